//! `docker`: starts and stops agent containers on a Docker host. Nothing is pulled: the agent
//! image is built locally ([`build_agent_image`]) from the `corral` binary.
//!
//! Options:
//! - `image` (string, default `corral-agent:latest`): the agent image; its entrypoint is `corral`;
//! - `network` (string, default `host`): the containers' network mode; `host` lets agents reach a
//!   manager on 127.0.0.1;
//! - `docker_host` (string, optional): `unix:///path`, `/path` (a socket), `tcp://host:port` or
//!   `http://host:port` [default: `DOCKER_HOST`, else `/var/run/docker.sock`];
//! - `runtime` (`"process"`, the default and only value): the agents' `--runtime`; sessions run as
//!   processes in the agent's container (Docker-in-Docker is not offered);
//! - `extra_env` (map, default empty): more environment variables for the agents (not the
//!   `CORRAL_*` ones the provider sets);
//! - `command` (list of strings, optional): replaces the container's command (the arguments of
//!   the `corral` entrypoint), for operators' own agent flags and for tests.
//!
//! Each launch request creates and starts a container `corral-<agent_id>` with the labels
//! `corral.io/group`, `corral.io/agent` and `corral.io/template`, an init process (so signals
//! reach the agent and exited sessions are reaped), and the command `agent --runtime process
//! --work-dir /var/lib/corral-agent --label corral.io/template=<t>`. The bootstrap channel is the
//! container's environment: `CORRAL_SERVER`, `CORRAL_TOKEN`, `CORRAL_AGENT_GROUP`,
//! `CORRAL_AGENT_ID` and `CORRAL_AGENT_CAPACITY` (the template's slots). The instance id is the
//! container id. `list` finds the group's containers (exited ones too) by label; `terminate`
//! stops (10 s) and removes them.
//!
//! Tests (`tests/docker.rs`, against the local daemon) build the image from a dynamically linked
//! stand-in for `corral` (`/usr/bin/env`, whose run proves the copied libraries load), launch
//! containers, check their labels, environment and output, list and terminate them.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use async_trait::async_trait;
use bollard::errors::Error as DockerError;
use bollard::models::{ContainerCreateBody, ContainerSummaryStateEnum, HostConfig};
use bollard::query_parameters::{
    BuildImageOptionsBuilder, CreateContainerOptionsBuilder, ListContainersOptionsBuilder,
    RemoveContainerOptionsBuilder, StopContainerOptionsBuilder,
};
use bollard::Docker;
use futures_util::StreamExt;
use serde::{Deserialize, Deserializer};

use crate::local::{self, checked, AgentRuntime, AgentSpec};
use crate::{
    Context, Instance, InstanceState, LaunchRequest, Provider, ProviderError, TemplateOffer,
    AGENT_LABEL, GROUP_LABEL, TEMPLATE_LABEL,
};

/// Where agents keep their sessions inside the container.
pub const AGENT_WORK_DIR: &str = "/var/lib/corral-agent";
/// Where the agent image holds the `corral` binary (its entrypoint).
pub const CORRAL_IN_IMAGE: &str = "/usr/local/bin/corral";
/// Where Debian's busybox-static installs its binary; the image's shell and tools.
const BUSYBOX: &str = "/bin/busybox";
/// Seconds `docker stop` waits before it kills.
const STOP_TIMEOUT_SECS: i32 = 10;

#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema), schema(as = OptionsDocker))]
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Options {
    #[serde(default = "default_image", deserialize_with = "checked::non_empty")]
    pub image: String,
    #[serde(default = "default_network", deserialize_with = "checked::non_empty")]
    pub network: String,
    #[serde(default, deserialize_with = "docker_host")]
    pub docker_host: Option<String>,
    #[cfg_attr(feature = "openapi", schema(inline))]
    #[serde(default, deserialize_with = "process_runtime")]
    pub runtime: AgentRuntime,
    #[serde(default, deserialize_with = "checked::extra_agent_env")]
    pub extra_env: BTreeMap<String, String>,
    #[serde(default, deserialize_with = "command")]
    pub command: Option<Vec<String>>,
}

fn default_image() -> String {
    "corral-agent:latest".into()
}

fn default_network() -> String {
    "host".into()
}

fn docker_host<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    let host = String::deserialize(d)?;
    let known = ["unix://", "tcp://", "http://", "/"];
    if known.iter().any(|p| host.starts_with(p)) {
        Ok(Some(host))
    } else {
        Err(serde::de::Error::custom(format!(
            "{host:?} is not unix:///path, /path, tcp://host:port or http://host:port"
        )))
    }
}

fn process_runtime<'de, D: Deserializer<'de>>(d: D) -> Result<AgentRuntime, D::Error> {
    match AgentRuntime::deserialize(d)? {
        AgentRuntime::Process => Ok(AgentRuntime::Process),
        AgentRuntime::Docker => Err(serde::de::Error::custom(
            "agents in containers run their sessions as processes (\"process\"); Docker-in-Docker \
             is not offered",
        )),
    }
}

fn command<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Vec<String>>, D::Error> {
    let args = checked::args(d)?;
    if args.is_empty() {
        return Err(serde::de::Error::custom(
            "must not be empty (leave it out for the agent's command)",
        ));
    }
    Ok(Some(args))
}

/// A client for `docker_host` (see the options) or the local defaults, with the API version
/// agreed with the daemon. An unreachable daemon is a transient failure.
pub async fn client(docker_host: Option<&str>) -> Result<Docker, ProviderError> {
    let docker = match docker_host {
        Some(path) if path.starts_with('/') => Docker::connect_with_host(&format!("unix://{path}")),
        Some(host) => Docker::connect_with_host(host),
        None => Docker::connect_with_defaults(),
    }
    .map_err(|e| {
        let message = format!(
            "docker provider: connecting to {}: {e}",
            docker_host.unwrap_or("the local Docker daemon")
        );
        // No socket (yet): the daemon is down, which may pass; anything else is the address.
        match e {
            DockerError::SocketNotFoundError(_) => ProviderError::transient(message),
            _ => ProviderError::fatal(message),
        }
    })?;
    docker.negotiate_version().await.map_err(|e| {
        ProviderError::transient(format!(
            "docker provider: the Docker daemon at {} does not answer: {e}",
            docker_host.unwrap_or("DOCKER_HOST or /var/run/docker.sock")
        ))
    })
}

pub struct DockerProvider {
    options: Options,
    context: Context,
    /// Made on first use, so that a daemon down when the manager starts is a transient
    /// failure of the calls rather than of the group's setup.
    docker: Mutex<Option<Docker>>,
}

pub async fn connect(options: Options, context: Context) -> Result<DockerProvider, ProviderError> {
    Ok(DockerProvider {
        options,
        context,
        docker: Mutex::new(None),
    })
}

impl DockerProvider {
    async fn docker(&self) -> Result<Docker, ProviderError> {
        if let Some(docker) = self.cached_client() {
            return Ok(docker);
        }
        let docker = client(self.options.docker_host.as_deref()).await?;
        *self.docker.lock().unwrap_or_else(|e| e.into_inner()) = Some(docker.clone());
        Ok(docker)
    }

    fn cached_client(&self) -> Option<Docker> {
        self.docker
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    fn container_body(&self, spec: &AgentSpec) -> ContainerCreateBody {
        let mut env: Vec<String> = spec
            .environment()
            .into_iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        env.extend(
            self.options
                .extra_env
                .iter()
                .map(|(k, v)| format!("{k}={v}")),
        );
        let cmd = self.options.command.clone().unwrap_or_else(|| {
            vec![
                "agent".into(),
                "--runtime".into(),
                self.options.runtime.as_str().into(),
                "--work-dir".into(),
                AGENT_WORK_DIR.into(),
                "--label".into(),
                spec.template_label(),
            ]
        });
        let labels: HashMap<String, String> = self
            .context
            .labels(&spec.agent_id, &spec.template)
            .into_iter()
            .collect();
        ContainerCreateBody {
            image: Some(self.options.image.clone()),
            cmd: Some(cmd),
            env: Some(env),
            labels: Some(labels),
            host_config: Some(HostConfig {
                network_mode: Some(self.options.network.clone()),
                // An init as pid 1 forwards `docker stop`'s signal to the agent and reaps.
                init: Some(true),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    async fn launch_one(
        &self,
        docker: &Docker,
        template: &str,
        request: &LaunchRequest,
    ) -> Result<Instance, ProviderError> {
        let spec = AgentSpec::new(&self.context, template, request)?;
        let name = format!("corral-{}", spec.agent_id);
        let options = CreateContainerOptionsBuilder::new().name(&name).build();
        let created = docker
            .create_container(Some(options), self.container_body(&spec))
            .await
            .map_err(|e| match status_of(&e) {
                Some(404) => ProviderError::fatal(format!(
                    "docker provider: image {:?} is not on the Docker host and nothing is \
                     pulled: build it there with `corral agent-image --tag TAG` (or a \
                     Dockerfile whose ENTRYPOINT is corral with the libraries it needs); {e}",
                    self.options.image
                )),
                _ => docker_failure(&format!("creating container {name}"), e),
            })?;
        if let Err(e) = docker.start_container(&created.id, None).await {
            let _ = docker.remove_container(&created.id, Some(force())).await;
            return Err(docker_failure(&format!("starting container {name}"), e));
        }
        Ok(Instance {
            id: created.id,
            agent_id: Some(spec.agent_id),
            template: Some(spec.template),
            state: InstanceState::Running,
        })
    }

    async fn terminate_one(&self, docker: &Docker, id: &str) -> Result<(), ProviderError> {
        let info = match docker.inspect_container(id, None).await {
            Ok(info) => info,
            Err(e) if status_of(&e) == Some(404) => return Ok(()),
            Err(e) => return Err(docker_failure(&format!("inspecting container {id}"), e)),
        };
        let group = info
            .config
            .as_ref()
            .and_then(|c| c.labels.as_ref())
            .and_then(|l| l.get(GROUP_LABEL));
        if group != Some(&self.context.group) {
            return Err(ProviderError::fatal(format!(
                "docker provider: container {id} is not of group {:?} (its {GROUP_LABEL} is {group:?}); \
                 not touching it",
                self.context.group
            )));
        }
        let stop = StopContainerOptionsBuilder::new()
            .t(STOP_TIMEOUT_SECS)
            .build();
        match docker.stop_container(id, Some(stop)).await {
            // 304: already stopped; 404: already removed.
            Err(e) if !matches!(status_of(&e), Some(304 | 404)) => {
                return Err(docker_failure(&format!("stopping container {id}"), e))
            }
            _ => {}
        }
        match docker.remove_container(id, Some(force())).await {
            // 409: its removal is already under way.
            Err(e) if !matches!(status_of(&e), Some(404 | 409)) => {
                Err(docker_failure(&format!("removing container {id}"), e))
            }
            _ => Ok(()),
        }
    }
}

fn force() -> bollard::query_parameters::RemoveContainerOptions {
    RemoveContainerOptionsBuilder::new().force(true).build()
}

/// The HTTP status of an answer in which the daemon refused a request; `None` for failures of
/// the connection or the client.
fn status_of(e: &DockerError) -> Option<u16> {
    match e {
        DockerError::DockerResponseServerError { status_code, .. } => Some(*status_code),
        _ => None,
    }
}

/// A refusal for what was asked (4xx) is fatal, except a conflict (another container of that
/// name, transient) and throttling; daemon errors (5xx) and connection failures are transient.
fn docker_failure(what: &str, e: DockerError) -> ProviderError {
    let message = format!("docker provider: {what}: {e}");
    match status_of(&e) {
        Some(status) if (400..500).contains(&status) && !matches!(status, 408 | 409 | 429) => {
            ProviderError::fatal(message)
        }
        _ => ProviderError::transient(message),
    }
}

fn state_of(state: Option<&ContainerSummaryStateEnum>) -> InstanceState {
    use ContainerSummaryStateEnum as S;
    match state {
        // A paused container still holds its resources.
        Some(S::RUNNING | S::PAUSED) => InstanceState::Running,
        Some(S::REMOVING | S::STOPPING) => InstanceState::Stopping,
        Some(S::EXITED | S::DEAD) => InstanceState::Gone,
        Some(S::CREATED | S::RESTARTING | S::EMPTY) | None => InstanceState::Pending,
    }
}

#[async_trait]
impl Provider for DockerProvider {
    async fn templates(&self) -> Result<Vec<TemplateOffer>, ProviderError> {
        Ok(local::offers(&self.context))
    }

    async fn launch(
        &self,
        template: &str,
        requests: &[LaunchRequest],
    ) -> Result<Vec<Instance>, ProviderError> {
        let docker = self.docker().await?;
        local::launch_each("docker", template, requests, |request| {
            self.launch_one(&docker, template, request)
        })
        .await
    }

    async fn terminate(&self, ids: &[String]) -> Result<(), ProviderError> {
        let docker = self.docker().await?;
        local::terminate_each(ids, |id| self.terminate_one(&docker, id)).await
    }

    async fn list(&self) -> Result<Vec<Instance>, ProviderError> {
        let docker = self.docker().await?;
        let filters = HashMap::from([(
            "label",
            vec![format!("{GROUP_LABEL}={}", self.context.group)],
        )]);
        let options = ListContainersOptionsBuilder::new()
            .all(true)
            .filters(&filters)
            .build();
        let containers = docker
            .list_containers(Some(options))
            .await
            .map_err(|e| docker_failure("listing containers", e))?;
        Ok(containers
            .into_iter()
            .filter_map(|c| {
                let label = |key: &str| c.labels.as_ref()?.get(key).cloned();
                Some(Instance {
                    agent_id: label(AGENT_LABEL),
                    template: label(TEMPLATE_LABEL),
                    state: state_of(c.state.as_ref()),
                    id: c.id?,
                })
            })
            .collect())
    }
}

/// Builds the agent image `tag` on `docker`, `FROM scratch`: `corral_binary` as
/// `/usr/local/bin/corral` (the entrypoint) with the shared libraries and the dynamic loader it
/// needs (as `ldd` resolves them on this host, at the same paths), Debian's static busybox as
/// `/bin/busybox` with its applets (`/bin/sh`...) linked beside it so that sessions can run shell
/// commands, and the directories `/tmp` and `/var/lib/corral-agent`.
pub async fn build_agent_image(
    docker: &Docker,
    tag: &str,
    corral_binary: &Path,
) -> Result<(), ProviderError> {
    let context = image_context(corral_binary).await?;
    let options = BuildImageOptionsBuilder::new()
        .t(tag)
        .rm(true)
        .forcerm(true)
        .build();
    let mut build = docker.build_image(options, None, Some(bollard::body_full(context.into())));
    while let Some(step) = build.next().await {
        let info = step.map_err(|e| docker_failure(&format!("building image {tag}"), e))?;
        if let Some(detail) = info.error_detail {
            return Err(ProviderError::fatal(format!(
                "docker provider: building image {tag}: {}",
                detail.message.unwrap_or_default()
            )));
        }
    }
    Ok(())
}

const AGENT_DOCKERFILE: &str = r#"FROM scratch
COPY rootfs/ /
ENV PATH=/usr/local/bin:/bin
WORKDIR /var/lib/corral-agent
ENTRYPOINT ["/usr/local/bin/corral"]
CMD ["agent", "--work-dir", "/var/lib/corral-agent"]
"#;

/// One entry of the build context.
enum Entry {
    File(Vec<u8>, u32),
    Dir(u32),
    Symlink(&'static str),
}

/// The build context: the Dockerfile and the image's files under `rootfs/`.
async fn image_context(corral_binary: &Path) -> Result<Vec<u8>, ProviderError> {
    let read = |path: &Path, hint: &str| {
        std::fs::read(path).map_err(|e| {
            ProviderError::fatal(format!(
                "docker provider: reading {}{hint}: {e}",
                path.display()
            ))
        })
    };
    let busybox = Path::new(BUSYBOX);
    let mut entries = vec![
        (
            "Dockerfile".to_string(),
            Entry::File(AGENT_DOCKERFILE.into(), 0o644),
        ),
        (
            format!("rootfs{CORRAL_IN_IMAGE}"),
            Entry::File(read(corral_binary, "")?, 0o755),
        ),
        (
            "rootfs/bin/busybox".into(),
            Entry::File(read(busybox, " (apt-get install busybox-static)")?, 0o755),
        ),
        ("rootfs/tmp".into(), Entry::Dir(0o1777)),
        (format!("rootfs{AGENT_WORK_DIR}"), Entry::Dir(0o755)),
    ];
    let mut libraries = shared_libraries(corral_binary).await?;
    libraries.extend(shared_libraries(busybox).await?);
    for library in &libraries {
        let bytes = read(library, "")?;
        entries.push((
            format!("rootfs{}", library.display()),
            Entry::File(bytes, 0o755),
        ));
    }
    for applet in busybox_applets().await? {
        entries.push((format!("rootfs/bin/{applet}"), Entry::Symlink("busybox")));
    }
    pack(&entries).map_err(|e| {
        ProviderError::fatal(format!("docker provider: packing the build context: {e}"))
    })
}

fn pack(entries: &[(String, Entry)]) -> std::io::Result<Vec<u8>> {
    let mut tar = tar::Builder::new(Vec::new());
    for (path, entry) in entries {
        let mut header = tar::Header::new_gnu();
        header.set_size(0);
        match entry {
            Entry::File(data, mode) => {
                header.set_mode(*mode);
                header.set_size(data.len() as u64);
                header.set_cksum();
                tar.append_data(&mut header, path, &data[..])?;
            }
            Entry::Dir(mode) => {
                header.set_entry_type(tar::EntryType::Directory);
                header.set_mode(*mode);
                header.set_cksum();
                tar.append_data(&mut header, path, std::io::empty())?;
            }
            Entry::Symlink(target) => {
                header.set_entry_type(tar::EntryType::Symlink);
                header.set_mode(0o777);
                tar.append_link(&mut header, path, target)?;
            }
        }
    }
    tar.into_inner()
}

/// The shared libraries and loader `binary` needs, as `ldd` resolves them here; none for a
/// static binary.
async fn shared_libraries(binary: &Path) -> Result<BTreeSet<PathBuf>, ProviderError> {
    let output = tokio::process::Command::new("ldd")
        .arg(binary)
        .output()
        .await
        .map_err(|e| ProviderError::fatal(format!("running ldd {}: {e}", binary.display())))?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    if !output.status.success() {
        if format!("{stdout}{stderr}").contains("not a dynamic executable") {
            return Ok(BTreeSet::new());
        }
        return Err(ProviderError::fatal(format!(
            "ldd {} failed ({}): {}",
            binary.display(),
            output.status,
            stderr.trim()
        )));
    }
    parse_ldd(&stdout).map_err(|e| ProviderError::fatal(format!("ldd {}: {e}", binary.display())))
}

/// Reads `ldd`'s lines: `libc.so.6 => /lib/.../libc.so.6 (0x...)` names a library,
/// `/lib64/ld-linux-x86-64.so.2 (0x...)` the loader; the vDSO has no file.
fn parse_ldd(output: &str) -> Result<BTreeSet<PathBuf>, String> {
    let mut paths = BTreeSet::new();
    for line in output.lines().map(str::trim) {
        let target = match line.split_once("=>") {
            Some((name, resolved)) => {
                let resolved = resolved.trim();
                if resolved.starts_with("not found") {
                    return Err(format!("{} is not found", name.trim()));
                }
                resolved
            }
            None => line,
        };
        if let Some(path) = target
            .split_whitespace()
            .next()
            .filter(|p| p.starts_with('/'))
        {
            paths.insert(PathBuf::from(path));
        }
    }
    Ok(paths)
}

/// The names of busybox's applets (`sh`, `ls`...), each linked to `/bin/busybox` in the image.
async fn busybox_applets() -> Result<Vec<String>, ProviderError> {
    let output = tokio::process::Command::new(BUSYBOX)
        .arg("--list")
        .output()
        .await
        .map_err(|e| ProviderError::fatal(format!("running {BUSYBOX} --list: {e}")))?;
    if !output.status.success() {
        return Err(ProviderError::fatal(format!(
            "{BUSYBOX} --list failed: {}",
            output.status
        )));
    }
    Ok(String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(str::trim)
        .filter(|a| !a.is_empty() && *a != "busybox" && !a.contains('/'))
        .map(String::from)
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ldd_output_names_libraries_and_the_loader() {
        let out = "\tlinux-vdso.so.1 (0x00007ffd)\n\
                   \tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x00007f)\n\
                   \t/lib64/ld-linux-x86-64.so.2 (0x00007f)\n";
        let paths: Vec<_> = parse_ldd(out).unwrap().into_iter().collect();
        assert_eq!(
            paths,
            [
                PathBuf::from("/lib/x86_64-linux-gnu/libc.so.6"),
                PathBuf::from("/lib64/ld-linux-x86-64.so.2")
            ]
        );
        let e = parse_ldd("\tlibfoo.so.1 => not found\n").unwrap_err();
        assert!(e.contains("libfoo.so.1"), "{e}");
        assert!(parse_ldd("\tstatically linked\n").unwrap().is_empty());
    }

    #[test]
    fn container_states_map_to_instance_states() {
        use ContainerSummaryStateEnum as S;
        assert_eq!(state_of(Some(&S::RUNNING)), InstanceState::Running);
        assert_eq!(state_of(Some(&S::CREATED)), InstanceState::Pending);
        assert_eq!(state_of(Some(&S::RESTARTING)), InstanceState::Pending);
        assert_eq!(state_of(Some(&S::EXITED)), InstanceState::Gone);
        assert_eq!(state_of(Some(&S::DEAD)), InstanceState::Gone);
        assert_eq!(state_of(Some(&S::REMOVING)), InstanceState::Stopping);
    }
}
