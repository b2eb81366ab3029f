//! Corral's session runtimes: the part of the agent daemon that runs sessions on this host.
//!
//! A [`Runtime`] starts a session described by a [`SessionSpec`] in its own directory under a
//! work root, waits for it, stops it, finds it again after an agent restart and collects its
//! outputs; while it runs, [`Runtime::exec`] runs a command inside it (see [`ExecRequest`]). Two runtimes exist: [`ProcessRuntime`] (a process group, limited by cgroup v2 or
//! rlimits) and [`DockerRuntime`] (a container through the Docker Engine API).
//! [`detect_capacity`] tells what this host offers.
//!
//! Layout of one session (see [`SessionPaths`]):
//!
//! ```text
//! <work_root>/<id>/work/        the working directory; the caller stages inputs here
//! <work_root>/<id>/stdout.log   what the session wrote to stdout
//! <work_root>/<id>/stderr.log   what the session wrote to stderr
//! <work_root>/<id>/outputs/     the outputs, once collected
//! <work_root>/<id>/pid.json     the process runtime's record of a running session
//! ```
//!
//! Errors: a session that could not start because of what it asked for (a program or image that
//! does not exist) is no [`RuntimeError`]: `start` succeeds and `wait` returns
//! [`Exit::Failed`]. A `RuntimeError` means the request was invalid or the host could not do
//! what was asked (a directory could not be made, the Docker daemon did not answer).

mod atomic;
mod capacity;
mod cgroup;
mod devices;
mod docker;
mod escalate;
mod exec;
mod images;
mod outputs;
mod process;
pub mod procfs;
pub mod sandbox;
/// The busybox test image, for tests of this crate and its users (the `testing` feature).
#[cfg(any(test, feature = "testing"))]
pub mod testing;
mod tracking;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

pub use atomic::write_atomic;
pub use capacity::{detect_capacity, Capacity, Gpu, Mig, DEFAULT_NVIDIA_SMI};
pub use devices::{CUDA_VISIBLE_DEVICES, DEFAULT_CDI_DIRS, GPU_SHARES_VAR, NVIDIA_VISIBLE_DEVICES};
pub use docker::{DockerRuntime, LABEL_AGENT, LABEL_SESSION};
pub use escalate::terminate_then_kill;
pub use exec::{ExecRequest, Execution, Resizer};
pub use images::repository_of;
pub use process::{become_subreaper, ProcessConfig, ProcessRuntime, DEFAULT_PATH, LEFTOVER_GRACE};
pub use tracking::{COOKIE_VAR, ID_VAR};

/// What to run: one session as the agent received it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionSpec {
    /// The session id; `[a-z0-9]` only, so it is safe as a file, cgroup and container name.
    pub id: String,
    /// Program and arguments. May be empty for Docker (the image's default command).
    pub command: Vec<String>,
    /// Docker image; ignored by the process runtime.
    pub image: Option<String>,
    /// The session's environment; the process runtime adds `PATH` and `HOME` if absent, and
    /// [`ID_VAR`] and [`COOKIE_VAR`] (which mark its processes) always. Both runtimes set
    /// [`CUDA_VISIBLE_DEVICES`], [`NVIDIA_VISIBLE_DEVICES`] and [`GPU_SHARES_VAR`] from
    /// `devices`, over what this says.
    pub environment: BTreeMap<String, String>,
    /// Resource limits.
    pub limits: Limits,
    /// Paths relative to the work directory to collect once the session ended.
    pub outputs: Vec<String>,
    /// The devices granted to it. The `gpu` ones are what it may use: the only GPUs its
    /// variables name, and those the Docker runtime asks the daemon for.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub devices: Vec<corral_core::DeviceGrant>,
}

/// Resource limits of a session; 0 means none.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Limits {
    /// CPU in thousandths of a core.
    pub cpu_milli: u64,
    /// Memory in bytes.
    pub mem_bytes: u64,
}

/// How a session ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Exit {
    /// Its program exited with this code.
    Code(i32),
    /// Its program was killed by this signal (for Docker: an exit code 128 + n, as shells and
    /// Docker report a signal, or the kernel's OOM killer, reported as SIGKILL).
    Signal(i32),
    /// It could not start, or the runtime lost track of it; the text says why.
    Failed(String),
}

impl Exit {
    /// Whether the session succeeded (exit code 0).
    pub fn success(&self) -> bool {
        matches!(self, Exit::Code(0))
    }

    /// The exit code in the shell's convention (a signal n is 128 + n); `None` for `Failed`.
    pub fn code(&self) -> Option<i32> {
        match self {
            Exit::Code(code) => Some(*code),
            Exit::Signal(signal) => Some(128 + signal),
            Exit::Failed(_) => None,
        }
    }
}

impl std::fmt::Display for Exit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Exit::Code(code) => write!(f, "exited with code {code}"),
            Exit::Signal(signal) => write!(f, "killed by signal {signal}"),
            Exit::Failed(why) => write!(f, "failed: {why}"),
        }
    }
}

/// What went wrong in a runtime call.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    /// The spec cannot be run as given.
    #[error("invalid session {id:?}: {reason}")]
    InvalidSpec { id: String, reason: String },
    /// A session with this id is still running.
    #[error("session {0} is already running")]
    AlreadyRunning(String),
    /// The session has not ended yet.
    #[error("session {0} is still running")]
    StillRunning(String),
    /// This runtime knows no session with this id.
    #[error("unknown session {0}")]
    UnknownSession(String),
    /// The session does not run here (never did, or ended): nothing can be run in it.
    #[error("session {0} is not running on this agent")]
    NotRunning(String),
    /// What was asked of this session cannot be done yet.
    #[error("session {id}: {what} is not supported yet")]
    Unsupported { id: String, what: String },
    /// An output path leaves the work directory.
    #[error("output {path:?} of session {id} leaves its work directory")]
    OutputEscapes { id: String, path: String },
    /// A file system or process operation on the host failed.
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
    /// The Docker daemon refused or did not answer.
    #[error("docker: {what}: {source}")]
    Docker {
        what: String,
        #[source]
        source: bollard::errors::Error,
    },
    /// The daemon could not pull an image.
    #[error("docker: pulling {reference}: {error}")]
    Pull { reference: String, error: String },
    /// The session did not end in time after being killed.
    #[error("session {0} did not end after SIGKILL")]
    StopTimedOut(String),
}

impl RuntimeError {
    pub(crate) fn io(what: impl Into<String>, source: std::io::Error) -> Self {
        RuntimeError::Io {
            what: what.into(),
            source,
        }
    }
}

/// Where a session's files live: `<work_root>/<id>/...`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionPaths {
    /// `<work_root>/<id>/`
    pub dir: PathBuf,
    /// `<work_root>/<id>/work/`, the working directory.
    pub work: PathBuf,
    /// `<work_root>/<id>/stdout.log`
    pub stdout: PathBuf,
    /// `<work_root>/<id>/stderr.log`
    pub stderr: PathBuf,
    /// `<work_root>/<id>/outputs/`
    pub outputs: PathBuf,
}

impl SessionPaths {
    pub fn new(work_root: &Path, id: &str) -> Self {
        let dir = work_root.join(id);
        SessionPaths {
            work: dir.join("work"),
            stdout: dir.join("stdout.log"),
            stderr: dir.join("stderr.log"),
            outputs: dir.join("outputs"),
            dir,
        }
    }
}

/// Checks that a session id is non-empty, `[a-z0-9]` only and at most 64 characters.
pub fn validate_id(id: &str) -> Result<(), RuntimeError> {
    let ok = !id.is_empty()
        && id.len() <= 64
        && id
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit());
    if ok {
        Ok(())
    } else {
        Err(RuntimeError::InvalidSpec {
            id: id.to_string(),
            reason: "the id must be 1 to 64 characters from [a-z0-9]".into(),
        })
    }
}

/// Checks what both runtimes need of a spec: the id, and environment names without `=` or NUL.
pub(crate) fn validate_spec(spec: &SessionSpec) -> Result<(), RuntimeError> {
    validate_id(&spec.id)?;
    let invalid = |reason: String| RuntimeError::InvalidSpec {
        id: spec.id.clone(),
        reason,
    };
    for (name, value) in &spec.environment {
        if name.is_empty() || name.contains('=') || name.contains('\0') {
            return Err(invalid(format!(
                "invalid environment variable name {name:?}"
            )));
        }
        if value.contains('\0') {
            return Err(invalid(format!("environment variable {name} contains NUL")));
        }
    }
    if spec.command.iter().any(|arg| arg.contains('\0')) {
        return Err(invalid("the command contains NUL".into()));
    }
    devices::check_grants(&spec.devices).map_err(invalid)?;
    outputs::validate_outputs(spec)?;
    Ok(())
}

/// A session runtime on this host: processes or Docker containers.
pub enum Runtime {
    Process(ProcessRuntime),
    Docker(DockerRuntime),
}

impl Runtime {
    /// Prepares `<work_root>/<id>/` (the work dir `work/`, where the caller already staged the
    /// inputs, plus `stdout.log` and `stderr.log`), starts the session and returns at once.
    pub async fn start(&self, spec: &SessionSpec, work_root: &Path) -> Result<(), RuntimeError> {
        match self {
            Runtime::Process(r) => r.start(spec, work_root).await,
            Runtime::Docker(r) => r.start(spec, work_root).await,
        }
    }

    /// Waits for the session to end (at once if it already ended) and returns its exit.
    pub async fn wait(&self, id: &str) -> Result<Exit, RuntimeError> {
        match self {
            Runtime::Process(r) => r.wait(id).await,
            Runtime::Docker(r) => r.wait(id).await,
        }
    }

    /// Stops the session: SIGTERM to all its processes (the process runtime: its process group,
    /// cgroup and the processes that carry its cookie or descend from it) or its container,
    /// SIGKILL after `grace`. Returns once it ended, nothing of it left running; stopping an
    /// ended session does nothing.
    pub async fn stop(&self, id: &str, grace: Duration) -> Result<(), RuntimeError> {
        match self {
            Runtime::Process(r) => r.stop(id, grace).await,
            Runtime::Docker(r) => r.stop(id, grace).await,
        }
    }

    /// The sessions this runtime still runs, sorted, including those started before an agent
    /// restart (processes through their pid file under `work_root`, containers through their
    /// labels); those are adopted, so `wait` and `stop` work on them.
    pub async fn running(&self, work_root: &Path) -> Result<Vec<String>, RuntimeError> {
        match self {
            Runtime::Process(r) => r.running(work_root).await,
            Runtime::Docker(r) => r.running(work_root).await,
        }
    }

    /// After the end: copies the spec's `outputs` from the work dir (process) or out of the
    /// container (Docker) into `<work_root>/<id>/outputs/`, refusing paths that leave the work
    /// dir before copying anything. Returns the collected paths; missing outputs are skipped
    /// with a warning, and so are symbolic links.
    pub async fn collect_outputs(
        &self,
        spec: &SessionSpec,
        work_root: &Path,
    ) -> Result<Vec<PathBuf>, RuntimeError> {
        match self {
            Runtime::Process(r) => r.collect_outputs(spec, work_root).await,
            Runtime::Docker(r) => r.collect_outputs(spec, work_root).await,
        }
    }

    /// Runs `request` inside running session `spec.id` (its environment, working directory,
    /// cgroup, as the session's own processes run), returning at once with its pipes. See
    /// [`ProcessRuntime::exec`] and [`DockerRuntime::exec`].
    pub async fn exec(
        &self,
        spec: &SessionSpec,
        work_root: &Path,
        request: &ExecRequest,
    ) -> Result<Execution, RuntimeError> {
        match self {
            Runtime::Process(r) => r.exec(spec, work_root, request).await,
            Runtime::Docker(r) => r.exec(spec, work_root, request).await,
        }
    }

    /// Where a running session's ports are reached from the agent: the loopback for the process
    /// runtime (its sessions share the host's network), the container's address for Docker.
    pub async fn address(&self, id: &str) -> Result<std::net::IpAddr, RuntimeError> {
        match self {
            Runtime::Process(_) => Ok(std::net::Ipv4Addr::LOCALHOST.into()),
            Runtime::Docker(r) => r.address(id).await,
        }
    }

    /// The Docker runtime, which runs images (the process runtime runs none).
    pub fn docker(&self) -> Option<&DockerRuntime> {
        match self {
            Runtime::Process(_) => None,
            Runtime::Docker(r) => Some(r),
        }
    }

    /// Forgets an ended session: removes its container (Docker) or its records (process). The
    /// session directory stays.
    pub async fn remove(&self, id: &str) -> Result<(), RuntimeError> {
        match self {
            Runtime::Process(r) => r.remove(id).await,
            Runtime::Docker(r) => r.remove(id).await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_checked() {
        assert!(validate_id("abc123").is_ok());
        for bad in ["", "A", "a-b", "../x", "a/b", "a b", &"a".repeat(65)] {
            assert!(validate_id(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn exit_codes_follow_the_shell() {
        assert_eq!(Exit::Code(3).code(), Some(3));
        assert_eq!(Exit::Signal(9).code(), Some(137));
        assert_eq!(Exit::Failed("x".into()).code(), None);
        assert!(Exit::Code(0).success());
        assert!(!Exit::Signal(15).success());
    }

    #[test]
    fn environment_names_are_checked() {
        let mut spec = SessionSpec {
            id: "a1".into(),
            command: vec!["true".into()],
            ..Default::default()
        };
        spec.environment.insert("A=B".into(), "x".into());
        assert!(matches!(
            validate_spec(&spec),
            Err(RuntimeError::InvalidSpec { .. })
        ));
    }
}
