//! `corral bench agent`'s second case: the CPU a manager in a child process spends on
//! thousands of simulated agents heartbeating from this process.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use corral_api::protocol::{JoinRequest, SyncRequest};
use corral_api::Client;
use corral_core::{Agent, AgentState};
use serde_json::Value;
use tokio::task::JoinSet;

use super::{create_group, AbortOnDrop, ChildManager, GROUP, HEARTBEAT, LOST_AFTER};

/// Agents that join at once.
const JOIN_BATCH: usize = 200;
/// File descriptors kept beside one socket per agent (database, logs, listeners).
const FD_MARGIN: u64 = 256;

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
pub(super) async fn heartbeats(agents: usize, window_secs: u64) -> Result<()> {
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

/// Case 2 once the manager runs: it answers, `agents` simulated agents join and heartbeat, the
/// manager's CPU is read over the window, and what it and the agents saw is reported.
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
    let token = wait_answering(manager, &client, data_dir).await?;
    let api = Arc::new(client.with_token(&token));
    create_group(&api).await?;
    let stats = Arc::new(SimStats::default());
    let sims = join_agents(manager, &api, &client, agents, &rhythm, &stats).await?;
    let measured = measure(manager, &api, &stats, window_secs).await?;
    drop(sims);
    report_heartbeats(agents, &measured, manager, &stats, &rhythm);
    Ok(())
}

/// Waits until the manager is ready: the admin token written and the API answering; the token.
async fn wait_answering(
    manager: &mut ChildManager,
    client: &Client,
    data_dir: &Path,
) -> Result<String> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
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
                return Ok(t);
            }
        }
        if Instant::now() > deadline {
            bail!("the manager did not answer within 30 s");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Joins the agents in batches of `JOIN_BATCH`; each starts syncing as soon as it joined.
/// Their tasks, which stop when dropped.
async fn join_agents(
    manager: &mut ChildManager,
    api: &Arc<Client>,
    client: &Client,
    agents: usize,
    rhythm: &Rhythm,
    stats: &Arc<SimStats>,
) -> Result<Vec<AbortOnDrop<()>>> {
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
    Ok(sims)
}

/// What case 2 measured over its window, and the agents' states at its end.
struct Measured {
    /// The manager's CPU time over the window.
    cpu: Duration,
    wall: Duration,
    /// Syncs answered in the window.
    syncs: u64,
    failures_in_window: u64,
    /// The manager's CPU over the wall time: cores kept busy.
    cores: f64,
    /// Agents alive at the end, as the manager sees them.
    alive: usize,
    /// Agents by state at the end.
    states: BTreeMap<String, usize>,
}

/// The window: after one heartbeat and a bit for the join burst to settle, the manager's CPU
/// and the syncs answered over `window_secs`; then whether anybody was lost, as the manager sees
/// it.
async fn measure(
    manager: &mut ChildManager,
    api: &Client,
    stats: &SimStats,
    window_secs: u64,
) -> Result<Measured> {
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
    Ok(Measured {
        cpu,
        wall,
        syncs,
        failures_in_window,
        cores,
        alive,
        states,
    })
}

/// Case 2's lines: the agents and the manager's cores, then on stderr the rest (rates, silences,
/// states, failures).
fn report_heartbeats(
    agents: usize,
    m: &Measured,
    manager: &ChildManager,
    stats: &SimStats,
    rhythm: &Rhythm,
) {
    let Measured {
        cpu,
        wall,
        syncs,
        failures_in_window,
        cores,
        alive,
        ref states,
    } = *m;
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
}
