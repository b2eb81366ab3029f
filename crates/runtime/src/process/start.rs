//! Starting a session, step by step: its directory and log files, where its limits go (its
//! cgroup, else `RLIMIT_AS`), its sandbox, its command (exactly the spec's environment plus
//! `PATH`, `HOME` and the runtime's variables), the spawn with what runs between fork and exec,
//! then its record (`pid.json`) and the task that watches it. A session that cannot start is
//! recorded as such: its `wait` says why.

use std::fs;
use std::io;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;

use tokio::process::{Child, Command};
use tokio::sync::watch;

use super::{
    watch_child, write_record, ProcessRecord, ProcessRuntime, Tracked, LEFTOVER_GRACE, PID_FILE,
};
use crate::cgroup::SessionCgroup;
use crate::devices::device_environment;
use crate::procfs;
use crate::sandbox::{self, Isolation, Sandbox};
use crate::tracking::{self, COOKIE_VAR, ID_VAR};
use crate::{validate_spec, Exit, Limits, RuntimeError, SessionPaths, SessionSpec};

/// Where a session's limits go.
struct Limited {
    /// Its cgroup, if one could be made and joined.
    cgroup: Option<SessionCgroup>,
    /// The cgroup's `cgroup.procs`, open for the child to join it before exec.
    procs_file: Option<fs::File>,
    /// Its memory limit as `RLIMIT_AS`, without a cgroup.
    rlimit_as: Option<u64>,
}

impl ProcessRuntime {
    /// See [`crate::Runtime::start`].
    pub async fn start(&self, spec: &SessionSpec, work_root: &Path) -> Result<(), RuntimeError> {
        validate_spec(spec)?;
        let id = spec.id.as_str();
        let Some(program) = spec.command.first() else {
            return Err(RuntimeError::InvalidSpec {
                id: id.to_string(),
                reason: "the process runtime needs a command".into(),
            });
        };
        if self.sessions().get(id).is_some_and(|t| !t.ended()) {
            return Err(RuntimeError::AlreadyRunning(id.to_string()));
        }

        let paths = SessionPaths::new(work_root, id);
        let (work, stdout, stderr) = session_files(&paths)?;
        let Limited {
            cgroup,
            procs_file,
            rlimit_as,
        } = self.limited(id, spec.limits).await;

        let (sandbox, uid) = match self.sandbox_for(&paths, &work, work_root) {
            Ok(Some((sandbox, uid))) => (Some(sandbox), uid),
            Ok(None) => (None, None),
            Err(why) => {
                if let Some(cg) = &cgroup {
                    cg.remove().await;
                }
                self.not_started(id, why);
                return Ok(());
            }
        };

        let sandboxed = sandbox.is_some();
        let cookie = tracking::new_cookie();
        let command = self.command(spec, program, &work, &cookie, stdout, stderr);
        let child = match spawn_limited(command, procs_file, rlimit_as, sandbox) {
            Ok(child) => child,
            Err(e) => {
                if let Some(cg) = &cgroup {
                    cg.remove().await;
                }
                if let Some(uid) = uid {
                    self.uids.give_back(uid);
                }
                self.not_started(id, format!("could not start {program:?}: {e}"));
                return Ok(());
            }
        };

        let pid = child.id().map(|p| p as i32).unwrap_or_default();
        let start_time = procfs::stat(pid).map(|s| s.start_time).unwrap_or_default();
        let record = ProcessRecord {
            pid,
            start_time,
            cgroup: cgroup.as_ref().map(|c| c.path.clone()),
            cookie: Some(cookie),
            uid,
            sandboxed: Some(sandboxed),
        };
        let pid_file = paths.dir.join(PID_FILE);
        if let Err(e) = write_record(&pid_file, &record) {
            tracing::warn!(session = id, error = %e, "could not write the pid file; the session will not be found after an agent restart");
        }
        tracing::info!(session = id, pid, cgroup = ?record.cgroup, mem_rlimit = ?rlimit_as, "session started");
        self.watch_started(id, child, record, pid_file);
        Ok(())
    }

    /// The session's cgroup with `limits`, else its memory limit as `RLIMIT_AS` (and a
    /// warning that its CPU limit is not enforced).
    async fn limited(&self, id: &str, limits: Limits) -> Limited {
        let cgroup = self
            .cgroups
            .as_ref()
            .and_then(|parent| match parent.create(id, limits) {
                Ok(cg) => Some(cg),
                Err(e) => {
                    tracing::warn!(session = id, parent = %parent.path().display(), error = %e,
                        "could not make the session's cgroup; falling back to rlimits");
                    None
                }
            });
        let procs_file = match cgroup.as_ref().map(SessionCgroup::procs_file).transpose() {
            Ok(file) => file,
            Err(e) => {
                tracing::warn!(session = id, error = %e, "could not open cgroup.procs; falling back to rlimits");
                if let Some(cg) = &cgroup {
                    cg.remove().await;
                }
                None
            }
        };
        let cgroup = cgroup.filter(|_| procs_file.is_some());
        let rlimit_as = (cgroup.is_none() && limits.mem_bytes > 0).then_some(limits.mem_bytes);
        if cgroup.is_none() && limits.cpu_milli > 0 {
            tracing::warn!(
                session = id,
                cpu_milli = limits.cpu_milli,
                "no cgroup for the session: its CPU limit is not enforced"
            );
        }
        Limited {
            cgroup,
            procs_file,
            rlimit_as,
        }
    }

    /// The sandbox for a session about to start, `None` unsandboxed (`Err`: why the session
    /// cannot start).
    fn sandbox_for(
        &self,
        paths: &SessionPaths,
        work: &Path,
        work_root: &Path,
    ) -> Result<Option<(Sandbox, Option<u32>)>, String> {
        let config = &self.config.sandbox;
        if config.isolation == Isolation::Off {
            return Ok(None);
        }
        let usable = self.sandboxing.get_or_init(|| {
            let probe = sandbox::available(work_root);
            match &probe {
                Ok(()) => tracing::info!("process runtime: sessions run sandboxed"),
                Err(why) if config.isolation == Isolation::Auto => tracing::warn!(
                    why,
                    "process runtime: this host cannot sandbox sessions; they run as the \
                     agent's account and see what it sees (docs/security.md)"
                ),
                Err(why) => tracing::error!(why, "process runtime: sessions cannot be sandboxed"),
            }
            probe
        });
        if let Err(why) = usable {
            return match config.isolation {
                Isolation::Auto => Ok(None),
                _ => Err(format!("the agent must sandbox sessions and cannot: {why}")),
            };
        }
        let tmp = paths.dir.join("tmp");
        fs::create_dir_all(&tmp).map_err(|e| format!("creating {}: {e}", tmp.display()))?;
        let uid = if sandbox::is_root() {
            let uid = self
                .uids
                .take(config.first_uid, config.uid_count)
                .ok_or("every uid of the agent's session pool is in use")?;
            // Its files are its own; nothing else of the agent's is.
            for dir in [work, tmp.as_path()] {
                if let Err(e) = sandbox::chown_tree(dir, uid) {
                    self.uids.give_back(uid);
                    return Err(format!("giving {} to uid {uid}: {e}", dir.display()));
                }
            }
            Some(uid)
        } else {
            None
        };
        let covered = sandbox::covered(work_root, &config.hide);
        match Sandbox::new(work, &tmp, &covered, uid, LEFTOVER_GRACE) {
            Ok(sandbox) => Ok(Some((sandbox, uid))),
            Err(e) => {
                if let Some(uid) = uid {
                    self.uids.give_back(uid);
                }
                Err(format!("preparing the sandbox: {e}"))
            }
        }
    }

    /// The session's program in its work directory and its own process group, with exactly
    /// the spec's environment plus `PATH`, `HOME` and the runtime's variables.
    fn command(
        &self,
        spec: &SessionSpec,
        program: &str,
        work: &Path,
        cookie: &str,
        stdout: fs::File,
        stderr: fs::File,
    ) -> Command {
        let mut command = self.in_session(spec, program, &spec.command[1..], work, cookie);
        command
            .stdin(Stdio::null())
            .stdout(stdout)
            .stderr(stderr)
            .process_group(0);
        command
    }

    /// `program` with `args` as the session's processes run: in its work directory, with
    /// exactly the spec's environment plus `PATH`, `HOME` and the runtime's variables (its
    /// cookie among them). Also what a command run in the session gets.
    pub(super) fn in_session(
        &self,
        spec: &SessionSpec,
        program: &str,
        args: &[String],
        work: &Path,
        cookie: &str,
    ) -> Command {
        let mut command = Command::new(program);
        command
            .args(args)
            .current_dir(work)
            .env_clear()
            .env("PATH", &self.config.path)
            .env("HOME", work)
            .envs(&spec.environment)
            // After the spec's: a session cannot pose as another, nor see GPUs not granted.
            .envs(device_environment(&spec.devices))
            .env(ID_VAR, &spec.id)
            .env(COOKIE_VAR, cookie);
        command
    }

    /// Watches a session that started: its processes looked at, its end awaited by a task.
    fn watch_started(&self, id: &str, child: Child, record: ProcessRecord, pid_file: PathBuf) {
        self.tracker.watch(id, record.mark());
        self.keep_looking();
        let (tx, exit) = watch::channel(None);
        let task = tokio::spawn(watch_child(
            id.to_string(),
            child,
            record.clone(),
            pid_file,
            Arc::clone(&self.tracker),
            Arc::clone(&self.uids),
            tx,
        ));
        self.sessions().insert(
            id.to_string(),
            Tracked {
                process: Some(record),
                exit,
                task: Some(task.abort_handle()),
            },
        );
    }

    /// Records that session `id` could not start, and why (its `wait` says so).
    fn not_started(&self, id: &str, why: String) {
        tracing::warn!(session = id, why, "session could not start");
        let (_tx, exit) = watch::channel(Some(Exit::Failed(why)));
        self.sessions().insert(
            id.to_string(),
            Tracked {
                process: None,
                exit,
                task: None,
            },
        );
    }
}

/// The session's work directory (made, and absolute) and its log files (created).
fn session_files(paths: &SessionPaths) -> Result<(PathBuf, fs::File, fs::File), RuntimeError> {
    fs::create_dir_all(&paths.work)
        .map_err(|e| RuntimeError::io(format!("creating {}", paths.work.display()), e))?;
    let work = std::path::absolute(&paths.work)
        .map_err(|e| RuntimeError::io(format!("resolving {}", paths.work.display()), e))?;
    let stdout = fs::File::create(&paths.stdout)
        .map_err(|e| RuntimeError::io(format!("creating {}", paths.stdout.display()), e))?;
    let stderr = fs::File::create(&paths.stderr)
        .map_err(|e| RuntimeError::io(format!("creating {}", paths.stderr.display()), e))?;
    Ok((work, stdout, stderr))
}

/// Spawns `command`, the child joining its cgroup through `procs_file` (or taking
/// `RLIMIT_AS`), then entering its sandbox, between fork and exec (after the hooks `command`
/// already has). Also how a command run in a session joins it.
pub(super) fn spawn_limited(
    mut command: Command,
    procs_file: Option<fs::File>,
    rlimit_as: Option<u64>,
    sandbox: Option<Sandbox>,
) -> io::Result<Child> {
    let procs_fd = procs_file.as_ref().map(|f| f.as_raw_fd());
    // SAFETY: the closure runs in the child between fork and exec, where only
    // async-signal-safe calls are allowed. It makes two raw system calls, write(2) and
    // setrlimit(2), on plain values computed before the fork, and allocates nothing;
    // `procs_fd` stays open because `procs_file` lives until after the spawn.
    unsafe {
        command.pre_exec(move || {
            if let Some(fd) = procs_fd {
                // Writing "0" to cgroup.procs moves the writing process into the cgroup,
                // before exec, so nothing of the session runs outside its limits.
                if libc::write(fd, b"0".as_ptr().cast(), 1) != 1 {
                    return Err(io::Error::last_os_error());
                }
            }
            if let Some(bytes) = rlimit_as {
                let limit = libc::rlimit {
                    rlim_cur: bytes as libc::rlim_t,
                    rlim_max: bytes as libc::rlim_t,
                };
                if libc::setrlimit(libc::RLIMIT_AS, &limit) != 0 {
                    return Err(io::Error::last_os_error());
                }
            }
            Ok(())
        });
        if let Some(sandbox) = sandbox {
            // After the cgroup and the limits, which the sandbox's processes inherit.
            command.pre_exec(move || sandbox.enter());
        }
    }
    let spawned = command.spawn();
    drop(procs_file);
    spawned
}
