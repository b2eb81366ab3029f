//! Running a command inside a running session of the process runtime: it runs as the
//! session's own processes do (its environment with its cookie, its work directory, its
//! cgroup or else its `RLIMIT_AS`), so the session's tracking finds it and `stop` ends it
//! with the rest. On pipes it gets a process group of its own; on a pseudo-terminal a session
//! of its own, with the terminal as its controlling terminal. The agent waits for it itself:
//! the tracker, which reaps a session's orphans, leaves it alone.
//!
//! Sandboxed sessions are refused for now: the command would have to enter the session's
//! namespaces (`setns`), which is not done yet.

use std::io;
use std::os::fd::OwnedFd;
use std::path::Path;
use std::process::Stdio;
use std::sync::Arc;

use tokio::process::{Child, Command};

use super::start::spawn_limited;
use super::{exit_of, ProcessRecord, ProcessRuntime};
use crate::exec::{
    login_shell, pty_streams, ExecRequest, Execution, Pty, PtyReader, PtyWriter, Resizer,
};
use crate::sandbox::Isolation;
use crate::tracking::{Tracker, Waited};
use crate::{validate_spec, Exit, RuntimeError, SessionPaths, SessionSpec};

impl ProcessRuntime {
    /// See [`crate::Runtime::exec`]. Only into a session this runtime runs (started or
    /// adopted) and that has not ended; not into a sandboxed one yet.
    pub async fn exec(
        &self,
        spec: &SessionSpec,
        work_root: &Path,
        request: &ExecRequest,
    ) -> Result<Execution, RuntimeError> {
        validate_spec(spec)?;
        request.validate(&spec.id)?;
        let id = spec.id.as_str();
        let record = self.running_record(id)?;
        let Some(cookie) = record.cookie.clone() else {
            return Err(RuntimeError::Unsupported {
                id: id.to_string(),
                what: "exec into a session started by an agent without session cookies".into(),
            });
        };
        let work = std::path::absolute(SessionPaths::new(work_root, id).work)
            .map_err(|e| RuntimeError::io("resolving the work directory", e))?;
        let argv = if request.command.is_empty() {
            login_shell(Path::new("/bin/bash").exists())
        } else {
            request.command.clone()
        };
        let mut command = self.in_session(spec, &argv[0], &argv[1..], &work, &cookie);
        let terminal = if request.tty {
            let opened = Pty::open(request.cols, request.rows).and_then(|pty| {
                on_terminal(&mut command, pty.slave)?;
                pty_streams(pty.master)
            });
            Some(opened.map_err(|e| RuntimeError::io("opening a pseudo-terminal", e))?)
        } else {
            command
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .process_group(0);
            None
        };
        let (mut child, waited) = self.spawn_in(spec, &record, command, &argv[0]).await?;
        // It may have ended meanwhile, its cleaning up past: then this command goes too.
        if self.running_record(id).is_err() {
            let _ = child.start_kill();
            return Err(RuntimeError::NotRunning(id.to_string()));
        }
        tracing::info!(
            session = id,
            pid = child.id(),
            tty = request.tty,
            "command started in the session"
        );
        execution(child, waited, terminal)
    }

    /// The record of session `id` if this runtime runs it now.
    fn running_record(&self, id: &str) -> Result<ProcessRecord, RuntimeError> {
        let not_running = || RuntimeError::NotRunning(id.to_string());
        let tracked = self.sessions().get(id).cloned().ok_or_else(not_running)?;
        if tracked.ended() {
            return Err(not_running());
        }
        let record = tracked.process.ok_or_else(not_running)?;
        if self.sandboxed(&record) {
            return Err(RuntimeError::Unsupported {
                id: id.to_string(),
                what: "exec into a sandboxed session".into(),
            });
        }
        Ok(record)
    }

    /// Whether the session runs in a sandbox: its record says so (it has a uid of the pool,
    /// or says it is sandboxed); a record written before that was recorded, unless sandboxes
    /// are off.
    fn sandboxed(&self, record: &ProcessRecord) -> bool {
        record.uid.is_some()
            || record
                .sandboxed
                .unwrap_or(self.config.sandbox.isolation != Isolation::Off)
    }

    /// Spawns `command` into the session of `record`: its cgroup (or its memory limit as
    /// `RLIMIT_AS`), kept from the tracker's reaping.
    async fn spawn_in(
        &self,
        spec: &SessionSpec,
        record: &ProcessRecord,
        command: Command,
        program: &str,
    ) -> Result<(Child, Waited), RuntimeError> {
        let id = spec.id.as_str();
        let procs_file =
            match record.cgroup() {
                Some(cgroup) => Some(cgroup.procs_file().map_err(|e| {
                    RuntimeError::io(format!("opening the cgroup of session {id}"), e)
                })?),
                None => None,
            };
        let mem = spec.limits.mem_bytes;
        let rlimit_as = (record.cgroup.is_none() && mem > 0).then_some(mem);
        let tracker: Arc<Tracker> = Arc::clone(&self.tracker);
        // The tracker's look lock may be held for a whole look at /proc: off the async threads.
        let spawned = tokio::task::spawn_blocking(move || {
            tracker.spawn_waited(|| {
                let child = spawn_limited(command, procs_file, rlimit_as, None)?;
                let pid = child.id().map(|p| p as i32).unwrap_or_default();
                Ok((child, pid))
            })
        })
        .await
        .map_err(|e| RuntimeError::io("spawning", io::Error::other(e)))?;
        spawned.map_err(|e| RuntimeError::io(format!("starting {program:?} in session {id}"), e))
    }
}

/// Gives `command` the terminal's slave side as stdin, stdout and stderr, and makes it the
/// controlling terminal of a new session the command leads.
fn on_terminal(command: &mut Command, slave: OwnedFd) -> io::Result<()> {
    command
        .stdin(slave.try_clone()?)
        .stdout(slave.try_clone()?)
        .stderr(slave);
    // SAFETY: runs in the child between fork and exec, after std put the slave on fds 0, 1
    // and 2: two raw system calls, setsid(2) and ioctl(2) with integer arguments, no
    // allocation. No `process_group`: std's setpgid would run first and make setsid fail.
    unsafe {
        command.pre_exec(|| {
            if libc::setsid() < 0 {
                return Err(io::Error::last_os_error());
            }
            if libc::ioctl(0, libc::TIOCSCTTY, 0) < 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        });
    }
    Ok(())
}

/// The caller's side of a command spawned: its pipes, or the terminal's master.
fn execution(
    mut child: Child,
    waited: Waited,
    terminal: Option<(PtyReader, PtyWriter, Resizer)>,
) -> Result<Execution, RuntimeError> {
    let (stdin, stdout, stderr, resizer): (_, _, _, Resizer) = match terminal {
        Some((reader, writer, resizer)) => {
            (Box::pin(writer) as _, Box::pin(reader) as _, None, resizer)
        }
        None => {
            let piped = || RuntimeError::io("spawning", io::Error::other("a pipe is missing"));
            let stdin = child.stdin.take().ok_or_else(piped)?;
            let stdout = child.stdout.take().ok_or_else(piped)?;
            let stderr = child.stderr.take().ok_or_else(piped)?;
            (
                Box::pin(stdin) as _,
                Box::pin(stdout) as _,
                Some(Box::pin(stderr) as _),
                Resizer::none(),
            )
        }
    };
    let exit = async move {
        let exit = match child.wait().await {
            Ok(status) => exit_of(status),
            Err(e) => Exit::Failed(format!("waiting for the command: {e}")),
        };
        // Reaped: the tracker may reap what takes its pid next.
        drop(waited);
        exit
    };
    Ok(Execution {
        stdin,
        stdout,
        stderr,
        resizer,
        exit: Box::pin(exit),
    })
}
