//! What the CLI's end-to-end tests share: the `corral` binary, child processes that die with the
//! test, and a manager with agents on loopback. What a test starts (the server, agents, the
//! agents a provider launches, their sessions) is killed when it ends, also when it fails.
#![allow(dead_code)]

use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

pub use corral_testkit::{eventually, KillLeftovers};

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

/// Starts a manager (`command()`, to which `--listen 127.0.0.1:PORT` is added) on a free port
/// and waits until it serves as itself: the admin token it wrote under `data_dir` is accepted.
/// An open port is no proof: another test's manager may take the port between the look and
/// the bind (seen in CI: a test read `admin.token` before its manager had written it, another
/// one answering on its port). A manager that exits before it serves, its port taken, is
/// started again on another port. `client_env` is what clients need (`CORRAL_CA_FILE`).
pub fn start_manager(
    data_dir: &Path,
    client_env: &[(&str, &str)],
    command: impl Fn() -> Command,
) -> (Proc, u16) {
    for _ in 0..5 {
        let port = free_port();
        if let Some(manager) = start_manager_on(port, data_dir, client_env, &command) {
            return (manager, port);
        }
    }
    panic!("the manager exited before serving, 5 times (its port taken?)");
}

/// [`start_manager`] on a given port (a manager restarted where its agents expect it); None
/// if it exited before serving.
pub fn start_manager_on(
    port: u16,
    data_dir: &Path,
    client_env: &[(&str, &str)],
    command: impl Fn() -> Command,
) -> Option<Proc> {
    let mut manager = Proc(
        command()
            .args(["--listen", &format!("127.0.0.1:{port}")])
            .spawn()
            .unwrap(),
    );
    let scheme = if client_env.iter().any(|(k, _)| *k == "CORRAL_CA_FILE") {
        "https"
    } else {
        "http"
    };
    let serving = eventually(
        &format!("the manager to serve on {port}"),
        Duration::from_secs(30),
        || {
            if manager.0.try_wait().unwrap().is_some() {
                return Ok(false);
            }
            let token = std::fs::read_to_string(data_dir.join("admin.token"))
                .map_err(|e| format!("admin.token: {e}"))?;
            let out = Command::new(CORRAL)
                .args(["group", "ls"])
                .env("CORRAL_SERVER", format!("{scheme}://127.0.0.1:{port}"))
                .env("CORRAL_TOKEN", token.trim())
                .env("CORRAL_CONFIG", data_dir.join("none.toml"))
                .envs(client_env.iter().copied())
                .output()
                .unwrap();
            if out.status.success() {
                Ok(true)
            } else {
                Err(text(&out.stderr))
            }
        },
    );
    serving.then_some(manager)
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

/// `corral server` on `data`, its agents lost after `lost_after` seconds of silence, with
/// `extra` flags.
fn server_command(data: &Path, lost_after: u32, extra: &[String]) -> Command {
    let mut command = Command::new(CORRAL);
    command
        .args(["server", "--data-dir"])
        .arg(data)
        .args(["--heartbeat-secs", "1", "--lost-after-secs"])
        .arg(lost_after.to_string())
        .args(extra)
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    command
}

pub struct Cluster {
    /// Kills every process of `dir` first (the server, agents, what providers launched for it).
    _leftovers: KillLeftovers,
    pub dir: tempfile::TempDir,
    pub port: u16,
    pub lost_after: u32,
    pub token: String,
    pub server: Option<Proc>,
    /// The server's flags beside the data directory and the heartbeat's.
    server_args: Vec<String>,
    /// Variables of the server's environment.
    server_env: Vec<(String, String)>,
}

impl Cluster {
    pub fn start(lost_after: u32) -> Cluster {
        Cluster::start_with(lost_after, &[])
    }

    /// [`Cluster::start`], the server started with `flags` too.
    pub fn start_with(lost_after: u32, flags: &[&str]) -> Cluster {
        Cluster::start_with_env(lost_after, flags, &[])
    }

    /// [`Cluster::start_with`], the server's environment given `env` too.
    pub fn start_with_env(lost_after: u32, flags: &[&str], env: &[(&str, &str)]) -> Cluster {
        let server_args: Vec<String> = flags.iter().map(|f| f.to_string()).collect();
        let server_env: Vec<(String, String)> = env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        let (server, port) = start_manager(&data, &[], || {
            let mut command = server_command(&data, lost_after, &server_args);
            command.envs(server_env.iter().map(|(k, v)| (k, v)));
            command
        });
        let token = std::fs::read_to_string(data.join("admin.token"))
            .unwrap()
            .trim()
            .to_string();
        Cluster {
            _leftovers: KillLeftovers::new(dir.path()),
            dir,
            port,
            lost_after,
            token,
            server: Some(server),
            server_args,
            server_env,
        }
    }

    /// Starts the server again on its port, where the agents look for it.
    pub fn start_server(&mut self) {
        let data = self.dir.path().join("data");
        let server = start_manager_on(self.port, &data, &[], || {
            let mut command = server_command(&data, self.lost_after, &self.server_args);
            command.envs(self.server_env.iter().map(|(k, v)| (k, v)));
            command
        });
        self.server = Some(server.expect("the server restarts on its port"));
    }

    /// SIGKILL, as a crash would.
    pub fn kill_server(&mut self) {
        drop(self.server.take());
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// `corral ARGS` as the admin, to be started (for commands that run until stopped).
    pub fn command(&self, args: &[&str]) -> Command {
        let mut command = Command::new(CORRAL);
        command
            .args(args)
            .env("CORRAL_SERVER", self.url())
            .env("CORRAL_TOKEN", &self.token)
            .env("CORRAL_CONFIG", self.dir.path().join("none.toml"));
        command
    }

    pub fn cli(&self, args: &[&str]) -> Output {
        self.command(args).output().unwrap()
    }

    /// `corral ARGS` as the user of `token`, in `dir`.
    pub fn as_user_in(&self, token: &str, dir: &Path, args: &[&str]) -> Output {
        Command::new(CORRAL)
            .args(args)
            .current_dir(dir)
            .env("CORRAL_SERVER", self.url())
            .env("CORRAL_TOKEN", token)
            .env("CORRAL_CONFIG", self.dir.path().join("none.toml"))
            .output()
            .unwrap()
    }

    /// `corral ARGS` as the user of `token`.
    pub fn as_user(&self, token: &str, args: &[&str]) -> Output {
        self.as_user_in(token, self.dir.path(), args)
    }

    /// A group whose policy ends a session idle for `secs`, with agent `agent` (cpu=2).
    pub fn idle_group(&self, name: &str, secs: u32, agent: &str) -> Proc {
        let file = self.dir.path().join(format!("{name}.json"));
        let group = serde_json::json!({"name": name, "policy": {"termination":
            {"mode": "idle", "idle_timeout_secs": secs}}});
        std::fs::write(&file, group.to_string()).unwrap();
        ok(self.cli(&["group", "create", name, "--file", file.to_str().unwrap()]));
        self.agent(agent, name, "cpu=2")
    }

    /// `corral session port-forward ID 0:REMOTE` as the user of `token` (its standard error
    /// piped; REMOTE a port or an app's name, on `port`), and the local port it says it
    /// listens on (its one line, checked whole).
    pub fn port_forward(&self, token: &str, id: &str, remote: &str, port: u16) -> (Proc, u16) {
        let mut forward = Proc(
            self.command(&["session", "port-forward", id, &format!("0:{remote}")])
                .env("CORRAL_TOKEN", token)
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap(),
        );
        let mut line = String::new();
        std::io::BufRead::read_line(
            &mut std::io::BufReader::new(forward.0.stdout.take().unwrap()),
            &mut line,
        )
        .unwrap();
        let local: u16 = line
            .strip_prefix("Forwarding from 127.0.0.1:")
            .and_then(|rest| rest.split(' ').next())
            .and_then(|p| p.parse().ok())
            .unwrap_or_else(|| panic!("{line:?}"));
        assert_eq!(
            line.trim_end(),
            format!("Forwarding from 127.0.0.1:{local} -> {port}")
        );
        (forward, local)
    }

    /// A new token of the user `user` (the secret alone).
    pub fn user_token(&self, user: &str) -> String {
        ok(self.cli(&["token", "create", user])).trim().to_string()
    }

    pub fn json(&self, args: &[&str]) -> serde_json::Value {
        serde_json::from_slice(&self.cli(args).stdout).unwrap_or_default()
    }

    /// `corral agent` for `group`, joining this cluster's manager, for a test to add to.
    pub fn agent_command(&self, id: &str, group: &str, capacity: &str) -> Command {
        let mut command = Command::new(CORRAL);
        command
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
            // The tests talk to their sessions through files of the test's directory, which a
            // session's sandbox hides (its own tests: crates/runtime/tests/sandbox.rs, the dev
            // test in agent.rs, the pilots').
            .env("CORRAL_AGENT_ISOLATION", "off")
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        command
    }

    /// Starts `corral agent` for `group` and waits until it has joined.
    pub fn agent(&self, id: &str, group: &str, capacity: &str) -> Proc {
        self.agent_from(id, self.agent_command(id, group, capacity))
    }

    /// Starts agent `id` from `command` and waits until it has joined.
    pub fn agent_from(&self, id: &str, mut command: Command) -> Proc {
        let agent = Proc(command.spawn().unwrap());
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

    /// Waits until `check` gives a value (20 s at most).
    pub fn until<T>(&self, what: &str, check: impl Fn() -> Option<T>) -> T {
        self.until_for(20, what, check)
    }

    /// Waits until `check` gives a value (`secs` at most).
    pub fn until_for<T>(&self, secs: u64, what: &str, check: impl FnMut() -> Option<T>) -> T {
        eventually(what, Duration::from_secs(secs), check)
    }

    /// A session read the way that is not activity (a read of the session itself would be).
    pub fn listed(&self, id: &str) -> serde_json::Value {
        let list = self.json(&["session", "ls", "-o", "json"]);
        list.as_array()
            .and_then(|l| l.iter().find(|s| s["id"] == id).cloned())
            .unwrap_or_default()
    }
}

/// A command's standard output, once it succeeded (else the test fails with what it printed).
pub fn ok(out: Output) -> String {
    assert!(
        out.status.success(),
        "stdout: {}\nstderr: {}",
        text(&out.stdout),
        text(&out.stderr)
    );
    text(&out.stdout)
}

/// Docker is reachable; without it the test is skipped, saying so (and fails under CI=true).
pub fn docker_available() -> bool {
    let ok = Command::new("docker")
        .arg("info")
        .output()
        .is_ok_and(|o| o.status.success());
    corral_testkit::require("a Docker daemon", ok)
}

/// Docker and Debian's static busybox, from which `corral agent-image` builds its images (this
/// machine pulls none); without them the test is skipped, saying so (fails under CI=true).
pub fn docker_and_busybox_available() -> bool {
    docker_available() && corral_testkit::require_busybox()
}

/// The Python with Selenium (and Jupyter): `CORRAL_TEST_PYTHON`, else `python3`.
pub fn python() -> String {
    std::env::var("CORRAL_TEST_PYTHON").unwrap_or_else(|_| "python3".to_string())
}

pub fn browser_available() -> Result<(), String> {
    for (what, command, args) in [
        ("chromium", "chromium", &["--version"][..]),
        ("chromedriver", "chromedriver", &["--version"][..]),
        ("Selenium", &python(), &["-c", "import selenium"][..]),
    ] {
        let ok = Command::new(command)
            .args(args)
            .output()
            .is_ok_and(|o| o.status.success());
        if !ok {
            return Err(format!("{what} ({command} {})", args.join(" ")));
        }
    }
    Ok(())
}

/// Runs `tests/browser/{name}.py` with `env` and `ARTIFACTS` (its screenshots, kept in
/// `target/tmp/{name}/`), asserts it succeeded, and returns what it printed and that directory.
pub fn run_browser_script(name: &str, env: &[(&str, &str)]) -> (String, std::path::PathBuf) {
    let artifacts = Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    std::fs::create_dir_all(&artifacts).unwrap();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("tests/browser/{name}.py"));
    let out = Command::new(python())
        .arg(&script)
        .envs(env.iter().copied())
        .env("ARTIFACTS", &artifacts)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "the browser test failed (screenshots in {}):\nstdout: {}\nstderr: {}",
        artifacts.display(),
        text(&out.stdout),
        text(&out.stderr)
    );
    (text(&out.stdout), artifacts)
}
