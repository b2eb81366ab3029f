//! `process`: starts and stops `corral agent` processes on the manager's own host (development,
//! small sites).
//!
//! Options:
//! - `binary` (path, default: the manager's own `corral`): the program started;
//! - `runtime` (`"process"` default, or `"docker"`): the agent's `--runtime`;
//! - `extra_args` (list of strings, default none): appended to the agent's arguments.
//!
//! Each launch request starts
//! `<binary> agent --server <manager_url> --group <group> --id <agent_id> --capacity <slots>
//! --label corral.io/template=<template> --work-dir <state_dir>/<agent_id>/work --runtime <r>`.
//! The bootstrap channel is the environment: the one-time token is `CORRAL_TOKEN` (never an
//! argument, which `ps` shows to every user); `CORRAL_*` variables of the manager are not
//! inherited, so the agent gets exactly what the provider says. Its output goes to
//! `<state_dir>/<agent_id>/agent.log`. It runs in a session (and process group) of its own, so it
//! outlives a restart of the manager and is stopped as a whole with its children.
//!
//! The instance id is the agent id. `<state_dir>/<agent_id>/instance.json` (replaced atomically)
//! records its pid, start time (field 22 of `/proc/<pid>/stat`), template, agent id and group:
//! `list` reads these files, so a restarted manager finds its agents again, and a pid reused by
//! another process is not mistaken for an agent. `terminate` sends SIGTERM to every process
//! group of the agent's session (its own, and those of the sessions it runs as processes, which
//! get groups of their own), waits up to 5 s, sends SIGKILL, and removes `instance.json` (the log
//! and work directory stay).
//!
//! Tests (`tests/process.rs`) use a shell script standing in for `corral` that prints its
//! arguments and token and starts a child: they check the arguments, the token's channel, the
//! listing from a second provider value (a restarted manager), that terminating kills the whole
//! group and session (also when they ignore SIGTERM), and that a process killed by hand is listed
//! as gone.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

pub use crate::local::AgentRuntime;
use crate::local::{self, checked, AgentSpec, ENV_TOKEN};
use crate::{
    Context, Instance, InstanceState, LaunchRequest, Provider, ProviderError, TemplateOffer,
};

/// How long an agent gets between SIGTERM and SIGKILL.
const STOP_GRACE: Duration = Duration::from_secs(5);
/// The file in an agent's directory that names its process.
const INSTANCE_FILE: &str = "instance.json";

#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema), schema(as = OptionsProcess))]
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Options {
    /// The `corral` executable [default: the manager's own].
    #[cfg_attr(feature = "openapi", schema(value_type = Option<String>))]
    #[serde(default)]
    pub binary: Option<PathBuf>,
    /// How the agents run their sessions.
    #[cfg_attr(feature = "openapi", schema(inline))]
    #[serde(default)]
    pub runtime: AgentRuntime,
    /// More arguments for `corral agent`, after the provider's own.
    #[serde(default, deserialize_with = "checked::args")]
    pub extra_args: Vec<String>,
}

/// What `instance.json` holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Record {
    pid: i32,
    /// Field 22 of `/proc/<pid>/stat`.
    start_time: u64,
    template: String,
    agent_id: String,
    group: String,
}

impl Record {
    fn alive(&self) -> bool {
        local::is_same_live_process(self.pid, self.start_time)
    }

    fn instance(&self) -> Instance {
        Instance {
            id: self.agent_id.clone(),
            agent_id: Some(self.agent_id.clone()),
            template: Some(self.template.clone()),
            state: if self.alive() {
                InstanceState::Running
            } else {
                InstanceState::Gone
            },
        }
    }
}

pub struct ProcessProvider {
    binary: PathBuf,
    options: Options,
    context: Context,
}

pub async fn connect(options: Options, context: Context) -> Result<ProcessProvider, ProviderError> {
    let binary = options
        .binary
        .clone()
        .unwrap_or_else(|| context.corral_binary.clone());
    if binary.as_os_str().is_empty() {
        return Err(ProviderError::fatal(
            "process provider: no corral binary (options.binary)",
        ));
    }
    std::fs::create_dir_all(&context.state_dir).map_err(|e| {
        ProviderError::fatal(format!(
            "process provider: creating the state directory {}: {e}",
            context.state_dir.display()
        ))
    })?;
    Ok(ProcessProvider {
        binary,
        options,
        context,
    })
}

impl ProcessProvider {
    fn agent_dir(&self, agent_id: &str) -> PathBuf {
        self.context.state_dir.join(agent_id)
    }

    /// The record of an agent of this group, if it has one.
    fn record(&self, agent_id: &str) -> Result<Option<Record>, ProviderError> {
        let path = self.agent_dir(agent_id).join(INSTANCE_FILE);
        let text = match std::fs::read(&path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(io_failure(&format!("reading {}", path.display()), e)),
        };
        let record: Record = serde_json::from_slice(&text).map_err(|e| {
            ProviderError::transient(format!(
                "process provider: {} is not an instance record: {e}",
                path.display()
            ))
        })?;
        Ok(Some(record).filter(|r| r.group == self.context.group))
    }

    fn command(&self, spec: &AgentSpec, work_dir: &Path) -> tokio::process::Command {
        let mut command = tokio::process::Command::new(&self.binary);
        command
            .args(["agent", "--server", &spec.server])
            .args(spec.agent_flags())
            .arg("--work-dir")
            .arg(work_dir)
            .args(["--runtime", self.options.runtime.as_str()])
            .args(&self.options.extra_args)
            .stdin(Stdio::null());
        // The agent gets exactly the settings given here, not the manager's own.
        for (name, _) in std::env::vars_os() {
            if name.to_string_lossy().starts_with("CORRAL_") {
                command.env_remove(name);
            }
        }
        command.env(ENV_TOKEN, &spec.token);
        // SAFETY: setsid(2) is async-signal-safe and touches no memory of ours; it runs in the
        // child between fork and exec. A session of its own makes the agent a process-group
        // leader without a controlling terminal: it outlives the manager and its terminal.
        unsafe {
            command.pre_exec(|| {
                if libc::setsid() == -1 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        command
    }

    async fn launch_one(
        &self,
        template: &str,
        request: &LaunchRequest,
    ) -> Result<Instance, ProviderError> {
        let spec = AgentSpec::new(&self.context, template, request)?;
        if let Some(old) = self.record(&spec.agent_id)?.filter(Record::alive) {
            return Err(ProviderError::transient(format!(
                "process provider: agent {} already runs as pid {}",
                old.agent_id, old.pid
            )));
        }
        let dir = self.agent_dir(&spec.agent_id);
        let work_dir = dir.join("work");
        std::fs::create_dir_all(&work_dir)
            .map_err(|e| io_failure(&format!("creating {}", work_dir.display()), e))?;
        let (stdout, stderr) = open_log(&dir.join("agent.log"))?;
        let mut child = self
            .command(&spec, &work_dir)
            .stdout(stdout)
            .stderr(stderr)
            .spawn()
            .map_err(|e| self.spawn_failure(&spec, e))?;
        let pid = child.id().and_then(|p| i32::try_from(p).ok()).unwrap_or(0);
        let record = match self.record_started(pid, &spec) {
            Ok(record) => record,
            Err(e) => {
                // Unrecorded, it could never be listed or terminated: stop it now.
                let _ = local::signal_group(pid, libc::SIGKILL);
                let _ = child.wait().await;
                return Err(e);
            }
        };
        // Reaps the agent when it exits, so that it does not linger as a zombie.
        tokio::spawn(async move {
            let _ = child.wait().await;
        });
        // Just started: an agent that exits at once shows as gone in the next list.
        Ok(Instance {
            state: InstanceState::Running,
            ..record.instance()
        })
    }

    /// Writes the record of an agent just started as `pid`.
    fn record_started(&self, pid: i32, spec: &AgentSpec) -> Result<Record, ProviderError> {
        let failed = |e: std::io::Error| {
            io_failure(&format!("recording agent {} (pid {pid})", spec.agent_id), e)
        };
        // Not reaped yet (the child is ours), so its stat is there even if it exited already.
        let stat = local::proc_stat(pid)
            .ok_or_else(|| failed(std::io::Error::other("/proc/<pid>/stat is unreadable")))?;
        let record = Record {
            pid,
            start_time: stat.start_time,
            template: spec.template.clone(),
            agent_id: spec.agent_id.clone(),
            group: spec.group.clone(),
        };
        let json = serde_json::to_vec_pretty(&record).map_err(|e| failed(e.into()))?;
        let path = self.agent_dir(&spec.agent_id).join(INSTANCE_FILE);
        corral_runtime::write_atomic(&path, &json).map_err(failed)?;
        Ok(record)
    }

    fn spawn_failure(&self, spec: &AgentSpec, e: std::io::Error) -> ProviderError {
        let message = format!(
            "process provider: starting {} for agent {}: {e}",
            self.binary.display(),
            spec.agent_id
        );
        match e.kind() {
            std::io::ErrorKind::NotFound | std::io::ErrorKind::PermissionDenied => {
                ProviderError::fatal(message)
            }
            _ => ProviderError::transient(message),
        }
    }

    async fn terminate_one(&self, id: &str) -> Result<(), ProviderError> {
        if !local::is_agent_id(id) {
            // Not an id this provider gives: nothing of ours to stop.
            tracing::debug!(id, "process provider: ignoring an id it never gave");
            return Ok(());
        }
        let Some(record) = self.record(id)? else {
            return Ok(());
        };
        if owns_session(&record) {
            local::stop_session(record.pid, STOP_GRACE)
                .await
                .map_err(|e| {
                    ProviderError::transient(format!(
                        "process provider: stopping agent {id} (session {}): {e}",
                        record.pid
                    ))
                })?;
        }
        let path = self.agent_dir(id).join(INSTANCE_FILE);
        match std::fs::remove_file(&path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(io_failure(&format!("removing {}", path.display()), e)),
        }
    }
}

/// Whether the session named by the record is still the agent's: its leader is the recorded
/// process (live, or a zombie not reaped yet), or the leader is gone and processes of its session
/// remain. A pid that names a session or group is not reused, so a leader with another start
/// time means the session is long gone and the pid is someone else's.
fn owns_session(record: &Record) -> bool {
    match local::proc_stat(record.pid) {
        Some(stat) => stat.start_time == record.start_time,
        None => !local::session_groups(record.pid).is_empty(),
    }
}

/// The agent's log, opened for appending, as its standard output and error.
fn open_log(path: &Path) -> Result<(std::fs::File, std::fs::File), ProviderError> {
    let failed = |e| io_failure(&format!("opening {}", path.display()), e);
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(failed)?;
    let copy = log.try_clone().map_err(failed)?;
    Ok((log, copy))
}

fn io_failure(what: &str, e: std::io::Error) -> ProviderError {
    ProviderError::transient(format!("process provider: {what}: {e}"))
}

#[async_trait]
impl Provider for ProcessProvider {
    async fn templates(&self) -> Result<Vec<TemplateOffer>, ProviderError> {
        Ok(local::offers(&self.context))
    }

    async fn launch(
        &self,
        template: &str,
        requests: &[LaunchRequest],
    ) -> Result<Vec<Instance>, ProviderError> {
        local::launch_each("process", template, requests, |request| {
            self.launch_one(template, request)
        })
        .await
    }

    async fn terminate(&self, ids: &[String]) -> Result<(), ProviderError> {
        local::terminate_each(ids, |id| self.terminate_one(id)).await
    }

    async fn list(&self) -> Result<Vec<Instance>, ProviderError> {
        let dir = &self.context.state_dir;
        let entries = match std::fs::read_dir(dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(io_failure(&format!("reading {}", dir.display()), e)),
        };
        let mut instances = Vec::new();
        for entry in entries {
            let entry = entry.map_err(|e| io_failure(&format!("reading {}", dir.display()), e))?;
            let Some(name) = entry.file_name().to_str().map(str::to_string) else {
                continue;
            };
            if !local::is_agent_id(&name) {
                continue;
            }
            match self.record(&name) {
                Ok(Some(record)) => instances.push(record.instance()),
                Ok(None) => {}
                // One damaged file must not hide the other agents.
                Err(e) => tracing::warn!(error = %e, "process provider: skipping an agent"),
            }
        }
        instances.sort_by(|a, b| a.id.cmp(&b.id));
        Ok(instances)
    }
}
