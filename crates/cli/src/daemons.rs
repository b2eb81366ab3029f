//! The long-running commands besides `server`: `corral agent` (without a subcommand) runs the
//! agent daemon, and `corral dev` runs a manager and an agent together for one machine.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::{Args, ValueEnum};
use corral_core::Slots;
use corral_runtime::Runtime;

use crate::client::config::{client_config_path, ClientConfig};

#[derive(Clone, Copy, Default, ValueEnum)]
pub enum RuntimeKind {
    /// Sessions are processes of this host.
    #[default]
    Process,
    /// Sessions are Docker containers (images must be present: nothing is pulled).
    Docker,
}

/// `corral agent --manager URL --group G`: run this host's agent.
#[derive(Args)]
pub struct AgentArgs {
    /// How log lines are written to standard error.
    #[arg(long, env = "CORRAL_LOG_FORMAT", value_enum, default_value_t)]
    pub log_format: crate::LogFormat,
    /// The scaling group to join (env CORRAL_AGENT_GROUP).
    #[arg(long, env = "CORRAL_AGENT_GROUP", value_name = "G")]
    pub group: Option<String>,
    /// This agent's id [default: the host name].
    #[arg(long, env = "CORRAL_AGENT_ID", value_name = "ID")]
    pub id: Option<String>,
    /// What it offers [default: detected CPUs, memory and GPUs (nvidia-smi)].
    #[arg(long, env = "CORRAL_AGENT_CAPACITY", value_name = "SLOTS")]
    pub capacity: Option<String>,
    /// A label of the agent; repeat for more.
    #[arg(long = "label", value_name = "K=V")]
    pub labels: Vec<String>,
    /// Where sessions' working directories, logs and outputs live.
    #[arg(
        long,
        env = "CORRAL_AGENT_WORK_DIR",
        value_name = "DIR",
        default_value = "corral-agent"
    )]
    pub work_dir: PathBuf,
    /// How sessions run.
    #[arg(long, value_enum, default_value_t)]
    pub runtime: RuntimeKind,
    /// The nvidia-smi to detect GPUs with.
    #[arg(long, value_name = "PATH", default_value = "nvidia-smi")]
    pub nvidia_smi: PathBuf,
    /// Where to learn the group (and on AWS the manager and token) that flags do not give:
    /// the pod's labels (`corral.io/group`) or the instance's tag `corral-group` and user data.
    #[arg(long, env = "CORRAL_AGENT_METADATA", value_enum, default_value_t)]
    pub metadata: Metadata,
    /// The downward API file holding the pod's labels.
    #[arg(long, value_name = "PATH", default_value = "/etc/podinfo/labels")]
    pub pod_labels: PathBuf,
    /// The downward API file holding the pod's annotations (a StatefulSet's pods get their
    /// bootstrap token there).
    #[arg(long, value_name = "PATH", default_value = "/etc/podinfo/annotations")]
    pub pod_annotations: PathBuf,
    /// Once SECS seconds have passed since it started, the agent takes nothing new: the manager
    /// marks it, what runs goes on, and once empty the `demand` policy lets it go. For an agent
    /// in a batch job (a pilot job): its walltime less the longest session, so that it ends
    /// empty before the batch system kills it.
    #[arg(long, env = corral_api::identity::ENV_DRAIN_AFTER, value_name = "SECS")]
    pub drain_after: Option<u64>,
    /// A pilot job's own id, as its scheduler set it (`SLURM_JOB_ID`, `JOB_ID`...); the batch
    /// provider's job script gives it. The manager takes a pilot's bootstrap token only from
    /// its job, while the scheduler says that job runs.
    #[arg(long, env = corral_api::identity::ENV_BATCH_JOB, value_name = "ID")]
    pub batch_job: Option<String>,
    /// An external agent's private key (`corral agent keygen`): it joins without a token, by
    /// proving it holds a key registered for the group (`corral group key add`).
    #[arg(long, env = "CORRAL_AGENT_KEY", value_name = "FILE")]
    pub key: Option<PathBuf>,
    /// The instance metadata service (IMDSv2).
    #[arg(
        long,
        env = "CORRAL_IMDS_ENDPOINT",
        value_name = "URL",
        default_value = "http://169.254.169.254"
    )]
    pub imds_endpoint: String,
    #[command(flatten)]
    pub sandbox: SandboxArgs,
}

/// How the process runtime keeps sessions from the agent and from each other
/// (docs/security.md).
#[derive(Args, Clone, Default)]
pub struct SandboxArgs {
    /// `auto`: sandbox sessions where this host can (mount and PID namespaces; as root, a uid
    /// of their own), else run them as the agent's account with a warning; `on`: a session
    /// that cannot be sandboxed fails (pilot agents); `off`: never, sessions see what the
    /// agent's account sees (docs/security.md).
    #[arg(long, env = "CORRAL_AGENT_ISOLATION", value_enum, default_value_t)]
    pub isolation: IsolationKind,
    /// A path sessions must not see, covered by an empty directory in their sandbox (the
    /// agent's work directory always is); repeat for more.
    #[arg(long = "hide", value_name = "PATH")]
    pub hide: Vec<PathBuf>,
    /// The uids an agent running as root runs sessions as, one per running session (each with
    /// the gid of the same number).
    #[arg(long, value_name = "FIRST-LAST", value_parser = parse_uid_range)]
    pub session_uids: Option<(u32, u32)>,
}

#[derive(Clone, Copy, Default, ValueEnum)]
pub enum IsolationKind {
    Auto,
    On,
    #[default]
    Off,
}

impl SandboxArgs {
    fn config(&self) -> corral_runtime::sandbox::SandboxConfig {
        use corral_runtime::sandbox::{Isolation, SandboxConfig};
        let mut config = SandboxConfig {
            isolation: match self.isolation {
                IsolationKind::Auto => Isolation::Auto,
                IsolationKind::On => Isolation::On,
                IsolationKind::Off => Isolation::Off,
            },
            hide: self.hide.clone(),
            ..SandboxConfig::default()
        };
        if let Some((first, last)) = self.session_uids {
            config.first_uid = first;
            config.uid_count = last - first + 1;
        }
        config
    }
}

fn parse_uid_range(text: &str) -> Result<(u32, u32), String> {
    let (first, last) = text
        .split_once('-')
        .ok_or_else(|| format!("{text:?} is not FIRST-LAST"))?;
    let number = |t: &str| {
        t.trim()
            .parse::<u32>()
            .map_err(|e| format!("{t:?} is not a uid: {e}"))
    };
    let (first, last) = (number(first)?, number(last)?);
    if first == 0 || last < first {
        return Err(format!(
            "{text:?}: the range must be FIRST-LAST with 0 < FIRST <= LAST (uid 0 is root)"
        ));
    }
    Ok((first, last))
}

#[derive(Clone, Copy, Default, ValueEnum)]
pub enum Metadata {
    /// Flags, environment and the config file only.
    #[default]
    None,
    /// The pod's labels from the downward API.
    Kubernetes,
    /// The instance's tags and user data from IMDSv2.
    Aws,
}

fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "agent".into())
}

/// The runtime sessions of agent `agent` run in.
pub async fn runtime_of(
    kind: RuntimeKind,
    agent: &str,
    sandbox: corral_runtime::sandbox::SandboxConfig,
) -> Result<Runtime> {
    Ok(match kind {
        RuntimeKind::Process => Runtime::Process(corral_runtime::ProcessRuntime::new(
            corral_runtime::ProcessConfig {
                sandbox,
                ..Default::default()
            },
        )),
        RuntimeKind::Docker => Runtime::Docker(
            corral_runtime::DockerRuntime::connect(agent)
                .await
                .context("connecting to the Docker daemon")?,
        ),
    })
}

/// Runs the agent daemon until Ctrl-C. Flags and environment win; then the metadata source the
/// operator named; then the client config file.
pub fn run_agent(args: AgentArgs, conn: crate::client::Conn) -> Result<()> {
    let crate::client::Conn {
        server,
        token,
        ca_file,
        context,
    } = conn;
    // Orphans of sessions (a `setsid` child whose parent exited) come back to this daemon,
    // so the runtime can find, stop and reap them. Not in `corral dev`, whose process also
    // hosts providers' agents, whose orphans its runtime could not tell apart.
    if let Err(e) = corral_runtime::become_subreaper() {
        tracing::warn!(error = %e, "cannot become a child subreaper; orphaned session processes are found less surely");
    }
    let rt = tokio::runtime::Runtime::new().context("starting the async runtime")?;
    let found = match args.metadata {
        Metadata::None => corral_agent::metadata::Found::default(),
        Metadata::Kubernetes => wait_for_bootstrap(token.is_some(), || {
            Ok(corral_agent::metadata::from_pod_files(
                &args.pod_labels,
                &args.pod_annotations,
            )?)
        })?,
        Metadata::Aws => wait_for_bootstrap(token.is_some(), || {
            Ok(rt.block_on(corral_agent::metadata::from_imds(&args.imds_endpoint))?)
        })?,
    };
    let Some(group) = args.group.clone().or(found.group) else {
        bail!(
            "say which group to join: --group G, CORRAL_AGENT_GROUP, or --metadata kubernetes|aws"
        );
    };
    let key = args
        .key
        .as_deref()
        .map(|path| -> Result<_> {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("--key: reading {}", path.display()))?;
            let key = corral_api::agent_keys::AgentKey::from_pem(&text)
                .with_context(|| format!("--key {}", path.display()))?;
            Ok(std::sync::Arc::new(key))
        })
        .transpose()?;
    // An external agent proves who it is with its key: it has no token, and takes none from
    // the client's config file (which may hold an admin's).
    let token = token.or(found.token);
    let given = token.as_deref().or(key.as_ref().map(|_| "unused"));
    let resolved = crate::client::config::resolve(
        server.or(found.manager).as_deref(),
        given,
        ca_file.as_deref(),
        context.as_deref(),
    )?;
    let server = resolved.server;
    let token = if key.is_some() {
        String::new()
    } else {
        resolved.token
    };
    let capacity = args
        .capacity
        .as_deref()
        .map(str::parse::<Slots>)
        .transpose()
        .context("--capacity")?;
    let mut labels = std::collections::BTreeMap::new();
    for l in &args.labels {
        let (k, v) = l
            .split_once('=')
            .with_context(|| format!("--label {l:?} is not K=V"))?;
        labels.insert(k.to_string(), v.to_string());
    }
    let config = corral_agent::Config {
        manager: server,
        token,
        id: args.id.or(found.id).unwrap_or_else(host_name),
        group,
        capacity,
        labels,
        work_root: args.work_dir,
        nvidia_smi: args.nvidia_smi,
        stop_grace: Duration::from_secs(10),
        ca_file: resolved.ca_file,
        drain_after: args.drain_after.map(Duration::from_secs),
        key,
        // It replaces the file it was started from, and starts it again as it was started.
        self_update: std::env::current_exe()
            .ok()
            .map(|exe| corral_agent::update::SelfUpdate {
                exe,
                args: std::env::args_os().skip(1).collect(),
            }),
        resume_token: RESUME_TOKEN.get().cloned(),
        // An empty variable (not in a job) names no job.
        batch_job: args.batch_job.filter(|id| !id.is_empty()),
    };
    crate::init_logs(args.log_format);
    std::fs::create_dir_all(&config.work_root)
        .with_context(|| format!("--work-dir {}", config.work_root.display()))?;
    start_guard(&config.work_root, args.runtime, &config.id);
    rt.block_on(async {
        let runtime = runtime_of(args.runtime, &config.id, args.sandbox.config()).await?;
        corral_agent::run(config, runtime, crate::stop_signal())
            .await
            .map_err(anyhow::Error::from)
    })
}

/// `corral agent-guard`: what the agent tells its guard.
#[derive(Args)]
pub struct GuardArgs {
    /// The agent's work directory.
    #[arg(long)]
    pub work_dir: PathBuf,
    #[arg(long, value_enum, default_value_t)]
    pub runtime: RuntimeKind,
    /// The agent's id (the Docker runtime finds its containers by it).
    #[arg(long)]
    pub agent_id: String,
    /// The agent's process: the guard ends once it is gone and nothing is left to stop.
    #[arg(long)]
    pub agent_pid: u32,
}

/// Runs the agent's guard until it is no longer needed.
pub fn run_guard(args: GuardArgs) -> Result<()> {
    crate::init_logs(crate::LogFormat::Text);
    let rt = tokio::runtime::Runtime::new().context("starting the async runtime")?;
    rt.block_on(async {
        // It stops sessions and starts none: no sandbox to probe.
        let runtime = runtime_of(args.runtime, &args.agent_id, Default::default()).await?;
        corral_agent::guard::run(&args.work_dir, runtime, args.agent_pid)
            .await
            .with_context(|| format!("the guard of {}", args.work_dir.display()))
    })
}

/// Starts the agent's guard beside it, in a process group of its own (a Ctrl-C to the agent
/// leaves it, as it leaves the sessions); without one, only the agent's own watch fences its
/// sessions, which a frozen agent cannot. It logs to `<work dir>/guard.log`, not to the agent's
/// standard error, which it would otherwise hold open past the agent's end.
fn start_guard(work_dir: &Path, runtime: RuntimeKind, agent_id: &str) {
    use std::os::unix::process::CommandExt;
    let kind = runtime
        .to_possible_value()
        .map(|v| v.get_name().to_string())
        .unwrap_or_default();
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(work_dir.join("guard.log"));
    let started = log
        .and_then(|log| Ok((std::env::current_exe()?, log)))
        .and_then(|(exe, log)| {
            Command::new(exe)
                .arg("agent-guard")
                .arg("--work-dir")
                .arg(work_dir)
                .args(["--runtime", &kind, "--agent-id", agent_id])
                .args(["--agent-pid", &std::process::id().to_string()])
                .stdin(std::process::Stdio::null())
                .stdout(std::process::Stdio::null())
                .stderr(log)
                .process_group(0)
                .spawn()
        });
    match started {
        // Reaped when it ends, so that it leaves no zombie.
        Ok(mut guard) => {
            std::thread::spawn(move || guard.wait());
        }
        Err(e) => {
            tracing::warn!(error = %e, "could not start the agent's guard: a frozen agent's sessions are not stopped")
        }
    }
}

/// The agent's own token, passed on by the agent this one replaced (see [`take_resume_token`]).
static RESUME_TOKEN: std::sync::OnceLock<String> = std::sync::OnceLock::new();

/// Takes the token an updating agent passes to its new build: read from the pipe it names
/// (`update::RESUME_FD_ENV`), or, from a build older than that, out of the environment. Called
/// first thing in `main`, before any thread starts.
pub(crate) fn take_resume_token() {
    use corral_agent::update::{RESUME_FD_ENV, RESUME_TOKEN_ENV};
    let from_pipe = std::env::var(RESUME_FD_ENV).ok().map(|fd| {
        // SAFETY: no other thread exists yet to read the environment meanwhile.
        unsafe { std::env::remove_var(RESUME_FD_ENV) };
        corral_agent::update::read_resume_pipe(&fd)
    });
    let from_env = std::env::var_os(RESUME_TOKEN_ENV).map(|token| {
        // SAFETY: as above.
        unsafe { std::env::remove_var(RESUME_TOKEN_ENV) };
        token.to_string_lossy().into_owned()
    });
    match from_pipe {
        Some(Ok(token)) => {
            let _ = RESUME_TOKEN.set(token);
        }
        Some(Err(e)) => {
            let _ = writeln_stderr(&format!(
                "error: reading the agent's token from the update's pipe: {e}"
            ));
        }
        None => {
            if let Some(token) = from_env {
                let _ = RESUME_TOKEN.set(token);
            }
        }
    }
}

/// Daemons that hold credentials (the agent's token, the manager's secrets) keep them from
/// other processes of their account, sessions first: a process that is not dumpable has its
/// `/proc/<pid>/` entries (environ, mem, fd) owned by root, and cannot be traced.
pub(crate) fn keep_memory_private() {
    // SAFETY: prctl with PR_SET_DUMPABLE reads no memory of ours.
    if unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0) } != 0 {
        let e = std::io::Error::last_os_error();
        let _ = writeln_stderr(&format!(
            "warning: cannot make this process undumpable ({e}): processes of its account can read its memory"
        ));
    }
}

/// A line on standard error that never panics (a closed standard error is not fatal).
fn writeln_stderr(line: &str) -> std::io::Result<()> {
    use std::io::Write as _;
    writeln!(std::io::stderr(), "{line}")
}

/// Reads the metadata source until it holds a bootstrap token (two minutes at most), unless one
/// came from flags or environment. A StatefulSet's pods and an Auto Scaling group's instances
/// get theirs a moment after they start: as an annotation (the kubelet refreshes downward API
/// files within about a minute) or as an instance tag.
fn wait_for_bootstrap(
    has_token: bool,
    read: impl Fn() -> Result<corral_agent::metadata::Found>,
) -> Result<corral_agent::metadata::Found> {
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    loop {
        let found = read()?;
        if has_token || found.token.is_some() || std::time::Instant::now() >= deadline {
            return Ok(found);
        }
        std::thread::sleep(Duration::from_secs(2));
    }
}

/// `corral dev`: one machine, everything.
#[derive(Args)]
pub struct DevArgs {
    /// Holds the database, the admin token, and the agent's session directories.
    #[arg(long, default_value = "corral-data")]
    pub data_dir: PathBuf,
    /// Address of the REST API.
    #[arg(long, default_value = "127.0.0.1:8470")]
    pub listen: std::net::SocketAddr,
    /// What the local agent offers [default: detected].
    #[arg(long, value_name = "SLOTS")]
    pub capacity: Option<String>,
    /// How sessions run.
    #[arg(long, value_enum, default_value_t)]
    pub runtime: RuntimeKind,
    /// How log lines are written to standard error.
    #[arg(long, env = "CORRAL_LOG_FORMAT", value_enum, default_value_t)]
    pub log_format: crate::LogFormat,
    #[command(flatten)]
    pub sandbox: SandboxArgs,
}

/// The group `corral dev` creates and its agent joins.
pub const DEV_GROUP: &str = "dev";

/// The client context `corral dev` writes.
const DEV_CONTEXT: &str = "dev";

/// Runs a manager on embedded SQLite and a local agent in group `dev`, and writes the client
/// configuration so that `corral session run -- CMD` works from another terminal, no flags.
pub fn run_dev(args: DevArgs) -> Result<()> {
    crate::init_logs(args.log_format);
    let capacity = args
        .capacity
        .as_deref()
        .map(str::parse::<Slots>)
        .transpose()
        .context("--capacity")?;
    let rt = tokio::runtime::Runtime::new().context("starting the async runtime")?;
    rt.block_on(async move {
        let config = corral_manager::Config {
            data_dir: args.data_dir.clone(),
            listen: args.listen,
            heartbeat: Duration::from_secs(2),
            lost_after: Duration::from_secs(10),
            ..Default::default()
        };
        let app = corral_manager::start(&config).await?;
        let listener = tokio::net::TcpListener::bind(config.listen).await.with_context(|| format!("listening on {}", config.listen))?;
        let server = format!("http://{}", listener.local_addr()?);
        let token = std::fs::read_to_string(config.data_dir.join("admin.token")).context("reading the admin token")?.trim().to_string();
        if app.store.get_group(DEV_GROUP).await?.is_none() {
            let group = corral_core::ScalingGroup { name: DEV_GROUP.into(), policy: Default::default(), scheduler: Default::default(), templates: Vec::new() };
            app.store.create_group(&group, corral_manager::now()).await?;
        }
        let store = app.store.clone();
        let mut serving = tokio::spawn(corral_manager::serve_on(listener, app, std::future::pending()));
        let agent = corral_agent::Config {
            manager: server.clone(),
            token: token.clone(),
            id: "dev-agent".into(),
            group: DEV_GROUP.into(),
            capacity,
            labels: Default::default(),
            work_root: args.data_dir.join("agent"),
            nvidia_smi: "nvidia-smi".into(),
            stop_grace: Duration::from_secs(10),
            ca_file: None,
            drain_after: None,
            key: None,
            self_update: None,
            resume_token: None,
            batch_job: None,
        };
        // Its sessions see neither the manager's data (the admin token) nor the client
        // configuration this command writes.
        let mut sandbox = args.sandbox.config();
        sandbox.hide.push(args.data_dir.clone());
        if let Some(dir) = client_config_path().as_deref().and_then(Path::parent) {
            sandbox.hide.push(dir.to_path_buf());
        }
        let runtime = runtime_of(args.runtime, "dev-agent", sandbox).await?;
        let mut agent = tokio::spawn(corral_agent::run(agent, runtime, std::future::pending()));
        // Say "ready" only once the agent has joined, so the first `session run` finds it.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        loop {
            let joined = store.get_agent("dev-agent").await?.is_some_and(|a| a.state == corral_core::AgentState::Alive);
            if joined {
                break;
            }
            if agent.is_finished() || tokio::time::Instant::now() > deadline {
                bail!("the local agent did not join within 30 s");
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let written = write_client_context(&server, &token);
        // Not eprintln!, which panics (and the daemon with it) when standard error is closed.
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), "corral dev: manager at {server}, agent \"dev-agent\" in group {DEV_GROUP:?}");
        let _ = match written {
            Ok(said) => writeln!(std::io::stderr(), "{said}; from another terminal: corral session run -- echo hello"),
            Err(e) => writeln!(std::io::stderr(), "client configuration not written: {e:#}; from another terminal: corral --server {server} --token $(cat {}) session run -- echo hello", config.data_dir.join("admin.token").display()),
        };
        tokio::select! {
            r = &mut agent => r.context("the agent stopped")?.map_err(anyhow::Error::from)?,
            r = &mut serving => r.context("the manager stopped")??,
            _ = tokio::signal::ctrl_c() => {}
        }
        anyhow::Ok(())
    })
}

/// Adds or updates the context `dev` in the client config file and makes it the current one,
/// keeping every other context; says what it did, naming the context it replaced as current.
/// A file that is not a valid config is left as it is.
fn write_client_context(server: &str, token: &str) -> Result<String> {
    use crate::client::config::{read_config_file, write_config_file};
    let path = client_config_path()
        .context("no home directory to write the client configuration in; set CORRAL_CONFIG")?;
    let mut file = read_config_file(&path)?;
    let before = file.current_name();
    let context = ClientConfig {
        server: Some(server.into()),
        token: Some(token.into()),
        group: Some(DEV_GROUP.into()),
        ca_file: None,
    };
    let existed = file.contexts().contains_key(DEV_CONTEXT);
    file.set(DEV_CONTEXT, context)?;
    file.use_context(DEV_CONTEXT)?;
    write_config_file(&path, &file)?;
    let verb = if existed { "updated" } else { "added" };
    let mut said = format!(
        "client context {DEV_CONTEXT:?} {verb} to {} and made current",
        path.display()
    );
    if let Some(before) = before.filter(|b| b != DEV_CONTEXT) {
        let was = file
            .contexts()
            .remove(&before)
            .and_then(|c| c.server)
            .unwrap_or_default();
        said.push_str(&format!(
            " (it was {before:?}, {was}; back to it with: corral config use {before})"
        ));
    }
    Ok(said)
}
