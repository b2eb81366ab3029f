//! `corral bench agent`: the agent protocol under measurement.
//!
//! 1. Start latency: a manager and a real agent (process runtime) run in this process; sessions
//!    are submitted one at a time to the warm agent, idle in its long poll, and each session's
//!    process prints its own start time, so submit → start is read on one clock.
//! 2. Heartbeats: a manager runs as a child process (its CPU read from `/proc`), and thousands of
//!    simulated agents in this process join and then long-poll their syncs, each answer held up
//!    to the heartbeat: the manager's CPU per heartbeating agent.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context, Result};
use corral_api::protocol::{JoinRequest, SyncRequest};
use corral_api::sessions::{NewSession, SessionView, Submitted};
use corral_api::Client;
use corral_core::{Agent, AgentState, SessionState, SessionType};
use serde_json::{json, Value};
use tokio::task::{JoinHandle, JoinSet};

/// The group both cases create.
const GROUP: &str = "bench";
/// How often agents sync when nothing happens, in both cases.
const HEARTBEAT: Duration = Duration::from_secs(5);
/// Silence after which the manager marks an agent lost.
const LOST_AFTER: Duration = Duration::from_secs(30);
/// How often the client polls a session's state.
const POLL: Duration = Duration::from_millis(5);
/// Pause between sessions, so the agent is back in its long poll when the next one comes.
const IDLE: Duration = Duration::from_millis(50);
/// Longest any one session may take, submit to end.
const SESSION_DEADLINE: Duration = Duration::from_secs(30);
/// Agents that join at once.
const JOIN_BATCH: usize = 200;
/// File descriptors kept beside one socket per agent (database, logs, listeners).
const FD_MARGIN: u64 = 256;

pub async fn run(sessions: usize, agents: &[usize], window_secs: u64) -> Result<()> {
    if sessions > 0 {
        start_latency(sessions)
            .await
            .context("case agent_start (submit to process start)")?;
    }
    // Agents' syncs may fall in phase; a window shorter than a heartbeat can miss them all.
    let window = window_secs.max(HEARTBEAT.as_secs());
    if window != window_secs && agents.iter().any(|&n| n > 0) {
        eprintln!("# --window-secs raised to {window}: at least one heartbeat");
    }
    for &count in agents.iter().filter(|&&n| n > 0) {
        heartbeats(count, window)
            .await
            .with_context(|| format!("case agent_heartbeat ({count} simulated agents)"))?;
    }
    Ok(())
}

/// A task aborted when dropped, so an early return leaves nothing running.
struct AbortOnDrop<T>(JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

fn epoch_nanos() -> Result<i128> {
    Ok(SystemTime::now().duration_since(UNIX_EPOCH)?.as_nanos() as i128)
}

/// Nearest-rank percentile of sorted values.
fn percentile(sorted: &[f64], p: f64) -> f64 {
    let rank = (p * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

fn sorted(mut v: Vec<f64>) -> Vec<f64> {
    v.sort_by(f64::total_cmp);
    v
}

/// Case 1: submit → process start on a warm agent, process runtime.
async fn start_latency(count: usize) -> Result<()> {
    let dir = tempfile::tempdir().context("temporary directory")?;
    let data_dir = dir.path().join("manager");
    std::fs::create_dir_all(&data_dir)?;
    let config = corral_manager::Config {
        data_dir: data_dir.clone(),
        listen: "127.0.0.1:0".parse()?,
        heartbeat: HEARTBEAT,
        lost_after: LOST_AFTER,
        ..Default::default()
    };
    let app = corral_manager::start(&config).await?;
    let listener = tokio::net::TcpListener::bind(config.listen).await?;
    let base = format!("http://{}", listener.local_addr()?);
    let _server = AbortOnDrop(tokio::spawn(corral_manager::serve_on(
        listener,
        app,
        std::future::pending(),
    )));
    let token = std::fs::read_to_string(data_dir.join("admin.token"))?
        .trim()
        .to_string();
    let api = Client::new(&base, &token, None)?.with_timeout(Duration::from_secs(60));
    api.post::<Value, _>(
        &["groups"],
        Some(&json!({"name": GROUP, "policy": {"kind": "fixed"}})),
    )
    .await?;

    let agent_id = "bench-agent";
    let agent_config = corral_agent::Config {
        manager: base,
        token,
        id: agent_id.into(),
        group: GROUP.into(),
        capacity: Some("cpu=4".parse()?),
        labels: BTreeMap::new(),
        work_root: dir.path().join("agent"),
        nvidia_smi: "nvidia-smi".into(),
        stop_grace: Duration::from_secs(1),
        ca_file: None,
        drain_after: None,
        key: None,
        self_update: None,
        resume_token: None,
        batch_job: None,
    };
    let runtime =
        corral_runtime::Runtime::Process(corral_runtime::ProcessRuntime::new(Default::default()));
    let agent = AbortOnDrop(tokio::spawn(corral_agent::run(
        agent_config,
        runtime,
        std::future::pending(),
    )));
    // Warm: joined, and idle in its long poll.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let agent_state = match api.get::<Agent, _>(&["agents", agent_id], &[]).await {
            Ok(reply) => Some(reply.body()?.state),
            Err(e) if e.status() == Some(404) => None,
            Err(e) => return Err(e.into()),
        };
        if agent_state == Some(AgentState::Alive) {
            break;
        }
        if agent.0.is_finished() {
            bail!("the agent stopped before joining");
        }
        if Instant::now() > deadline {
            bail!("the agent did not join within 30 s");
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    tokio::time::sleep(Duration::from_millis(200)).await;

    let body = NewSession {
        group: GROUP.into(),
        kind: SessionType::Batch,
        command: ["sh", "-c", "date +%s%N"].map(String::from).to_vec(),
        request: "cpu=1".parse()?,
        ..NewSession::default()
    };
    let mut starts = Vec::with_capacity(count);
    let mut ends = Vec::with_capacity(count);
    let mut placed = Vec::with_capacity(count);
    for _ in 0..count {
        let submitted = epoch_nanos()?;
        let t0 = Instant::now();
        let answer: Submitted = api.post(&["sessions"], Some(&body)).await?.body()?;
        let id = answer.id;
        let view = loop {
            let v: SessionView = api.get(&["sessions", &id], &[]).await?.body()?;
            match v.session.state {
                SessionState::Succeeded => break v,
                state if state.is_terminal() => bail!(
                    "session {id} ended {state:?}: {}",
                    v.end_reason.unwrap_or_default()
                ),
                _ => {}
            }
            if t0.elapsed() > SESSION_DEADLINE {
                bail!(
                    "session {id} still {:?} {} s after submit",
                    v.session.state,
                    SESSION_DEADLINE.as_secs()
                );
            }
            tokio::time::sleep(POLL).await;
        };
        ends.push(t0.elapsed().as_secs_f64() * 1e3);
        let out = String::from_utf8_lossy(
            &api.get_bytes(&["sessions", &id, "logs", "stdout"], &[])
                .await?,
        )
        .into_owned();
        let started: i128 = out
            .trim()
            .parse()
            .with_context(|| format!("session {id} printed {out:?}, not a time in ns"))?;
        starts.push((started - submitted) as f64 / 1e6);
        // When the manager placed it, on its own (ms) clock.
        let scheduled = view
            .history
            .iter()
            .find(|e| e.state == SessionState::Scheduled)
            .map(|e| e.at.0);
        if let Some(at) = scheduled {
            placed.push(at as f64 - submitted as f64 / 1e6);
        }
        tokio::time::sleep(IDLE).await;
    }
    let starts = sorted(starts);
    let ends = sorted(ends);
    let placed = sorted(placed);
    println!("agent_start_p50 {:.1} ms", percentile(&starts, 0.5));
    println!("agent_start_p99 {:.1} ms", percentile(&starts, 0.99));
    eprintln!(
        "# {count} sessions one at a time on a warm agent: submit to process start min {:.1} ms, max {:.1} ms; submit to succeeded (seen by the client, polling every {} ms) p50 {:.1} ms, p99 {:.1} ms",
        starts[0],
        starts[starts.len() - 1],
        POLL.as_millis(),
        percentile(&ends, 0.5),
        percentile(&ends, 0.99),
    );
    if !placed.is_empty() {
        eprintln!(
            "# of which submit to placed (the manager's ms clock) p50 {:.1} ms, p99 {:.1} ms",
            percentile(&placed, 0.5),
            percentile(&placed, 0.99),
        );
    }
    Ok(())
}

/// A manager in a child process, killed when dropped.
pub(crate) struct ChildManager {
    pub(crate) child: std::process::Child,
    pub(crate) log: PathBuf,
}

impl ChildManager {
    /// SIGKILL, and reaped.
    pub(crate) fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// The last lines the manager logged, for errors.
    pub(crate) fn log_tail(&self) -> Vec<String> {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(20)..]
            .iter()
            .map(|l| l.to_string())
            .collect()
    }

    /// User plus system CPU time it used so far.
    fn cpu(&self) -> Result<Duration> {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.child.id()))
            .context("reading the manager's /proc/PID/stat")?;
        // Fields after the command name in parentheses, starting at field 3 (state): utime is
        // field 14 and stime field 15, in clock ticks.
        let rest = &stat[stat.rfind(')').context("malformed /proc/PID/stat")? + 1..];
        let fields: Vec<&str> = rest.split_whitespace().collect();
        let ticks: u64 = fields
            .get(11..13)
            .context("short /proc/PID/stat")?
            .iter()
            .map(|f| f.parse::<u64>())
            .sum::<Result<u64, _>>()?;
        // SAFETY: sysconf only reads a configuration value.
        let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
        if hz <= 0 {
            bail!("sysconf(_SC_CLK_TCK) failed");
        }
        Ok(Duration::from_secs_f64(ticks as f64 / hz as f64))
    }

    /// Its resident memory, from /proc/PID/status.
    fn rss_mib(&self) -> Option<f64> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).ok()?;
        let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
        let kib: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
        Some(kib / 1024.0)
    }
}

impl Drop for ChildManager {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Raises this process's open-file limit (children inherit it) to `needed`, above the hard limit
/// where this process may (root), else to the hard limit; returns it.
fn raise_nofile(needed: u64) -> Result<u64> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into the struct we own.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        return Err(std::io::Error::last_os_error()).context("getrlimit(RLIMIT_NOFILE)");
    }
    // The kernel caps open files at fs.nr_open however high a limit is.
    let nr_open: u64 = std::fs::read_to_string("/proc/sys/fs/nr_open")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(1 << 20);
    if lim.rlim_max != libc::RLIM_INFINITY && lim.rlim_max < needed {
        // Only a process allowed to (CAP_SYS_RESOURCE) raises its hard limit: tried, and
        // passed over if refused.
        let raised = libc::rlimit {
            rlim_cur: needed.min(nr_open),
            rlim_max: needed.min(nr_open),
        };
        // SAFETY: setrlimit reads the struct we own.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } == 0 {
            return Ok(raised.rlim_cur);
        }
    }
    let target = match lim.rlim_max {
        libc::RLIM_INFINITY => nr_open,
        max => max,
    };
    if lim.rlim_cur < target {
        lim.rlim_cur = target;
        // SAFETY: setrlimit reads the struct we own.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &lim) } != 0 {
            return Err(std::io::Error::last_os_error()).context("setrlimit(RLIMIT_NOFILE)");
        }
    }
    Ok(lim.rlim_cur)
}

/// What the simulated agents count together.
#[derive(Default)]
struct SimStats {
    syncs: AtomicU64,
    failures: AtomicU64,
    /// Longest time between two syncs sent by one agent, in ms: what the manager sees as
    /// silence.
    max_gap_ms: AtomicU64,
    /// Longest sync answer, in ms (held up to the heartbeat, then the manager's own delay).
    max_answer_ms: AtomicU64,
    first_failure: Mutex<Option<String>>,
}

impl SimStats {
    fn fail(&self, why: String) {
        self.failures.fetch_add(1, Ordering::Relaxed);
        let mut first = self.first_failure.lock().unwrap_or_else(|p| p.into_inner());
        first.get_or_insert(why);
    }
}

/// How a simulated agent syncs: its answer held for `hold`, then a pause before the next sync,
/// together its heartbeat. A real agent holds its whole heartbeat (no pause), keeping one
/// connection open; where the open-file limit cannot give every agent one, they hold part of it.
#[derive(Clone)]
struct Rhythm {
    hold: Duration,
    pause: Duration,
    /// Syncs under way at once, at most: connections a pool opens for them stay open.
    at_once: Arc<tokio::sync::Semaphore>,
}

impl Rhythm {
    /// As real agents, if `agents` connections fit within `connections`; else each holds what
    /// keeps about half of `connections` open at once (at least 1 s), and never more than
    /// three quarters are.
    fn of(agents: usize, connections: u64) -> Rhythm {
        let beat = HEARTBEAT.as_secs();
        let (hold, at_once) = match agents as u64 <= connections {
            true => (beat, agents),
            false => (
                (beat * connections / 2 / agents as u64).clamp(1, beat),
                (connections * 3 / 4) as usize,
            ),
        };
        Rhythm {
            hold: Duration::from_secs(hold),
            pause: Duration::from_secs(beat - hold),
            at_once: Arc::new(tokio::sync::Semaphore::new(at_once)),
        }
    }
}

/// One simulated agent: syncs with nothing to report, in its rhythm.
async fn sim_agent(client: Client, id: String, stats: Arc<SimStats>, rhythm: Rhythm) {
    let body = SyncRequest {
        sessions: Vec::new(),
        wait_secs: rhythm.hold.as_secs(),
        ..SyncRequest::default()
    };
    let mut last: Option<Instant> = None;
    loop {
        let sent = Instant::now();
        if let Some(prev) = last {
            let gap = (sent - prev).as_millis() as u64;
            stats.max_gap_ms.fetch_max(gap, Ordering::Relaxed);
        }
        last = Some(sent);
        let answer = {
            let Ok(_turn) = rhythm.at_once.acquire().await else {
                return;
            };
            client.sync(&id, &body).await
        };
        match answer {
            Ok(_) => {
                stats.syncs.fetch_add(1, Ordering::Relaxed);
                let answer = sent.elapsed().as_millis() as u64;
                stats.max_answer_ms.fetch_max(answer, Ordering::Relaxed);
                tokio::time::sleep(rhythm.pause).await;
            }
            Err(why) => {
                stats.fail(format!("{id}: {why}"));
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }
    }
}

/// Joins agent `sim-<i>` (retrying twice) and returns its own token.
async fn join(api: &Client, i: usize) -> Result<String> {
    let body = JoinRequest {
        id: format!("sim-{i}"),
        group: GROUP.into(),
        capacity: "cpu=1".parse()?,
        labels: BTreeMap::new(),
        devices: Vec::new(),
        version: None,
        platform: None,
        batch_job: None,
    };
    let mut attempt = 0;
    loop {
        match api.join(&body).await {
            Ok(answer) => return Ok(answer.token),
            Err(e) if attempt >= 2 => {
                return Err(anyhow::Error::from(e).context(format!("joining sim-{i}")))
            }
            Err(_) => {
                attempt += 1;
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        }
    }
}

/// Case 2: how much CPU one manager spends on `agents` heartbeating agents.
async fn heartbeats(agents: usize, window_secs: u64) -> Result<()> {
    let needed = agents as u64 + FD_MARGIN;
    let limit = raise_nofile(needed)?;
    // What this process and the manager can each hold open for agents.
    let connections = limit.saturating_sub(FD_MARGIN);
    if connections < 16 {
        bail!("the open-file limit ({limit}) leaves room for no agent");
    }
    let rhythm = Rhythm::of(agents, connections);
    if rhythm.pause > Duration::ZERO {
        eprintln!(
            "# the open-file hard limit is {limit}, below the {needed} that {agents} agents need to hold a connection each (in this process and in the manager): each syncs every {} s still, its answer held {} s then a pause of {} s, so that about {} connections are open at once; raise it (ulimit -Hn, LimitNOFILE) for one connection per agent",
            HEARTBEAT.as_secs(),
            rhythm.hold.as_secs(),
            rhythm.pause.as_secs(),
            agents as u64 * rhythm.hold.as_secs() / HEARTBEAT.as_secs(),
        );
    }

    let dir = tempfile::tempdir().context("temporary directory")?;
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let listen = format!("127.0.0.1:{port}");
    let log = dir.path().join("manager.log");
    let log_file = std::fs::File::create(&log)?;
    let mut command = Command::new(std::env::current_exe().context("finding this executable")?);
    // If this process dies without unwinding (SIGKILL), the manager goes with it.
    #[cfg(target_os = "linux")]
    // SAFETY: prctl is async-signal-safe, as code between fork and exec must be.
    unsafe {
        std::os::unix::process::CommandExt::pre_exec(&mut command, || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let child = command
        .args(["server", "--data-dir"])
        .arg(dir.path())
        .args(["--listen", &listen])
        .args(["--heartbeat-secs", &HEARTBEAT.as_secs().to_string()])
        .args(["--lost-after-secs", &LOST_AFTER.as_secs().to_string()])
        .args(["--max-connections", &connections.to_string()])
        // SQLite in the data directory, whatever this shell points at.
        .env_remove("CORRAL_DATABASE_URL")
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .stdout(log_file.try_clone()?)
        .stderr(log_file)
        .spawn()
        .context("starting the manager")?;
    let mut manager = ChildManager { child, log };
    let result = heartbeats_with(
        &mut manager,
        dir.path(),
        &listen,
        agents,
        rhythm,
        window_secs,
    )
    .await;
    if result.is_err() {
        eprintln!("# the manager's last log lines:");
        for line in manager.log_tail() {
            eprintln!("#   {line}");
        }
    }
    result
}

async fn heartbeats_with(
    manager: &mut ChildManager,
    data_dir: &Path,
    listen: &str,
    agents: usize,
    rhythm: Rhythm,
    window_secs: u64,
) -> Result<()> {
    let base = format!("http://{listen}");
    let client = Client::new(&base, "", None)?.with_timeout(Duration::from_secs(60));

    // Ready: the admin token written and the API answering.
    let deadline = Instant::now() + Duration::from_secs(30);
    let token = loop {
        if let Some(status) = manager.child.try_wait()? {
            bail!("the manager exited at start ({status})");
        }
        if let Ok(t) = std::fs::read_to_string(data_dir.join("admin.token")) {
            let t = t.trim().to_string();
            let up = client
                .with_token(&t)
                .get::<Value, _>(&["groups"], &[])
                .await
                .is_ok();
            if up {
                break t;
            }
        }
        if Instant::now() > deadline {
            bail!("the manager did not answer within 30 s");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let api = Arc::new(client.with_token(&token));
    api.post::<Value, _>(
        &["groups"],
        Some(&json!({"name": GROUP, "policy": {"kind": "fixed"}})),
    )
    .await?;

    // Join in batches; each agent starts syncing as soon as it joined.
    let stats = Arc::new(SimStats::default());
    let mut sims = Vec::with_capacity(agents);
    let joining = Instant::now();
    let join_deadline = Duration::from_secs(600);
    for first in (0..agents).step_by(JOIN_BATCH) {
        let mut batch = JoinSet::new();
        for i in first..(first + JOIN_BATCH).min(agents) {
            let api = api.clone();
            batch.spawn(async move { join(&api, i).await.map(|t| (i, t)) });
        }
        while let Some(joined) = batch.join_next().await {
            let (i, token) = joined??;
            // Each sync is held up to the heartbeat: its limit is above that.
            let client = client
                .with_token(&token)
                .with_timeout(HEARTBEAT + Duration::from_secs(25));
            sims.push(AbortOnDrop(tokio::spawn(sim_agent(
                client,
                format!("sim-{i}"),
                stats.clone(),
                rhythm.clone(),
            ))));
        }
        if let Some(status) = manager.child.try_wait()? {
            bail!("the manager exited while agents joined ({status})");
        }
        if joining.elapsed() > join_deadline {
            bail!(
                "only {} of {agents} agents joined in {} s",
                sims.len(),
                join_deadline.as_secs()
            );
        }
    }
    let joined_secs = joining.elapsed().as_secs_f64();
    eprintln!(
        "# {agents} agents joined in {joined_secs:.1} s ({:.0} joins/s, {JOIN_BATCH} at a time)",
        agents as f64 / joined_secs
    );

    // One heartbeat and a bit for the join burst to settle, then the window.
    tokio::time::sleep(HEARTBEAT + Duration::from_secs(1)).await;
    let failures_before = stats.failures.load(Ordering::Relaxed);
    let syncs_before = stats.syncs.load(Ordering::Relaxed);
    let cpu_before = manager.cpu()?;
    let wall = Instant::now();
    tokio::time::sleep(Duration::from_secs(window_secs)).await;
    let cpu = manager.cpu()? - cpu_before;
    let wall = wall.elapsed();
    let syncs = stats.syncs.load(Ordering::Relaxed) - syncs_before;
    let failures_in_window = stats.failures.load(Ordering::Relaxed) - failures_before;
    let cores = cpu.as_secs_f64() / wall.as_secs_f64();
    if let Some(status) = manager.child.try_wait()? {
        bail!("the manager exited during the window ({status})");
    }

    // Nobody lost, as the manager sees it.
    let list: Vec<Agent> = api
        .get(&["agents"], &[("group", Some(GROUP.to_string()))])
        .await
        .context("listing the agents")?
        .body()?;
    let mut states: BTreeMap<String, usize> = BTreeMap::new();
    for a in &list {
        *states
            .entry(format!("{:?}", a.state).to_lowercase())
            .or_default() += 1;
    }
    let alive = list.iter().filter(|a| a.state == AgentState::Alive).count();
    drop(sims);

    println!("agent_heartbeat_agents {agents} agents");
    println!("agent_heartbeat_manager_cpu {cores:.3} cores");
    eprintln!(
        "# manager CPU {:.2} s over {:.1} s; {syncs} syncs answered in the window ({:.0}/s, one per agent every {:.1} s); {:.0} agents per core; manager RSS {}",
        cpu.as_secs_f64(),
        wall.as_secs_f64(),
        syncs as f64 / wall.as_secs_f64(),
        agents as f64 * wall.as_secs_f64() / syncs.max(1) as f64,
        if cores > 0.0 { agents as f64 / cores } else { f64::INFINITY },
        manager
            .rss_mib()
            .map_or("unknown".to_string(), |m| format!("{m:.0} MiB")),
    );
    eprintln!(
        "# longest silence of any agent {:.1} s (lost after {} s); longest sync answer {:.1} s (held up to {} s)",
        stats.max_gap_ms.load(Ordering::Relaxed) as f64 / 1e3,
        LOST_AFTER.as_secs(),
        stats.max_answer_ms.load(Ordering::Relaxed) as f64 / 1e3,
        rhythm.hold.as_secs(),
    );
    if alive == agents && states.len() == 1 {
        eprintln!("# all {agents} agents alive at the end");
    } else {
        eprintln!(
            "# NOT all agents alive at the end: {alive} of {agents} alive; by state: {states:?}"
        );
    }
    let failures = stats.failures.load(Ordering::Relaxed);
    if failures == 0 {
        eprintln!("# no sync failed");
    } else {
        let first = stats
            .first_failure
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
            .unwrap_or_default();
        eprintln!(
            "# {failures} syncs failed ({failures_in_window} in the window); the first: {first}"
        );
    }
    if cores >= 1.0 {
        eprintln!(
            "# over one core: at this rate about {:.0} agents fit under one core",
            agents as f64 / cores
        );
    }
    Ok(())
}
