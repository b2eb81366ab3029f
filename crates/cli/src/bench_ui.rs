//! `corral bench ui`: the dashboard's pages, served by a manager in this process whose store
//! holds thousands of sessions and agents (placed and queued by the manager's own passes), each
//! page fetched as a logged-in admin's browser would, the median of the runs reported.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use corral_api::agents::RegisterAgent;
use corral_api::sessions::NewSession;
use corral_api::Client;
use corral_core::SessionType;
use serde_json::{json, Value};

use crate::bench_api::InProcess;

/// Clients registering agents and submitting sessions at once.
const CONCURRENCY: usize = 16;

pub async fn run(
    database_url: Option<String>,
    sessions: usize,
    agents: usize,
    runs: usize,
) -> Result<()> {
    case("", None, sessions, agents, runs).await?;
    if let Some(url) = database_url {
        case("_postgres", Some(url), sessions, agents, runs).await?;
    }
    Ok(())
}

/// Runs `f(i)` for i in 0..n, `CONCURRENCY` at a time.
async fn each<F, Fut>(n: usize, f: F) -> Result<()>
where
    F: Fn(usize) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = Result<()>> + Send,
{
    let f = Arc::new(f);
    let next = Arc::new(AtomicUsize::new(0));
    let workers: Vec<_> = (0..CONCURRENCY)
        .map(|_| {
            let (f, next) = (f.clone(), next.clone());
            tokio::spawn(async move {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= n {
                        return anyhow::Ok(());
                    }
                    f(i).await?;
                }
            })
        })
        .collect();
    for w in workers {
        w.await??;
    }
    Ok(())
}

/// One case: a manager on `database_url` (none: SQLite) whose store the bench fills and lets
/// settle, then each page timed; `label` ends each line's name.
async fn case(
    label: &str,
    database_url: Option<String>,
    sessions: usize,
    agents: usize,
    runs: usize,
) -> Result<()> {
    let manager = InProcess::start(database_url).await?;
    let group = manager.group.clone();
    let client = Arc::new(Client::new(&manager.base, &manager.token, None)?);
    create_group(&client, &group, agents).await?;
    let setup = Instant::now();
    register_agents(&client, &group, agents).await?;
    submit_sessions(&client, &group, sessions).await?;
    wait_settled(&client, &group).await?;
    eprintln!(
        "# ui{label}: {agents} agents and {sessions} sessions stored and placed in {:.1} s",
        setup.elapsed().as_secs_f64()
    );
    time_pages(&manager, &client, label, runs).await
}

/// The bench's group: fixed at `agents` nodes of two templates.
async fn create_group(client: &Client, group: &str, agents: usize) -> Result<()> {
    client
        .post::<Value, _>(
            &["groups"],
            Some(&json!({
                "name": group,
                "policy": {"kind": "fixed", "max_nodes": agents},
                "templates": [
                    {"name": "cpu-small", "slots": "cpu=4,mem=16GiB"},
                    {"name": "cpu-large", "slots": "cpu=16,mem=64GiB"},
                ],
            })),
        )
        .await?;
    Ok(())
}

/// Registers `agents` agents by hand, one in four of the large template.
async fn register_agents(client: &Arc<Client>, group: &str, agents: usize) -> Result<()> {
    let (c, g) = (client.clone(), group.to_string());
    each(agents, move |i| {
        let (c, g) = (c.clone(), g.clone());
        async move {
            let agent = RegisterAgent {
                id: format!("{g}-a{i:04}"),
                group: g.clone(),
                capacity: "cpu=4,mem=16GiB".parse()?,
                labels: Default::default(),
                template: Some(if i % 4 == 0 { "cpu-large" } else { "cpu-small" }.into()),
                devices: Vec::new(),
            };
            c.post::<Value, _>(&["agents"], Some(&agent)).await?;
            Ok(())
        }
    })
    .await
}

/// Submits `sessions` alike sessions of one CPU.
async fn submit_sessions(client: &Arc<Client>, group: &str, sessions: usize) -> Result<()> {
    let session = Arc::new(NewSession {
        group: group.to_string(),
        kind: Some(SessionType::Batch),
        command: vec!["true".into()],
        request: "cpu=1,mem=1GiB".parse()?,
        ..NewSession::default()
    });
    let c = client.clone();
    each(sessions, move |_| {
        let (c, s) = (c.clone(), session.clone());
        async move {
            c.post::<Value, _>(&["sessions"], Some(&*s)).await?;
            Ok(())
        }
    })
    .await
}

/// Waits until settled: the pass placed what fits and told the rest of the queue's head why it
/// waits.
async fn wait_settled(client: &Client, group: &str) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        let pending: Vec<Value> = client
            .get(
                &["groups", group, "pending"],
                &[] as &[(&str, Option<String>)],
            )
            .await?
            .body()?;
        if pending.iter().all(|s| s["wait_reason"].is_string()) {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("the queue's head still had no wait reason 5 minutes after the submits");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Fetches the group's page, the overview and the newest session's page `runs` times each as a
/// logged-in admin's browser would; prints each page's median.
async fn time_pages(manager: &InProcess, client: &Client, label: &str, runs: usize) -> Result<()> {
    let group = &manager.group;
    let http = reqwest::Client::new();
    let cookie = format!("corral_ui={}", manager.token);
    let newest: Vec<Value> = client
        .get(
            &["sessions"],
            &[
                ("group", Some(group.clone())),
                ("limit", Some("1".to_string())),
            ],
        )
        .await?
        .body()?;
    let session_id = newest
        .first()
        .and_then(|s| s["id"].as_str())
        .context("no session listed")?
        .to_string();
    for (name, path) in [
        ("ui_group_page_ms", format!("/ui/groups/{group}")),
        ("ui_overview_ms", "/ui".to_string()),
        ("ui_session_page_ms", format!("/ui/sessions/{session_id}")),
    ] {
        let mut times = Vec::with_capacity(runs);
        let mut bytes = 0;
        for _ in 0..runs {
            let start = Instant::now();
            let response = http
                .get(format!("{}{path}", manager.base))
                .header("cookie", &cookie)
                .send()
                .await?;
            let status = response.status();
            let body = response.bytes().await?;
            times.push(start.elapsed());
            if !status.is_success() {
                bail!("{path}: {status}");
            }
            bytes = body.len();
        }
        times.sort();
        println!(
            "{name}{label} {:.1} ms",
            times[times.len() / 2].as_secs_f64() * 1e3
        );
        eprintln!(
            "# {path}: {bytes} bytes, fastest {:.1} ms, slowest {:.1} ms of {runs}",
            times[0].as_secs_f64() * 1e3,
            times[times.len() - 1].as_secs_f64() * 1e3
        );
    }
    Ok(())
}
