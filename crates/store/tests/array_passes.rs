//! Passes over session arrays, on SQLite and (with CORRAL_TEST_DATABASE_URL) PostgreSQL, as a
//! property: arrays, some capped (`%N`), next to single sessions, placed pass after pass on an
//! agent of random size while random sessions end between passes. An array's sessions get rows
//! only as they are placed (its tail is made up from the array until then), so this checks
//! that at every pass no capped array holds more than its limit, that no session is placed
//! twice or lost, and that in the end every session ran once.

mod common;

use std::collections::BTreeMap;

use corral_core::*;
use corral_store::{ArraySelect, NewArray, SessionFilter, SessionRecord, Store};
use proptest::prelude::*;

use common::*;

#[derive(Debug, Clone)]
struct Case {
    /// Each array's size and limit.
    arrays: Vec<(u32, Option<u32>)>,
    singles: usize,
    /// The agent's CPUs (each session asks for one).
    cpus: u32,
    /// Which held sessions end after each pass (by their position among those held), cycled.
    ends: Vec<prop::sample::Index>,
}

fn case() -> impl Strategy<Value = Case> {
    (
        prop::collection::vec((1..40u32, prop::option::of(1..5u32)), 1..4),
        0..5usize,
        1..12u32,
        prop::collection::vec(any::<prop::sample::Index>(), 1..6),
    )
        .prop_map(|(arrays, singles, cpus, ends)| Case {
            arrays,
            singles,
            cpus,
            ends,
        })
}

async fn insert_array(store: &Store, id: &str, group: &str, size: u32, max: Option<u32>, at: i64) {
    let template = session("template", group, "alice", "cpu=1", at);
    let spec = serde_json::json!({"command": ["echo", "{index}"]});
    let array = NewArray {
        id,
        range: ArrayRange {
            first: 0,
            last: size - 1,
            step: 1,
            max_running: max,
        },
        session: &template,
        spec: &spec,
        waiting_reason: max.map(|_| "waits for its array's limit"),
    };
    store.insert_array(&array).await.unwrap();
}

/// Every session of the group that holds capacity now.
async fn held(store: &Store, group: &str) -> Vec<SessionRecord> {
    let mut out = Vec::new();
    for state in [SessionState::Scheduled, SessionState::Running] {
        out.extend(
            store
                .list_sessions(&SessionFilter {
                    group: Some(group.into()),
                    state: Some(state),
                    ..Default::default()
                })
                .await
                .unwrap(),
        );
    }
    out
}

async fn passes_keep_every_limit_and_run_each_session_once(db: &common::Db, n: usize, c: Case) {
    let s = &db.store;
    let g = format!("g{n}");
    s.create_group(&group(&g), t(1)).await.unwrap();
    s.upsert_agent(
        &agent(&format!("a{n}"), &g, &format!("cpu={}", c.cpus)),
        t(1),
    )
    .await
    .unwrap();
    let ids: Vec<String> = (0..c.arrays.len()).map(|k| format!("r{n}k{k}")).collect();
    for (k, (size, max)) in c.arrays.iter().enumerate() {
        insert_array(s, &ids[k], &g, *size, *max, 10 + k as i64).await;
    }
    for i in 0..c.singles {
        let id = format!("s{n}i{i}");
        s.insert_session(&session(&id, &g, "bob", "cpu=1", 12), &spec(), t(12))
            .await
            .unwrap();
    }
    let total: u32 = c.arrays.iter().map(|(size, _)| size).sum::<u32>() + c.singles as u32;
    let mut placed: BTreeMap<String, u32> = BTreeMap::new();
    let mut now = 100;
    // Every pass places at least one session or ends one: bounded.
    for pass in 0..(4 * total as usize + 10) {
        now += 1;
        let snap = s.snapshot(&g, t(now)).await.unwrap();
        let d = cycle(&snap);
        for p in &d.placements {
            *placed.entry(p.session.0.clone()).or_default() += 1;
        }
        s.apply(&g, &snap, &d, t(now)).await.unwrap();
        for (k, (_, max)) in c.arrays.iter().enumerate() {
            let counts = s.get_array(&ids[k]).await.unwrap().unwrap().counts;
            if let Some(max) = max {
                let holding = counts.scheduled + counts.running;
                assert!(
                    holding <= *max,
                    "array {k} holds {holding} > {max} at pass {pass}"
                );
            }
        }
        let holding = held(s, &g).await;
        if holding.is_empty() && d.placements.is_empty() {
            break;
        }
        // Some of those held end, the first of them at least, so every pass moves on.
        let pick = c.ends[pass % c.ends.len()].index(holding.len().max(1));
        for (i, r) in holding.iter().enumerate() {
            if i == 0 || i == pick {
                s.end_session(&r.session.id.0, SessionState::Succeeded, t(now), "done")
                    .await
                    .unwrap();
            }
        }
    }
    assert!(
        placed.values().all(|&times| times == 1),
        "placed twice: {placed:?}"
    );
    assert_eq!(placed.len() as u32, total, "every session placed once");
    for (k, (size, _)) in c.arrays.iter().enumerate() {
        let a = s.get_array(&ids[k]).await.unwrap().unwrap();
        assert_eq!(
            (a.counts.succeeded, a.counts.total()),
            (*size, *size),
            "array {k}"
        );
        let members = s
            .list_sessions(&SessionFilter {
                array: Some(ArraySelect::Of(ids[k].clone())),
                ..Default::default()
            })
            .await
            .unwrap();
        let indices: Vec<Option<u32>> = members.iter().map(|r| r.array_index).collect();
        assert_eq!(
            indices,
            (0..*size).map(Some).collect::<Vec<_>>(),
            "array {k}"
        );
        for r in &members {
            let full = s.get_session(&r.session.id.0).await.unwrap().unwrap();
            let states: Vec<SessionState> = full.history.iter().map(|h| h.state).collect();
            assert_eq!(
                states,
                [
                    SessionState::Pending,
                    SessionState::Scheduled,
                    SessionState::Succeeded
                ],
                "{}",
                r.session.id
            );
        }
    }
}

fn property(db: common::Db, rt: tokio::runtime::Runtime) {
    let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig {
        cases: 16,
        ..ProptestConfig::default()
    });
    // Each case (shrunk ones too) in a group of its own.
    let n = std::cell::Cell::new(0);
    runner
        .run(&case(), |c| {
            n.set(n.get() + 1);
            rt.block_on(passes_keep_every_limit_and_run_each_session_once(
                &db,
                n.get(),
                c,
            ));
            Ok(())
        })
        .unwrap();
}

#[test]
fn passes_keep_every_array_limit_and_run_each_session_once_sqlite() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let db = rt.block_on(common::Db::sqlite());
    property(db, rt);
}

#[test]
fn passes_keep_every_array_limit_and_run_each_session_once_postgres() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let Some(db) = rt.block_on(common::Db::postgres("array_passes_property")) else {
        return;
    };
    property(db, rt);
}
