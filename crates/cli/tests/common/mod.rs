//! What the CLI's end-to-end tests share: the `corral` binary, child processes that die with the
//! test, and a manager with agents on loopback.
#![allow(dead_code)]

use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

pub const CORRAL: &str = env!("CARGO_BIN_EXE_corral");

/// A child process killed when the test lets go of it.
pub struct Proc(pub Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

pub fn wait_healthy(port: u16) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "nothing listens on {port}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Runs `corral ARGS` with the client configuration of `dir`.
pub fn corral(dir: &Path, args: &[&str]) -> Output {
    Command::new(CORRAL)
        .args(args)
        .env("CORRAL_CONFIG", dir.join("config.toml"))
        .env_remove("CORRAL_SERVER")
        .env_remove("CORRAL_TOKEN")
        .output()
        .unwrap()
}

pub fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

pub struct Cluster {
    pub dir: tempfile::TempDir,
    pub port: u16,
    pub lost_after: u32,
    pub token: String,
    pub server: Option<Proc>,
}

impl Cluster {
    pub fn start(lost_after: u32) -> Cluster {
        let mut c = Cluster {
            dir: tempfile::tempdir().unwrap(),
            port: free_port(),
            lost_after,
            token: String::new(),
            server: None,
        };
        c.start_server();
        c.token = std::fs::read_to_string(c.dir.path().join("data/admin.token"))
            .unwrap()
            .trim()
            .to_string();
        c
    }

    pub fn start_server(&mut self) {
        let child = Command::new(CORRAL)
            .args(["server", "--data-dir"])
            .arg(self.dir.path().join("data"))
            .args([
                "--listen",
                &format!("127.0.0.1:{}", self.port),
                "--heartbeat-secs",
                "1",
                "--lost-after-secs",
                &self.lost_after.to_string(),
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        self.server = Some(Proc(child));
        wait_healthy(self.port);
    }

    /// SIGKILL, as a crash would.
    pub fn kill_server(&mut self) {
        drop(self.server.take());
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    pub fn cli(&self, args: &[&str]) -> Output {
        Command::new(CORRAL)
            .args(args)
            .env("CORRAL_SERVER", self.url())
            .env("CORRAL_TOKEN", &self.token)
            .env("CORRAL_CONFIG", self.dir.path().join("none.toml"))
            .output()
            .unwrap()
    }

    pub fn json(&self, args: &[&str]) -> serde_json::Value {
        serde_json::from_slice(&self.cli(args).stdout).unwrap_or_default()
    }

    /// Starts `corral agent` for `group` and waits until it has joined.
    pub fn agent(&self, id: &str, group: &str, capacity: &str) -> Proc {
        let child = Command::new(CORRAL)
            .args([
                "agent",
                "--group",
                group,
                "--id",
                id,
                "--capacity",
                capacity,
                "--work-dir",
            ])
            .arg(self.dir.path().join(id))
            .env("CORRAL_SERVER", self.url())
            .env("CORRAL_TOKEN", &self.token)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let agent = Proc(child);
        self.until(&format!("agent {id} joins"), || {
            let agents = self.json(&["agent", "ls", "-o", "json"]);
            agents
                .as_array()
                .is_some_and(|a| a.iter().any(|a| a["id"] == id && a["state"] == "alive"))
                .then_some(())
        });
        agent
    }

    pub fn submit(&self, args: &[&str]) -> String {
        let out = self.cli(&[&["session", "submit"], args].concat());
        assert!(out.status.success(), "{}", text(&out.stderr));
        text(&out.stdout).trim().to_string()
    }

    /// Polls `check` until it gives a value (20 s at most).
    pub fn until<T>(&self, what: &str, check: impl Fn() -> Option<T>) -> T {
        self.until_for(20, what, check)
    }

    /// Polls `check` until it gives a value (`secs` at most).
    pub fn until_for<T>(&self, secs: u64, what: &str, mut check: impl FnMut() -> Option<T>) -> T {
        let deadline = Instant::now() + Duration::from_secs(secs);
        loop {
            if let Some(v) = check() {
                return v;
            }
            assert!(Instant::now() < deadline, "timed out waiting: {what}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// A session read the way that is not activity (a read of the session itself would be).
    pub fn listed(&self, id: &str) -> serde_json::Value {
        let list = self.json(&["session", "ls", "-o", "json"]);
        list.as_array()
            .and_then(|l| l.iter().find(|s| s["id"] == id).cloned())
            .unwrap_or_default()
    }
}
