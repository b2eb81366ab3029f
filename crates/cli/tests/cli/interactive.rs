//! Reaching into running sessions, as a user types it: `session exec` with stdin, stdout,
//! stderr and the exit code kept apart; `session port-forward` carrying a large transfer whole
//! both ways; only the owner and admins get in, each attach an event; a session that is not
//! running answers why.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::Stdio;

use crate::common;
use common::{ok, text, Cluster, Proc};
use serde_json::Value;

/// A cluster with agent a1 and alice's session `sleep 600` running on it; alice's token.
fn running(c: &Cluster, command: &[&str]) -> (Proc, String, String) {
    ok(c.cli(&["group", "create", "g"]));
    let agent = c.agent("a1", "g", "cpu=2");
    let alice = c.user_token("alice");
    let out = c.as_user(
        &alice,
        &[
            &[
                "session",
                "submit",
                "--group",
                "g",
                "--request",
                "cpu=1",
                "--",
            ],
            command,
        ]
        .concat(),
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let id = text(&out.stdout).trim().to_string();
    c.until("the session to run", || {
        (c.listed(&id)["state"] == "running").then_some(())
    });
    // The agent dials its tunnel once it has joined: the first exec may find it on the way.
    c.until("the agent's tunnel", || {
        let out = c.as_user(&alice, &["session", "exec", &id, "--", "true"]);
        out.status.success().then_some(())
    });
    (agent, id, alice)
}

/// Alice's session running an echo server (one connection at a time) on the port returned.
fn echoing(c: &Cluster) -> (Proc, String, String, u16) {
    let port = common::free_port();
    let server = format!(
        "import socket\ns=socket.socket()\ns.setsockopt(socket.SOL_SOCKET,socket.SO_REUSEADDR,1)\n\
         s.bind(('127.0.0.1',{port}))\ns.listen()\n\
         while True:\n  c,_=s.accept()\n  while True:\n    b=c.recv(65536)\n    if not b: break\n    c.sendall(b)\n  c.close()\n"
    );
    let (agent, id, alice) = running(c, &["python3", "-c", &server]);
    (agent, id, alice, port)
}

fn exec_with_stdin(c: &Cluster, token: &str, args: &[&str], stdin: &[u8]) -> std::process::Output {
    let mut child = c
        .command(args)
        .env("CORRAL_TOKEN", token)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(stdin).unwrap();
    child.wait_with_output().unwrap()
}

#[test]
fn exec_keeps_stdin_stdout_stderr_and_the_exit_code_apart() {
    let c = Cluster::start(60);
    let (_agent, id, alice) = running(&c, &["sleep", "600"]);

    let out = exec_with_stdin(
        &c,
        &alice,
        &[
            "session",
            "exec",
            &id,
            "--",
            "sh",
            "-c",
            "cat; echo oops >&2; exit 3",
        ],
        b"hello\nworld\n",
    );
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "hello\nworld\n");
    assert_eq!(text(&out.stderr), "oops\n");

    // In the session's environment and working directory.
    let out = c.as_user(
        &alice,
        &[
            "session",
            "exec",
            &id,
            "--",
            "sh",
            "-c",
            "echo $CORRAL_SESSION_ID; pwd",
        ],
    );
    let printed = ok(out);
    let mut lines = printed.lines();
    assert_eq!(lines.next(), Some(id.as_str()));
    assert!(
        lines.next().unwrap().ends_with(&format!("{id}/work")),
        "{printed}"
    );

    // A command that does not exist fails as a shell says.
    let out = c.as_user(
        &alice,
        &["session", "exec", &id, "--", "no-such-command-here"],
    );
    assert!(!out.status.success());
    assert!(!text(&out.stderr).is_empty());

    // Recorded: who, which session; not what was typed.
    let events = c.json(&["events", "--session", &id, "-o", "json"]);
    let execs: Vec<&Value> = events
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["kind"] == "session.exec")
        .collect();
    assert!(execs.len() >= 3, "{events}");
    assert!(execs
        .iter()
        .all(|e| e["message"].as_str().unwrap().starts_with("alice ")));
    assert!(!events.to_string().contains("hello"), "{events}");
}

#[test]
fn only_the_owner_and_admins_reach_a_session_and_only_while_it_runs() {
    let c = Cluster::start(60);
    let (_agent, id, _alice) = running(&c, &["sleep", "600"]);
    let bob = &c.user_token("bob");

    let out = c.as_user(bob, &["session", "exec", &id, "--", "true"]);
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("another user"),
        "{}",
        text(&out.stderr)
    );
    let out = c.as_user(bob, &["session", "port-forward", &id, "8080"]);
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("another user"),
        "{}",
        text(&out.stderr)
    );

    // An admin may.
    assert_eq!(
        ok(c.cli(&["session", "exec", &id, "--", "echo", "admin"])),
        "admin\n"
    );

    ok(c.cli(&["session", "cancel", &id]));
    c.until("the session to end", || {
        (c.listed(&id)["state"] == "cancelled").then_some(())
    });
    let out = c.cli(&["session", "exec", &id, "--", "true"]);
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("only a running session can be reached"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn port_forward_carries_a_large_transfer_whole_both_ways() {
    let c = Cluster::start(60);
    let (_agent, id, alice, port) = echoing(&c);

    let (_forward, local) = c.port_forward(&alice, &id, &port.to_string(), port);

    // The server listens once the session runs; connections may come before it does.
    let payload: Vec<u8> = (0..32u32 << 20)
        .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
        .collect();
    let echoed = c.until("the echo through the forward", || {
        let mut tcp = TcpStream::connect(("127.0.0.1", local)).ok()?;
        let sender = {
            let mut tcp = tcp.try_clone().unwrap();
            let payload = payload.clone();
            std::thread::spawn(move || {
                let sent = tcp.write_all(&payload).is_ok();
                let _ = tcp.shutdown(std::net::Shutdown::Write);
                sent
            })
        };
        let mut back = Vec::new();
        tcp.read_to_end(&mut back).ok()?;
        (sender.join().unwrap() && !back.is_empty()).then_some(back)
    });
    assert_eq!(echoed.len(), payload.len());
    assert!(echoed == payload, "the echo differs");
}

/// Drives `corral session shell` from a real pseudo-terminal (Python's `pty` and `termios`): the
/// first size reaches the shell, a resize does, Ctrl-C ends the remote command and not the
/// client, and the shell's exit code is the client's.
const SHELL_DRIVER: &str = r#"
import fcntl, os, select, struct, subprocess, sys, termios, time
corral, session = sys.argv[1], sys.argv[2]
master, slave = os.openpty()
def size(rows, cols):
    fcntl.ioctl(master, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
size(24, 80)
client = subprocess.Popen([corral, "session", "shell", session], stdin=slave, stdout=slave,
    stderr=slave, start_new_session=True,
    preexec_fn=lambda: fcntl.ioctl(0, termios.TIOCSCTTY, 0))
os.close(slave)
seen = b""
def until(marker, within=30, fatal=True):
    # Reads what the terminal shows until `marker`; returns what came before it.
    global seen
    deadline = time.monotonic() + within
    while marker not in seen:
        ready, _, _ = select.select([master], [], [], max(0, deadline - time.monotonic()))
        if not ready:
            if not fatal:
                return None
            sys.exit(f"timed out waiting for {marker!r}; the terminal showed {seen!r}")
        try:
            seen += os.read(master, 4096)
        except OSError:
            sys.exit(f"the client ended before {marker!r}; the terminal showed {seen!r}")
    before, _, seen = seen.partition(marker)
    return before
# $((n+1)) in the command, its value in the output: the terminal's echo of what was typed
# never matches.
os.write(master, b"stty size; echo MARK$((0+1))\n")
assert b"24 80" in until(b"MARK1"), "the first size"
size(40, 100)
for n in range(2, 200):
    os.write(master, b"stty size; echo MARK$((%d+1))\n" % (n - 1))
    if b"40 100" in until(b"MARK%d" % n):
        break
else:
    sys.exit("the new size never reached the shell")
# Ctrl-C once the command runs in the foreground: its own output says so, which comes after
# bash gave it the terminal (a Ctrl-C before that reaches bash, which waits on).
os.write(master, b"sh -c 'echo STARTED$((0+1)); exec sleep 300'; echo SLEPT$((0+1))\n")
until(b"STARTED1")
os.write(master, b"\x03")
until(b"^C")
# Bash drops what was typed while it handled the interrupt: type until it is heard.
for n in range(1, 100):
    os.write(master, b"echo AFTER$((%d+1))\n" % (n - 1))
    shown = until(b"AFTER%d" % n, within=2, fatal=False)
    if shown is not None:
        assert b"SLEPT1" not in shown, "the interrupted command went on"
        break
else:
    sys.exit(f"the shell never answered after Ctrl-C; the terminal showed {seen!r}")
os.write(master, b"exit 7\n")
print(client.wait(timeout=30))
"#;

#[test]
fn a_shell_on_a_real_terminal_is_resized_interrupted_and_returns_its_exit_code() {
    let c = Cluster::start(60);
    let (_agent, id, alice) = running(&c, &["sleep", "600"]);
    let out = std::process::Command::new("python3")
        .args(["-c", SHELL_DRIVER, common::CORRAL, &id])
        .env("CORRAL_SERVER", c.url())
        .env("CORRAL_TOKEN", &alice)
        .env("CORRAL_CONFIG", c.dir.path().join("none.toml"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    assert_eq!(text(&out.stdout).trim(), "7", "{}", text(&out.stderr));
    let events = c.json(&["events", "--session", &id, "-o", "json"]);
    assert!(
        events.to_string().contains("alice opened a shell"),
        "{events}"
    );
}

/// Behind NAT: the agent runs in a network namespace it can connect out of while nothing from
/// outside connects in (the manager included); exec and a forwarded port work all the same,
/// through the tunnel the agent dialled.
#[test]
fn an_agent_behind_nat_serves_exec_and_port_forward() {
    let Some(ns) = corral_testkit::Netns::create(1) else {
        return;
    };
    ns.refuse_incoming();
    let c = Cluster::start(60);
    let manager: std::net::SocketAddr = format!("127.0.0.1:{}", c.port).parse().unwrap();
    let front = corral_testkit::Front::start_on(ns.host_ip, vec![manager]).unwrap();
    ok(c.cli(&["group", "create", "g"]));
    let mut a1 = c.agent_command("a1", "g", "cpu=2");
    a1.env("CORRAL_SERVER", front.url());
    let mut inside = ns.command(&a1);
    inside.stdout(Stdio::null()).stderr(Stdio::null());
    let _a1 = c.agent_from("a1", inside);

    // A server in the session, on every address of the namespace.
    let port = common::free_port();
    let server = format!(
        "import socket\ns=socket.socket()\ns.bind(('0.0.0.0',{port}))\ns.listen()\n\
         while True:\n  c,_=s.accept()\n  c.sendall(b'hello from behind NAT\\n')\n  c.close()\n"
    );
    let id = c.submit(&[
        "--group",
        "g",
        "--request",
        "cpu=1",
        "--",
        "python3",
        "-c",
        &server,
    ]);
    c.until("the session to run", || {
        (c.listed(&id)["state"] == "running").then_some(())
    });
    let said = c.until("exec through the tunnel", || {
        let out = c.cli(&[
            "session",
            "exec",
            &id,
            "--",
            "sh",
            "-c",
            "echo $CORRAL_SESSION_ID",
        ]);
        out.status.success().then(|| text(&out.stdout))
    });
    assert_eq!(said.trim(), id);

    // From outside, nothing gets in: not even to the port the session listens on.
    let (_forward, local) = c.port_forward(&c.token, &id, &port.to_string(), port);
    let greeting = c.until("the server's greeting through the forward", || {
        let mut tcp = TcpStream::connect(("127.0.0.1", local)).ok()?;
        let mut got = String::new();
        tcp.read_to_string(&mut got).ok()?;
        (!got.is_empty()).then_some(got)
    });
    assert_eq!(greeting, "hello from behind NAT\n");
    let direct = TcpStream::connect_timeout(
        &std::net::SocketAddr::new(ns.inner_ip, port),
        std::time::Duration::from_secs(2),
    );
    assert!(
        direct.is_err(),
        "the session's port was reachable from outside"
    );
}

/// Idle means idle: in a group that ends interactive sessions idle for 8 s, a session someone
/// types into (a byte a second through `session exec`, for twice the timeout) runs on; once
/// nobody types, it is ended as idle.
#[test]
fn typing_into_a_session_keeps_it_from_the_idle_policy_and_silence_does_not() {
    let c = Cluster::start(60);
    let _agent = c.idle_group("idle", 8, "i1");
    // A session that says no type is batch, which the idle policy never ends.
    let plain = c.submit(&["--group", "idle", "--", "sleep", "600"]);
    let id = c.submit(&[
        "--group",
        "idle",
        "--type",
        "interactive",
        "--request",
        "cpu=1",
        "--",
        "sleep",
        "600",
    ]);
    c.until("the session to run", || {
        (c.listed(&id)["state"] == "running").then_some(())
    });
    let mut typing = Proc(
        c.command(&["session", "exec", &id, "--", "cat"])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let mut keys = typing.0.stdin.take().unwrap();
    // A person typing: the pauses are the test's input, not a wait for something to happen.
    for _ in 0..16 {
        keys.write_all(b"x").unwrap();
        keys.flush().unwrap();
        std::thread::sleep(std::time::Duration::from_secs(1));
        assert_eq!(c.listed(&id)["state"], "running", "ended while typed into");
    }
    drop(keys);
    assert!(typing.0.wait().unwrap().success());
    let ended = c.until_for(60, "the silent session ends", || {
        let s = c.listed(&id);
        (s["state"] == "cancelled").then_some(s)
    });
    assert_eq!(
        ended["end_reason"],
        "ended by the group's policy: idle for 8 s"
    );
    let plain = c.listed(&plain);
    assert_eq!(
        (&plain["state"], &plain["type"]),
        (&"running".into(), &"batch".into())
    );
}

/// Faults: the manager killed under an attached command and a forwarded port: the client says
/// the connection was lost (exit 255) instead of hanging; once the manager is back and the
/// agent has dialled its tunnel again, both work again. The agent restarted under a command:
/// the session runs on, the client says the connection was lost, and a new exec works.
#[test]
fn a_lost_manager_or_agent_ends_the_attached_client_clearly_and_reattaching_works() {
    let mut c = Cluster::start(60);
    let (agent, id, alice) = running(&c, &["sleep", "600"]);
    let attach = |c: &Cluster| {
        let mut child = Proc(
            c.command(&[
                "session",
                "exec",
                &id,
                "--",
                "sh",
                "-c",
                "echo attached; exec cat",
            ])
            .env("CORRAL_TOKEN", &alice)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
        );
        let mut line = String::new();
        let mut out = BufReader::new(child.0.stdout.take().unwrap());
        out.read_line(&mut line).unwrap();
        assert_eq!(line, "attached\n");
        child
    };
    let lost = |mut child: Proc| {
        // Its stdin stays open: only the lost connection may end it.
        let _keys = child.0.stdin.take();
        let status = child.0.wait().unwrap();
        let mut err = String::new();
        child
            .0
            .stderr
            .take()
            .unwrap()
            .read_to_string(&mut err)
            .unwrap();
        assert_eq!(status.code(), Some(255), "{err}");
        assert!(
            err.contains("the connection to the session was lost"),
            "{err}"
        );
    };

    let client = attach(&c);
    c.kill_server();
    lost(client);
    c.start_server();
    c.until("exec again once the agent's tunnel is back", || {
        let out = c.as_user(&alice, &["session", "exec", &id, "--", "echo", "back"]);
        (out.status.success() && text(&out.stdout) == "back\n").then_some(())
    });

    let client = attach(&c);
    drop(agent);
    lost(client);
    let _agent = c.agent_from("a1", c.agent_command("a1", "g", "cpu=2"));
    c.until(
        "exec again in the same session after the agent's restart",
        || {
            let out = c.as_user(&alice, &["session", "exec", &id, "--", "echo", "again"]);
            (out.status.success() && text(&out.stdout) == "again\n").then_some(())
        },
    );
    assert_eq!(c.listed(&id)["state"], "running");
}

/// Silence behind a proxy that drops idle connections: the agent's tunnel and a user's
/// terminal both go through a front that drops a connection silent both ways for 3 s (a load
/// balancer's 60 s, compressed twenty times, as is the keepalive: a ping every second instead
/// of every 15 s). A terminal left silent for 30 s (ten of the proxy's timeouts) still echoes.
#[test]
fn a_silent_terminal_behind_an_idle_dropping_proxy_stays_open() {
    let keepalive = [("CORRAL_KEEPALIVE_SECS", "1")];
    let c = Cluster::start_with_env(60, &[], &keepalive);
    let manager: std::net::SocketAddr = format!("127.0.0.1:{}", c.port).parse().unwrap();
    let front = corral_testkit::Front::start_idle(vec![manager], std::time::Duration::from_secs(3))
        .unwrap();
    ok(c.cli(&["group", "create", "g"]));
    let mut a1 = c.agent_command("a1", "g", "cpu=2");
    a1.env("CORRAL_SERVER", front.url()).envs(keepalive);
    let _a1 = c.agent_from("a1", a1);
    let id = c.submit(&["--group", "g", "--request", "cpu=1", "--", "sleep", "600"]);
    c.until("the session to run", || {
        (c.listed(&id)["state"] == "running").then_some(())
    });
    c.until("the agent's tunnel", || {
        c.cli(&["session", "exec", &id, "--", "true"])
            .status
            .success()
            .then_some(())
    });

    let mut terminal = Proc(
        c.command(&["session", "exec", &id, "--", "cat"])
            .env("CORRAL_SERVER", front.url())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let mut keys = terminal.0.stdin.take().unwrap();
    let mut screen = BufReader::new(terminal.0.stdout.take().unwrap());
    let mut line = String::new();
    keys.write_all(b"before\n").unwrap();
    screen.read_line(&mut line).unwrap();
    assert_eq!(line, "before\n");
    // Silence, as a person away from the keyboard: the pause is the input.
    std::thread::sleep(std::time::Duration::from_secs(30));
    line.clear();
    keys.write_all(b"after\n").unwrap();
    screen.read_line(&mut line).unwrap();
    assert_eq!(line, "after\n", "the terminal was dropped while silent");
    drop(keys);
    assert!(terminal.0.wait().unwrap().success());
}

#[test]
fn port_forward_rides_out_a_manager_restart_saying_what_was_lost() {
    let mut c = Cluster::start(60);
    let (_agent, id, alice, port) = echoing(&c);
    let (mut forward, local) = c.port_forward(&alice, &id, &port.to_string(), port);
    let echo = |word: &[u8]| -> Option<Vec<u8>> {
        let mut tcp = TcpStream::connect(("127.0.0.1", local)).ok()?;
        tcp.write_all(word).ok()?;
        tcp.shutdown(std::net::Shutdown::Write).ok()?;
        let mut back = Vec::new();
        tcp.read_to_end(&mut back).ok()?;
        (back == word).then_some(back)
    };
    c.until("an echo through the forward", || echo(b"before"));

    // A connection open while the manager goes: it ends, and the command says why.
    let mut held = TcpStream::connect(("127.0.0.1", local)).unwrap();
    held.write_all(b"held").unwrap();
    let mut back = [0u8; 4];
    held.read_exact(&mut back).unwrap();
    c.kill_server();
    let mut rest = Vec::new();
    let _ = held.read_to_end(&mut rest);
    assert!(rest.is_empty(), "{rest:?}");
    // The command keeps listening while the manager is away, and forwards again once it (and
    // the agent's tunnel) are back.
    assert!(
        forward.0.try_wait().unwrap().is_none(),
        "port-forward exited"
    );
    c.start_server();
    c.until("an echo through the same forward after the restart", || {
        echo(b"after")
    });
    assert!(
        forward.0.try_wait().unwrap().is_none(),
        "port-forward exited"
    );
    unsafe { libc::kill(forward.0.id() as i32, libc::SIGTERM) };
    let status = forward.0.wait().unwrap();
    assert!(status.success(), "{status:?}");
    let mut err = String::new();
    forward
        .0
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    assert!(
        err.contains("the connection to the session was lost"),
        "{err}"
    );
}
