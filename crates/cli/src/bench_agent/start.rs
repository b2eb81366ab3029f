//! `corral bench agent`'s first case: submit → process start on a warm agent, a manager and a
//! real agent (process runtime) in this process.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context, Result};
use corral_api::sessions::{NewSession, SessionView, Submitted};
use corral_api::Client;
use corral_core::{Agent, AgentState, SessionState, SessionType};

use super::{create_group, AbortOnDrop, GROUP, HEARTBEAT, LOST_AFTER};

/// How often the client polls a session's state.
const POLL: Duration = Duration::from_millis(5);
/// Pause between sessions, so the agent is back in its long poll when the next one comes.
const IDLE: Duration = Duration::from_millis(50);
/// Longest any one session may take, submit to end.
const SESSION_DEADLINE: Duration = Duration::from_secs(30);

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
pub(super) async fn start_latency(count: usize) -> Result<()> {
    let dir = tempfile::tempdir().context("temporary directory")?;
    let data_dir = dir.path().join("manager");
    std::fs::create_dir_all(&data_dir)?;
    let (base, token, _server) = serve_in_process(data_dir).await?;
    let api = Client::new(&base, &token, None)?.with_timeout(Duration::from_secs(60));
    create_group(&api).await?;
    let agent_id = "bench-agent";
    let agent = start_agent(agent_id, base, token, dir.path().join("agent"))?;
    wait_warm(&api, agent_id, &agent).await?;

    let body = NewSession {
        group: GROUP.into(),
        kind: Some(SessionType::Batch),
        command: ["sh", "-c", "date +%s%N"].map(String::from).to_vec(),
        request: "cpu=1".parse()?,
        ..NewSession::default()
    };
    let mut starts = Vec::with_capacity(count);
    let mut ends = Vec::with_capacity(count);
    let mut placed = Vec::with_capacity(count);
    for _ in 0..count {
        let timed = one_session(&api, &body).await?;
        ends.push(timed.end_ms);
        starts.push(timed.start_ms);
        placed.extend(timed.placed_ms);
        tokio::time::sleep(IDLE).await;
    }
    report_start_latency(count, sorted(starts), sorted(ends), sorted(placed));
    Ok(())
}

/// A manager served by a task of this process from `data_dir`, on a free loopback port: its
/// address, its admin token, and the task.
async fn serve_in_process(
    data_dir: PathBuf,
) -> Result<(
    String,
    String,
    AbortOnDrop<Result<(), corral_manager::ManagerError>>,
)> {
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
    let server = AbortOnDrop(tokio::spawn(corral_manager::serve_on(
        listener,
        app,
        std::future::pending(),
    )));
    let token = std::fs::read_to_string(data_dir.join("admin.token"))?
        .trim()
        .to_string();
    Ok((base, token, server))
}

/// A real agent (process runtime, 4 CPUs) run by a task of this process.
fn start_agent(
    id: &str,
    manager: String,
    token: String,
    work_root: PathBuf,
) -> Result<AbortOnDrop<Result<(), corral_agent::AgentError>>> {
    let agent_config = corral_agent::Config {
        manager,
        token,
        id: id.into(),
        group: GROUP.into(),
        capacity: Some("cpu=4".parse()?),
        labels: BTreeMap::new(),
        work_root,
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
    Ok(AbortOnDrop(tokio::spawn(corral_agent::run(
        agent_config,
        runtime,
        std::future::pending(),
    ))))
}

/// Waits until the agent is warm: joined, and idle in its long poll.
async fn wait_warm<T>(api: &Client, agent_id: &str, agent: &AbortOnDrop<T>) -> Result<()> {
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
    Ok(())
}

/// One session's times, in ms after its submit.
struct Timed {
    /// When its process started, on this host's clock (the process prints it).
    start_ms: f64,
    /// When the client saw it succeeded.
    end_ms: f64,
    /// When the manager placed it, on the manager's own (ms) clock.
    placed_ms: Option<f64>,
}

/// Submits one session and polls it until it succeeded; its times.
async fn one_session(api: &Client, body: &NewSession) -> Result<Timed> {
    let submitted = epoch_nanos()?;
    let t0 = Instant::now();
    let answer: Submitted = api.post(&["sessions"], Some(body)).await?.body()?;
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
    let end_ms = t0.elapsed().as_secs_f64() * 1e3;
    let out = String::from_utf8_lossy(
        &api.get_bytes(&["sessions", &id, "logs", "stdout"], &[])
            .await?,
    )
    .into_owned();
    let started: i128 = out
        .trim()
        .parse()
        .with_context(|| format!("session {id} printed {out:?}, not a time in ns"))?;
    // When the manager placed it, on its own (ms) clock.
    let scheduled = view
        .history
        .iter()
        .find(|e| e.state == SessionState::Scheduled)
        .map(|e| e.at.0);
    Ok(Timed {
        start_ms: (started - submitted) as f64 / 1e6,
        end_ms,
        placed_ms: scheduled.map(|at| at as f64 - submitted as f64 / 1e6),
    })
}

/// Case 1's lines: the percentiles of submit to process start, then on stderr the rest.
fn report_start_latency(count: usize, starts: Vec<f64>, ends: Vec<f64>, placed: Vec<f64>) {
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
}
