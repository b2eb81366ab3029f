//! The agent daemon: joins its group, then syncs with the manager in a loop (each sync is its
//! heartbeat and carries what it runs and what ended), starts and stops sessions through a
//! runtime, and uploads their logs and outputs. Every connection is opened by the agent.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

mod admit;
mod backoff;
mod checkpoint;
mod fence;
mod fencing;
mod files;
pub mod guard;
mod images;
mod join;
pub mod metadata;
mod sessions;
mod sync;
mod tasks;
mod tunnel;
pub mod update;

use admit::OwnDevices;
use backoff::{backoff, FIRST_REJOIN_WAIT, FIRST_RETRY_WAIT, MAX_JOIN_RETRY_WAIT, MAX_REJOIN_WAIT};
use tasks::AbortOnDrop;

use corral_api::agent_builds::UpdateFailure;
use corral_api::protocol::*;
use corral_api::{Client, ClientError};
use corral_core::slots::{Quantity, SlotName};
use corral_core::Slots;
use corral_runtime::Runtime;
use tokio::sync::Notify;

/// How the agent runs.
#[derive(Debug, Clone)]
pub struct Config {
    /// The manager's URL, e.g. `http://127.0.0.1:8470`.
    pub manager: String,
    /// The bootstrap token it joins with (empty for an external agent, which has `key`).
    pub token: String,
    /// An external agent's key: it joins, and joins again, by signing the manager's challenge.
    pub key: Option<std::sync::Arc<corral_api::agent_keys::AgentKey>>,
    pub id: String,
    pub group: String,
    /// What it offers; `None` detects CPU, memory and GPUs.
    pub capacity: Option<Slots>,
    pub labels: BTreeMap<String, String>,
    /// Sessions' working directories live under here.
    pub work_root: PathBuf,
    /// `nvidia-smi` (or a stand-in) for GPU detection.
    pub nvidia_smi: PathBuf,
    /// How long a stopped session gets between SIGTERM and SIGKILL.
    pub stop_grace: Duration,
    /// PEM certificates trusted for an `https://` manager, besides the system's roots.
    pub ca_file: Option<PathBuf>,
    /// Once this long has passed since the agent started, every sync asks to take nothing new
    /// (`draining`), so that a pilot job ends empty before the batch system kills it at its
    /// walltime. `None`: never.
    pub drain_after: Option<Duration>,
    /// How it was started, so that it can replace itself with a build the manager names;
    /// `None`: it does not update itself (and says so when told to).
    pub self_update: Option<update::SelfUpdate>,
    /// Its own token from before it replaced itself (`update::RESUME_TOKEN_ENV`): it joins
    /// again with it first.
    pub resume_token: Option<String>,
    /// A pilot's batch job id, as its scheduler set it (`corral agent --batch-job`): the
    /// manager takes a pilot's bootstrap token only from that job.
    pub batch_job: Option<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    /// The manager refused the join (a wrong token or group will not fix itself), or the
    /// client could not be built (a bad URL or CA file).
    #[error(transparent)]
    Api(#[from] ClientError),
    #[error("runtime: {0}")]
    Runtime(#[from] corral_runtime::RuntimeError),
    /// The manager told it to leave (its key was revoked, or its group no longer takes
    /// external agents); its sessions were stopped.
    #[error("the manager dismissed this agent: {0}")]
    Dismissed(String),
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

/// The slots this host offers, as detected.
pub fn detected_capacity(nvidia_smi: &std::path::Path) -> (Slots, Vec<corral_core::Device>) {
    let c = corral_runtime::detect_capacity(nvidia_smi);
    let name = |n: &str| SlotName::new(n).expect("constant slot name");
    let mut pairs = vec![
        (name("cpu"), Quantity::from_milli(c.cpu_milli)),
        (
            name("mem"),
            Quantity::from_milli(c.mem_bytes.saturating_mul(1000)),
        ),
    ];
    // Devices, not boards: a GPU split into MIG instances counts as its instances; their
    // memory adds up in `gpu.mem`, what fractions of a device may ask for.
    let devices = c.devices();
    if !devices.is_empty() {
        pairs.push((
            name("gpu"),
            Quantity::from_milli(devices.len() as u64 * 1000),
        ));
        let memory: u64 = devices.iter().map(|d| d.memory.milli()).sum();
        if memory > 0 {
            pairs.push((name("gpu.mem"), Quantity::from_milli(memory)));
        }
    }
    (Slots::from_pairs(pairs).expect("distinct names"), devices)
}

/// What ended since the last successful sync, and a bell rung when something ends.
#[derive(Default)]
struct Ended {
    reports: Mutex<Vec<SessionReport>>,
    bell: Notify,
}

/// What the sync loop and the sessions' waiters share.
struct Agent {
    config: Config,
    client: Client,
    runtime: Runtime,
    /// The credential from the last join.
    token: Mutex<String>,
    /// Sessions it runs, with what it was asked to run.
    running: Mutex<HashMap<String, Assignment>>,
    /// Sessions taken but waiting for devices that sessions it stops still hold.
    waiting: Mutex<Vec<Assignment>>,
    /// Sessions admitted and being started (their inputs fetched) beside the sync loop, so
    /// that a large input holds up no heartbeat; they hold their devices meanwhile.
    staging: Mutex<HashMap<String, Assignment>>,
    /// Sessions it was told to stop that have not ended yet.
    stopping: Mutex<HashSet<String>>,
    /// The devices it joined with, which grants are checked against.
    devices: OnceLock<OwnDevices>,
    ended: Ended,
    /// Log bytes the manager has, per session and stream.
    offsets: tokio::sync::Mutex<HashMap<(String, &'static str), u64>>,
    /// The images it holds, kept current while its group's policy says so.
    images: images::Images,
    /// When it is to stop its sessions, cut off from the manager.
    fence: Mutex<fence::Fence>,
    /// Sessions it stopped itself, cut off, with why: reported `disconnected`.
    fenced: Mutex<HashMap<String, String>>,
}

impl Agent {
    /// The client with the agent's current credential.
    fn as_agent(&self) -> Client {
        self.client.with_token(&lock(&self.token))
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Runs the agent until `shutdown` resolves. Connection failures are retried with backoff; a
/// refused join is returned (a wrong token or group will not fix itself).
pub async fn run(
    config: Config,
    runtime: Runtime,
    shutdown: impl std::future::Future<Output = ()>,
) -> Result<(), AgentError> {
    let client = Client::new(&config.manager, &config.token, config.ca_file.as_deref())?;
    let kept_rules = fence::load(&config.work_root);
    let images = images::Images::kept(&config.work_root);
    let agent = Arc::new(Agent {
        token: Mutex::new(config.resume_token.clone().unwrap_or(config.token.clone())),
        config,
        client,
        runtime,
        running: Mutex::default(),
        waiting: Mutex::default(),
        staging: Mutex::default(),
        stopping: Mutex::default(),
        devices: OnceLock::new(),
        ended: Ended::default(),
        offsets: tokio::sync::Mutex::default(),
        images,
        fence: Mutex::new(fence::Fence::new(kept_rules, fence::boottime_ms())),
        fenced: Mutex::default(),
    });
    tokio::select! {
        r = serve(agent) => r,
        () = shutdown => Ok(()),
    }
}

/// Joins, then syncs, joining again whenever the manager forgot the agent; returns when the
/// manager dismisses it or refuses a join.
async fn serve(agent: Arc<Agent>) -> Result<(), AgentError> {
    let config = &agent.config;
    // Counted from the start, not the join: the walltime runs from the start too. A time too far
    // to represent is never.
    let drain_at = config
        .drain_after
        .and_then(|d| tokio::time::Instant::now().checked_add(d));
    let join = join::request(config).await?;
    let _ = agent.devices.set(OwnDevices {
        capacity: join.capacity.clone(),
        devices: join.devices.clone(),
    });
    tokio::fs::create_dir_all(&config.work_root).await?;
    // Sessions found running after a restart are re-adopted and reported; the manager says
    // which to stop.
    sessions::readopt(&agent).await?;
    // Logs go up as they grow, whatever the sync loop is waiting for.
    let _pump = AbortOnDrop(tokio::spawn(tasks::pump_logs(agent.clone())));
    // Watched beside the syncs, so that a sync left hanging delays no fence.
    let _fence = AbortOnDrop(tokio::spawn(fencing::watch_fence(agent.clone())));
    // Images are checked beside the syncs, so that a slow registry or pull delays nothing.
    let _images = agent
        .runtime
        .docker()
        .map(|_| AbortOnDrop(tokio::spawn(tasks::keep_images_current(agent.clone()))));
    let mut join_retry = backoff(FIRST_RETRY_WAIT, MAX_JOIN_RETRY_WAIT);
    let mut rejoin = backoff(FIRST_REJOIN_WAIT, MAX_REJOIN_WAIT);
    // An update that failed, told at the next sync.
    let mut update_failed: Option<UpdateFailure> = None;
    // Dialled once the agent holds its own token, and held from then on.
    let mut held_tunnel = None;
    loop {
        let joined = join::join(&agent, &join, &mut join_retry).await?;
        join_retry = backoff(FIRST_RETRY_WAIT, MAX_JOIN_RETRY_WAIT);
        held_tunnel.get_or_insert_with(|| AbortOnDrop(tokio::spawn(tunnel::hold(agent.clone()))));
        // Until the manager no longer knows this agent: then it joins again.
        sync::until_forgotten(&agent, &joined, drain_at, &mut rejoin, &mut update_failed).await?;
    }
}
