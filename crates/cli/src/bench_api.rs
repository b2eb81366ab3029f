//! `corral bench api`: load through the real HTTP API and store. A manager runs in this process
//! (sharing the machine with the load, as it would share a host with its clients); agents
//! registered by hand with ample capacity accept every placement. Three cases per database:
//! throughput (many clients, single submits), the latency of paced submits, and one array of
//! 100,000 sessions submitted in one request and placed.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use corral_api::agents::RegisterAgent;
use corral_api::sessions::{NewSession, Submitted};
use corral_api::Client;
use corral_core::{ArrayRange, SessionType};
use serde_json::{json, Value};

/// Agents the bench registers; their capacity never runs out during a run.
const AGENTS: usize = 10;

struct Target {
    client: Client,
    group: String,
    /// What every session submits: a no-op that any agent holds.
    session: NewSession,
}

impl Target {
    async fn post(&self, path: &[&str], body: &impl serde::Serialize) -> Result<()> {
        self.client.post::<Value, _>(path, Some(body)).await?;
        Ok(())
    }

    async fn submit(&self) -> Result<()> {
        self.post(&["sessions"], &self.session).await
    }

    async fn pending(&self) -> Result<bool> {
        let query = [
            ("group", Some(self.group.clone())),
            ("state", Some("pending".into())),
            ("limit", Some("1".into())),
        ];
        let list: Vec<Value> = self.client.get(&["sessions"], &query).await?.body()?;
        Ok(!list.is_empty())
    }
}

pub async fn run(
    database_url: Option<String>,
    sessions: usize,
    concurrency: usize,
    rate: u32,
    seconds: u64,
) -> Result<()> {
    for (label, url) in [("sqlite", None), ("postgres", database_url)] {
        if label == "postgres" && url.is_none() {
            continue;
        }
        // One manager per database: a second on the same PostgreSQL database would find the
        // first's admin token there and write none of its own.
        let manager = InProcess::start(url).await?;
        case(label, &manager, sessions, concurrency, rate, seconds).await?;
        array_case(label, &manager).await?;
    }
    Ok(())
}

/// Sessions in the array `array_case` submits.
const ARRAY_SESSIONS: u32 = 100_000;

/// Group `group` (fixed) on `manager` with `AGENTS` agents of ample room, and a client for it.
async fn target(manager: &InProcess, group: &str) -> Result<Arc<Target>> {
    let target = Arc::new(Target {
        client: Client::new(&manager.base, &manager.token, None)?,
        session: NewSession {
            group: group.to_string(),
            kind: Some(SessionType::Batch),
            command: vec!["true".into()],
            request: "cpu=1,mem=1GiB".parse()?,
            ..NewSession::default()
        },
        group: group.to_string(),
    });
    target
        .post(
            &["groups"],
            &json!({"name": target.group, "policy": {"kind": "fixed"}}),
        )
        .await?;
    for i in 0..AGENTS {
        let agent = RegisterAgent {
            id: format!("{}-a{i}", target.group),
            group: target.group.clone(),
            capacity: "cpu=1000000,mem=1000000GiB".parse()?,
            labels: Default::default(),
            template: None,
            devices: Vec::new(),
        };
        target.post(&["agents"], &agent).await?;
    }
    Ok(target)
}

/// One array of `ARRAY_SESSIONS` sessions in one POST, in a group of its own whose agents have
/// room for all: the time from the POST until none is pending (all placed, state
/// `scheduled`).
async fn array_case(label: &str, manager: &InProcess) -> Result<()> {
    let target = target(manager, &format!("{}-array", manager.group)).await?;
    let body = NewSession {
        array: Some(ArrayRange {
            first: 0,
            last: ARRAY_SESSIONS - 1,
            step: 1,
            max_running: None,
        }),
        command: vec!["echo".into(), "{index}".into()],
        ..target.session.clone()
    };
    let start = Instant::now();
    let submitted: Submitted = target
        .client
        .post(&["sessions"], Some(&body))
        .await?
        .body()?;
    let acknowledged = start.elapsed();
    let array = submitted
        .array
        .context("the answer to an array's submission describes no array")?;
    if array.sessions != ARRAY_SESSIONS {
        bail!(
            "the array made {} sessions, not {ARRAY_SESSIONS}",
            array.sessions
        );
    }
    let pending = [
        ("array", Some(array.id.clone())),
        ("state", Some("pending".to_string())),
        ("limit", Some("1".to_string())),
    ];
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let list: Vec<Value> = target.client.get(&["sessions"], &pending).await?.body()?;
        if list.is_empty() {
            break;
        }
        if Instant::now() > deadline {
            bail!("sessions of the array still pending two minutes after its submission");
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let placed = start.elapsed();
    let view: Value = (target.client)
        .get(&["arrays", array.id.as_str()], &[])
        .await?
        .body()?;
    if view["counts"]["scheduled"] != json!(ARRAY_SESSIONS) {
        bail!(
            "not all of the array's sessions were placed: {}",
            view["counts"]
        );
    }
    println!("api_{label}_array_submit_100k_ms {} ms", placed.as_millis());
    eprintln!(
        "# {label}: an array of {ARRAY_SESSIONS} sessions acknowledged after {} ms, all placed after {} ms",
        acknowledged.as_millis(),
        placed.as_millis()
    );
    Ok(())
}

async fn case(
    label: &str,
    manager: &InProcess,
    sessions: usize,
    concurrency: usize,
    rate: u32,
    seconds: u64,
) -> Result<()> {
    let target = target(manager, &manager.group).await?;

    // Throughput: `concurrency` clients submit as fast as answers come; the clock stops when
    // the last session is placed.
    let start = Instant::now();
    let next = Arc::new(AtomicUsize::new(0));
    let clients: Vec<_> = (0..concurrency)
        .map(|_| {
            let (target, next) = (target.clone(), next.clone());
            tokio::spawn(async move {
                while next.fetch_add(1, Ordering::Relaxed) < sessions {
                    target.submit().await?;
                }
                anyhow::Ok(())
            })
        })
        .collect();
    for c in clients {
        c.await??;
    }
    let submitted = start.elapsed().as_secs_f64();
    let deadline = Instant::now() + Duration::from_secs(120);
    while target.pending().await? {
        if Instant::now() > deadline {
            bail!("sessions still pending two minutes after the last submit");
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let secs = start.elapsed().as_secs_f64();
    println!(
        "api_{label}_throughput {:.0} sessions/s",
        sessions as f64 / secs
    );

    // Latency: submits paced at `rate` per second, each timed from send to answer.
    let total = rate as usize * seconds as usize;
    let mut ticker = tokio::time::interval(Duration::from_secs_f64(1.0 / f64::from(rate)));
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    let mut timings = Vec::with_capacity(total);
    for _ in 0..total {
        ticker.tick().await;
        let target = target.clone();
        timings.push(tokio::spawn(async move {
            let t = Instant::now();
            target.submit().await.map(|()| t.elapsed())
        }));
    }
    let mut latencies = Vec::with_capacity(total);
    for t in timings {
        latencies.push(t.await??);
    }
    latencies.sort();
    let p99 = latencies[(latencies.len() * 99 / 100).min(latencies.len() - 1)];
    println!("api_{label}_submit_p99 {:.1} ms", p99.as_secs_f64() * 1e3);
    eprintln!(
        "# {label}: {sessions} sessions by {concurrency} clients, all acknowledged after {submitted:.2} s and placed after {secs:.2} s; {total} paced at {rate}/s, p50 {:.1} ms",
        latencies[latencies.len() / 2].as_secs_f64() * 1e3
    );
    Ok(())
}

/// A manager in this process on a fresh data directory and a free loopback port, with a group
/// name of its own for the bench (so a database that already holds data takes part unharmed).
/// Stopped when dropped.
pub struct InProcess {
    pub base: String,
    pub token: String,
    pub group: String,
    server: tokio::task::JoinHandle<Result<(), corral_manager::ManagerError>>,
    _dir: tempfile::TempDir,
}

impl InProcess {
    pub async fn start(database_url: Option<String>) -> Result<InProcess> {
        let dir = tempfile::tempdir().context("temporary data directory")?;
        let config = corral_manager::Config {
            data_dir: dir.path().to_path_buf(),
            listen: "127.0.0.1:0".parse()?,
            database_url,
            // The agents registered by hand accept placements but run no daemon, so they never
            // heartbeat: keep them alive for the run.
            lost_after: Duration::from_secs(3600),
            // The manager's own defaults for how often passes run: what operators get.
            ..Default::default()
        };
        let app = corral_manager::start(&config).await?;
        let listener = tokio::net::TcpListener::bind(config.listen).await?;
        let base = format!("http://{}", listener.local_addr()?);
        let server = tokio::spawn(corral_manager::serve_on(
            listener,
            app,
            std::future::pending(),
        ));
        let token = std::fs::read_to_string(dir.path().join("admin.token"))?
            .trim()
            .to_string();
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)?
            .as_nanos();
        Ok(InProcess {
            base,
            token,
            group: format!("bench-{nanos:x}"),
            server,
            _dir: dir,
        })
    }
}

impl InProcess {
    /// The manager's data directory.
    pub fn data_dir(&self) -> &std::path::Path {
        self._dir.path()
    }
}

impl Drop for InProcess {
    fn drop(&mut self) {
        self.server.abort();
    }
}
