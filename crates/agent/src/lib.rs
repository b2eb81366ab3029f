//! The agent daemon: joins its group, then syncs with the manager in a loop (each sync is its
//! heartbeat and carries what it runs and what ended), starts and stops sessions through a
//! runtime, and uploads their logs and outputs. Every connection is opened by the agent.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

pub mod metadata;

use corral_core::protocol::*;
use corral_core::slots::{Quantity, SlotName};
use corral_core::Slots;
use corral_runtime::{Exit, Limits, Runtime, SessionSpec};
use tokio::sync::Notify;

/// How often running sessions' new log bytes are sent.
const LOG_PUMP: Duration = Duration::from_millis(500);

/// How the agent runs.
#[derive(Debug, Clone)]
pub struct Config {
    /// The manager's URL, e.g. `http://127.0.0.1:8470`.
    pub manager: String,
    /// The bootstrap token it joins with.
    pub token: String,
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
}

#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    #[error("the manager at {url} refused: {status}: {message}")]
    Refused {
        url: String,
        status: u16,
        message: String,
    },
    #[error("cannot reach the manager at {url}: {source}")]
    Unreachable { url: String, source: reqwest::Error },
    #[error("runtime: {0}")]
    Runtime(#[from] corral_runtime::RuntimeError),
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

/// The slots this host offers, as detected.
pub fn detected_capacity(nvidia_smi: &std::path::Path) -> Slots {
    let c = corral_runtime::detect_capacity(nvidia_smi);
    let name = |n: &str| SlotName::new(n).expect("constant slot name");
    let mut pairs = vec![
        (name("cpu"), Quantity::from_milli(c.cpu_milli)),
        (
            name("mem"),
            Quantity::from_milli(c.mem_bytes.saturating_mul(1000)),
        ),
    ];
    if !c.gpus.is_empty() {
        pairs.push((
            name("gpu"),
            Quantity::from_milli(c.gpus.len() as u64 * 1000),
        ));
    }
    Slots::from_pairs(pairs).expect("distinct names")
}

struct Client {
    http: reqwest::Client,
    base: String,
}

impl Client {
    async fn call<T: serde::de::DeserializeOwned>(
        &self,
        token: &str,
        path: &str,
        body: &impl serde::Serialize,
    ) -> Result<T, AgentError> {
        let url = format!("{}{path}", self.base);
        let resp = self
            .http
            .post(&url)
            .bearer_auth(token)
            .json(body)
            .send()
            .await
            .map_err(|source| AgentError::Unreachable {
                url: url.clone(),
                source,
            })?;
        let status = resp.status();
        if !status.is_success() {
            let body: serde_json::Value = resp.json().await.unwrap_or_default();
            let message = body["error"]["message"]
                .as_str()
                .unwrap_or("no message")
                .to_string();
            return Err(AgentError::Refused {
                url,
                status: status.as_u16(),
                message,
            });
        }
        resp.json()
            .await
            .map_err(|source| AgentError::Unreachable { url, source })
    }
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
    ended: Ended,
    /// Log bytes the manager has, per session and stream.
    offsets: tokio::sync::Mutex<HashMap<(String, &'static str), u64>>,
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
    let client = Client {
        http: reqwest::Client::new(),
        base: config.manager.trim_end_matches('/').to_string(),
    };
    let agent = Arc::new(Agent {
        token: Mutex::new(config.token.clone()),
        config,
        client,
        runtime,
        running: Mutex::default(),
        ended: Ended::default(),
        offsets: tokio::sync::Mutex::default(),
    });
    tokio::select! {
        r = serve(agent) => r,
        () = shutdown => Ok(()),
    }
}

async fn serve(agent: Arc<Agent>) -> Result<(), AgentError> {
    let config = &agent.config;
    let capacity = match config.capacity.clone() {
        Some(c) => c,
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
    };
    tokio::fs::create_dir_all(&config.work_root).await?;
    // Sessions found running after a restart are re-adopted and reported; the manager says
    // which to stop.
    for id in agent.runtime.running(&config.work_root).await? {
        tracing::info!(session = id, "re-adopting a session that still runs");
        let adopted = Assignment {
            id: id.clone(),
            kind: Default::default(),
            image: None,
            command: Vec::new(),
            environment: BTreeMap::new(),
            inputs: Vec::new(),
            outputs: Vec::new(),
            allocation: Slots::new(),
        };
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
    let mut backoff = Duration::from_millis(200);
    'join: loop {
        // Joining again (the manager forgot this agent) uses the agent's own token: a one-time
        // bootstrap token is spent; the bootstrap token is the fallback.
        let own = lock(&agent.token).clone();
        let mut attempt = agent
            .client
            .call::<JoinResponse>(&own, "/api/v1/agents/join", &join)
            .await;
        if own != config.token
            && matches!(
                attempt,
                Err(AgentError::Refused {
                    status: 401 | 403,
                    ..
                })
            )
        {
            attempt = agent
                .client
                .call(&config.token, "/api/v1/agents/join", &join)
                .await;
        }
        let joined = match attempt {
            Ok(j) => j,
            Err(e @ AgentError::Refused { .. }) => return Err(e),
            Err(e) => {
                tracing::warn!(error = %e, "join failed; retrying");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(10));
                continue;
            }
        };
        tracing::info!(agent = config.id, group = config.group, "joined");
        *lock(&agent.token) = joined.token.clone();
        let heartbeat = Duration::from_secs(joined.heartbeat_secs.max(1));
        let sync_path = format!("/api/v1/agents/{}/sync", config.id);
        loop {
            // Made before the reports are read, so an end between the read and the sync still
            // rings it (a Notified future counts from its creation).
            let bell = agent.ended.bell.notified();
            let ids: Vec<String> = lock(&agent.running).keys().cloned().collect();
            let mut sessions: Vec<SessionReport> = ids
                .iter()
                .map(|id| SessionReport {
                    id: id.clone(),
                    state: ReportedState::Running,
                    exit_code: None,
                    reason: None,
                })
                .collect();
            let finished: Vec<SessionReport> = lock(&agent.ended.reports).clone();
            sessions.extend(finished.iter().cloned());
            let request = SyncRequest {
                sessions,
                wait_secs: if finished.is_empty() {
                    heartbeat.as_secs()
                } else {
                    0
                },
            };
            let answer = tokio::select! {
                a = agent.client.call::<SyncResponse>(&joined.token, &sync_path, &request) => a,
                // Something ended while the sync waited: report it now.
                () = bell => continue,
            };
            match answer {
                Ok(resp) => {
                    backoff = Duration::from_millis(200);
                    lock(&agent.ended.reports).retain(|r| !finished.contains(r));
                    for id in &resp.stop {
                        if let Err(e) = agent.runtime.stop(id, config.stop_grace).await {
                            tracing::warn!(session = id, error = %e, "stop failed");
                        }
                    }
                    for assignment in resp.start {
                        start(&agent, assignment).await;
                    }
                }
                Err(AgentError::Refused {
                    status: 401 | 403 | 404,
                    message,
                    ..
                }) => {
                    tracing::warn!(
                        message,
                        "the manager no longer knows this agent; joining again"
                    );
                    continue 'join;
                }
                Err(e) => {
                    tracing::warn!(error = %e, "sync failed; retrying");
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(heartbeat);
                }
            }
        }
    }
}

fn spec_of(a: &Assignment) -> SessionSpec {
    SessionSpec {
        id: a.id.clone(),
        command: a.command.clone(),
        image: a.image.clone(),
        environment: a.environment.clone(),
        limits: Limits {
            cpu_milli: a.allocation.get("cpu").milli(),
            mem_bytes: a.allocation.get("mem").milli() / 1000,
        },
        outputs: a.outputs.clone(),
    }
}

async fn start(agent: &Arc<Agent>, a: Assignment) {
    if lock(&agent.running).contains_key(&a.id) {
        return; // Already started; the manager had not heard yet.
    }
    if let Err(why) = fetch_inputs(agent, &a).await {
        tracing::warn!(session = a.id, why, "inputs not staged");
        let report = SessionReport {
            id: a.id,
            state: ReportedState::Failed,
            exit_code: None,
            reason: Some(format!("could not stage its inputs: {why}")),
        };
        lock(&agent.ended.reports).push(report);
        agent.ended.bell.notify_waiters();
        return;
    }
    match agent
        .runtime
        .start(&spec_of(&a), &agent.config.work_root)
        .await
    {
        Ok(()) => {
            tracing::info!(session = a.id, "started");
            lock(&agent.running).insert(a.id.clone(), a.clone());
            spawn_waiter(agent, a);
        }
        Err(e) => {
            tracing::warn!(session = a.id, error = %e, "could not start");
            let report = SessionReport {
                id: a.id,
                state: ReportedState::Failed,
                exit_code: None,
                reason: Some(format!("could not start: {e}")),
            };
            lock(&agent.ended.reports).push(report);
            agent.ended.bell.notify_waiters();
        }
    }
}

/// Waits for the session's end, uploads its outputs and the rest of its logs, then reports it.
fn spawn_waiter(agent: &Arc<Agent>, a: Assignment) {
    let agent = agent.clone();
    tokio::spawn(async move {
        let exit = agent.runtime.wait(&a.id).await;
        let token = lock(&agent.token).clone();
        if let Ok(files) = agent
            .runtime
            .collect_outputs(&spec_of(&a), &agent.config.work_root)
            .await
        {
            let root = agent.config.work_root.join(&a.id).join("outputs");
            for file in files {
                let rel = file
                    .strip_prefix(&root)
                    .unwrap_or(&file)
                    .to_string_lossy()
                    .into_owned();
                let url = format!(
                    "{}/api/v1/agents/{}/sessions/{}/outputs/{rel}",
                    agent.client.base, agent.config.id, a.id
                );
                let sent = match tokio::fs::read(&file).await {
                    Ok(data) => agent
                        .client
                        .http
                        .put(&url)
                        .bearer_auth(&token)
                        .body(data)
                        .send()
                        .await
                        .and_then(|r| r.error_for_status())
                        .map(drop)
                        .map_err(|e| e.to_string()),
                    Err(e) => Err(e.to_string()),
                };
                if let Err(e) = sent {
                    tracing::warn!(session = a.id, file = rel, error = e, "output not uploaded");
                }
            }
        }
        flush_logs(&agent, &a.id).await;
        let (state, exit_code, reason) = match exit {
            Ok(Exit::Code(0)) => (ReportedState::Succeeded, Some(0), None),
            Ok(Exit::Code(c)) => (ReportedState::Failed, Some(c), None),
            Ok(Exit::Signal(s)) => (
                ReportedState::Failed,
                None,
                Some(format!("killed by signal {s}")),
            ),
            Ok(Exit::Failed(why)) => (ReportedState::Failed, None, Some(why)),
            Err(e) => (
                ReportedState::Failed,
                None,
                Some(format!("lost track of it: {e}")),
            ),
        };
        lock(&agent.running).remove(&a.id);
        lock(&agent.ended.reports).push(SessionReport {
            id: a.id.clone(),
            state,
            exit_code,
            reason,
        });
        agent.ended.bell.notify_waiters();
    });
}

/// Sends the bytes a session's logs gained since the last upload (1 MiB a stream at a time).
async fn flush_logs(agent: &Agent, id: &str) {
    use tokio::io::{AsyncReadExt, AsyncSeekExt};
    let token = lock(&agent.token).clone();
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
        let url = format!(
            "{}/api/v1/agents/{}/sessions/{id}/logs/{stream}?offset={}",
            agent.client.base, agent.config.id, *offset
        );
        match agent
            .client
            .http
            .post(&url)
            .bearer_auth(&token)
            .body(chunk.clone())
            .send()
            .await
        {
            Ok(r) if r.status().is_success() => *offset += chunk.len() as u64,
            Ok(r) if r.status() == reqwest::StatusCode::CONFLICT => {
                // The manager holds a different amount (a retry landed twice): go on from there.
                let body: serde_json::Value = r.json().await.unwrap_or_default();
                if let Some(size) = body["error"]["details"]["size"].as_u64() {
                    *offset = size;
                }
            }
            Ok(r) => tracing::debug!(session = id, status = %r.status(), "log upload refused"),
            Err(e) => tracing::debug!(session = id, error = %e, "log upload failed"),
        }
    }
}

/// Downloads the session's inputs into its working directory before it starts.
async fn fetch_inputs(agent: &Agent, a: &Assignment) -> Result<(), String> {
    let token = lock(&agent.token).clone();
    let work = corral_runtime::SessionPaths::new(&agent.config.work_root, &a.id).work;
    for input in &a.inputs {
        let rel = std::path::Path::new(input);
        if !rel
            .components()
            .all(|c| matches!(c, std::path::Component::Normal(_)))
        {
            return Err(format!("{input:?} leaves the working directory"));
        }
        let url = format!(
            "{}/api/v1/agents/{}/sessions/{}/inputs/{input}",
            agent.client.base, agent.config.id, a.id
        );
        let resp = agent
            .client
            .http
            .get(&url)
            .bearer_auth(&token)
            .send()
            .await
            .and_then(|r| r.error_for_status())
            .map_err(|e| format!("{input}: {e}"))?;
        let data = resp.bytes().await.map_err(|e| format!("{input}: {e}"))?;
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
