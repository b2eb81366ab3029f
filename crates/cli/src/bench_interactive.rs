//! `corral bench interactive`: reaching into a running session through `corral dev` (manager
//! and agent in one child process, the agent's tunnel on loopback), each figure beside the same
//! traffic sent directly: a forwarded port's throughput (1 GiB through `session port-forward`
//! to an echo server in the session, SHA-256 checked at the other end), a keystroke's round
//! trip through `session exec` (`cat`, against a local `cat`), and terminals held open at once
//! with the child's CPU meanwhile. The session's echo server is Python's (`python3`).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use corral_tunnel::{Exec, Kind};
use futures_util::{SinkExt, StreamExt};
use sha2::{Digest, Sha256};

use crate::bench_run::Dev;
use crate::client::config::load_client_config_from;

/// The session's echo server (one connection at a time), on the port given.
const ECHO: &str = "import socket,sys\ns=socket.socket()\ns.setsockopt(socket.SOL_SOCKET,socket.SO_REUSEADDR,1)\ns.bind(('127.0.0.1',int(sys.argv[1])))\ns.listen()\nwhile True:\n  c,_=s.accept()\n  while True:\n    b=c.recv(1<<20)\n    if not b: break\n    c.sendall(b)\n  c.close()\n";

pub async fn run(
    megabytes: u64,
    keystrokes: usize,
    terminals: usize,
    app_seconds: f64,
) -> Result<()> {
    let dir = tempfile::tempdir().context("temporary directory")?;
    let config = dir.path().join("config.toml");
    let dev = Dev::start(dir.path(), &config)?;
    let client = {
        let c = load_client_config_from(&config, None)?;
        corral_api::Client::new(
            c.server.as_deref().unwrap_or_default(),
            c.token.as_deref().unwrap_or_default(),
            None,
        )?
    };
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let id = submit(&config, &["--", "python3", "-c", ECHO, &port.to_string()])?;

    let bytes = megabytes << 20;
    let forward = PortForward::start(&config, &id, port)?;
    let direct = transfer(port, bytes).context("the direct transfer")?;
    let through = transfer(forward.local, bytes).context("the forwarded transfer")?;
    println!(
        "forward_mb_per_s {:.0} MB/s",
        bytes as f64 / 1e6 / through.as_secs_f64()
    );
    println!(
        "direct_mb_per_s {:.0} MB/s",
        bytes as f64 / 1e6 / direct.as_secs_f64()
    );
    drop(forward);

    let mut echo = keystroke_round_trips(&client, &id, keystrokes).await?;
    let mut local = local_round_trips(keystrokes)?;
    report("shell_echo", &mut echo);
    report("local_echo", &mut local);

    let (held, cpu) = held_terminals(&client, &id, terminals, dev.pid()).await?;
    println!("terminals_held {held}");
    println!("terminals_held_cpu_percent {cpu:.1} %");

    let server = client.server().to_string();
    let submit_app = |args: &[&str]| submit(&config, args);
    crate::bench_apps::run(submit_app, &server, client.token(), app_seconds, keystrokes).await
}

/// Submits a session (`args`: flags, `--`, the command) and waits (set-up, not measured)
/// until it runs.
fn submit(config: &Path, args: &[&str]) -> Result<String> {
    let out = corral(config)
        .args(["session", "submit"])
        .args(args)
        .output()?;
    if !out.status.success() {
        bail!("submit: {}", String::from_utf8_lossy(&out.stderr));
    }
    let id = String::from_utf8(out.stdout)?.trim().to_string();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let out = corral(config)
            .args(["session", "get", &id, "-o", "json"])
            .output()?;
        let view: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
        if view["state"] == "running" {
            return Ok(id);
        }
        if Instant::now() > deadline {
            bail!("session {id} did not run within 60 s: {view}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn corral(config: &Path) -> Command {
    let mut command = Command::new(std::env::current_exe().expect("this executable"));
    command.env("CORRAL_CONFIG", config);
    command
}

/// `corral session port-forward` as a child, stopped when dropped.
struct PortForward {
    child: Child,
    local: u16,
}

impl PortForward {
    fn start(config: &Path, id: &str, port: u16) -> Result<PortForward> {
        let mut child = corral(config)
            .args(["session", "port-forward", id, &format!("0:{port}")])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()?;
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("piped")).read_line(&mut line)?;
        let local = line
            .strip_prefix("Forwarding from 127.0.0.1:")
            .and_then(|rest| rest.split(' ').next())
            .and_then(|p| p.parse().ok())
            .with_context(|| format!("port-forward said {line:?}"))?;
        Ok(PortForward { child, local })
    }
}

impl Drop for PortForward {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Sends `bytes` to the echo server on `port` while reading them back; the time until the last
/// byte came back, once both ends' SHA-256 agree. The server may still be starting: the first
/// connections may find nobody (set-up, retried).
fn transfer(port: u16, bytes: u64) -> Result<Duration> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match transfer_once(port, bytes) {
            Ok(took) => return Ok(took),
            Err(e) if Instant::now() < deadline => {
                tracing::debug!("transfer: {e:#}; again");
                std::thread::sleep(Duration::from_millis(100));
            }
            Err(e) => return Err(e),
        }
    }
}

fn transfer_once(port: u16, bytes: u64) -> Result<Duration> {
    let mut tcp = TcpStream::connect(("127.0.0.1", port))?;
    tcp.set_nodelay(true)?;
    let mut writer = tcp.try_clone()?;
    let started = Instant::now();
    let sender = std::thread::spawn(move || -> Result<[u8; 32]> {
        // One block of noise, made before the clock matters, sent again and again.
        let block = noise(1 << 20);
        let mut sha = Sha256::new();
        let mut sent = 0u64;
        while sent < bytes {
            let n = (bytes - sent).min(block.len() as u64) as usize;
            writer.write_all(&block[..n])?;
            sha.update(&block[..n]);
            sent += n as u64;
        }
        writer.shutdown(std::net::Shutdown::Write)?;
        Ok(sha.finalize().into())
    });
    let mut sha = Sha256::new();
    let mut got = 0u64;
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = tcp.read(&mut buf)?;
        if n == 0 {
            break;
        }
        sha.update(&buf[..n]);
        got += n as u64;
    }
    let took = started.elapsed();
    let sent = sender.join().expect("the sender")?;
    if got != bytes {
        bail!("{got} of {bytes} bytes came back");
    }
    if <[u8; 32]>::from(sha.finalize()) != sent {
        bail!("what came back differs from what was sent (SHA-256)");
    }
    Ok(took)
}

/// `len` bytes of xorshift noise (nothing a compressor on the way could shrink).
fn noise(len: usize) -> Vec<u8> {
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    (0..len / 8)
        .flat_map(|_| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed.to_le_bytes()
        })
        .collect()
}

/// Milliseconds of each byte's round trip through `session exec -- cat`.
async fn keystroke_round_trips(
    client: &corral_api::Client,
    id: &str,
    n: usize,
) -> Result<Vec<f64>> {
    let mut socket = open_cat(client, id).await?;
    let mut ms = Vec::with_capacity(n);
    for _ in 0..n {
        let started = Instant::now();
        socket
            .send(message(Kind::Data(bytes::Bytes::from_static(b"x"))))
            .await?;
        loop {
            let frame = socket.next().await.context("the socket ended")??;
            if let corral_api::websocket::Message::Binary(b) = frame {
                if let Ok(Kind::Data(_)) = Kind::decode(b) {
                    break;
                }
            }
        }
        ms.push(started.elapsed().as_secs_f64() * 1e3);
    }
    Ok(ms)
}

async fn open_cat(
    client: &corral_api::Client,
    id: &str,
) -> Result<corral_api::websocket::WebSocket> {
    let mut socket = client.websocket(&["sessions", id, "exec"], &[]).await?;
    let open = Exec {
        command: vec!["cat".into()],
        tty: false,
        cols: 0,
        rows: 0,
    };
    socket
        .send(message(Kind::Open(serde_json::to_vec(&open)?.into())))
        .await?;
    Ok(socket)
}

fn message(kind: Kind) -> corral_api::websocket::Message {
    corral_api::websocket::Message::Binary(kind.encode())
}

/// The same round trips to a local `cat` through pipes.
fn local_round_trips(n: usize) -> Result<Vec<f64>> {
    let mut cat = Command::new("cat")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()?;
    let (mut stdin, mut stdout) = (
        cat.stdin.take().expect("piped"),
        cat.stdout.take().expect("piped"),
    );
    let mut ms = Vec::with_capacity(n);
    let mut byte = [0u8; 1];
    for _ in 0..n {
        let started = Instant::now();
        stdin.write_all(b"x")?;
        stdin.flush()?;
        stdout.read_exact(&mut byte)?;
        ms.push(started.elapsed().as_secs_f64() * 1e3);
    }
    drop(stdin);
    cat.wait()?;
    Ok(ms)
}

/// Opens `n` terminals (`cat` each) at once, checks each answers, then measures the dev
/// process's CPU over 10 s while they are held; how many held, and that CPU.
async fn held_terminals(
    client: &corral_api::Client,
    id: &str,
    n: usize,
    pid: u32,
) -> Result<(usize, f64)> {
    let mut sockets = Vec::with_capacity(n);
    for _ in 0..n {
        sockets.push(open_cat(client, id).await?);
    }
    for socket in &mut sockets {
        socket
            .send(message(Kind::Data(bytes::Bytes::from_static(b"x"))))
            .await?;
        loop {
            let frame = socket.next().await.context("a terminal ended")??;
            if let corral_api::websocket::Message::Binary(b) = frame {
                if let Ok(Kind::Data(_)) = Kind::decode(b) {
                    break;
                }
            }
        }
    }
    let window = Duration::from_secs(10);
    let before = cpu_ticks(pid)?;
    // The sockets are read meanwhile, so that pings are answered as a client's would be.
    let reading = futures_util::future::join_all(sockets.iter_mut().map(|s| async move {
        let _ = tokio::time::timeout(window, async { while s.next().await.is_some() {} }).await;
    }));
    reading.await;
    let ticks = cpu_ticks(pid)? - before;
    let per_second = 100.0; // USER_HZ
    Ok((
        sockets.len(),
        ticks as f64 / per_second / window.as_secs_f64() * 100.0,
    ))
}

/// User plus system clock ticks of a process (fields 14 and 15 of /proc/<pid>/stat).
fn cpu_ticks(pid: u32) -> Result<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    let after = stat.rsplit_once(')').context("a stat line")?.1;
    let fields: Vec<&str> = after.split_whitespace().collect();
    Ok(fields[11].parse::<u64>()? + fields[12].parse::<u64>()?)
}

/// `<name>_p50_ms` and `<name>_p99_ms`.
fn report(name: &str, ms: &mut [f64]) {
    ms.sort_by(f64::total_cmp);
    let at = |p: f64| ms[((ms.len() - 1) as f64 * p).round() as usize];
    println!("{name}_p50_ms {:.2} ms", at(0.5));
    println!("{name}_p99_ms {:.2} ms", at(0.99));
}
