//! Kill the manager with SIGKILL in the middle of a submit load, start it again: every
//! acknowledged session is still there, none is placed twice, no agent is over-allocated. On
//! SQLite, and on PostgreSQL when CORRAL_TEST_DATABASE_URL is set.

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use corral_testkit::eventually_async;

use serde_json::{json, Value};

const AGENTS: usize = 4;
const CPUS_PER_AGENT: usize = 48;
const CLIENTS: usize = 8;

struct Server {
    child: Child,
    base: String,
}

impl Server {
    async fn start(dir: &Path, database_url: Option<&str>) -> Server {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_corral"));
        cmd.args(["server", "--data-dir"])
            .arg(dir)
            .args(["--listen", &format!("127.0.0.1:{port}")]);
        if let Some(url) = database_url {
            cmd.args(["--database-url", url]);
        }
        let child = cmd
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let base = format!("http://127.0.0.1:{port}");
        let server = Server { child, base };
        let health = format!("{}/api/v1/health", server.base);
        let health = &health;
        eventually_async("the manager to come up", Duration::from_secs(30), || {
            reqwest::get(health)
        })
        .await;
        server
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn call(
    client: &reqwest::Client,
    token: &str,
    method: reqwest::Method,
    url: String,
    body: Option<Value>,
) -> reqwest::Result<(u16, Value)> {
    let mut req = client.request(method, url).bearer_auth(token);
    if let Some(b) = body {
        req = req.json(&b);
    }
    let resp = req.send().await?;
    let status = resp.status().as_u16();
    Ok((status, resp.json().await.unwrap_or(Value::Null)))
}

async fn sigkill_under_load(database_url: Option<String>) {
    // reqwest is built for rustls with ring: its clients need the provider installed.
    corral_api::tls::install_crypto_provider();
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), database_url.as_deref()).await;
    let token = std::fs::read_to_string(dir.path().join("admin.token"))
        .unwrap()
        .trim()
        .to_string();
    let client = reqwest::Client::new();
    let post = |path: &str, body: Value| {
        call(
            &client,
            &token,
            reqwest::Method::POST,
            format!("{}{path}", server.base),
            Some(body),
        )
    };
    assert_eq!(
        post(
            "/api/v1/groups",
            json!({"name": "g", "policy": {"kind": "fixed"}})
        )
        .await
        .unwrap()
        .0,
        201
    );
    for i in 0..AGENTS {
        let agent = json!({"id": format!("a{i}"), "group": "g", "capacity": format!("cpu={CPUS_PER_AGENT}")});
        assert_eq!(post("/api/v1/agents", agent).await.unwrap().0, 201);
    }

    // Clients submit until the manager dies under them; each remembers what was acknowledged.
    let acked = Arc::new(Mutex::new(Vec::<String>::new()));
    let clients: Vec<_> = (0..CLIENTS)
        .map(|_| {
            let (acked, client, token, base) = (
                acked.clone(),
                client.clone(),
                token.clone(),
                server.base.clone(),
            );
            tokio::spawn(async move {
                loop {
                    let body = json!({"group": "g", "command": ["true"], "request": "cpu=1"});
                    match call(
                        &client,
                        &token,
                        reqwest::Method::POST,
                        format!("{base}/api/v1/sessions"),
                        Some(body),
                    )
                    .await
                    {
                        Ok((201, reply)) => acked
                            .lock()
                            .unwrap()
                            .push(reply["id"].as_str().unwrap().to_string()),
                        Ok((status, reply)) => panic!("submit answered {status}: {reply}"),
                        Err(_) => return, // the manager is gone
                    }
                }
            })
        })
        .collect();
    // More sessions than capacity, so that some are pending, some placed, when the kill comes.
    let enough = AGENTS * CPUS_PER_AGENT + 40;
    eventually_async(
        &format!("{enough} acknowledged sessions"),
        Duration::from_secs(60),
        || std::future::ready(acked.lock().unwrap().len() >= enough),
    )
    .await;
    let mut server = server;
    server.child.kill().unwrap(); // SIGKILL
    server.child.wait().unwrap();
    for c in clients {
        c.await.unwrap();
    }
    drop(server);
    let acked: Vec<String> = acked.lock().unwrap().clone();

    let server = Server::start(dir.path(), database_url.as_deref()).await;
    let get = |path: String| {
        call(
            &client,
            &token,
            reqwest::Method::GET,
            format!("{}{path}", server.base),
            None,
        )
    };
    // Let the restarted manager finish placing what fits.
    let capacity = AGENTS * CPUS_PER_AGENT;
    let get = &get;
    let what = "the restarted manager to place what fits";
    let sessions = eventually_async(what, Duration::from_secs(30), || async move {
        let mut all = Vec::new();
        let mut after = String::new();
        loop {
            let (_, page) = get(format!("/api/v1/sessions?group=g&limit=1000{after}"))
                .await
                .unwrap();
            let page = page.as_array().unwrap().clone();
            let Some(last) = page.last() else { break };
            after = format!("&after={}", last["id"].as_str().unwrap());
            all.extend(page);
        }
        let placed = all.iter().filter(|s| s["state"] == "scheduled").count();
        if placed == capacity.min(all.len()) {
            Ok(all)
        } else {
            Err(format!("{placed} of {} placed", all.len()))
        }
    })
    .await;

    let by_id: HashMap<&str, &Value> = sessions
        .iter()
        .map(|s| (s["id"].as_str().unwrap(), s))
        .collect();
    for id in &acked {
        assert!(
            by_id.contains_key(id.as_str()),
            "acknowledged session {id} was lost"
        );
    }
    assert_eq!(
        sessions
            .iter()
            .filter(|s| s["state"] == "scheduled")
            .count(),
        capacity,
        "all capacity is used after the restart"
    );
    // Every agent holds exactly what its sessions hold, never more than it has.
    let mut held: HashMap<String, u64> = HashMap::new();
    for s in sessions.iter().filter(|s| s["state"] == "scheduled") {
        *held
            .entry(s["agent"].as_str().unwrap().to_string())
            .or_default() += 1;
    }
    for i in 0..AGENTS {
        let (_, agent) = get(format!("/api/v1/agents/a{i}")).await.unwrap();
        let allocated: u64 = agent["allocated"]["cpu"]
            .as_str()
            .unwrap_or("0")
            .parse()
            .unwrap();
        assert_eq!(
            allocated,
            held.get(&format!("a{i}")).copied().unwrap_or(0),
            "agent a{i}: {agent}"
        );
        assert!(
            allocated <= CPUS_PER_AGENT as u64,
            "agent a{i} over-allocated: {agent}"
        );
    }
    // No session was placed twice: one `placed` event at most per session.
    let mut placed_events = HashSet::new();
    let mut before = String::new();
    loop {
        let (_, page) = get(format!("/api/v1/events?group=g&limit=1000{before}"))
            .await
            .unwrap();
        let page = page.as_array().unwrap().clone();
        let Some(last) = page.last() else { break };
        before = format!("&before={}", last["id"]);
        for e in page.iter().filter(|e| e["kind"] == "placed") {
            let session = e["session"].as_str().unwrap().to_string();
            assert!(
                placed_events.insert(session.clone()),
                "session {session} was placed twice"
            );
        }
    }
    assert_eq!(placed_events.len(), capacity);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_under_load_loses_nothing_acknowledged_sqlite() {
    sigkill_under_load(None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_under_load_loses_nothing_acknowledged_postgres() {
    // Skipped, saying so, without PostgreSQL; fails instead under CI=true.
    let Some(admin) = corral_testkit::postgres_admin_url() else {
        return;
    };
    let url = corral_store::testing::fresh_database(&admin, "cli_sigkill")
        .await
        .unwrap();
    sigkill_under_load(Some(url)).await;
}
