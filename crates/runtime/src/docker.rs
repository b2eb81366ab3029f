//! The Docker runtime: a session is a container `corral-<id>`, through the Docker Engine API.
//!
//! The container runs the spec's image and command (the image's default command if empty)
//! with the spec's environment, in `/work`, bind-mounted from the session's work directory. It
//! carries the labels `corral.session=<id>` and `corral.agent=<agent>`, by which a restarted
//! agent finds it again, and its limits as `NanoCpus` and `Memory` (with no swap beyond).
//! Its granted GPUs are asked of the daemon as one device request (see
//! [`crate::devices::device_requests`]: through CDI when the host has a CDI specification of
//! NVIDIA GPUs, else through the `nvidia` driver) and named in its variables.
//! Its stdout and stderr are streamed into the session's log files. It is kept after it ends
//! (so outputs can be copied out of it) until [`DockerRuntime::remove`]. A command run in it
//! while it runs is a Docker exec instance (`docker/exec.rs`).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

use bollard::container::LogOutput;
use bollard::errors::Error as DockerError;
use bollard::models::{
    ContainerCreateBody, ContainerInspectResponse, HostConfig, Mount, MountType,
};
use bollard::query_parameters::{
    CreateContainerOptionsBuilder, DownloadFromContainerOptionsBuilder,
    KillContainerOptionsBuilder, ListContainersOptionsBuilder, LogsOptionsBuilder,
    RemoveContainerOptionsBuilder, WaitContainerOptionsBuilder,
};
use bollard::Docker;
use futures_util::StreamExt;
use tokio::io::AsyncWriteExt;
use tokio::sync::watch;
use tokio::task::AbortHandle;

mod exec;

pub(crate) use exec::resize_exec;

use crate::devices::{device_environment, device_requests, grants_gpus, nvidia_cdi_spec_present};
use crate::outputs::{unpack_archive, validate_outputs};
use crate::{validate_spec, Exit, RuntimeError, SessionPaths, SessionSpec};

/// The label naming a container's session.
pub const LABEL_SESSION: &str = "corral.session";
/// The label naming the agent that started a container.
pub const LABEL_AGENT: &str = "corral.agent";

/// Where the work directory is mounted in the container, and its working directory.
const WORK_MOUNT: &str = "/work";

/// How long `wait` lets the log streams finish after the container ended.
const LOG_DRAIN: Duration = Duration::from_secs(30);

/// How long `stop` waits for the container to end after SIGKILL.
const KILL_WAIT: Duration = Duration::from_secs(10);

/// What this value knows of a session beyond the container.
#[derive(Debug, Default)]
struct Known {
    /// It could not start, for this reason.
    failed: Option<String>,
    /// Becomes `true` once its logs are written in full.
    logs_done: Option<watch::Receiver<bool>>,
    /// The task that streams its logs.
    logs_task: Option<AbortHandle>,
}

/// Runs sessions as Docker containers.
#[derive(Debug)]
pub struct DockerRuntime {
    docker: Docker,
    agent: String,
    known: Mutex<HashMap<String, Known>>,
    /// Where CDI specifications are looked for.
    cdi_dirs: Vec<PathBuf>,
}

impl DockerRuntime {
    /// Connects to the local Docker daemon (`DOCKER_HOST`, else `/var/run/docker.sock`),
    /// agrees on an API version with it and checks that it answers. `agent` is the name put in
    /// the `corral.agent` label.
    pub async fn connect(agent: impl Into<String>) -> Result<Self, RuntimeError> {
        let docker =
            Docker::connect_with_local_defaults().map_err(|e| docker_error("connecting", e))?;
        let docker = docker
            .negotiate_version()
            .await
            .map_err(|e| docker_error("negotiating the API version", e))?;
        docker.ping().await.map_err(|e| docker_error("ping", e))?;
        Ok(Self::with_client(docker, agent))
    }

    /// Uses a client made elsewhere (its API version must suit the daemon).
    pub fn with_client(docker: Docker, agent: impl Into<String>) -> Self {
        DockerRuntime {
            docker,
            agent: agent.into(),
            known: Mutex::new(HashMap::new()),
            cdi_dirs: crate::DEFAULT_CDI_DIRS.iter().map(PathBuf::from).collect(),
        }
    }

    /// Looks for CDI specifications in `dirs` instead of [`crate::DEFAULT_CDI_DIRS`] (where the
    /// daemon reads them: `cdi-spec-dirs` in its configuration).
    pub fn with_cdi_dirs(mut self, dirs: Vec<PathBuf>) -> Self {
        self.cdi_dirs = dirs;
        self
    }

    /// The Docker client.
    pub fn client(&self) -> &Docker {
        &self.docker
    }

    /// The agent name in the `corral.agent` label.
    pub fn agent(&self) -> &str {
        &self.agent
    }

    /// The container name of a session.
    pub fn container_name(id: &str) -> String {
        format!("corral-{id}")
    }

    fn known(&self) -> std::sync::MutexGuard<'_, HashMap<String, Known>> {
        // Every update is a single insert or field write, so a poisoned map is still consistent.
        self.known.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// See [`crate::Runtime::start`]. The image must already be on the host.
    pub async fn start(&self, spec: &SessionSpec, work_root: &Path) -> Result<(), RuntimeError> {
        let name = match self.create(spec, work_root).await? {
            Ok(name) => name,
            Err(why) => {
                self.fail(&spec.id, why);
                return Ok(());
            }
        };
        let id = spec.id.as_str();
        if let Err(e) = self.docker.start_container(&name, None).await {
            if server_refusal(&e).is_none() {
                return Err(docker_error(format!("starting container {name}"), e));
            }
            self.fail(id, format!("could not start the container: {e}"));
            if let Err(e) = self.remove_container(&name).await {
                tracing::warn!(session = id, error = %e, "could not remove a container that did not start");
            }
            return Ok(());
        }
        tracing::info!(session = id, container = %name, image = spec.image.as_deref().unwrap_or_default(), "session started");
        self.follow_logs(id, &SessionPaths::new(work_root, id));
        Ok(())
    }

    /// Prepares the session directory and creates the session's container, not started.
    /// `Ok(Ok(name))`: created; `Ok(Err(why))`: the daemon refused what the session asks for
    /// (an image it does not have).
    pub(crate) async fn create(
        &self,
        spec: &SessionSpec,
        work_root: &Path,
    ) -> Result<Result<String, String>, RuntimeError> {
        validate_spec(spec)?;
        let id = spec.id.as_str();
        let Some(image) = spec.image.as_deref().filter(|i| !i.is_empty()) else {
            return Err(RuntimeError::InvalidSpec {
                id: id.to_string(),
                reason: "the docker runtime needs an image".into(),
            });
        };
        let name = Self::container_name(id);
        match self.inspect(&name).await? {
            Some(info) if is_running(&info) => {
                return Err(RuntimeError::AlreadyRunning(id.to_string()))
            }
            Some(_) => self.remove_container(&name).await?,
            None => {}
        }

        let paths = SessionPaths::new(work_root, id);
        std::fs::create_dir_all(&paths.work)
            .map_err(|e| RuntimeError::io(format!("creating {}", paths.work.display()), e))?;
        for log in [&paths.stdout, &paths.stderr] {
            std::fs::File::create(log)
                .map_err(|e| RuntimeError::io(format!("creating {}", log.display()), e))?;
        }
        let host_work = std::fs::canonicalize(&paths.work)
            .map_err(|e| RuntimeError::io(format!("resolving {}", paths.work.display()), e))?;

        let limits = spec.limits;
        let memory =
            (limits.mem_bytes > 0).then(|| i64::try_from(limits.mem_bytes).unwrap_or(i64::MAX));
        // The device variables after the session's own: the grant wins.
        let mut env = spec.environment.clone();
        for (name, value) in device_environment(&spec.devices) {
            env.insert(name.to_string(), value);
        }
        // The CDI directories are read only for sessions with GPUs, at each start: a
        // specification may be generated after the agent started.
        let cdi = grants_gpus(&spec.devices) && nvidia_cdi_spec_present(&self.cdi_dirs);
        let device_requests = device_requests(&spec.devices, cdi);
        if let Some(requests) = &device_requests {
            tracing::info!(session = id, ?requests, "GPUs asked of the daemon");
        }
        let body = ContainerCreateBody {
            image: Some(image.to_string()),
            cmd: (!spec.command.is_empty()).then(|| spec.command.clone()),
            env: Some(env.iter().map(|(k, v)| format!("{k}={v}")).collect()),
            working_dir: Some(WORK_MOUNT.to_string()),
            labels: Some(HashMap::from([
                (LABEL_SESSION.to_string(), id.to_string()),
                (LABEL_AGENT.to_string(), self.agent.clone()),
            ])),
            host_config: Some(HostConfig {
                mounts: Some(vec![Mount {
                    target: Some(WORK_MOUNT.to_string()),
                    source: Some(host_work.to_string_lossy().into_owned()),
                    typ: Some(MountType::BIND),
                    ..Default::default()
                }]),
                nano_cpus: (limits.cpu_milli > 0).then(|| {
                    i64::try_from(limits.cpu_milli.saturating_mul(1_000_000)).unwrap_or(i64::MAX)
                }),
                memory,
                // Equal to Memory: no swap beyond the limit.
                memory_swap: memory,
                device_requests,
                ..Default::default()
            }),
            ..Default::default()
        };
        let options = CreateContainerOptionsBuilder::new().name(&name).build();
        match self.docker.create_container(Some(options), body).await {
            Ok(_) => Ok(Ok(name)),
            Err(e) => match server_refusal(&e) {
                Some(409) => Err(RuntimeError::AlreadyRunning(id.to_string())),
                Some(_) => Ok(Err(format!(
                    "could not create the container from {image}: {e}"
                ))),
                None => Err(docker_error(format!("creating container {name}"), e)),
            },
        }
    }

    fn fail(&self, id: &str, why: String) {
        tracing::warn!(session = id, why, "session could not start");
        self.known().insert(
            id.to_string(),
            Known {
                failed: Some(why),
                ..Default::default()
            },
        );
    }

    /// Streams the container's stdout and stderr, from its start, into the log files
    /// (truncating them).
    fn follow_logs(&self, id: &str, paths: &SessionPaths) {
        let (tx, rx) = watch::channel(false);
        let task = tokio::spawn(write_logs(
            self.docker.clone(),
            id.to_string(),
            paths.stdout.clone(),
            paths.stderr.clone(),
            tx,
        ));
        let mut known = self.known();
        let entry = known.entry(id.to_string()).or_default();
        *entry = Known {
            failed: None,
            logs_done: Some(rx),
            logs_task: Some(task.abort_handle()),
        };
    }

    /// Starts streaming the logs of a container this value did not start, into the session
    /// directory its work mount lies in.
    fn adopt(&self, id: &str, info: &ContainerInspectResponse) {
        if self
            .known()
            .get(id)
            .is_some_and(|k| k.logs_done.is_some() || k.failed.is_some())
        {
            return;
        }
        let Some(dir) = session_dir_of(info) else {
            tracing::warn!(
                session = id,
                "container has no work mount; its logs are not collected"
            );
            return;
        };
        tracing::info!(session = id, dir = %dir.display(), "adopted a container started before a restart");
        let paths = SessionPaths {
            work: dir.join("work"),
            stdout: dir.join("stdout.log"),
            stderr: dir.join("stderr.log"),
            outputs: dir.join("outputs"),
            dir,
        };
        self.follow_logs(id, &paths);
    }

    async fn inspect(&self, name: &str) -> Result<Option<ContainerInspectResponse>, RuntimeError> {
        match self.docker.inspect_container(name, None).await {
            Ok(info) => Ok(Some(info)),
            Err(e) if server_refusal(&e) == Some(404) => Ok(None),
            Err(e) => Err(docker_error(format!("inspecting {name}"), e)),
        }
    }

    async fn remove_container(&self, name: &str) -> Result<(), RuntimeError> {
        let options = RemoveContainerOptionsBuilder::new().force(true).build();
        match self.docker.remove_container(name, Some(options)).await {
            Ok(()) => Ok(()),
            Err(e) if server_refusal(&e) == Some(404) => Ok(()),
            Err(e) => Err(docker_error(format!("removing {name}"), e)),
        }
    }

    /// See [`crate::Runtime::wait`]. Docker reports a signal n as exit code 128 + n, which is
    /// returned as `Exit::Signal(n)`; an OOM-killed container as `Exit::Signal(SIGKILL)`.
    pub async fn wait(&self, id: &str) -> Result<Exit, RuntimeError> {
        if let Some(why) = self.known().get(id).and_then(|k| k.failed.clone()) {
            return Ok(Exit::Failed(why));
        }
        let name = Self::container_name(id);
        let Some(info) = self.inspect(&name).await? else {
            return Err(RuntimeError::UnknownSession(id.to_string()));
        };
        self.adopt(id, &info);
        loop {
            let options = WaitContainerOptionsBuilder::new()
                .condition("not-running")
                .build();
            let mut stream = self.docker.wait_container(&name, Some(options));
            match stream.next().await {
                Some(Ok(_)) | Some(Err(DockerError::DockerContainerWaitError { .. })) | None => {
                    break
                }
                Some(Err(DockerError::RequestTimeoutError)) => continue,
                Some(Err(e)) if server_refusal(&e) == Some(404) => {
                    return Err(RuntimeError::UnknownSession(id.to_string()))
                }
                Some(Err(e)) => return Err(docker_error(format!("waiting for {name}"), e)),
            }
        }
        let info = self
            .inspect(&name)
            .await?
            .ok_or_else(|| RuntimeError::UnknownSession(id.to_string()))?;
        let exit = exit_of(&info);
        let logs = self.known().get(id).and_then(|k| k.logs_done.clone());
        if let Some(mut done) = logs {
            if tokio::time::timeout(LOG_DRAIN, done.wait_for(|d| *d))
                .await
                .is_err()
            {
                tracing::warn!(session = id, "the session's logs did not finish in time");
            }
        }
        tracing::info!(session = id, %exit, "session ended");
        Ok(exit)
    }

    /// See [`crate::Runtime::stop`]. SIGTERM goes to the container's first process (the
    /// container's whole process tree ends with it).
    pub async fn stop(&self, id: &str, grace: Duration) -> Result<(), RuntimeError> {
        let name = Self::container_name(id);
        let Some(info) = self.inspect(&name).await? else {
            if self.known().contains_key(id) {
                return Ok(());
            }
            return Err(RuntimeError::UnknownSession(id.to_string()));
        };
        if !is_running(&info) {
            return Ok(());
        }
        tracing::info!(session = id, "stopping session (SIGTERM)");
        self.kill(&name, "SIGTERM").await?;
        if self.ended_within(&name, grace).await? {
            return Ok(());
        }
        tracing::info!(
            session = id,
            "session still running after the grace; SIGKILL"
        );
        self.kill(&name, "SIGKILL").await?;
        if self.ended_within(&name, KILL_WAIT).await? {
            Ok(())
        } else {
            Err(RuntimeError::StopTimedOut(id.to_string()))
        }
    }

    async fn kill(&self, name: &str, signal: &str) -> Result<(), RuntimeError> {
        let options = KillContainerOptionsBuilder::new().signal(signal).build();
        match self.docker.kill_container(name, Some(options)).await {
            Ok(()) => Ok(()),
            // Not running (409) or gone (404): nothing to kill.
            Err(e) if matches!(server_refusal(&e), Some(404 | 409)) => Ok(()),
            Err(e) => Err(docker_error(format!("sending {signal} to {name}"), e)),
        }
    }

    async fn ended_within(&self, name: &str, limit: Duration) -> Result<bool, RuntimeError> {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            match self.inspect(name).await? {
                Some(info) if is_running(&info) => {}
                _ => return Ok(true),
            }
            if tokio::time::Instant::now() >= deadline {
                return Ok(false);
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// See [`crate::Runtime::running`]: the running containers labelled with this agent's
    /// name (`work_root` is not needed: the labels tell). Their logs are streamed again.
    pub async fn running(&self, _work_root: &Path) -> Result<Vec<String>, RuntimeError> {
        let filters = HashMap::from([
            ("label", vec![format!("{LABEL_AGENT}={}", self.agent)]),
            ("status", vec!["running".to_string()]),
        ]);
        let options = ListContainersOptionsBuilder::new()
            .filters(&filters)
            .build();
        let containers = self
            .docker
            .list_containers(Some(options))
            .await
            .map_err(|e| docker_error("listing containers", e))?;
        let mut ids: Vec<String> = containers
            .into_iter()
            .filter_map(|c| c.labels?.remove(LABEL_SESSION))
            .filter(|id| crate::validate_id(id).is_ok())
            .collect();
        ids.sort();
        ids.dedup();
        for id in &ids {
            if self.known().contains_key(id) {
                continue;
            }
            if let Some(info) = self.inspect(&Self::container_name(id)).await? {
                self.adopt(id, &info);
            }
        }
        Ok(ids)
    }

    /// See [`crate::Runtime::collect_outputs`]: each output is copied out of the container
    /// (`/work/<path>`) through Docker's archive API; regular files and directories only.
    pub async fn collect_outputs(
        &self,
        spec: &SessionSpec,
        work_root: &Path,
    ) -> Result<Vec<PathBuf>, RuntimeError> {
        let rels = validate_outputs(spec)?;
        let id = spec.id.as_str();
        let name = Self::container_name(id);
        let paths = SessionPaths::new(work_root, id);
        let mut collected = Vec::new();
        for (rel, given) in rels.iter().zip(&spec.outputs) {
            let in_container = format!("{WORK_MOUNT}/{}", rel.display());
            let archive = paths.dir.join(".output.tar");
            match self.download(&name, &in_container, &archive).await {
                Ok(true) => {}
                Ok(false) => {
                    tracing::warn!(session = id, output = %given, "output not found; skipped");
                    continue;
                }
                Err(e) => {
                    let _ = tokio::fs::remove_file(&archive).await;
                    return Err(e);
                }
            }
            let dest = paths.outputs.join(rel.parent().unwrap_or(Path::new("")));
            let (id_owned, archive_owned) = (id.to_string(), archive.clone());
            let unpacked = tokio::task::spawn_blocking(move || {
                unpack_archive(&id_owned, &archive_owned, &dest)
            })
            .await
            .map_err(std::io::Error::other)
            .and_then(|r| r);
            let _ = tokio::fs::remove_file(&archive).await;
            unpacked.map_err(|e| RuntimeError::io(format!("unpacking output {given}"), e))?;
            let dest = paths.outputs.join(rel);
            if std::fs::symlink_metadata(&dest).is_ok() {
                collected.push(dest);
            } else {
                tracing::warn!(session = id, output = %given, "output is a link or special file; skipped");
            }
        }
        Ok(collected)
    }

    /// Writes the archive of `path` in the container to `archive`; `false` if there is no such
    /// path.
    async fn download(&self, name: &str, path: &str, archive: &Path) -> Result<bool, RuntimeError> {
        let options = DownloadFromContainerOptionsBuilder::new()
            .path(path)
            .build();
        let mut stream = self.docker.download_from_container(name, Some(options));
        let mut file = tokio::fs::File::create(archive)
            .await
            .map_err(|e| RuntimeError::io(format!("creating {}", archive.display()), e))?;
        while let Some(chunk) = stream.next().await {
            match chunk {
                Ok(bytes) => file
                    .write_all(&bytes)
                    .await
                    .map_err(|e| RuntimeError::io(format!("writing {}", archive.display()), e))?,
                Err(e) if server_refusal(&e) == Some(404) => {
                    drop(file);
                    let _ = tokio::fs::remove_file(archive).await;
                    return Ok(false);
                }
                Err(e) => return Err(docker_error(format!("copying {path} out of {name}"), e)),
            }
        }
        file.flush()
            .await
            .map_err(|e| RuntimeError::io(format!("writing {}", archive.display()), e))?;
        Ok(true)
    }

    /// See [`crate::Runtime::remove`]: removes the container.
    pub async fn remove(&self, id: &str) -> Result<(), RuntimeError> {
        let name = Self::container_name(id);
        if let Some(info) = self.inspect(&name).await? {
            if is_running(&info) {
                return Err(RuntimeError::StillRunning(id.to_string()));
            }
            self.remove_container(&name).await?;
        }
        if let Some(known) = self.known().remove(id) {
            if let Some(task) = known.logs_task {
                task.abort();
            }
        }
        Ok(())
    }
}

impl Drop for DockerRuntime {
    /// Stops streaming logs; the containers go on running, to be found again by `running`.
    fn drop(&mut self) {
        let known = self.known.get_mut().unwrap_or_else(|e| e.into_inner());
        for k in known.values() {
            if let Some(task) = &k.logs_task {
                task.abort();
            }
        }
    }
}

pub(crate) fn docker_error(what: impl Into<String>, source: DockerError) -> RuntimeError {
    RuntimeError::Docker {
        what: what.into(),
        source,
    }
}

/// The HTTP status of an answer in which the daemon refused a request; `None` for errors of
/// the connection or the client.
pub(crate) fn server_refusal(e: &DockerError) -> Option<u16> {
    match e {
        DockerError::DockerResponseServerError { status_code, .. } => Some(*status_code),
        _ => None,
    }
}

fn is_running(info: &ContainerInspectResponse) -> bool {
    info.state.as_ref().and_then(|s| s.running).unwrap_or(false)
}

/// The session directory: the parent of the host directory mounted at `/work`.
fn session_dir_of(info: &ContainerInspectResponse) -> Option<PathBuf> {
    let mount = info
        .mounts
        .as_ref()?
        .iter()
        .find(|m| m.destination.as_deref() == Some(WORK_MOUNT))?;
    Some(Path::new(mount.source.as_deref()?).parent()?.to_path_buf())
}

fn exit_of(info: &ContainerInspectResponse) -> Exit {
    let Some(state) = &info.state else {
        return Exit::Failed("the container has no state".into());
    };
    if state.oom_killed == Some(true) {
        return Exit::Signal(libc::SIGKILL);
    }
    let code = state.exit_code.unwrap_or(-1);
    if let Some(error) = state.error.as_deref().filter(|e| !e.is_empty()) {
        if code != 0 {
            return Exit::Failed(error.to_string());
        }
    }
    exit_of_code(code)
}

/// An exit code as Docker reports it: a signal n as 128 + n.
fn exit_of_code(code: i64) -> Exit {
    match i32::try_from(code) {
        Ok(code @ 129..=192) => Exit::Signal(code - 128),
        Ok(code) => Exit::Code(code),
        Err(_) => Exit::Failed(format!("exit code {code} out of range")),
    }
}

/// Writes a container's log stream into the two log files, truncating them first.
async fn write_logs(
    docker: Docker,
    id: String,
    stdout: PathBuf,
    stderr: PathBuf,
    done: watch::Sender<bool>,
) {
    let name = DockerRuntime::container_name(&id);
    let result: std::io::Result<()> = async {
        let mut out = tokio::fs::File::create(&stdout).await?;
        let mut err = tokio::fs::File::create(&stderr).await?;
        let options = LogsOptionsBuilder::new()
            .follow(true)
            .stdout(true)
            .stderr(true)
            .build();
        let mut stream = docker.logs(&name, Some(options));
        while let Some(item) = stream.next().await {
            match item {
                Ok(LogOutput::StdOut { message }) | Ok(LogOutput::Console { message }) => {
                    out.write_all(&message).await?
                }
                Ok(LogOutput::StdErr { message }) => err.write_all(&message).await?,
                Ok(LogOutput::StdIn { .. }) => {}
                Err(e) => {
                    tracing::warn!(session = %id, error = %e, "the container's log stream broke off");
                    break;
                }
            }
        }
        out.flush().await?;
        err.flush().await?;
        Ok(())
    }
    .await;
    if let Err(e) = result {
        tracing::warn!(session = %id, error = %e, "could not write the session's logs");
    }
    done.send_replace(true);
}

#[cfg(test)]
mod tests {
    use super::*;
    use bollard::models::{ContainerState, MountPoint};

    fn info(exit_code: i64, oom: bool, error: &str) -> ContainerInspectResponse {
        ContainerInspectResponse {
            state: Some(ContainerState {
                exit_code: Some(exit_code),
                oom_killed: Some(oom),
                error: Some(error.to_string()),
                running: Some(false),
                ..Default::default()
            }),
            mounts: Some(vec![MountPoint {
                source: Some("/var/corral/abc/work".into()),
                destination: Some("/work".into()),
                ..Default::default()
            }]),
            ..Default::default()
        }
    }

    #[test]
    fn exits_follow_docker_conventions() {
        assert_eq!(exit_of(&info(3, false, "")), Exit::Code(3));
        assert_eq!(exit_of(&info(137, false, "")), Exit::Signal(9));
        assert_eq!(exit_of(&info(143, false, "")), Exit::Signal(15));
        assert_eq!(exit_of(&info(1, true, "")), Exit::Signal(9));
        assert_eq!(
            exit_of(&info(127, false, "exec: \"nope\": not found")),
            Exit::Failed("exec: \"nope\": not found".into())
        );
    }

    #[test]
    fn the_session_dir_is_found_from_the_work_mount() {
        assert_eq!(
            session_dir_of(&info(0, false, "")),
            Some(PathBuf::from("/var/corral/abc"))
        );
    }
}
