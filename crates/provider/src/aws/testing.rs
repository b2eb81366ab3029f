//! Starts a local moto server (the AWS emulator from PyPI, `pip install 'moto[server]'`) for
//! tests: on a free loopback port, with EC2 instance type and AMI validation on, stopped when
//! dropped.

use std::net::{Ipv4Addr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use aws_config::SdkConfig;
use serde_json::{json, Map, Value};

use super::{sdk_config, Options};

const STARTUP_WAIT: Duration = Duration::from_secs(60);
/// Where moto's default AMIs and instance type offerings live.
pub const REGION: &str = "us-east-1";

/// A running moto server.
pub struct Moto {
    child: Child,
    endpoint: String,
    log: PathBuf,
}

impl Moto {
    /// Starts moto, or returns `None` after saying why the test is skipped when moto is not
    /// installed (the skip policy of `corral_testkit`: under `CI=true` a missing moto panics
    /// instead, as CI must run these tests). Panics when moto is installed but does not come up.
    pub async fn start() -> Option<Moto> {
        let mut command = corral_testkit::require_ok(
            "moto, the AWS emulator",
            moto_command().ok_or("moto_server is not installed (pip install 'moto[server]')"),
        )?;
        let port = free_port();
        let log = std::env::temp_dir().join(format!("corral-moto-{port}.log"));
        let log_file = std::fs::File::create(&log).expect("create the moto log file");
        let child = command
            .args(["-H", "127.0.0.1", "-p", &port.to_string()])
            // RunInstances then rejects unknown instance types and AMIs as AWS does.
            .env("MOTO_EC2_ENABLE_INSTANCE_TYPE_VALIDATION", "true")
            .env("MOTO_ENABLE_AMI_VALIDATION", "true")
            .stdin(Stdio::null())
            .stdout(log_file.try_clone().expect("clone the moto log file"))
            .stderr(log_file)
            .spawn()
            .expect("start moto_server");
        let mut moto = Moto {
            child,
            endpoint: format!("http://127.0.0.1:{port}"),
            log,
        };
        moto.wait_ready(port).await;
        Some(moto)
    }

    async fn wait_ready(&mut self, port: u16) {
        let what = format!("moto_server to listen on port {port}");
        let log = &self.log;
        let child = &mut self.child;
        corral_testkit::eventually_async(&what, STARTUP_WAIT, || {
            if let Ok(Some(status)) = child.try_wait() {
                let log = std::fs::read_to_string(log).unwrap_or_default();
                panic!("moto_server exited ({status}): {log}");
            }
            tokio::net::TcpStream::connect((Ipv4Addr::LOCALHOST, port))
        })
        .await;
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// `http://127.0.0.1:<port>`.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// The provider options that point the SDK at this server with dummy credentials.
    pub fn options(&self) -> Map<String, Value> {
        let value = json!({
            "endpoint_url": self.endpoint,
            "region": REGION,
            "access_key_id": "testing",
            "secret_access_key": "testing",
        });
        match value {
            Value::Object(map) => map,
            _ => unreachable!("a JSON object"),
        }
    }

    /// An SDK configuration for the test's own clients, the same way the provider builds its.
    pub async fn sdk_config(&self) -> SdkConfig {
        let options: Options = crate::options::parse(&self.options()).expect("moto options");
        sdk_config(&options).await
    }
}

impl Drop for Moto {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("moto_server's log:\n{}", self.log_text());
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_file(&self.log);
    }
}

/// `moto_server` from PATH, else `python3 -m moto.server` when python3 has moto.
fn moto_command() -> Option<Command> {
    if let Some(path) = find_on_path("moto_server") {
        return Some(Command::new(path));
    }
    let has_moto = Command::new("python3")
        .args(["-c", "import moto.server"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    has_moto.then(|| {
        let mut command = Command::new("python3");
        command.args(["-m", "moto.server"]);
        command
    })
}

fn find_on_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|candidate| is_executable(candidate))
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    path.metadata()
        .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// A port free right now (the kernel's pick); moto binds it a moment later.
fn free_port() -> u16 {
    TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("bind a loopback port")
}
