//! A PostgreSQL server of a test's own, for tests that stop and start it under the managers
//! (the shared one of `CORRAL_TEST_DATABASE_URL` serves other tests): Debian's server binaries
//! (`/usr/lib/postgresql/<version>/bin`), a cluster made by `initdb` in a temporary directory, on
//! a free loopback port, stopped at once when dropped. As root (as in CI) it runs as the
//! `postgres` user, which `initdb` requires.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Command;

pub struct Postgres {
    bin: PathBuf,
    dir: tempfile::TempDir,
    pub port: u16,
}

impl Postgres {
    /// Makes a cluster and starts it; `None` after the skip policy's message when the server
    /// binaries are missing.
    pub fn start() -> Option<Postgres> {
        let bin = crate::require_ok(
            "a PostgreSQL server (apt-get install postgresql)",
            server_bin(),
        )?;
        let dir = tempfile::tempdir().unwrap();
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let pg = Postgres { bin, dir, port };
        if is_root() {
            let chown = Command::new("chown")
                .args(["postgres:postgres"])
                .arg(pg.dir.path())
                .status()
                .unwrap();
            assert!(chown.success(), "chown to postgres failed");
        }
        pg.run(&format!(
            "{} -D {} -A trust -U postgres",
            pg.bin.join("initdb").display(),
            pg.data().display()
        ));
        pg.resume();
        Some(pg)
    }

    /// `postgres://postgres@127.0.0.1:PORT/postgres`.
    pub fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    /// Stops the server at once (`-m immediate`: connections cut, as a crash would).
    pub fn halt(&self) {
        self.pg_ctl("-m immediate stop");
    }

    /// Starts it again, on the same port, and waits until it takes connections.
    pub fn resume(&self) {
        self.pg_ctl(&format!(
            "-l {} -w -o \"-k {} -p {} -c listen_addresses=127.0.0.1\" start",
            self.dir.path().join("log").display(),
            self.dir.path().display(),
            self.port
        ));
    }

    fn data(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    fn pg_ctl(&self, args: &str) {
        self.run(&format!(
            "{} -D {} {args}",
            self.bin.join("pg_ctl").display(),
            self.data().display()
        ));
    }

    /// Runs a shell command line as the server's user, and checks that it succeeded.
    fn run(&self, line: &str) {
        let out = as_server_user(line);
        assert!(
            out.status.success(),
            "{line}: {}{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
            std::fs::read_to_string(self.dir.path().join("log")).unwrap_or_default()
        );
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        as_server_user(&format!(
            "{} -D {} -m immediate stop",
            self.bin.join("pg_ctl").display(),
            self.data().display()
        ));
    }
}

/// Runs a shell command line as the server's user: `postgres` when root.
fn as_server_user(line: &str) -> std::process::Output {
    match is_root() {
        true => Command::new("su").args(["postgres", "-c", line]).output(),
        false => Command::new("sh").args(["-c", line]).output(),
    }
    .unwrap()
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// The newest installed server's binaries.
fn server_bin() -> Result<PathBuf, String> {
    let root = Path::new("/usr/lib/postgresql");
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir(root)
        .map_err(|e| format!("{}: {e}", root.display()))?
        .filter_map(|e| {
            let e = e.ok()?;
            let version = e.file_name().to_str()?.parse().ok()?;
            let bin = e.path().join("bin");
            bin.join("initdb").exists().then_some((version, bin))
        })
        .collect();
    versions.sort();
    versions
        .pop()
        .map(|(_, bin)| bin)
        .ok_or_else(|| format!("no initdb under {}", root.display()))
}
