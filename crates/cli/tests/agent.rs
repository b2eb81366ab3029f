//! Sessions run for real: `corral dev` and `corral session run`, outputs and logs, and an agent
//! killed with SIGKILL whose sessions are requeued and run on another agent.

use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

const CORRAL: &str = env!("CARGO_BIN_EXE_corral");

/// A child process killed when the test lets go of it.
struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn wait_healthy(port: u16) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "nothing listens on {port}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Runs `corral ARGS` with the client configuration of `dir`.
fn corral(dir: &Path, args: &[&str]) -> Output {
    Command::new(CORRAL)
        .args(args)
        .env("CORRAL_CONFIG", dir.join("config.toml"))
        .env_remove("CORRAL_SERVER")
        .env_remove("CORRAL_TOKEN")
        .output()
        .unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn start_dev(dir: &Path) -> Proc {
    let port = free_port();
    let child = Command::new(CORRAL)
        .args(["dev", "--data-dir"])
        .arg(dir.join("data"))
        .args([
            "--listen",
            &format!("127.0.0.1:{port}"),
            "--capacity",
            "cpu=2,mem=2GiB",
        ])
        .env("CORRAL_CONFIG", dir.join("config.toml"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_healthy(port);
    // The client configuration is written once the manager listens.
    let deadline = Instant::now() + Duration::from_secs(10);
    while !dir.join("config.toml").exists() {
        assert!(
            Instant::now() < deadline,
            "corral dev wrote no client configuration"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    Proc(child)
}

#[test]
fn dev_runs_a_session_and_returns_its_output_and_exit_code() {
    let dir = tempfile::tempdir().unwrap();
    let _dev = start_dev(dir.path());
    let out = corral(
        dir.path(),
        &[
            "session",
            "run",
            "--",
            "sh",
            "-c",
            "echo hello; echo oops >&2; exit 3",
        ],
    );
    assert_eq!(text(&out.stdout), "hello\n");
    assert!(text(&out.stderr).contains("oops"), "{}", text(&out.stderr));
    assert_eq!(out.status.code(), Some(3));

    let out = corral(dir.path(), &["session", "run", "--", "echo", "hello"]);
    assert_eq!(
        (text(&out.stdout).as_str(), out.status.code()),
        ("hello\n", Some(0)),
        "{}",
        text(&out.stderr)
    );

    // Inputs go in before it starts.
    let input = dir.path().join("numbers.txt");
    std::fs::write(&input, "1\n2\n3\n").unwrap();
    let out = corral(
        dir.path(),
        &[
            "session",
            "run",
            "--input",
            input.to_str().unwrap(),
            "--",
            "wc",
            "-l",
            "numbers.txt",
        ],
    );
    assert_eq!(
        (text(&out.stdout).trim(), out.status.code()),
        ("3 numbers.txt", Some(0)),
        "{}",
        text(&out.stderr)
    );

    // Outputs come back through the API.
    let out = corral(
        dir.path(),
        &[
            "session",
            "run",
            "--output",
            "result.txt",
            "--",
            "sh",
            "-c",
            "echo 42 > result.txt",
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let list = corral(dir.path(), &["session", "ls", "-o", "json"]);
    let sessions: serde_json::Value = serde_json::from_slice(&list.stdout).unwrap();
    let last = sessions.as_array().unwrap().last().unwrap();
    assert_eq!(last["state"], "succeeded");
    assert_eq!(last["exit_code"], 0);
    let id = last["id"].as_str().unwrap();
    let got = dir.path().join("got");
    let out = corral(
        dir.path(),
        &["session", "outputs", id, "--dir", got.to_str().unwrap()],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(
        std::fs::read_to_string(got.join("result.txt")).unwrap(),
        "42\n"
    );
}

#[test]
fn a_killed_agent_is_lost_and_its_session_runs_again_elsewhere() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let data = dir.path().join("data");
    let server = Proc(
        Command::new(CORRAL)
            .args(["server", "--data-dir"])
            .arg(&data)
            .args([
                "--listen",
                &format!("127.0.0.1:{port}"),
                "--heartbeat-secs",
                "1",
                "--lost-after-secs",
                "2",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    wait_healthy(port);
    let token = std::fs::read_to_string(data.join("admin.token"))
        .unwrap()
        .trim()
        .to_string();
    let server_url = format!("http://127.0.0.1:{port}");
    let cli = |args: &[&str]| {
        Command::new(CORRAL)
            .args(args)
            .env("CORRAL_SERVER", &server_url)
            .env("CORRAL_TOKEN", &token)
            .env("CORRAL_CONFIG", dir.path().join("none.toml"))
            .output()
            .unwrap()
    };
    let agent = |id: &str| {
        Proc(
            Command::new(CORRAL)
                .args([
                    "agent",
                    "--group",
                    "g",
                    "--id",
                    id,
                    "--capacity",
                    "cpu=1",
                    "--work-dir",
                ])
                .arg(dir.path().join(id))
                .env("CORRAL_SERVER", &server_url)
                .env("CORRAL_TOKEN", &token)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap(),
        )
    };
    assert!(cli(&["group", "create", "g"]).status.success());
    let alive = |id: &str| {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let agents: serde_json::Value =
                serde_json::from_slice(&cli(&["agent", "ls", "-o", "json"]).stdout).unwrap();
            if agents
                .as_array()
                .unwrap()
                .iter()
                .any(|a| a["id"] == id && a["state"] == "alive")
            {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "agent {id} did not join: {agents}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    };
    let mut first = agent("a1");
    alive("a1");
    let out = cli(&[
        "session",
        "submit",
        "--group",
        "g",
        "--request",
        "cpu=1",
        "--",
        "sh",
        "-c",
        "sleep 1; echo done",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let id = text(&out.stdout).trim().to_string();
    let state = |id: &str| -> serde_json::Value {
        serde_json::from_slice(&cli(&["session", "get", id, "-o", "json"]).stdout).unwrap()
    };
    let until = |what: &str, ok: &dyn Fn(&serde_json::Value) -> bool| {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let s = state(&id);
            if ok(&s) {
                return s;
            }
            assert!(Instant::now() < deadline, "{what}: {s}");
            std::thread::sleep(Duration::from_millis(50));
        }
    };
    until("running on a1", &|s| {
        s["state"] == "running" && s["agent"] == "a1"
    });
    first.0.kill().unwrap(); // SIGKILL
    let s = until("requeued after a1 was lost", &|s| s["state"] == "pending");
    assert!(
        s["history"]
            .to_string()
            .contains("requeued: agent a1 was lost"),
        "{s}"
    );
    let agents: serde_json::Value =
        serde_json::from_slice(&cli(&["agent", "ls", "-o", "json"]).stdout).unwrap();
    assert_eq!(agents[0]["state"], "lost");
    let _second = agent("a2");
    alive("a2");
    let s = until("succeeded on a2", &|s| s["state"] == "succeeded");
    assert_eq!(s["agent"], "a2");
    let log = cli(&["session", "logs", &id]);
    assert_eq!(text(&log.stdout), "done\n");
    drop(server);
}

#[test]
fn an_idle_interactive_session_is_ended_by_the_policy_and_others_are_not() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let data = dir.path().join("data");
    let _server = Proc(
        Command::new(CORRAL)
            .args(["server", "--data-dir"])
            .arg(&data)
            .args([
                "--listen",
                &format!("127.0.0.1:{port}"),
                "--heartbeat-secs",
                "1",
                "--lost-after-secs",
                "5",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    wait_healthy(port);
    let token = std::fs::read_to_string(data.join("admin.token"))
        .unwrap()
        .trim()
        .to_string();
    let server_url = format!("http://127.0.0.1:{port}");
    let cli = |args: &[&str]| {
        Command::new(CORRAL)
            .args(args)
            .env("CORRAL_SERVER", &server_url)
            .env("CORRAL_TOKEN", &token)
            .env("CORRAL_CONFIG", dir.path().join("none.toml"))
            .output()
            .unwrap()
    };
    let idle_group = dir.path().join("idle.json");
    std::fs::write(
        &idle_group,
        r#"{"name": "idle", "policy": {"termination": {"mode": "idle", "idle_timeout_secs": 2}}}"#,
    )
    .unwrap();
    let out = cli(&[
        "group",
        "create",
        "idle",
        "--file",
        idle_group.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(cli(&["group", "create", "kept"]).status.success());
    let mut agents = Vec::new();
    for (id, group) in [("i1", "idle"), ("k1", "kept")] {
        agents.push(Proc(
            Command::new(CORRAL)
                .args([
                    "agent",
                    "--group",
                    group,
                    "--id",
                    id,
                    "--capacity",
                    "cpu=4",
                    "--work-dir",
                ])
                .arg(dir.path().join(id))
                .env("CORRAL_SERVER", &server_url)
                .env("CORRAL_TOKEN", &token)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap(),
        ));
    }
    let listed = || -> Vec<serde_json::Value> {
        serde_json::from_slice::<serde_json::Value>(&cli(&["session", "ls", "-o", "json"]).stdout)
            .unwrap()
            .as_array()
            .unwrap()
            .clone()
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    while cli(&["agent", "ls", "-o", "json"])
        .stdout
        .windows(7)
        .filter(|w| w == b"\"alive\"")
        .count()
        < 2
    {
        assert!(Instant::now() < deadline, "agents did not join");
        std::thread::sleep(Duration::from_millis(50));
    }
    let submit = |group: &str, kind: &str| {
        let out = cli(&[
            "session",
            "submit",
            "--group",
            group,
            "--type",
            kind,
            "--request",
            "cpu=1",
            "--",
            "sleep",
            "30",
        ]);
        assert!(out.status.success(), "{}", text(&out.stderr));
        text(&out.stdout).trim().to_string()
    };
    let idle = submit("idle", "interactive");
    let batch = submit("idle", "batch");
    let kept = submit("kept", "interactive");
    // Only listing, never reading a session: a read is activity and would keep it alive.
    let state = |id: &str| listed().into_iter().find(|s| s["id"] == id).unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let s = state(&idle);
        if s["state"] == "cancelled" {
            assert_eq!(s["end_reason"], "ended by the group's policy: idle for 2 s");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the idle session was not ended: {s}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(
        state(&batch)["state"],
        "running",
        "batch sessions end on their own"
    );
    assert_eq!(
        state(&kept)["state"],
        "running",
        "a persistent group ends nothing"
    );
    let events = cli(&["events", "--session", &idle, "-o", "json"]);
    assert!(
        text(&events.stdout).contains("idle for 2 s"),
        "{}",
        text(&events.stdout)
    );
    for id in [&batch, &kept] {
        assert!(cli(&["session", "cancel", id]).status.success());
    }
}

#[test]
fn a_manager_restart_with_agents_connected_loses_no_running_session() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let data = dir.path().join("data");
    let start_server = || {
        let p = Proc(
            Command::new(CORRAL)
                .args(["server", "--data-dir"])
                .arg(&data)
                .args([
                    "--listen",
                    &format!("127.0.0.1:{port}"),
                    "--heartbeat-secs",
                    "1",
                    "--lost-after-secs",
                    "10",
                ])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap(),
        );
        wait_healthy(port);
        p
    };
    let mut server = start_server();
    let token = std::fs::read_to_string(data.join("admin.token"))
        .unwrap()
        .trim()
        .to_string();
    let server_url = format!("http://127.0.0.1:{port}");
    let cli = |args: &[&str]| {
        Command::new(CORRAL)
            .args(args)
            .env("CORRAL_SERVER", &server_url)
            .env("CORRAL_TOKEN", &token)
            .env("CORRAL_CONFIG", dir.path().join("none.toml"))
            .output()
            .unwrap()
    };
    assert!(cli(&["group", "create", "g"]).status.success());
    let _agent = Proc(
        Command::new(CORRAL)
            .args([
                "agent",
                "--group",
                "g",
                "--id",
                "a1",
                "--capacity",
                "cpu=1",
                "--work-dir",
            ])
            .arg(dir.path().join("a1"))
            .env("CORRAL_SERVER", &server_url)
            .env("CORRAL_TOKEN", &token)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let deadline = Instant::now() + Duration::from_secs(20);
    while !text(&cli(&["agent", "ls", "-o", "json"]).stdout).contains("\"alive\"") {
        assert!(Instant::now() < deadline, "the agent did not join");
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = cli(&[
        "session",
        "submit",
        "--group",
        "g",
        "--request",
        "cpu=1",
        "--",
        "sh",
        "-c",
        "sleep 3; echo survived",
    ]);
    let id = text(&out.stdout).trim().to_string();
    let state = |id: &str| -> serde_json::Value {
        serde_json::from_slice(&cli(&["session", "get", id, "-o", "json"]).stdout)
            .unwrap_or_default()
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    while state(&id)["state"] != "running" {
        assert!(Instant::now() < deadline, "never ran: {}", state(&id));
        std::thread::sleep(Duration::from_millis(50));
    }
    server.0.kill().unwrap(); // SIGKILL, while the session runs
    server.0.wait().unwrap();
    drop(server);
    let _server = start_server();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let s = state(&id);
        if s["state"] == "succeeded" {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the session did not survive the restart: {s}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(text(&cli(&["session", "logs", &id]).stdout), "survived\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dev_runs_a_session_in_a_docker_container() {
    if let Err(why) = corral_runtime::testing::docker_with_test_image("corral-cli-test").await {
        eprintln!("skipping: {why}");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let _dev = Proc(
        Command::new(CORRAL)
            .args(["dev", "--runtime", "docker", "--data-dir"])
            .arg(dir.path().join("data"))
            .args([
                "--listen",
                &format!("127.0.0.1:{port}"),
                "--capacity",
                "cpu=2,mem=2GiB",
            ])
            .env("CORRAL_CONFIG", dir.path().join("config.toml"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    while !dir.path().join("config.toml").exists() {
        assert!(Instant::now() < deadline, "corral dev did not come up");
        std::thread::sleep(Duration::from_millis(50));
    }
    let image = corral_runtime::testing::TEST_IMAGE;
    let out = corral(dir.path(), &["image", "put", image]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let out = corral(
        dir.path(),
        &[
            "session",
            "run",
            "--image",
            image,
            "--output",
            "made.txt",
            "--",
            "sh",
            "-c",
            "echo in a container; echo made > made.txt; exit 4",
        ],
    );
    assert_eq!(
        (text(&out.stdout).as_str(), out.status.code()),
        ("in a container\n", Some(4)),
        "{}",
        text(&out.stderr)
    );
    let list: serde_json::Value =
        serde_json::from_slice(&corral(dir.path(), &["session", "ls", "-o", "json"]).stdout)
            .unwrap();
    let id = list[0]["id"].as_str().unwrap().to_string();
    let got = dir.path().join("got");
    let out = corral(
        dir.path(),
        &["session", "outputs", &id, "--dir", got.to_str().unwrap()],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(
        std::fs::read_to_string(got.join("made.txt")).unwrap(),
        "made\n"
    );
}
