//! Several managers on one PostgreSQL database (docs/high-availability.md): three real
//! `corral server` processes behind a load balancer's stand-in, a demand group whose exec
//! plugin records every launch call, sessions submitted to each manager in turn. The group runs
//! in one manager at a time (its lease), every instance is launched once, and when the owner
//! is killed another manager takes the group over and runs what comes next.

mod common;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{free_port, start_manager_on, text, Proc, CORRAL};
use corral_testkit::{Front, KillLeftovers};
use serde_json::{json, Value};

const LEASE_SECS: u64 = 2;

/// Records each launch call's agent ids, one line each, then hands the call to the Python
/// example plugin (real `corral agent` processes on this host). A launch takes 2 s, as a
/// cloud's API does: long enough for every manager's driver to see the requested instances
/// while the first launch of them is under way.
const RECORDING_PLUGIN: &str = r#"#!/usr/bin/env python3
import fcntl, json, os, subprocess, sys, time
request = sys.stdin.read()
call = json.loads(request)
if call.get("op") == "launch":
    with open(os.path.join(os.environ["CORRAL_PLUGIN_STATE"], "launched"), "a") as log:
        fcntl.flock(log, fcntl.LOCK_EX)
        for r in call["requests"]:
            log.write(r["agent_id"] + "\n")
    time.sleep(2)
done = subprocess.run([sys.executable, os.environ["EXAMPLE"]], input=request, text=True,
                      capture_output=True)
sys.stdout.write(done.stdout)
sys.stderr.write(done.stderr)
sys.exit(done.returncode)
"#;

/// A provider whose vendor is down: every launch fails (transiently); nothing is listed.
const FAILING_PLUGIN: &str = r#"#!/usr/bin/env python3
import json, sys
op = json.loads(sys.stdin.read()).get("op")
if op == "launch":
    print(json.dumps({"error": {"class": "transient", "message": "injected: the vendor is down"}}))
elif op == "templates":
    print(json.dumps({"templates": []}))
elif op == "list":
    print(json.dumps({"instances": []}))
else:
    print("{}")
"#;

struct Managers {
    /// Kills what the test started (managers, agents) before the directory goes.
    _leftovers: KillLeftovers,
    procs: Vec<Option<Proc>>,
    /// The one stopped with SIGSTOP, if any: it counts as no owner, and is not asked.
    paused: Option<usize>,
    ports: Vec<u16>,
    front: Front,
    token: String,
    root: PathBuf,
    /// The test's database, and the store the test reads the leases with.
    database: String,
    store: corral_store::Store,
    _dir: tempfile::TempDir,
}

impl Managers {
    /// Three managers on a fresh database named after `test`, the first creating the admin
    /// token and the secrets key the others are given; `None` without PostgreSQL (skipped,
    /// saying so; fails instead under CI=true).
    async fn start(test: &str) -> Option<Managers> {
        let admin = corral_testkit::postgres_admin_url()?;
        let database = corral_store::testing::fresh_database(&admin, test)
            .await
            .unwrap();
        let store = corral_store::Store::open(&database).await.unwrap();
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        let leftovers = KillLeftovers::new(root);
        let ports: Vec<u16> = (0..3).map(|_| free_port()).collect();
        let backends = ports
            .iter()
            .map(|p| std::net::SocketAddr::from(([127, 0, 0, 1], *p)))
            .collect();
        let front = Front::start(backends).unwrap();
        let first = root.join("m0");
        let key = first.join("secrets.key");
        let mut procs = Vec::new();
        for (i, port) in ports.iter().enumerate() {
            let data = root.join(format!("m{i}"));
            if i > 0 {
                std::fs::create_dir_all(&data).unwrap();
                std::fs::copy(first.join("admin.token"), data.join("admin.token")).unwrap();
            }
            let command = || {
                let mut c = Command::new(CORRAL);
                c.args(["server", "--data-dir"])
                    .arg(&data)
                    .args(["--database-url", &database])
                    .args(["--lease-secs", &LEASE_SECS.to_string()])
                    .args(["--heartbeat-secs", "1", "--lost-after-secs", "20"])
                    .args(["--advertise-url", &front.url()])
                    .stdout(Stdio::null())
                    .stderr(Stdio::null());
                if i > 0 {
                    c.arg("--secrets-key-file").arg(&key);
                }
                c
            };
            let manager = start_manager_on(*port, &data, &[], command)
                .unwrap_or_else(|| panic!("manager {i} did not start on {port}"));
            procs.push(Some(manager));
        }
        let token = std::fs::read_to_string(first.join("admin.token"))
            .unwrap()
            .trim()
            .to_string();
        Some(Managers {
            _leftovers: leftovers,
            procs,
            paused: None,
            ports,
            front,
            token,
            root: root.to_path_buf(),
            database,
            store,
            _dir: dir,
        })
    }

    /// `corral ARGS` against `url`, as the admin.
    fn cli_at(&self, url: &str, args: &[&str]) -> std::process::Output {
        Command::new(CORRAL)
            .args(args)
            .env("CORRAL_SERVER", url)
            .env("CORRAL_TOKEN", &self.token)
            .env("CORRAL_CONFIG", self.root.join("none.toml"))
            .output()
            .unwrap()
    }

    /// `corral ARGS -o json` against a manager that runs and is not paused.
    fn json(&self, args: &[&str]) -> Value {
        let live = (0..self.procs.len())
            .find(|i| self.procs[*i].is_some() && self.paused != Some(*i))
            .expect("a manager runs");
        let url = format!("http://127.0.0.1:{}", self.ports[live]);
        let out = self.cli_at(&url, args);
        assert!(out.status.success(), "{}", text(&out.stderr));
        serde_json::from_slice(&out.stdout).unwrap()
    }

    /// A session of `sleep 1` submitted to manager `i`.
    fn submit_to(&self, i: usize, n: usize) -> String {
        let url = format!("http://127.0.0.1:{}", self.ports[i]);
        let out = self.cli_at(
            &url,
            &[
                "session",
                "submit",
                "--group",
                "ha",
                "--request",
                "cpu=1",
                "--type",
                "batch",
                "--",
                "sh",
                "-c",
                &format!("sleep 1; echo session {n}"),
            ],
        );
        assert!(out.status.success(), "{}", text(&out.stderr));
        text(&out.stdout).trim().to_string()
    }

    /// Which manager holds the group's lease now (its pid is in the lease's owner).
    fn owner(&self, leases: &[corral_store::Lease]) -> Option<usize> {
        let lease = leases.iter().find(|l| l.group == "ha")?;
        let holds = |i: usize| {
            self.procs[i]
                .as_ref()
                .is_some_and(|p| lease.owner.contains(&format!("-{}-", p.0.id())))
        };
        (0..self.procs.len()).find(|i| self.paused != Some(*i) && holds(*i))
    }
}

/// Writes `source` as an executable plugin under `dir`.
fn plugin(dir: &Path, name: &str, source: &str) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir_all(dir).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, source).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

/// Creates group `ha` (demand, up to 4 one-CPU agents) on the exec plugin `provider`.
fn create_group(m: &Managers, provider: Value) {
    let group = json!({
        "name": "ha",
        "policy": {"kind": "demand", "min_nodes": 0, "max_nodes": 4, "idle_wait_secs": 2,
                   "cooldown_secs": 0, "max_launches_per_pass": 4},
        "templates": [{"name": "small", "slots": "cpu=1,mem=512MiB", "max": 4}],
        "provider": provider,
    });
    let file = m.root.join("group.json");
    std::fs::write(&file, group.to_string()).unwrap();
    let out = m.cli_at(
        &m.front.url(),
        &["group", "create", "ha", "--file", file.to_str().unwrap()],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
}

/// Waits until a manager still running holds the group's lease; which one.
async fn new_owner(m: &Managers, store: &corral_store::Store) -> usize {
    corral_testkit::eventually_async(
        "another manager takes the group over",
        Duration::from_secs(60),
        || {
            let store = store.clone();
            async move { m.owner(&store.list_leases().await.unwrap()) }
        },
    )
    .await
}

fn all_succeeded(m: &Managers, ids: &[String]) -> bool {
    let list = m.json(&["session", "ls", "--group", "ha", "-o", "json"]);
    let state: HashMap<&str, &str> = list
        .as_array()
        .unwrap()
        .iter()
        .map(|s| (s["id"].as_str().unwrap(), s["state"].as_str().unwrap()))
        .collect();
    ids.iter()
        .all(|id| state.get(id.as_str()) == Some(&"succeeded"))
}

/// The agent ids of every launch call, in call order.
fn launched(state: &Path) -> Vec<String> {
    std::fs::read_to_string(state.join("launched"))
        .unwrap_or_default()
        .lines()
        .map(String::from)
        .collect()
}

fn now_ms() -> i64 {
    let since = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap();
    i64::try_from(since.as_millis()).unwrap()
}

fn assert_each_launched_once(ids: &[String]) {
    let mut seen = std::collections::HashSet::new();
    for id in ids {
        assert!(seen.insert(id), "{id} was launched twice: {ids:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_managers_launch_each_instance_once_and_take_over_a_dead_owners_group() {
    let Some(mut m) = Managers::start("cli_ha").await else {
        return;
    };
    let (store, database, root) = (m.store.clone(), m.database.clone(), m.root.clone());

    let state = root.join("plugin");
    let recording = plugin(&state, "recording.py", RECORDING_PLUGIN);
    let example = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../examples/plugins/local_agents.py")
        .canonicalize()
        .unwrap();
    create_group(
        &m,
        json!({
            "name": "exec",
            "options": {"command": recording, "timeout_secs": 30,
                        "env": {"CORRAL_BINARY": CORRAL, "CORRAL_PLUGIN_STATE": state,
                                "EXAMPLE": example}},
            "launch": {"max_provisioning_secs": 60, "reconcile_secs": 2, "call_timeout_secs": 30},
        }),
    );

    // Twelve sessions, submitted to each manager in turn: all run, each instance launched once.
    let first: Vec<String> = (0..12).map(|n| m.submit_to(n % 3, n)).collect();
    common::eventually("the 12 sessions succeed", Duration::from_secs(120), || {
        all_succeeded(&m, &first)
    });
    let before = launched(&state);
    assert!(!before.is_empty() && before.len() <= 12, "{before:?}");
    assert_each_launched_once(&before);
    // A claim a driver left when it died before the provider answered: settled by the
    // group's reconciliation once that launch would have timed out, never launched.
    let abandoned = "ha-abandoned01";
    let claimed_at = corral_core::Timestamp(now_ms() - 40_000);
    corral_store::testing::abandoned_claim(&database, "ha", "small", abandoned, claimed_at)
        .await
        .unwrap();
    let settled = common::eventually(
        "the abandoned claim is settled",
        Duration::from_secs(30),
        || {
            let events = m.json(&["events", "--group", "ha", "--limit", "500", "-o", "json"]);
            events
                .as_array()
                .unwrap()
                .iter()
                .find(|e| e["kind"] == "launch_settled" && e["agent"] == abandoned)
                .cloned()
        },
    );
    assert!(
        settled["message"]
            .as_str()
            .unwrap()
            .contains("claimed by a driver that stopped before launching it"),
        "{settled}"
    );
    let instances = m.json(&["group", "instances", "ha", "--all", "-o", "json"]);
    let row = instances["instances"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["id"] == abandoned)
        .cloned()
        .unwrap_or_default();
    assert_eq!(row["phase"], "failed", "{instances}");
    assert!(!launched(&state).contains(&abandoned.to_string()));

    let leases = store.list_leases().await.unwrap();
    let owner = m
        .owner(&leases)
        .expect("one of the managers owns the group");

    // The owner dies: another manager takes the group over and runs what comes next.
    drop(m.procs[owner].take());
    let killed = Instant::now();
    let taken_by = new_owner(&m, &store).await;
    eprintln!(
        "group taken over by manager {taken_by} {} ms after the owner was killed",
        killed.elapsed().as_millis()
    );
    let alive: Vec<usize> = (0..3).filter(|i| *i != owner).collect();
    let second: Vec<String> = (0..4).map(|n| m.submit_to(alive[n % 2], 12 + n)).collect();
    common::eventually(
        "the 4 sessions after the kill succeed",
        Duration::from_secs(120),
        || all_succeeded(&m, &second),
    );
    assert_each_launched_once(&launched(&state));

    // The new owner pauses (SIGSTOP, as a long GC pause or a frozen VM would): the third
    // manager takes the group over. Resumed, the paused one writes nothing more for the group
    // with its old lease: nothing is launched twice, every session ends once.
    let paused = taken_by;
    let pid = m.procs[paused].as_ref().unwrap().0.id() as i32;
    let epoch_before = store.list_leases().await.unwrap()[0].epoch;
    unsafe { libc::kill(pid, libc::SIGSTOP) };
    m.paused = Some(paused);
    let third = new_owner(&m, &store).await;
    assert!(third != paused && third != owner);
    assert!(store.list_leases().await.unwrap()[0].epoch > epoch_before);
    let last: Vec<String> = (0..4).map(|n| m.submit_to(third, 16 + n)).collect();
    let resumed = corral_core::Timestamp(now_ms());
    unsafe { libc::kill(pid, libc::SIGCONT) };
    m.paused = None;
    common::eventually(
        "the 4 sessions submitted during the pause succeed",
        Duration::from_secs(120),
        || all_succeeded(&m, &last),
    );
    // The resumed manager has looked at its leases again since.
    corral_testkit::eventually_async(
        "the resumed manager's next lease round",
        Duration::from_secs(30),
        || {
            let store = store.clone();
            async move {
                let seen = store.live_managers(resumed).await.unwrap();
                seen.iter().any(|id| id.contains(&format!("-{pid}-")))
            }
        },
    )
    .await;
    assert_each_launched_once(&launched(&state));
    assert!(all_succeeded(&m, &first) && all_succeeded(&m, &second));
}

/// The failures in a row a `launch_failed` event counts, and the backoff it names, in s.
fn failure_and_backoff(event: &Value) -> (u32, u64) {
    let message = event["message"].as_str().unwrap();
    let number_before = |marker: &str| -> u64 {
        let head = &message[..message.find(marker).unwrap_or_else(|| panic!("{message}"))];
        head.rsplit(' ')
            .find(|w| !w.is_empty())
            .unwrap()
            .parse()
            .unwrap()
    };
    let failures = number_before(" in a row") as u32;
    let backoff = number_before(" s (failure");
    (failures, backoff)
}

fn launch_failures(m: &Managers) -> Vec<Value> {
    let events = m.json(&["events", "--group", "ha", "--limit", "1000", "-o", "json"]);
    events
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["kind"] == "launch_failed")
        .cloned()
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_providers_backoff_goes_on_with_the_next_owner() {
    let Some(mut m) = Managers::start("cli_ha_backoff").await else {
        return;
    };
    let (store, root) = (m.store.clone(), m.root.clone());
    let failing = plugin(&root.join("plugin"), "failing.py", FAILING_PLUGIN);
    create_group(
        &m,
        json!({
            "name": "exec",
            "options": {"command": failing, "timeout_secs": 30},
            "launch": {"backoff_initial_secs": 1, "backoff_max_secs": 4, "reconcile_secs": 2},
        }),
    );
    let id = m.submit_to(0, 0);

    // Failures back the template off, longer each time, never beyond the maximum.
    let before = common::eventually("a third failure in a row", Duration::from_secs(60), || {
        let failures = launch_failures(&m);
        failures
            .iter()
            .map(failure_and_backoff)
            .any(|(n, _)| n >= 3)
            .then_some(failures)
    });
    let leases = store.list_leases().await.unwrap();
    let owner = m
        .owner(&leases)
        .expect("one of the managers owns the group");
    // Every manager shows the backoff, not only the owner.
    let other = (owner + 1) % 3;
    let url = format!("http://127.0.0.1:{}", m.ports[other]);
    common::eventually(
        "the backoff, shown by a manager that does not own the group",
        Duration::from_secs(30),
        || {
            let out = m.cli_at(&url, &["group", "instances", "ha", "-o", "json"]);
            let list: Value = serde_json::from_slice(&out.stdout).ok()?;
            let reason = list["held"]["small"]["reason"].as_str()?.to_string();
            reason.contains("backs off").then_some(())
        },
    );
    drop(m.procs[owner].take());
    new_owner(&m, &store).await;
    let seen: u32 = launch_failures(&m)
        .iter()
        .map(|e| failure_and_backoff(e).0)
        .max()
        .unwrap();
    assert!(seen >= 3, "{before:?}");
    let last_id = launch_failures(&m)[0]["id"].as_i64().unwrap();

    // The next owner goes on from the count: its first failure is the next in the row.
    let next = common::eventually(
        "a failure under the next owner",
        Duration::from_secs(60),
        || {
            launch_failures(&m)
                .into_iter()
                .rev()
                .find(|e| e["id"].as_i64().unwrap() > last_id)
        },
    );
    let (failures, _) = failure_and_backoff(&next);
    assert!(failures > seen, "the count started again: {next}");
    for event in launch_failures(&m) {
        let (_, backoff) = failure_and_backoff(&event);
        assert!(backoff <= 4, "backed off beyond the maximum: {event}");
    }
    // The session still waits, saying why.
    let sessions = m.json(&["session", "ls", "--group", "ha", "-o", "json"]);
    assert_eq!(sessions[0]["id"], id.as_str(), "{sessions}");
    assert_eq!(sessions[0]["state"], "pending", "{sessions}");
}
