//! A real container registry for a test: Debian's `docker-registry` (the distribution
//! registry) on a free loopback port, with a store of its own, stopped when dropped (its log
//! printed if the test failed).

use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

pub struct Registry {
    child: Child,
    pub port: u16,
    /// Its configuration, store and log.
    pub dir: tempfile::TempDir,
    log: PathBuf,
}

impl Registry {
    /// Starts one with the `auth` section (YAML; empty for none) that `auth` makes with the
    /// registry's directory; `None` after the skip policy's message when the package is
    /// missing.
    pub fn start(auth: impl FnOnce(&Path) -> String) -> Option<Registry> {
        let found = Command::new("docker-registry")
            .arg("--version")
            .output()
            .map_err(|e| format!("docker-registry: {e} (apt-get install docker-registry)"));
        crate::require_ok("the distribution registry", found)?;
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let dir = tempfile::tempdir().unwrap();
        let auth = auth(dir.path());
        let config = dir.path().join("config.yml");
        std::fs::write(
            &config,
            format!(
                "version: 0.1\nlog: {{level: warn}}\nstorage:\n  filesystem: {{rootdirectory: {}}}\n  \
                 delete: {{enabled: true}}\nhttp: {{addr: \"127.0.0.1:{port}\"}}\n{auth}",
                dir.path().join("data").display()
            ),
        )
        .unwrap();
        let log = dir.path().join("registry.log");
        let child = Command::new("docker-registry")
            .arg("serve")
            .arg(&config)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        let mut registry = Registry {
            child,
            port,
            dir,
            log,
        };
        let child = &mut registry.child;
        let log = &registry.log;
        crate::eventually("the registry to listen", Duration::from_secs(30), || {
            if let Ok(Some(status)) = child.try_wait() {
                panic!(
                    "docker-registry exited ({status}): {}",
                    std::fs::read_to_string(log).unwrap_or_default()
                );
            }
            TcpStream::connect(("127.0.0.1", port)).is_ok()
        });
        Some(registry)
    }

    /// Starts one that takes `user` with `password` only (htpasswd, HTTP Basic).
    pub fn start_with_user(user: &str, password: &str) -> Option<Registry> {
        let hash = bcrypt::hash(password, 4).unwrap();
        Registry::start(|dir| {
            let file = dir.join("htpasswd");
            std::fs::write(&file, format!("{user}:{hash}\n")).unwrap();
            format!(
                "auth:\n  htpasswd:\n    realm: corral-test\n    path: {}\n",
                file.display()
            )
        })
    }

    /// `http://127.0.0.1:PORT`
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// `127.0.0.1:PORT`, as image references name it.
    pub fn host(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!(
                "docker-registry's log:\n{}",
                std::fs::read_to_string(&self.log).unwrap_or_default()
            );
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
