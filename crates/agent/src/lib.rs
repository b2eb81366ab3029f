//! The agent daemon: joins its group, then syncs with the manager in a loop (each sync is its
//! heartbeat and carries what it runs and what ended), starts and stops sessions through a
//! runtime, and uploads their logs and outputs. Every connection is opened by the agent.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

mod admit;
mod checkpoint;
mod fence;
pub mod guard;
mod images;
pub mod metadata;
pub mod update;

use admit::{Admit, OwnDevices};

use corral_api::agent_builds::{UpdateFailure, UpdateOrder};
use corral_api::protocol::*;
use corral_api::{Client, ClientError};
use corral_core::slots::{Quantity, SlotName};
use corral_core::Slots;
use corral_runtime::{Exit, Limits, Runtime, SessionSpec};
use tokio::sync::Notify;

/// How often running sessions' new log bytes are sent.
const LOG_PUMP: Duration = Duration::from_millis(500);
/// Waits before joining again after the manager refused a sync: doubling, up to the cap.
const FIRST_REJOIN_WAIT: Duration = Duration::from_millis(500);
const MAX_REJOIN_WAIT: Duration = Duration::from_secs(60);
/// Waits before trying again after the manager could not be reached.
const FIRST_RETRY_WAIT: Duration = Duration::from_millis(200);
const MAX_JOIN_RETRY_WAIT: Duration = Duration::from_secs(10);
/// A sync answers within its long poll (`wait_secs`, at most a heartbeat); one that has not
/// this long after it is given up (a connection a partition left hanging) and tried again.
const SYNC_SLACK: Duration = Duration::from_secs(5);
/// How often the agent looks whether it is cut off long enough to stop its sessions.
const FENCE_WATCH: Duration = Duration::from_millis(250);

/// Waits between tries, without end: doubling from `first` up to `cap`, each plus a random
/// part of itself, so that agents cut off together (a manager restart) do not come back in step.
fn backoff(first: Duration, cap: Duration) -> impl Iterator<Item = Duration> {
    use backon::BackoffBuilder;
    let waits = backon::ExponentialBuilder::new()
        .with_jitter()
        .with_min_delay(first)
        .with_max_delay(cap)
        .without_max_times()
        .build();
    waits.chain(std::iter::repeat(cap))
}

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
        images: images::Images::default(),
        fence: Mutex::new(fence::Fence::new(kept_rules, fence::boottime_ms())),
        fenced: Mutex::default(),
    });
    tokio::select! {
        r = serve(agent) => r,
        () = shutdown => Ok(()),
    }
}

async fn serve(agent: Arc<Agent>) -> Result<(), AgentError> {
    let config = &agent.config;
    // Counted from the start, not the join: the walltime runs from the start too. A time too far
    // to represent is never.
    let drain_at = config
        .drain_after
        .and_then(|d| tokio::time::Instant::now().checked_add(d));
    let (capacity, devices) = match config.capacity.clone() {
        // Declared by hand: a device kind given as a number stands for that many devices.
        Some(c) => (c, Vec::new()),
        // Detection reads /proc and may run nvidia-smi: off the async threads.
        None => {
            let nvidia_smi = config.nvidia_smi.clone();
            tokio::task::spawn_blocking(move || detected_capacity(&nvidia_smi))
                .await
                .map_err(|e| AgentError::Io(std::io::Error::other(e)))?
        }
    };
    let join = JoinRequest {
        id: config.id.clone(),
        group: config.group.clone(),
        capacity,
        labels: config.labels.clone(),
        devices,
        version: Some(corral_api::agent_builds::version().to_string()),
        platform: Some(corral_api::agent_builds::platform()),
        batch_job: config.batch_job.clone(),
    };
    let _ = agent.devices.set(OwnDevices {
        capacity: join.capacity.clone(),
        devices: join.devices.clone(),
    });
    tokio::fs::create_dir_all(&config.work_root).await?;
    // Sessions found running after a restart are re-adopted and reported; the manager says
    // which to stop.
    for id in agent.runtime.running(&config.work_root).await? {
        tracing::info!(session = id, "re-adopting a session that still runs");
        let kept = checkpoint::load(&config.work_root, &id);
        let adopted = kept.unwrap_or_else(|| Assignment {
            id: id.clone(),
            kind: Default::default(),
            image: None,
            command: Vec::new(),
            environment: BTreeMap::new(),
            inputs: Vec::new(),
            outputs: Vec::new(),
            allocation: Slots::new(),
            devices: Vec::new(),
        });
        lock(&agent.running).insert(id, adopted.clone());
        spawn_waiter(&agent, adopted);
    }
    // Logs go up as they grow, whatever the sync loop is waiting for.
    let pump = agent.clone();
    let _pump = AbortOnDrop(tokio::spawn(async move {
        loop {
            tokio::time::sleep(LOG_PUMP).await;
            let ids: Vec<String> = lock(&pump.running).keys().cloned().collect();
            for id in &ids {
                flush_logs(&pump, id).await;
            }
        }
    }));
    // Watched beside the syncs, so that a sync left hanging delays no fence.
    let _fence = AbortOnDrop(tokio::spawn(watch_fence(agent.clone())));
    // Images are checked beside the syncs, so that a slow registry or pull delays nothing.
    let _images = agent
        .runtime
        .docker()
        .map(|_| AbortOnDrop(tokio::spawn(keep_images_current(agent.clone()))));
    let mut join_retry = backoff(FIRST_RETRY_WAIT, MAX_JOIN_RETRY_WAIT);
    let mut rejoin = backoff(FIRST_REJOIN_WAIT, MAX_REJOIN_WAIT);
    // An update that failed, told at the next sync.
    let mut update_failed: Option<UpdateFailure> = None;
    'join: loop {
        // Joining again (the manager forgot this agent) uses the agent's own token: a one-time
        // bootstrap token is spent; the bootstrap token is the fallback.
        let own = lock(&agent.token).clone();
        let started = fence::boottime_ms();
        let attempt = match &config.key {
            // The manager takes an external agent's joins by its key only.
            Some(key) => agent.client.join_with_key(key, &join).await,
            None => {
                let attempt = agent.client.with_token(&own).join(&join).await;
                if own != config.token
                    && matches!(attempt, Err(ref e) if matches!(e.status(), Some(401 | 403)))
                {
                    agent.client.join(&join).await
                } else {
                    attempt
                }
            }
        };
        let joined = match attempt {
            Ok(j) => j,
            // 503: not yet (a pilot whose job the manager has not recorded yet): try again.
            Err(e @ ClientError::Refused { status: 503, .. }) => {
                tracing::warn!(error = %e, "join deferred; retrying");
                tokio::time::sleep(join_retry.next().unwrap_or(MAX_JOIN_RETRY_WAIT)).await;
                continue;
            }
            Err(e @ ClientError::Refused { .. }) => return Err(e.into()),
            Err(e) => {
                tracing::warn!(error = %e, "join failed; retrying");
                tokio::time::sleep(join_retry.next().unwrap_or(MAX_JOIN_RETRY_WAIT)).await;
                continue;
            }
        };
        tracing::info!(agent = config.id, group = config.group, "joined");
        *lock(&agent.token) = joined.token.clone();
        agent.images.joined();
        let rules = {
            let mut fence = lock(&agent.fence);
            let rules = fence::Rules {
                lost_after_secs: joined.lost_after_secs,
                grace_secs: joined
                    .fence_grace_secs
                    .unwrap_or(config.stop_grace.as_secs()),
                on_disconnect: fence.rules().map(|r| r.on_disconnect).unwrap_or_default(),
            };
            fence.heard(rules, started).then_some(rules)
        };
        keep_fence_rules(config, rules);
        arm_guard(&agent);
        join_retry = backoff(FIRST_RETRY_WAIT, MAX_JOIN_RETRY_WAIT);
        let heartbeat = Duration::from_secs(joined.heartbeat_secs.max(1));
        let mut sync_retry = backoff(FIRST_RETRY_WAIT, heartbeat);
        let as_agent = agent.client.with_token(&joined.token);
        loop {
            // Made before the reports are read, so an end between the read and the sync still
            // rings it (a Notified future counts from its creation).
            let bell = agent.ended.bell.notified();
            start_waiting(&agent);
            let report = |id: &String, state| SessionReport {
                id: id.clone(),
                state,
                exit_code: None,
                reason: None,
            };
            let mut sessions: Vec<SessionReport> = lock(&agent.running)
                .keys()
                .map(|id| report(id, ReportedState::Running))
                .collect();
            sessions.extend(
                lock(&agent.waiting)
                    .iter()
                    .map(|a| report(&a.id, ReportedState::Starting)),
            );
            sessions.extend(
                lock(&agent.staging)
                    .keys()
                    .filter(|id| !sessions.iter().any(|s| &s.id == *id))
                    .map(|id| report(id, ReportedState::Starting))
                    .collect::<Vec<_>>(),
            );
            let finished: Vec<SessionReport> = lock(&agent.ended.reports).clone();
            sessions.extend(finished.iter().cloned());
            let draining = drain_at.is_some_and(|at| tokio::time::Instant::now() >= at);
            let images = agent.images.report();
            let request = SyncRequest {
                sessions,
                wait_secs: if finished.is_empty() {
                    heartbeat.as_secs()
                } else {
                    0
                },
                draining,
                update_failed: update_failed.clone(),
                images: images.images.clone(),
                image_problems: images.problems.clone(),
            };
            let drain_due = async {
                match drain_at {
                    Some(at) if !draining => tokio::time::sleep_until(at).await,
                    _ => std::future::pending().await,
                }
            };
            let started = fence::boottime_ms();
            let bounded = tokio::time::timeout(
                Duration::from_secs(request.wait_secs) + SYNC_SLACK,
                as_agent.sync(&config.id, &request),
            );
            let answer = tokio::select! {
                a = bounded => Some(a.unwrap_or_else(|_| Err(ClientError::Transport {
                    server: config.manager.clone(),
                    kind: corral_api::error::Transport::Timeout,
                    cause: "the sync did not answer within its long poll".into(),
                    ca_file: None,
                }))),
                // Something ended while the sync waited: report it now.
                () = bell => None,
                // Time to drain while the sync waited: say so now, not a heartbeat later.
                () = drain_due => None,
            };
            let Some(answer) = answer else {
                agent.images.reported(images, false);
                continue;
            };
            agent.images.reported(images, answer.is_ok());
            match answer {
                Ok(resp) => {
                    let rules = lock(&agent.fence).synced(resp.on_disconnect, started);
                    keep_fence_rules(config, rules);
                    arm_guard(&agent);
                    agent.images.set_policy(resp.images.clone());
                    sync_retry = backoff(FIRST_RETRY_WAIT, heartbeat);
                    rejoin = backoff(FIRST_REJOIN_WAIT, MAX_REJOIN_WAIT);
                    lock(&agent.ended.reports).retain(|r| !finished.contains(r));
                    if request.update_failed.is_some() {
                        update_failed = None;
                    }
                    for id in &resp.stop {
                        let waited = {
                            let mut waiting = lock(&agent.waiting);
                            let before = waiting.len();
                            waiting.retain(|a| &a.id != id);
                            waiting.len() < before
                        };
                        if waited {
                            continue; // Never started: nothing to stop.
                        }
                        if lock(&agent.staging).contains_key(id) {
                            // Its start sees this and does not start it.
                            lock(&agent.stopping).insert(id.clone());
                            continue;
                        }
                        lock(&agent.stopping).insert(id.clone());
                        if let Err(e) = agent.runtime.stop(id, config.stop_grace).await {
                            tracing::warn!(session = id, error = %e, "stop failed");
                        }
                    }
                    if let Some(reason) = resp.leave {
                        // Its sessions were stopped above; the manager lets it go.
                        return Err(AgentError::Dismissed(reason));
                    }
                    for assignment in resp.start {
                        take(&agent, assignment);
                    }
                    if let Some(order) = resp.update {
                        // Returns only when it could not: it runs on as it was.
                        let reason = self_update(&agent, &as_agent, &order).await;
                        tracing::warn!(version = order.version, reason, "update failed");
                        update_failed = Some(UpdateFailure {
                            version: order.version,
                            reason,
                            runs: Some(corral_api::agent_builds::version().to_string()),
                        });
                    }
                }
                Err(ClientError::Refused {
                    status: 401 | 403 | 404,
                    message,
                    ..
                }) => {
                    // Waited for, so that a manager that keeps refusing (an id it cannot
                    // route, a revoked token) is not asked again at full speed.
                    let wait = rejoin.next().unwrap_or(MAX_REJOIN_WAIT);
                    tracing::warn!(
                        message,
                        wait_ms = wait.as_millis() as u64,
                        "the manager no longer knows this agent; joining again"
                    );
                    tokio::time::sleep(wait).await;
                    continue 'join;
                }
                Err(e) => {
                    tracing::warn!(error = %e, "sync failed; retrying");
                    tokio::time::sleep(sync_retry.next().unwrap_or(heartbeat)).await;
                }
            }
        }
    }
}

/// Keeps changed fence rules for a restart.
fn keep_fence_rules(config: &Config, rules: Option<fence::Rules>) {
    if let Some(rules) = rules {
        if let Err(e) = fence::save(&config.work_root, &rules) {
            tracing::warn!(error = %e, "could not keep the fence rules for a restart");
        }
    }
}

/// Tells the guard the deadline as it is after a join or sync that went through.
fn arm_guard(agent: &Agent) {
    let deadline = lock(&agent.fence).deadline();
    if let Err(e) = fence::arm(&agent.config.work_root, deadline) {
        tracing::warn!(error = %e, "could not write the guard's deadline");
    }
}

/// Stops every session the agent holds once it is cut off from the manager long enough (its
/// group's `on_disconnect` is `stop`): sessions waiting to start are dropped, running ones are
/// stopped within the manager's grace; each is reported `disconnected` once it gets through.
async fn watch_fence(agent: Arc<Agent>) {
    let mut tick = tokio::time::interval(FENCE_WATCH);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let due = lock(&agent.fence).due(fence::boottime_ms());
        let Some((silence, grace)) = due else {
            continue;
        };
        let why = format!("no contact with the manager for {} s", silence.as_secs());
        let dropped: Vec<Assignment> = std::mem::take(&mut *lock(&agent.waiting));
        if !dropped.is_empty() {
            let mut reports = lock(&agent.ended.reports);
            for a in &dropped {
                reports.push(SessionReport {
                    id: a.id.clone(),
                    state: ReportedState::Disconnected,
                    exit_code: None,
                    reason: Some(why.clone()),
                });
            }
        }
        let running: Vec<String> = lock(&agent.running).keys().cloned().collect();
        for id in running {
            if lock(&agent.fenced)
                .insert(id.clone(), why.clone())
                .is_some()
            {
                continue; // Being stopped already.
            }
            tracing::warn!(session = id, "{why}: stopping the session");
            let agent = agent.clone();
            tokio::spawn(async move {
                if let Err(e) = agent.runtime.stop(&id, grace).await {
                    tracing::warn!(session = id, error = %e, "stop failed");
                }
            });
        }
    }
}

/// Checks the images the agent holds whenever the policy says (Docker runtime only), and has
/// what changed or failed reported at once.
async fn keep_images_current(agent: Arc<Agent>) {
    let Some(docker) = agent.runtime.docker() else {
        return;
    };
    let http = corral_api::tls::client_builder(true, agent.config.ca_file.as_deref())
        .map_err(|e| e.to_string())
        .and_then(|b| b.build().map_err(|e| e.to_string()));
    let registries = match http {
        Ok(http) => corral_registry::Registries::new(http, Vec::new()),
        Err(e) => {
            tracing::error!(error = e, "no registry client: images are not kept current");
            return;
        }
    };
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        if agent.images.check_if_due(docker, &registries).await {
            agent.ended.bell.notify_waiters();
        }
    }
}

/// Replaces the agent with the build of `order` and executes it; returns only if that
/// failed, with the reason.
async fn self_update(agent: &Agent, client: &Client, order: &UpdateOrder) -> String {
    let Some(me) = &agent.config.self_update else {
        return "this agent does not update itself (it was not started as a program)".into();
    };
    let busy = !lock(&agent.running).is_empty()
        || !lock(&agent.waiting).is_empty()
        || !lock(&agent.staging).is_empty();
    if busy {
        return "it runs sessions".into();
    }
    tracing::info!(version = order.version, "updating");
    match update::apply(me, client, order).await {
        Ok(never) => match never {},
        Err(reason) => reason,
    }
}

/// The runtime's spec of an assignment. The session learns its id, group and allocation from
/// its environment (`CORRAL_SESSION_ID`, `CORRAL_GROUP`, `CORRAL_ALLOCATION` such as
/// `cpu=2,mem=4GiB`), set after its own variables so that what it is told is true.
fn spec_of(a: &Assignment, group: &str) -> SessionSpec {
    let mut environment = a.environment.clone();
    environment.insert("CORRAL_SESSION_ID".into(), a.id.clone());
    environment.insert("CORRAL_GROUP".into(), group.to_string());
    environment.insert("CORRAL_ALLOCATION".into(), a.allocation.to_string());
    SessionSpec {
        id: a.id.clone(),
        command: a.command.clone(),
        image: a.image.clone(),
        environment,
        limits: Limits {
            cpu_milli: a.allocation.get("cpu").milli(),
            mem_bytes: a.allocation.get("mem").milli() / 1000,
        },
        outputs: a.outputs.clone(),
        devices: a.devices.clone(),
    }
}

/// Starts the waiting sessions whose devices are free now; refuses those that can no longer
/// have them.
fn start_waiting(agent: &Arc<Agent>) {
    let waiting = std::mem::take(&mut *lock(&agent.waiting));
    for a in waiting {
        take(agent, a);
    }
}

/// Whether `a`'s devices have room beside those its other sessions hold.
fn admit(agent: &Agent, a: &Assignment) -> Admit {
    let Some(own) = agent.devices.get() else {
        return Admit::Start;
    };
    let running = lock(&agent.running);
    let waiting = lock(&agent.waiting);
    let staging = lock(&agent.staging);
    let held: Vec<(&str, &[corral_core::DeviceGrant])> = running
        .values()
        .chain(waiting.iter())
        .chain(staging.values())
        .filter(|h| h.id != a.id)
        .map(|h| (h.id.as_str(), h.devices.as_slice()))
        .collect();
    own.admit(&a.devices, &held, &lock(&agent.stopping))
}

/// Reports a session it did not run.
fn report_unrun(agent: &Agent, id: String, state: ReportedState, reason: String) {
    lock(&agent.ended.reports).push(SessionReport {
        id,
        state,
        exit_code: None,
        reason: Some(reason),
    });
    agent.ended.bell.notify_waiters();
}

/// Takes an assignment: refused, waiting for devices a stopping session holds, or admitted
/// and started in a task of its own ([`launch`]), as its inputs may take long and must hold up
/// no heartbeat. An assignment sent again meanwhile is left as it is.
fn take(agent: &Arc<Agent>, a: Assignment) {
    // Its id names its directory.
    if let Err(e) = corral_runtime::validate_id(&a.id) {
        report_unrun(agent, a.id, ReportedState::Failed, e.to_string());
        return;
    }
    let taken = lock(&agent.running).contains_key(&a.id)
        || lock(&agent.waiting).iter().any(|w| w.id == a.id)
        || lock(&agent.staging).contains_key(&a.id);
    if taken {
        return; // The manager had not heard yet.
    }
    match admit(agent, &a) {
        Admit::Start => {}
        Admit::Wait => {
            tracing::info!(
                session = a.id,
                "waiting for devices a stopping session holds"
            );
            lock(&agent.waiting).push(a);
            return;
        }
        Admit::Refuse(why) => {
            tracing::warn!(
                session = a.id,
                why,
                "refusing a placement its devices cannot hold"
            );
            report_unrun(agent, a.id, ReportedState::Refused, why);
            return;
        }
    }
    lock(&agent.staging).insert(a.id.clone(), a.clone());
    let agent = agent.clone();
    tokio::spawn(async move {
        let id = a.id.clone();
        launch(&agent, a).await;
        lock(&agent.staging).remove(&id);
        // Its next report (running, or why not) goes at once.
        agent.ended.bell.notify_waiters();
    });
}

/// Fetches an admitted session's inputs and starts it.
async fn launch(agent: &Arc<Agent>, a: Assignment) {
    if let Err(why) = fetch_inputs(agent, &a).await {
        tracing::warn!(session = a.id, why, "inputs not staged");
        let reason = format!("could not stage its inputs: {why}");
        report_unrun(agent, a.id, ReportedState::Failed, reason);
        return;
    }
    // Without its record a restarted agent would still find the session, but not its outputs
    // or devices: worth a warning, not worth refusing the session.
    let (root, kept) = (agent.config.work_root.clone(), a.clone());
    match tokio::task::spawn_blocking(move || checkpoint::save(&root, &kept)).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => tracing::warn!(session = a.id, error = %e, "session record not kept"),
        Err(e) => tracing::warn!(session = a.id, error = %e, "session record not kept"),
    }
    let mut spec = spec_of(&a, &agent.config.group);
    if let (Some(docker), Some(image)) = (agent.runtime.docker(), &a.image) {
        spec.image = Some(agent.images.pinned(docker, image).await);
    }
    // Told to stop meanwhile (cancelled while its inputs came): it never starts.
    if lock(&agent.stopping).remove(&a.id) {
        return;
    }
    // Cut off meanwhile past its fence: the manager may give it to another agent.
    if let Some((silence, _)) = lock(&agent.fence).due(fence::boottime_ms()) {
        let why = format!("no contact with the manager for {} s", silence.as_secs());
        report_unrun(agent, a.id, ReportedState::Disconnected, why);
        return;
    }
    match agent.runtime.start(&spec, &agent.config.work_root).await {
        Ok(()) => {
            tracing::info!(session = a.id, "started");
            lock(&agent.running).insert(a.id.clone(), a.clone());
            spawn_waiter(agent, a);
        }
        Err(e) => {
            tracing::warn!(session = a.id, error = %e, "could not start");
            report_unrun(
                agent,
                a.id,
                ReportedState::Failed,
                format!("could not start: {e}"),
            );
        }
    }
}

/// Waits for the session's end, uploads its outputs and the rest of its logs, then reports it.
fn spawn_waiter(agent: &Arc<Agent>, a: Assignment) {
    let agent = agent.clone();
    tokio::spawn(async move {
        let exit = agent.runtime.wait(&a.id).await;
        // Stopped by the agent itself, cut off: it runs again elsewhere (or fails), and the
        // manager cannot be reached; what it left is not its result.
        let fenced = lock(&agent.fenced).remove(&a.id);
        let guarded = fence::take_mark(&agent.config.work_root, &a.id);
        if let Some(why) = fenced.or(guarded) {
            lock(&agent.running).remove(&a.id);
            lock(&agent.ended.reports).push(SessionReport {
                id: a.id.clone(),
                state: ReportedState::Disconnected,
                exit_code: None,
                reason: Some(why),
            });
            agent.ended.bell.notify_waiters();
            return;
        }
        let outputs = upload_outputs(&agent, &a).await;
        flush_logs(&agent, &a.id).await;
        let (mut state, exit_code, mut reason) = match exit {
            Ok(Exit::Code(0)) => (ReportedState::Succeeded, Some(0), None),
            Ok(Exit::Code(c)) => (ReportedState::Failed, Some(c), None),
            // The exit code a shell gives it (128 + n), so `session run` exits as the shell
            // would have.
            Ok(exit @ Exit::Signal(_)) => {
                (ReportedState::Failed, exit.code(), Some(exit.to_string()))
            }
            Ok(Exit::Failed(why)) => (ReportedState::Failed, None, Some(why)),
            Err(e) => (
                ReportedState::Failed,
                None,
                Some(format!("lost track of it: {e}")),
            ),
        };
        // Outputs the user asked for and did not get are part of how the session ended.
        let ended = reason.clone().unwrap_or_else(|| match exit_code {
            Some(code) => format!("exited with code {code}"),
            None => "ended".into(),
        });
        match outputs {
            Outputs::Saved => {}
            Outputs::Missing(names) => {
                reason = Some(format!(
                    "{ended}; not saved (missing, or not a file or directory): {}",
                    names.join(", ")
                ));
            }
            Outputs::Failed(why) => {
                state = ReportedState::Failed;
                reason = Some(format!("{ended}, but its outputs were not saved: {why}"));
            }
        }
        lock(&agent.running).remove(&a.id);
        lock(&agent.stopping).remove(&a.id);
        lock(&agent.ended.reports).push(SessionReport {
            id: a.id.clone(),
            state,
            exit_code,
            reason,
        });
        agent.ended.bell.notify_waiters();
    });
}

/// What became of a session's outputs.
enum Outputs {
    /// All of them are with the manager.
    Saved,
    /// Those not saved did not exist when the session ended.
    Missing(Vec<String>),
    /// Some could not be collected or uploaded: the reason.
    Failed(String),
}

/// Collects the session's outputs (files and directory trees) and uploads every file in them.
async fn upload_outputs(agent: &Agent, a: &Assignment) -> Outputs {
    if a.outputs.is_empty() {
        return Outputs::Saved;
    }
    let root = agent.config.work_root.join(&a.id).join("outputs");
    let collected = match agent
        .runtime
        .collect_outputs(&spec_of(a, &agent.config.group), &agent.config.work_root)
        .await
    {
        Ok(c) => c,
        Err(e) => return Outputs::Failed(e.to_string()),
    };
    let client = agent.as_agent();
    let mut failed = Vec::new();
    let mut files = collected.clone();
    while let Some(file) = files.pop() {
        let rel = file
            .strip_prefix(&root)
            .unwrap_or(&file)
            .to_string_lossy()
            .into_owned();
        if file.is_dir() {
            match std::fs::read_dir(&file) {
                Ok(entries) => files.extend(entries.flatten().map(|e| e.path())),
                Err(e) => failed.push(format!("{rel}: {e}")),
            }
            continue;
        }
        let sent = match tokio::fs::read(&file).await {
            Ok(data) => client
                .put_output(&agent.config.id, &a.id, &rel, data)
                .await
                .map_err(|e| e.to_string()),
            Err(e) => Err(e.to_string()),
        };
        if let Err(e) = sent {
            tracing::warn!(session = a.id, file = rel, error = e, "output not uploaded");
            failed.push(format!("{rel}: {e}"));
        }
    }
    if !failed.is_empty() {
        return Outputs::Failed(failed.join("; "));
    }
    let missing: Vec<String> = a
        .outputs
        .iter()
        .filter(|o| {
            !collected.iter().any(|c| {
                c.strip_prefix(&root)
                    .is_ok_and(|r| r == std::path::Path::new(o))
            })
        })
        .cloned()
        .collect();
    if missing.is_empty() {
        Outputs::Saved
    } else {
        Outputs::Missing(missing)
    }
}

/// Sends the bytes a session's logs gained since the last upload (1 MiB a stream at a time).
async fn flush_logs(agent: &Agent, id: &str) {
    use tokio::io::{AsyncReadExt, AsyncSeekExt};
    let client = agent.as_agent();
    let mut offsets = agent.offsets.lock().await;
    for stream in ["stdout", "stderr"] {
        let offset = offsets.entry((id.to_string(), stream)).or_insert(0);
        let path = agent
            .config
            .work_root
            .join(id)
            .join(format!("{stream}.log"));
        let Ok(mut f) = tokio::fs::File::open(&path).await else {
            continue;
        };
        let mut chunk = Vec::new();
        if f.seek(std::io::SeekFrom::Start(*offset)).await.is_err()
            || f.take(1 << 20).read_to_end(&mut chunk).await.is_err()
            || chunk.is_empty()
        {
            continue;
        }
        let len = chunk.len() as u64;
        match client
            .append_log(&agent.config.id, id, stream, *offset, chunk)
            .await
        {
            Ok(()) => *offset += len,
            Err(ClientError::Refused {
                status: 409,
                details,
                ..
            }) => {
                // The manager holds a different amount (a retry landed twice): go on from there.
                if let Some(size) = details["size"].as_u64() {
                    *offset = size;
                }
            }
            Err(e) => tracing::debug!(session = id, error = %e, "log upload failed"),
        }
    }
}

/// Downloads the session's inputs into its working directory before it starts.
async fn fetch_inputs(agent: &Agent, a: &Assignment) -> Result<(), String> {
    let client = agent.as_agent();
    let work = corral_runtime::SessionPaths::new(&agent.config.work_root, &a.id).work;
    for input in &a.inputs {
        let rel =
            corral_core::paths::session_path(input).map_err(|why| format!("{input:?} {why}"))?;
        let data = client
            .get_input(&agent.config.id, &a.id, input)
            .await
            .map_err(|e| format!("{input}: {e}"))?;
        let target = work.join(rel);
        if let Some(parent) = target.parent() {
            tokio::fs::create_dir_all(parent)
                .await
                .map_err(|e| format!("{input}: {e}"))?;
        }
        tokio::fs::write(&target, &data)
            .await
            .map_err(|e| format!("{input}: {e}"))?;
    }
    Ok(())
}

/// Stops a background task when the agent stops.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_double_up_to_the_cap_and_are_spread() {
        let first = Duration::from_secs(1);
        let cap = Duration::from_secs(8);
        // Each wait is its step of the doubling plus a random part of that step.
        let waits: Vec<Duration> = backoff(first, cap).take(6).collect();
        for (wait, step) in waits.iter().zip([1, 2, 4, 8, 8, 8]) {
            let step = Duration::from_secs(step);
            assert!(*wait >= step && *wait <= step * 2, "{waits:?}");
        }
        // Agents refused together do not come back in step.
        let firsts: std::collections::BTreeSet<Duration> =
            (0..50).filter_map(|_| backoff(first, cap).next()).collect();
        assert!(firsts.len() > 10, "{firsts:?}");
    }
}
