//! A writer killed with SIGKILL at an arbitrary moment loses nothing it was told was committed
//! and leaves no half-applied pass. The writer is this test binary run again as a child
//! process (`crash_child`), which submits sessions, runs passes of the real cycle and ends
//! sessions, printing each write once its call has returned.

mod common;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use corral_core::*;
use corral_store::{EventFilter, SessionFilter, Store, StoreError};

use common::*;

const CHILD_URL: &str = "CORRAL_STORE_CRASH_URL";
const CHILD_PREFIX: &str = "CORRAL_STORE_CRASH_PREFIX";

/// The child's workload; a no-op when run as an ordinary test.
#[tokio::test]
async fn crash_child() {
    let (Ok(url), Ok(prefix)) = (std::env::var(CHILD_URL), std::env::var(CHILD_PREFIX)) else {
        return;
    };
    let store = Store::open(&url).await.expect("child opens the store");
    for i in 0i64.. {
        let id = format!("{prefix}{i}");
        let s = session(&id, "g", ["ann", "bob"][(i % 2) as usize], "cpu=1", i);
        store.insert_session(&s, &spec(), t(i)).await.unwrap();
        println!("@@ inserted {id}");
        let snap = store.snapshot("g", t(i)).await.unwrap();
        match store.apply("g", &snap, &cycle(&snap), t(i)).await {
            Ok(_) | Err(StoreError::Conflict { .. }) => {}
            Err(e) => panic!("apply: {e}"),
        }
        if i % 2 == 1 {
            let oldest = snap
                .sessions
                .iter()
                .find(|x| x.state == SessionState::Scheduled);
            if let Some(x) = oldest {
                match store
                    .end_session(&x.id.0, SessionState::Succeeded, t(i), "exit 0")
                    .await
                {
                    Ok(_) => println!("@@ ended {}", x.id),
                    Err(StoreError::Conflict { .. }) => {}
                    Err(e) => panic!("end: {e}"),
                }
            }
        }
    }
}

/// Runs the child until it has reported `writes` writes, kills it, and returns what it
/// reported as committed.
fn run_and_kill(url: &str, prefix: &str, writes: usize) -> Vec<String> {
    let mut child = Command::new(std::env::current_exe().expect("test binary"))
        .args(["--exact", "crash_child", "--nocapture", "--test-threads=1"])
        .env(CHILD_URL, url)
        .env(CHILD_PREFIX, prefix)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn child");
    let stdout = child.stdout.take().expect("stdout");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if let Some(rest) = line.strip_prefix("@@ ") {
                if tx.send(rest.to_string()).is_err() {
                    break;
                }
            }
        }
    });
    let mut reported = Vec::new();
    while reported.len() < writes {
        match rx.recv_timeout(Duration::from_secs(60)) {
            Ok(line) => reported.push(line),
            Err(_) => {
                let _ = child.kill();
                let out = child.wait_with_output().expect("child output");
                panic!(
                    "the child stopped writing: {}",
                    String::from_utf8_lossy(&out.stderr)
                );
            }
        }
    }
    child.kill().expect("SIGKILL the child");
    child.wait().expect("reap the child");
    // Lines already written to the pipe before the kill were committed too.
    reported.extend(rx.try_iter());
    reported
}

async fn check_consistent(store: &Store, reported: &[String]) {
    let all = store
        .list_sessions(&SessionFilter::default())
        .await
        .unwrap();
    let by_id: BTreeMap<&str, &corral_store::SessionRecord> =
        all.iter().map(|r| (r.session.id.0.as_str(), r)).collect();
    for line in reported {
        match line.split_once(' ') {
            Some(("inserted", id)) => assert!(by_id.contains_key(id), "{id} was lost"),
            Some(("ended", id)) => assert_eq!(
                by_id[id].session.state,
                SessionState::Succeeded,
                "{id}'s end was lost"
            ),
            _ => panic!("unexpected line {line:?}"),
        }
    }
    // Every agent holds exactly what its sessions hold: no pass was half-applied.
    let mut held: BTreeMap<String, Slots> = BTreeMap::new();
    for r in &all {
        if r.session.state.holds_capacity() {
            let agent = r.session.agent.as_ref().expect("placed on an agent");
            let slot = held.entry(agent.0.clone()).or_default();
            *slot = slot
                .checked_add(r.allocation.as_ref().expect("an allocation"))
                .unwrap();
            let events = store
                .list_events(&EventFilter {
                    session: Some(r.session.id.0.clone()),
                    ..Default::default()
                })
                .await
                .unwrap();
            assert!(
                events.iter().any(|e| e.kind == "placed"),
                "{}",
                r.session.id
            );
            let full = store.get_session(&r.session.id.0).await.unwrap().unwrap();
            assert!(
                full.history
                    .iter()
                    .any(|h| h.state == SessionState::Scheduled),
                "{}",
                r.session.id
            );
        }
    }
    for a in store.list_agents(Some("g")).await.unwrap() {
        let expected = held.remove(&a.id.0).unwrap_or_default();
        assert_eq!(a.allocated, expected, "agent {}", a.id);
        assert!(a.allocated.fits_in(&a.capacity));
    }
    assert!(held.is_empty(), "sessions on unknown agents: {held:?}");
}

on_both!(sigkill_loses_no_committed_write, |db| {
    let mut g = group("g");
    g.policy.kind = PolicyKind::Fixed;
    db.store.create_group(&g, t(0)).await.unwrap();
    for id in ["a1", "a2"] {
        db.store
            .upsert_agent(&agent(id, "g", "cpu=4"), t(0))
            .await
            .unwrap();
    }
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.subsec_nanos() as usize)
        .unwrap_or(0);
    for round in 0..3 {
        // A different moment in the workload each round.
        let writes = 20 + (nanos / (round + 1)) % 40;
        let reported = run_and_kill(&db.url, &format!("r{round}-"), writes);
        db.reopen().await;
        check_consistent(&db.store, &reported).await;
    }
});
