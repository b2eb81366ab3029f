//! Session arrays through a real manager and agent, over the API (`session_arrays.rs` drives
//! them from the command line): each session of an array runs with its index in its environment and in its
//! command and output names, and `%2` never lets more than two of them be scheduled or running
//! at once, read from the group's events as they come (a blocking read, no sleep).

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use crate::common;

use common::{ok, Cluster};
use corral_api::arrays::session_id;
use corral_api::Client;
use serde_json::{json, Value};

fn query(pairs: &[(&'static str, String)]) -> Vec<(&'static str, Option<String>)> {
    pairs.iter().map(|(k, v)| (*k, Some(v.clone()))).collect()
}

#[test]
fn each_session_of_an_array_sees_its_index_and_its_limit_holds_at_every_event() {
    let c = Cluster::start(60);
    ok(c.cli(&["group", "create", "g"]));
    // Room for all six at once: only the array's limit keeps four waiting.
    let _agent = c.agent("a1", "g", "cpu=6");
    corral_api::tls::install_crypto_provider();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let api = Client::new(&c.url(), &c.token, None).unwrap();
    let get = |path: &[&str], q: &[(&'static str, String)]| -> Value {
        rt.block_on(api.get::<Value, _>(path, &query(q)))
            .unwrap()
            .body()
            .unwrap()
    };
    // Events from now on: those after the newest so far.
    let newest = get(&["events"], &[("group", "g".into()), ("limit", "1".into())]);
    let mut after = newest[0]["id"].as_i64().unwrap_or(0);

    let submit = json!({
        "group": "g", "request": "cpu=1",
        "command": ["sh", "-c",
            "echo index=$CORRAL_ARRAY_INDEX array=$CORRAL_ARRAY_ID > out-{index}.txt; sleep 0.3"],
        "outputs": ["out-{index}.txt"],
        "array": {"first": 0, "last": 5, "max_running": 2},
    });
    let answer: Value = rt
        .block_on(api.post(&["sessions"], Some(&submit)))
        .unwrap()
        .body()
        .unwrap();
    let array = answer["id"].as_str().unwrap().to_string();
    assert_eq!(answer["array"]["sessions"], 6, "{answer}");

    // Placed and not yet ended, in the order the store committed them.
    let mut held: BTreeSet<String> = BTreeSet::new();
    let mut ended = 0;
    let mut most = 0;
    let deadline = Instant::now() + Duration::from_secs(60);
    while ended < 6 {
        assert!(
            Instant::now() < deadline,
            "the array's sessions did not all end within a minute"
        );
        let events = get(
            &["events"],
            &[
                ("group", "g".into()),
                ("after", after.to_string()),
                ("wait_ms", "5000".into()),
                ("limit", "1000".into()),
            ],
        );
        for e in events.as_array().unwrap() {
            after = e["id"].as_i64().unwrap();
            let Some(session) = e["session"].as_str() else {
                continue;
            };
            match e["kind"].as_str().unwrap() {
                "placed" => {
                    held.insert(session.to_string());
                }
                "succeeded" | "failed" | "cancelled" | "requeued" => {
                    held.remove(session);
                    ended += usize::from(e["kind"] != "requeued");
                }
                _ => {}
            }
            most = most.max(held.len());
            assert!(
                held.len() <= 2,
                "{} of the array's sessions held capacity at event {}: {held:?}",
                held.len(),
                e["id"]
            );
        }
        // And as the array's counts say, read while it runs.
        let now = get(&["arrays", array.as_str()], &[]);
        let holding = now["counts"]["scheduled"].as_u64().unwrap()
            + now["counts"]["running"].as_u64().unwrap();
        assert!(holding <= 2, "{now}");
    }
    assert_eq!(most, 2, "two ran at once at some point");

    let done = get(&["arrays", array.as_str()], &[]);
    assert_eq!(done["counts"]["succeeded"], 6, "{done}");
    assert_eq!(done["max_exit_code"], 0);
    assert_eq!(done["active"], false);
    for index in 0..=5u32 {
        let id = session_id(&array, index, 5);
        let s = get(&["sessions", id.as_str()], &[]);
        assert_eq!(s["state"], "succeeded", "{s}");
        assert_eq!(s["array_index"], index);
        let name = format!("out-{index}.txt");
        let out = rt
            .block_on(api.get_bytes(&["sessions", id.as_str(), "outputs", name.as_str()], &[]))
            .unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            format!("index={index} array={array}\n")
        );
    }
}
