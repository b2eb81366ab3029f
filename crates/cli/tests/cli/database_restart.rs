//! The manager's PostgreSQL server stops at once (as a crash or a restart would) under a load of
//! submits, and comes back (issue 17, item 7): submits meanwhile are refused with 503, a
//! `Retry-After` and the code `store_unavailable` (never a 500), the manager reconnects by
//! itself, and every submit it acknowledged is there and runs. The server is the test's own
//! (`corral_testkit::Postgres`), not the shared one other tests use.

use crate::common;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;
use corral_testkit::{eventually, Postgres};
use serde_json::json;

/// What the submitters saw: each answer's status, and the ids acknowledged.
#[derive(Default)]
struct Seen {
    statuses: BTreeMap<u16, usize>,
    acknowledged: Vec<String>,
    /// The bodies and `Retry-After` of refusals other than 201.
    refusals: Vec<(u16, Option<String>, serde_json::Value)>,
}

/// Submits one session after another until `stop`, recording each answer in `seen`.
fn submitter(url: String, token: String, stop: Arc<AtomicBool>, seen: Arc<Mutex<Seen>>) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let client = reqwest::Client::builder()
            .timeout(Duration::from_secs(60))
            .build()
            .unwrap();
        while !stop.load(Ordering::SeqCst) {
            let answer = client
                .post(format!("{url}/api/v1/sessions"))
                .bearer_auth(&token)
                .json(&json!({"group": "g", "type": "batch", "command": ["true"],
                              "request": {"cpu": 1}}))
                .send()
                .await;
            let Ok(answer) = answer else {
                continue; // The manager is fine: only the database goes away.
            };
            let status = answer.status().as_u16();
            let retry = answer
                .headers()
                .get("retry-after")
                .and_then(|v| v.to_str().ok())
                .map(str::to_string);
            let body: serde_json::Value = answer.json().await.unwrap_or_default();
            let mut seen = seen.lock().unwrap();
            *seen.statuses.entry(status).or_default() += 1;
            match status {
                201 => seen
                    .acknowledged
                    .push(body["id"].as_str().unwrap().to_string()),
                _ => seen.refusals.push((status, retry, body)),
            }
        }
    });
}

#[test]
fn submits_while_postgresql_restarts_get_503_and_none_acknowledged_is_lost() {
    corral_api::tls::install_crypto_provider();
    let Some(pg) = Postgres::start() else {
        return;
    };
    let c = Cluster::start_with(60, &["--database-url", &pg.url()]);
    ok(c.cli(&["group", "create", "g"]));
    let _agent = c.agent("a1", "g", "cpu=8");
    let stop = Arc::new(AtomicBool::new(false));
    let seen = Arc::new(Mutex::new(Seen::default()));
    let submitters: Vec<_> = (0..4)
        .map(|_| {
            let (url, token) = (c.url(), c.token.clone());
            let (stop, seen) = (stop.clone(), seen.clone());
            std::thread::spawn(move || submitter(url, token, stop, seen))
        })
        .collect();
    let acknowledged = || seen.lock().unwrap().acknowledged.len();
    eventually("20 submits acknowledged", Duration::from_secs(30), || {
        acknowledged() >= 20
    });
    pg.halt();
    let before_halt = acknowledged();
    eventually("4 submits refused", Duration::from_secs(60), || {
        seen.lock().unwrap().refusals.len() >= 4
    });
    pg.resume();
    eventually(
        "20 more submits acknowledged once it is back",
        Duration::from_secs(60),
        || acknowledged() >= before_halt + 20,
    );
    stop.store(true, Ordering::SeqCst);
    for s in submitters {
        s.join().unwrap();
    }
    let seen = seen.lock().unwrap();
    assert_eq!(
        seen.statuses.keys().copied().collect::<Vec<_>>(),
        [201, 503],
        "every answer is 201 or 503: {:?}",
        seen.refusals
    );
    for (status, retry, body) in &seen.refusals {
        assert_eq!(*status, 503);
        assert_eq!(retry.as_deref(), Some("2"), "{body}");
        assert_eq!(body["error"]["code"], "store_unavailable", "{body}");
        assert_eq!(body["error"]["details"]["retry_after_secs"], 2, "{body}");
    }
    // Every acknowledged session is there, and runs.
    let ids = seen.acknowledged.clone();
    drop(seen);
    c.until_for(120, "every acknowledged session succeeds", || {
        let listed = c.json(&[
            "session",
            "ls",
            "--state",
            "succeeded",
            "--limit",
            "1000",
            "-o",
            "json",
        ]);
        let done: std::collections::HashSet<&str> = listed
            .as_array()?
            .iter()
            .filter_map(|s| s["id"].as_str())
            .collect();
        ids.iter()
            .all(|id| done.contains(id.as_str()))
            .then_some(())
    });
}
