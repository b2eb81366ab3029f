//! `corral bench ha`: how long a group goes without passes when the manager that runs it dies.
//! Three `corral server` processes share one PostgreSQL database (docs/high-availability.md);
//! a group of its own with one agent (registered, always free) is run by one of them, the
//! holder of its lease. That manager is SIGKILLed, a session is submitted to another at once,
//! and `ha_takeover_ms` is the time from the kill to the session placed: the new owner took
//! the lease once it expired and ran its first pass. Each run starts three fresh managers.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use corral_api::protocol::JoinRequest;
use corral_api::sessions::{NewSession, SessionView, Submitted};
use corral_api::tokens::Role;
use corral_api::Client;
use corral_core::{SessionState, SessionType};
use corral_store::Store;

use crate::bench_agent::ChildManager;

const MANAGERS: usize = 3;
const POLL: Duration = Duration::from_millis(10);

pub async fn run(database_url: Option<String>, lease_secs: u64, runs: usize) -> Result<()> {
    let Some(url) = database_url else {
        bail!("bench ha needs a PostgreSQL database: --database-url postgres://... (or CORRAL_BENCH_DATABASE_URL)");
    };
    if !url.starts_with("postgres") {
        bail!("bench ha needs PostgreSQL (several managers share it), not {url:?}");
    }
    let store = Store::open(&url).await.context("opening the database")?;
    let (_, token) =
        corral_manager::auth::create_token(&store, Role::Admin, "bench-ha", corral_manager::now())
            .await?;
    let mut took = Vec::new();
    for run in 1..=runs {
        let ms = takeover(&url, &token, &store, lease_secs)
            .await
            .with_context(|| format!("run {run}"))?;
        eprintln!("# run {run}: the group was placing again {ms:.0} ms after its owner was killed");
        took.push(ms);
    }
    took.sort_by(f64::total_cmp);
    println!("ha_takeover_ms {:.0} ms", took[took.len() / 2]);
    println!("ha_takeover_max_ms {:.0} ms", took[took.len() - 1]);
    eprintln!(
        "# {runs} run(s), {MANAGERS} managers, --lease-secs {lease_secs}: the median and the longest"
    );
    Ok(())
}

/// One run: three managers, the owner killed; the milliseconds until a session is placed.
async fn takeover(url: &str, token: &str, store: &Store, lease_secs: u64) -> Result<f64> {
    let root = tempfile::tempdir().context("temporary directory")?;
    let key = root.path().join("secrets.key");
    let mut managers = Vec::new();
    for i in 0..MANAGERS {
        managers.push(Manager::start(root.path(), i, url, &key, lease_secs)?);
    }
    let clients: Vec<Client> = managers
        .iter()
        .map(|m| Client::new(&m.base, token, None).map(|c| c.with_timeout(Duration::from_secs(30))))
        .collect::<Result<_, _>>()?;
    for (m, client) in managers.iter_mut().zip(&clients) {
        m.wait_ready(client).await?;
    }
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)?
        .as_nanos();
    let group = format!("bench-ha-{nanos:x}");
    clients[0]
        .post::<serde_json::Value, _>(&["groups"], Some(&serde_json::json!({"name": group})))
        .await?;
    clients[0]
        .join(&JoinRequest {
            id: format!("{group}-agent"),
            group: group.clone(),
            capacity: "cpu=100000".parse()?,
            labels: BTreeMap::new(),
            devices: Vec::new(),
            version: None,
            platform: None,
            batch_job: None,
        })
        .await?;
    // The group runs: a session is placed.
    let warm = submit(&clients[0], &group).await?;
    placed(&clients[0], &warm, Duration::from_secs(60)).await?;
    let owner = owner_of(store, &group, &managers).await?;
    let other = (owner + 1) % MANAGERS;
    let killed = Instant::now();
    managers[owner].process.kill();
    let id = submit(&clients[other], &group).await?;
    placed(&clients[other], &id, Duration::from_secs(120)).await?;
    Ok(killed.elapsed().as_secs_f64() * 1000.0)
}

async fn submit(client: &Client, group: &str) -> Result<String> {
    let session = NewSession {
        group: group.to_string(),
        kind: Some(SessionType::Batch),
        command: vec!["true".into()],
        request: "cpu=1".parse()?,
        ..Default::default()
    };
    let submitted: Submitted = client.post(&["sessions"], Some(&session)).await?.body()?;
    Ok(submitted.id)
}

/// Waits until session `id` is placed (or has gone further).
async fn placed(client: &Client, id: &str, within: Duration) -> Result<()> {
    let deadline = Instant::now() + within;
    loop {
        let session: SessionView = client.get(&["sessions", id], &[]).await?.body()?;
        if session.session.state != SessionState::Pending {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("session {id} still pending after {} s", within.as_secs());
        }
        tokio::time::sleep(POLL).await;
    }
}

/// Which manager holds the group's lease (its pid is in the lease's owner).
async fn owner_of(store: &Store, group: &str, managers: &[Manager]) -> Result<usize> {
    let leases = store.list_leases().await?;
    let lease = leases
        .iter()
        .find(|l| l.group == group)
        .context("the group has no lease")?;
    managers
        .iter()
        .position(|m| lease.owner.contains(&format!("-{}-", m.process.child.id())))
        .with_context(|| format!("no manager started here holds the lease ({})", lease.owner))
}

/// A manager of the run, and where it listens.
struct Manager {
    process: ChildManager,
    base: String,
}

impl Manager {
    fn start(root: &Path, i: usize, url: &str, key: &Path, lease_secs: u64) -> Result<Manager> {
        let data = root.join(format!("m{i}"));
        std::fs::create_dir_all(&data)?;
        let port = std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port();
        let log = root.join(format!("m{i}.log"));
        let out = std::fs::File::create(&log)?;
        let mut command = Command::new(std::env::current_exe().context("finding this executable")?);
        command
            .args(["server", "--data-dir"])
            .arg(&data)
            .args(["--listen", &format!("127.0.0.1:{port}")])
            .args(["--database-url", url])
            .args(["--lease-secs", &lease_secs.to_string()])
            // The agent is registered, not run: it never syncs.
            .args(["--lost-after-secs", "3600"])
            .arg("--secrets-key-file")
            .arg(key)
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .stdout(out.try_clone()?)
            .stderr(out);
        let child = command.spawn().context("starting a manager")?;
        Ok(Manager {
            process: ChildManager { child, log },
            base: format!("http://127.0.0.1:{port}"),
        })
    }

    /// Waits until it answers as a manager of the database.
    async fn wait_ready(&mut self, client: &Client) -> Result<()> {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if client
                .get::<serde_json::Value, _>(&["groups"], &[])
                .await
                .is_ok()
            {
                return Ok(());
            }
            if let Some(status) = self.process.child.try_wait()? {
                bail!(
                    "a manager exited ({status}): {}",
                    self.process.log_tail().join("\n")
                );
            }
            if Instant::now() > deadline {
                bail!(
                    "a manager did not answer within 30 s: {}",
                    self.process.log_tail().join("\n")
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}
