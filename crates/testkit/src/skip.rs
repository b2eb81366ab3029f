//! The skip policy: a test whose service (a Docker daemon, a PostgreSQL server, the moto AWS
//! emulator) is missing says `skipped: <why>` on standard error and passes, so that
//! `cargo test` works with only the Rust toolchain; under `CI=true` it fails instead, since CI
//! provides every service and a test must not pass there without having run.

use std::fmt::Display;
use std::io::Write;

/// The variable naming a PostgreSQL server for tests: an admin URL such as
/// `postgres://postgres@127.0.0.1:5432/postgres`; each test makes a database of its own there.
pub const POSTGRES_ENV: &str = "CORRAL_TEST_DATABASE_URL";

/// Whether this is a CI run (`CI=true`), where every service must be there.
fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true")
}

/// Says the test is skipped and why; panics instead under `CI=true`.
#[track_caller]
pub fn skip(why: &str) {
    if in_ci() {
        panic!("{why}; under CI=true a test must run, not pass skipped");
    }
    // Written to the process's standard error itself, not through `eprintln!`, which the test
    // harness captures and shows only for a failing test: a passing run says what it skipped.
    let _ = writeln!(std::io::stderr(), "skipped: {why}");
}

/// Whether the test may go on: true when `service` is available, otherwise false after
/// [`skip`] (which panics under `CI=true`).
#[track_caller]
pub fn require(service: &str, available: bool) -> bool {
    if !available {
        skip(&format!("{service} is not available"));
    }
    available
}

/// [`require`] for a check that says why it failed: its value, or `None` after [`skip`]
/// quoting the error.
#[track_caller]
pub fn require_ok<T, E: Display>(service: &str, check: Result<T, E>) -> Option<T> {
    match check {
        Ok(value) => Some(value),
        Err(e) => {
            skip(&format!("{service} is not available: {e}"));
            None
        }
    }
}

/// The PostgreSQL admin URL of [`POSTGRES_ENV`], or `None` after [`skip`] when it is unset
/// or empty.
#[track_caller]
pub fn postgres_admin_url() -> Option<String> {
    let url = std::env::var(POSTGRES_ENV).ok().filter(|u| !u.is_empty());
    require_ok(
        "PostgreSQL",
        url.ok_or_else(|| format!("{POSTGRES_ENV} is not set")),
    )
}

/// Where Debian's busybox-static installs its binary: what the images of Corral's Docker tests
/// are built from (this machine pulls no image).
pub const BUSYBOX: &str = "/bin/busybox";

/// [`require`] for [`BUSYBOX`]: whether it is there, or false after [`skip`] saying how to get
/// it.
#[track_caller]
pub fn require_busybox() -> bool {
    require(
        "/bin/busybox (apt-get install busybox-static)",
        std::path::Path::new(BUSYBOX).exists(),
    )
}

/// The variable naming the folder of the shared workload traces (`hpc2n.swf`...); by default
/// `../shared/data` beside the checkout, where the project's machines keep them.
pub const SHARED_DATA_ENV: &str = "CORRAL_SHARED_DATA";

/// The path of `name` in the shared traces' folder, or `None` after [`skip`] when it is not
/// there.
#[track_caller]
pub fn shared_data(name: &str) -> Option<std::path::PathBuf> {
    let folder = std::env::var_os(SHARED_DATA_ENV)
        .filter(|v| !v.is_empty())
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| {
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/data")
        });
    let path = folder.join(name);
    require(
        &format!("{} (set {SHARED_DATA_ENV} to its folder)", path.display()),
        path.exists(),
    )
    .then_some(path)
}
