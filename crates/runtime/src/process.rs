//! The process runtime: a session is a process group on this host.
//!
//! The session's program runs in its own process group (so a stop reaches its children), in
//! the work directory, with exactly the spec's environment plus `PATH` and `HOME` (if it sets
//! none), `CORRAL_SESSION_ID` and `CORRAL_SESSION_COOKIE`, and its granted GPUs in
//! `CUDA_VISIBLE_DEVICES`, `NVIDIA_VISIBLE_DEVICES` and `CORRAL_GPU_SHARES` (always, empty
//! without a grant), stdin from `/dev/null` and stdout/stderr into the log files. Limits go through a cgroup v2 `corral-<id>` when the
//! hierarchy is writable, else through `RLIMIT_AS` (memory only; no CPU limit).
//!
//! A session ends when its program ends: whatever it left running is then killed (SIGTERM,
//! SIGKILL after [`LEFTOVER_GRACE`]), as Docker does when a container's first process ends,
//! and only then is the exit reported. Its processes are those of its cgroup, if it has one
//! (all of them), and those [`crate::tracking`] finds: the cookie in their environment, its
//! process group, their descent; `setsid` and double forks do not escape. `stop` signals the
//! same set.
//!
//! `pid.json` in the session directory records the pid, its start time (from
//! `/proc/<pid>/stat`, so a reused pid is not mistaken for the session) and the cgroup, so a
//! restarted agent finds the session again with [`ProcessRuntime::running`]. The exit status
//! of such an adopted session cannot be known (only the parent that died could have read it):
//! `wait` reports it as [`Exit::Failed`].
//!
//! A command run in a running session (`exec.rs`) runs as its processes do, and so is one of
//! them: found, signalled and ended with them.

use std::collections::{BTreeSet, HashMap};
use std::fs;
use std::io;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::process::Child;
use tokio::sync::watch;
use tokio::task::AbortHandle;

use crate::cgroup::{CgroupParent, SessionCgroup};
use crate::outputs::copy_outputs;
use crate::procfs;
use crate::sandbox::{SandboxConfig, UidPool};
use crate::tracking::{self, Mark, Tracker};
use crate::{Exit, RuntimeError, SessionPaths, SessionSpec};

mod exec;
mod start;

/// `PATH` given to sessions whose environment sets none.
pub const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// The record of a running session in its directory.
const PID_FILE: &str = "pid.json";

/// How long processes a session left behind get to exit after SIGTERM.
pub const LEFTOVER_GRACE: Duration = Duration::from_secs(2);

/// How long the end of a session waits for its leftover processes to die after SIGKILL.
const LEFTOVER_WAIT: Duration = Duration::from_secs(5);

/// How long `stop` waits after SIGKILL.
const KILL_WAIT: Duration = Duration::from_secs(10);

/// How often an adopted session is checked.
const ADOPTED_POLL: Duration = Duration::from_millis(200);

/// Settings of the process runtime.
#[derive(Debug, Clone)]
pub struct ProcessConfig {
    /// The cgroup v2 directory under which sessions' `corral-<id>` cgroups are made; `None`:
    /// the agent's own cgroup.
    pub cgroup_parent: Option<PathBuf>,
    /// Whether to use cgroup v2 where it is available; `false` always uses rlimits.
    pub use_cgroups: bool,
    /// `PATH` given to sessions whose environment sets none.
    pub path: String,
    /// What keeps sessions from the agent and from each other (`crate::sandbox`).
    pub sandbox: SandboxConfig,
}

impl Default for ProcessConfig {
    fn default() -> Self {
        ProcessConfig {
            cgroup_parent: None,
            use_cgroups: true,
            path: DEFAULT_PATH.to_string(),
            sandbox: SandboxConfig::default(),
        }
    }
}

/// What `pid.json` holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct ProcessRecord {
    /// The session's first process, also its process group id.
    pid: i32,
    /// Its start time in clock ticks after boot (field 22 of `/proc/<pid>/stat`).
    start_time: u64,
    /// Its cgroup, if it has one.
    cgroup: Option<PathBuf>,
    /// The value of `CORRAL_SESSION_COOKIE` its processes carry (absent in records written
    /// before there was one).
    #[serde(default)]
    cookie: Option<String>,
    /// The uid of the pool it runs as (a root agent's sandbox).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    uid: Option<u32>,
    /// Whether it runs in a sandbox (absent in records written before this was recorded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    sandboxed: Option<bool>,
}

impl ProcessRecord {
    fn mark(&self) -> Mark {
        Mark {
            leader: self.pid,
            leader_start: self.start_time,
            cookie: self.cookie.clone(),
        }
    }

    fn cgroup(&self) -> Option<SessionCgroup> {
        self.cgroup.clone().map(|path| SessionCgroup { path })
    }
}

/// A session this runtime knows.
#[derive(Debug, Clone)]
struct Tracked {
    /// `None` if it never started.
    process: Option<ProcessRecord>,
    /// `Some` once it ended.
    exit: watch::Receiver<Option<Exit>>,
    /// The task that watches it.
    task: Option<AbortHandle>,
}

impl Tracked {
    fn ended(&self) -> bool {
        self.exit.borrow().is_some()
    }
}

/// Runs sessions as process groups on this host.
#[derive(Debug)]
pub struct ProcessRuntime {
    config: ProcessConfig,
    cgroups: Option<CgroupParent>,
    sessions: Mutex<HashMap<String, Tracked>>,
    tracker: Arc<Tracker>,
    /// The task that looks at running sessions' processes, once one runs.
    looking: OnceLock<AbortHandle>,
    /// Whether this host can sandbox sessions (`Err`: why not), tried at the first start.
    sandboxing: OnceLock<Result<(), String>>,
    /// The uids running sessions hold (a root agent's sandbox).
    uids: Arc<UidPool>,
}

impl ProcessRuntime {
    pub fn new(config: ProcessConfig) -> Self {
        let cgroups = if config.use_cgroups {
            CgroupParent::detect(config.cgroup_parent.as_deref())
        } else {
            None
        };
        match &cgroups {
            Some(parent) => {
                tracing::info!(parent = %parent.path().display(), "process runtime: limits through cgroup v2")
            }
            None => tracing::info!(
                "process runtime: no writable cgroup v2; memory limits through RLIMIT_AS, no CPU limits"
            ),
        }
        ProcessRuntime {
            config,
            cgroups,
            sessions: Mutex::new(HashMap::new()),
            tracker: Arc::new(Tracker::default()),
            looking: OnceLock::new(),
            sandboxing: OnceLock::new(),
            uids: Arc::new(UidPool::default()),
        }
    }

    /// Starts the periodic look at running sessions' processes (from within the async
    /// runtime, so at a start or an adoption).
    fn keep_looking(&self) {
        self.looking.get_or_init(|| {
            let tracker = Arc::clone(&self.tracker);
            let task = tokio::spawn(async move {
                let mut every = tokio::time::interval(tracking::LOOK_INTERVAL);
                every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                loop {
                    every.tick().await;
                    if tracker.is_empty() {
                        continue;
                    }
                    let tracker = Arc::clone(&tracker);
                    // /proc is read with blocking calls.
                    let _ = tokio::task::spawn_blocking(move || tracker.look()).await;
                }
            });
            task.abort_handle()
        });
    }

    /// The cgroup v2 directory sessions' cgroups are made in, if limits go through cgroups.
    pub fn cgroup_parent(&self) -> Option<&Path> {
        self.cgroups.as_ref().map(|c| c.path())
    }

    fn sessions(&self) -> std::sync::MutexGuard<'_, HashMap<String, Tracked>> {
        // A panic while holding the lock leaves the map consistent: every update is one insert.
        self.sessions.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn tracked(&self, id: &str) -> Result<Tracked, RuntimeError> {
        self.sessions()
            .get(id)
            .cloned()
            .ok_or_else(|| RuntimeError::UnknownSession(id.to_string()))
    }

    /// See [`crate::Runtime::wait`].
    pub async fn wait(&self, id: &str) -> Result<Exit, RuntimeError> {
        let mut exit = self.tracked(id)?.exit;
        let result = exit.wait_for(Option::is_some).await;
        Ok(match result {
            Ok(exit) => exit.clone().unwrap_or_else(|| lost(id)),
            Err(_) => lost(id),
        })
    }

    /// See [`crate::Runtime::stop`]. SIGTERM goes to every process of the session (see the
    /// module); the grace applies to the session's first process: once it ended, what is left
    /// gets [`LEFTOVER_GRACE`] more, and `grace` bounds the whole.
    pub async fn stop(&self, id: &str, grace: Duration) -> Result<(), RuntimeError> {
        let tracked = self.tracked(id)?;
        let Some(record) = tracked.process.clone() else {
            return Ok(());
        };
        if tracked.ended() {
            return Ok(());
        }
        tracing::info!(session = id, pid = record.pid, "stopping session (SIGTERM)");
        signal_session(&self.tracker, id, &record, Some(libc::SIGTERM)).await;
        let mut exit = tracked.exit.clone();
        if tokio::time::timeout(grace, exit.wait_for(Option::is_some))
            .await
            .is_ok()
        {
            return Ok(());
        }
        tracing::info!(
            session = id,
            pid = record.pid,
            "session still running after the grace; SIGKILL"
        );
        signal_session(&self.tracker, id, &record, Some(libc::SIGKILL)).await;
        tokio::time::timeout(KILL_WAIT, exit.wait_for(Option::is_some))
            .await
            .map_err(|_| RuntimeError::StopTimedOut(id.to_string()))?
            .ok();
        Ok(())
    }

    /// See [`crate::Runtime::running`]: the sessions this value started that still run, and
    /// those whose `pid.json` under `work_root` names a live process (which are adopted).
    pub async fn running(&self, work_root: &Path) -> Result<Vec<String>, RuntimeError> {
        let mut ids: BTreeSet<String> = self
            .sessions()
            .iter()
            .filter(|(_, t)| !t.ended())
            .map(|(id, _)| id.clone())
            .collect();
        let entries = match fs::read_dir(work_root) {
            Ok(entries) => entries,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(ids.into_iter().collect()),
            Err(e) => {
                return Err(RuntimeError::io(
                    format!("reading {}", work_root.display()),
                    e,
                ))
            }
        };
        for entry in entries {
            let entry = entry
                .map_err(|e| RuntimeError::io(format!("reading {}", work_root.display()), e))?;
            let Some(id) = entry.file_name().to_str().map(str::to_string) else {
                continue;
            };
            if crate::validate_id(&id).is_err() || ids.contains(&id) {
                continue;
            }
            let pid_file = entry.path().join(PID_FILE);
            let Some(record) = read_record(&pid_file) else {
                continue;
            };
            if !procfs::is_same_live_process(record.pid, record.start_time) {
                tracing::debug!(session = %id, pid = record.pid, "stale pid file removed");
                let _ = fs::remove_file(&pid_file);
                continue;
            }
            tracing::info!(session = %id, pid = record.pid, "adopted a session started before a restart");
            self.tracker.watch(&id, record.mark());
            self.keep_looking();
            if let Some(uid) = record.uid {
                self.uids.keep(uid);
            }
            let (tx, exit) = watch::channel(None);
            let task = tokio::spawn(watch_adopted(
                id.clone(),
                record.clone(),
                pid_file,
                Arc::clone(&self.tracker),
                Arc::clone(&self.uids),
                tx,
            ));
            self.sessions().insert(
                id.clone(),
                Tracked {
                    process: Some(record),
                    exit,
                    task: Some(task.abort_handle()),
                },
            );
            ids.insert(id);
        }
        Ok(ids.into_iter().collect())
    }

    /// See [`crate::Runtime::collect_outputs`].
    pub async fn collect_outputs(
        &self,
        spec: &SessionSpec,
        work_root: &Path,
    ) -> Result<Vec<PathBuf>, RuntimeError> {
        crate::outputs::validate_outputs(spec)?;
        let paths = SessionPaths::new(work_root, &spec.id);
        let id = spec.id.clone();
        let outputs = spec.outputs.clone();
        tokio::task::spawn_blocking(move || {
            copy_outputs(&id, &outputs, &paths.work, &paths.outputs)
        })
        .await
        .map_err(|e| RuntimeError::io("copying outputs", io::Error::other(e)))?
    }

    /// See [`crate::Runtime::remove`].
    pub async fn remove(&self, id: &str) -> Result<(), RuntimeError> {
        let mut sessions = self.sessions();
        match sessions.get(id) {
            Some(t) if !t.ended() => Err(RuntimeError::StillRunning(id.to_string())),
            Some(_) => {
                sessions.remove(id);
                Ok(())
            }
            None => Err(RuntimeError::UnknownSession(id.to_string())),
        }
    }
}

impl Drop for ProcessRuntime {
    /// Stops watching; the sessions go on running, to be found again by `running`.
    fn drop(&mut self) {
        let sessions = self.sessions.get_mut().unwrap_or_else(|e| e.into_inner());
        for tracked in sessions.values() {
            if let Some(task) = &tracked.task {
                task.abort();
            }
        }
        if let Some(task) = self.looking.get() {
            task.abort();
        }
    }
}

/// Makes this process the child subreaper of its descendants (`PR_SET_CHILD_SUBREAPER`): the
/// orphans of sessions (what a session's process left when it exited) are reparented to it
/// instead of init, and the process runtime reaps those of its sessions. For the agent daemon,
/// once at its start.
pub fn become_subreaper() -> Result<(), RuntimeError> {
    // SAFETY: prctl(2) with integer arguments only.
    let rc = unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) };
    if rc == 0 {
        Ok(())
    } else {
        Err(RuntimeError::io(
            "becoming a child subreaper",
            io::Error::last_os_error(),
        ))
    }
}

fn lost(id: &str) -> Exit {
    Exit::Failed(format!("the runtime lost track of session {id}"))
}

/// Sends `signal` (`None`: none, only look) to every live process of the session: its cgroup,
/// its process group (unless the leader's pid went to another process) and each process the
/// tracker finds. Returns the live processes found.
async fn signal_session(
    tracker: &Arc<Tracker>,
    id: &str,
    record: &ProcessRecord,
    signal: Option<i32>,
) -> Vec<i32> {
    let (tracker, id, record) = (Arc::clone(tracker), id.to_string(), record.clone());
    // /proc is read with blocking calls.
    tokio::task::spawn_blocking(move || signal_session_now(&tracker, &id, &record, signal))
        .await
        .unwrap_or_default()
}

fn signal_session_now(
    tracker: &Tracker,
    id: &str,
    record: &ProcessRecord,
    signal: Option<i32>,
) -> Vec<i32> {
    let cgroup = record.cgroup();
    if let Some(cg) = &cgroup {
        tracker.remember(id, &cg.pids());
    }
    // Look first: a process that escaped its group is found by its descent only while its
    // parent lives, which the signals may end.
    let mut live: Vec<i32> = tracker
        .members_of(id, &record.mark())
        .into_iter()
        .filter(|p| p.stat.alive())
        .map(|p| p.pid)
        .collect();
    if let Some(signal) = signal {
        if let Some(cg) = &cgroup {
            cg.signal_all(signal);
        }
        // The group in one call: a process forking in a loop is not outrun.
        let group_is_ours =
            procfs::stat(record.pid).is_none_or(|s| s.start_time == record.start_time);
        if group_is_ours {
            if let Err(e) = procfs::signal_group(record.pid, signal) {
                tracing::warn!(session = id, pgid = record.pid, signal, error = %e, "could not signal the session's process group");
            }
        }
        for &pid in &live {
            if let Err(e) = procfs::signal_process(pid, signal) {
                tracing::warn!(session = id, pid, signal, error = %e, "could not signal a session process");
            }
        }
    }
    if let Some(cg) = &cgroup {
        live.extend(cg.pids());
    }
    live.sort_unstable();
    live.dedup();
    live
}

fn exit_of(status: std::process::ExitStatus) -> Exit {
    match (status.code(), status.signal()) {
        (Some(code), _) => Exit::Code(code),
        (None, Some(signal)) => Exit::Signal(signal),
        (None, None) => Exit::Failed(format!("unknown wait status {status:?}")),
    }
}

/// Waits for a session this runtime started, then cleans up after it.
async fn watch_child(
    id: String,
    mut child: Child,
    record: ProcessRecord,
    pid_file: PathBuf,
    tracker: Arc<Tracker>,
    uids: Arc<UidPool>,
    tx: watch::Sender<Option<Exit>>,
) {
    let exit = match child.wait().await {
        Ok(status) => exit_of(status),
        Err(e) => Exit::Failed(format!("waiting for the process: {e}")),
    };
    tracing::info!(session = %id, %exit, "session ended");
    clean_up(&tracker, &id, &record, &pid_file).await;
    if let Some(uid) = record.uid {
        uids.give_back(uid);
    }
    tx.send_replace(Some(exit));
}

/// Waits for a session found again after a restart, then cleans up after it.
async fn watch_adopted(
    id: String,
    record: ProcessRecord,
    pid_file: PathBuf,
    tracker: Arc<Tracker>,
    uids: Arc<UidPool>,
    tx: watch::Sender<Option<Exit>>,
) {
    while procfs::is_same_live_process(record.pid, record.start_time) {
        tokio::time::sleep(ADOPTED_POLL).await;
    }
    tracing::info!(session = %id, "adopted session ended");
    clean_up(&tracker, &id, &record, &pid_file).await;
    if let Some(uid) = record.uid {
        uids.give_back(uid);
    }
    tx.send_replace(Some(Exit::Failed(
        "exit status unknown: the session ended after the agent that started it restarted".into(),
    )));
}

/// Ends what the session left running (SIGTERM, SIGKILL after [`LEFTOVER_GRACE`]), removes
/// its cgroup and its pid file.
async fn clean_up(tracker: &Arc<Tracker>, id: &str, record: &ProcessRecord, pid_file: &Path) {
    let left = crate::terminate_then_kill(
        |signal| signal_session(tracker, id, record, signal),
        LEFTOVER_GRACE,
        LEFTOVER_WAIT,
    )
    .await;
    if !left.is_empty() {
        tracing::warn!(session = id, pids = ?left, "processes of the session outlived SIGKILL");
    }
    if let Some(cg) = record.cgroup() {
        cg.remove().await;
    }
    tracker.forget(id);
    if let Err(e) = fs::remove_file(pid_file) {
        if e.kind() != io::ErrorKind::NotFound {
            tracing::warn!(session = id, error = %e, "could not remove the pid file");
        }
    }
}

fn write_record(path: &Path, record: &ProcessRecord) -> io::Result<()> {
    crate::write_atomic(path, &serde_json::to_vec(record).map_err(io::Error::other)?)
}

fn read_record(path: &Path) -> Option<ProcessRecord> {
    let bytes = fs::read(path).ok()?;
    match serde_json::from_slice(&bytes) {
        Ok(record) => Some(record),
        Err(e) => {
            tracing::warn!(file = %path.display(), error = %e, "unreadable pid file ignored");
            None
        }
    }
}
#[cfg(test)]
mod tests;
