//! Session arrays in the store, on SQLite and (with CORRAL_TEST_DATABASE_URL) PostgreSQL: an
//! array and its sessions stored as one, counted, listed; a pass's snapshot reading of a
//! capped array only what its limit lets be placed; and, as a property, cancelling an array
//! cancels every session of it not ended and changes nothing else.

mod common;

use std::collections::BTreeMap;

use corral_core::*;
use corral_store::{ArrayFilter, ArraySelect, NewArray, SessionFilter, Store};
use proptest::prelude::*;
use sqlx::{AnyConnection, Connection, Row};

use common::*;

/// Stores array `id` of `range` in `group` for `owner`, submitted at `at` (its sessions
/// `<id>x<index>`, the index padded to the width of the range's last).
async fn insert_array(
    store: &Store,
    id: &str,
    group: &str,
    owner: &str,
    range: ArrayRange,
    at: i64,
) {
    let template = session("template", group, owner, "cpu=1", at);
    let spec = serde_json::json!({"command": ["echo", "{index}"]});
    let array = NewArray {
        id,
        range,
        session: &template,
        spec: &spec,
        waiting_reason: range.max_running.map(|_| "waits for its array's limit"),
    };
    store.insert_array(&array).await.unwrap();
}

fn range(first: u32, last: u32, max_running: Option<u32>) -> ArrayRange {
    ArrayRange {
        first,
        last,
        step: 1,
        max_running,
    }
}

/// Puts session `id` in `state` behind the store's back: held ones on `agent` with `cpu=1`
/// (added to the agent's allocation), ended ones with a reason.
async fn set_state(url: &str, id: &str, state: SessionState, agent: &str) {
    let mut conn = AnyConnection::connect(url).await.unwrap();
    let name = serde_json::to_value(state).unwrap();
    let name = name.as_str().unwrap();
    if state.holds_capacity() {
        sqlx::query(
            "UPDATE sessions SET state = $1, agent = $2, allocation = 'cpu=1' WHERE id = $3",
        )
        .bind(name)
        .bind(agent)
        .bind(id)
        .execute(&mut conn)
        .await
        .unwrap();
        let allocated: String = sqlx::query("SELECT allocated FROM agents WHERE id = $1")
            .bind(agent)
            .fetch_one(&mut conn)
            .await
            .unwrap()
            .get(0);
        let allocated: Slots = allocated.parse().unwrap();
        let more = allocated.checked_add(&slots("cpu=1")).unwrap();
        sqlx::query("UPDATE agents SET allocated = $1 WHERE id = $2")
            .bind(more.to_string())
            .bind(agent)
            .execute(&mut conn)
            .await
            .unwrap();
    } else if state.is_terminal() {
        let code = matches!(state, SessionState::Succeeded | SessionState::Failed).then_some(
            if state == SessionState::Failed {
                7i64
            } else {
                0
            },
        );
        sqlx::query(
            "UPDATE sessions SET state = $1, end_reason = 'ended before', exit_code = $2 \
             WHERE id = $3",
        )
        .bind(name)
        .bind(code)
        .bind(id)
        .execute(&mut conn)
        .await
        .unwrap();
    }
    conn.close().await.ok();
}

/// Every session as stored (without its history), and how many history rows and events each
/// has: what must not change but where a cancel says.
async fn everything(store: &Store) -> BTreeMap<String, (serde_json::Value, usize, usize)> {
    let mut out = BTreeMap::new();
    let all = store
        .list_sessions(&SessionFilter::default())
        .await
        .unwrap();
    for r in all {
        let id = r.session.id.0.clone();
        let full = store.get_session(&id).await.unwrap().unwrap();
        let events = store
            .list_events(&corral_store::EventFilter {
                session: Some(id.clone()),
                ..Default::default()
            })
            .await
            .unwrap()
            .len();
        out.insert(
            id,
            (
                serde_json::to_value(&r).unwrap(),
                full.history.len(),
                events,
            ),
        );
    }
    out
}

on_both!(an_array_is_stored_whole_and_counted, |db| {
    let s = &db.store;
    s.create_group(&group("g"), t(1)).await.unwrap();
    s.upsert_agent(&agent("a1", "g", "cpu=64"), t(1))
        .await
        .unwrap();
    insert_array(s, "a1f", "g", "alice", range(3, 7, None), 10).await;
    let members = s
        .list_sessions(&SessionFilter {
            array: Some(ArraySelect::Of("a1f".into())),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(ids(&members), ["a1fx3", "a1fx4", "a1fx5", "a1fx6", "a1fx7"]);
    for (r, index) in members.iter().zip(3..) {
        assert_eq!(r.array_index, Some(index));
        assert_eq!(
            r.session.array,
            Some(ArrayMember {
                id: "a1f".into(),
                max_running: None
            })
        );
        assert_eq!(r.session.submitted_at, t(10));
        assert_eq!(r.session.state, SessionState::Pending);
        assert_eq!(r.spec["command"][1], index.to_string());
        assert_eq!(r.wait_reason, None, "no limit, nothing waits for it");
    }
    let first = s.get_session("a1fx3").await.unwrap().unwrap();
    assert_eq!(first.history.len(), 1);
    assert_eq!(first.history[0].reason, "submitted");

    // Its id taken, or its group missing: nothing of the second array is stored.
    let template = session("t", "g", "bob", "cpu=1", 11);
    let spec = serde_json::json!({});
    let again = NewArray {
        id: "a1f",
        range: range(0, 2, None),
        session: &template,
        spec: &spec,
        waiting_reason: None,
    };
    assert!(matches!(
        s.insert_array(&again).await,
        Err(corral_store::StoreError::Conflict { .. })
    ));
    assert_eq!(s.get_array("a1f").await.unwrap().unwrap().sessions, 5);
    let nowhere = Session {
        group: "nope".into(),
        ..template.clone()
    };
    let lost = NewArray {
        id: "c",
        session: &nowhere,
        ..again
    };
    assert!(matches!(
        s.insert_array(&lost).await,
        Err(corral_store::StoreError::NotFound { .. })
    ));
    assert!(s.get_array("c").await.unwrap().is_none());
    assert!(s.get_session("cx0").await.unwrap().is_none());

    // Counted by state; the highest exit code of those ended.
    corral_store::testing::store_array_sessions(s, "a1f", Some(5))
        .await
        .unwrap();
    set_state(&db.url, "a1fx3", SessionState::Running, "a1").await;
    set_state(&db.url, "a1fx4", SessionState::Failed, "a1").await;
    set_state(&db.url, "a1fx5", SessionState::Succeeded, "a1").await;
    let a = s.get_array("a1f").await.unwrap().unwrap();
    assert_eq!(a.range, range(3, 7, None));
    assert_eq!(a.sessions, 5);
    assert_eq!(a.owner, "alice");
    assert_eq!(a.spec, serde_json::json!({"command": ["echo", "{index}"]}));
    assert_eq!(
        (
            a.counts.pending,
            a.counts.running,
            a.counts.failed,
            a.counts.succeeded
        ),
        (2, 1, 1, 1)
    );
    assert_eq!(a.max_exit_code, Some(7));
    let listed = s
        .list_arrays(&ArrayFilter {
            active: Some(true),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(listed, std::slice::from_ref(&a));
    assert!(s
        .list_arrays(&ArrayFilter {
            active: Some(false),
            ..Default::default()
        })
        .await
        .unwrap()
        .is_empty());
    let outside = s
        .list_sessions(&SessionFilter {
            array: Some(ArraySelect::Outside),
            ..Default::default()
        })
        .await
        .unwrap();
    assert!(outside.is_empty());
});

on_both!(
    a_pass_reads_of_a_capped_array_only_what_its_limit_lets_be_placed,
    |db| {
        let s = &db.store;
        s.create_group(&group("g"), t(1)).await.unwrap();
        s.upsert_agent(&agent("a1", "g", "cpu=64"), t(1))
            .await
            .unwrap();
        // A capped array at the head of the queue, an uncapped one and a session behind it.
        insert_array(s, "cap", "g", "alice", range(0, 9, Some(3)), 10).await;
        insert_array(s, "free", "g", "alice", range(0, 1, None), 11).await;
        s.insert_session(&session("s1", "g", "bob", "cpu=1", 12), &spec(), t(12))
            .await
            .unwrap();
        corral_store::testing::store_array_sessions(s, "cap", Some(0))
            .await
            .unwrap();
        set_state(&db.url, "capx0", SessionState::Running, "a1").await;
        let snap = s.snapshot("g", t(20)).await.unwrap();
        let read: Vec<&str> = snap.pending().map(|x| x.id.0.as_str()).collect();
        assert_eq!(read, ["capx1", "capx2", "freex0", "freex1", "s1"]);
        assert_eq!(snap.array_holding, BTreeMap::from([("cap".to_string(), 1)]));
        let member = |id: &str| {
            snap.sessions
                .iter()
                .find(|x| x.id.0 == id)
                .unwrap()
                .array
                .clone()
        };
        assert_eq!(
            member("capx1"),
            Some(ArrayMember {
                id: "cap".into(),
                max_running: Some(3)
            })
        );
        assert_eq!(
            member("freex0"),
            Some(ArrayMember {
                id: "free".into(),
                max_running: None
            })
        );
        assert_eq!(member("s1"), None);
        // The pass places two of it (3 minus the one running), and the others keep waiting.
        let d = cycle(&snap);
        let mut placed: Vec<&str> = d.placements.iter().map(|p| p.session.0.as_str()).collect();
        placed.sort();
        assert_eq!(placed, ["capx1", "capx2", "freex0", "freex1", "s1"]);
        s.apply("g", &snap, &d, t(20)).await.unwrap();
        let snap = s.snapshot("g", t(21)).await.unwrap();
        assert_eq!(
            snap.pending().count(),
            0,
            "the array is full: none of it is read"
        );
        assert_eq!(snap.array_holding, BTreeMap::from([("cap".to_string(), 3)]));
        let waiting = s.get_session("capx5").await.unwrap().unwrap();
        assert_eq!(
            waiting.wait_reason.as_deref(),
            Some("waits for its array's limit")
        );
    }
);

/// What a property case stores: arrays (each a list of member states, a limit, and how many of
/// its sessions have rows: the others are its tail, pending) and ordinary sessions, and which
/// array is cancelled.
#[derive(Debug, Clone)]
struct Case {
    arrays: Vec<(Vec<SessionState>, Option<u32>, prop::sample::Index)>,
    singles: Vec<SessionState>,
    cancel: usize,
}

fn state() -> impl Strategy<Value = SessionState> {
    prop_oneof![
        Just(SessionState::Pending),
        Just(SessionState::Scheduled),
        Just(SessionState::Running),
        Just(SessionState::Succeeded),
        Just(SessionState::Failed),
        Just(SessionState::Cancelled),
        Just(SessionState::Rejected),
    ]
}

fn case() -> impl Strategy<Value = Case> {
    (
        prop::collection::vec(
            (
                prop::collection::vec(state(), 1..8),
                prop::option::of(1..4u32),
                any::<prop::sample::Index>(),
            ),
            1..4,
        ),
        prop::collection::vec(state(), 0..5),
        any::<prop::sample::Index>(),
    )
        .prop_map(|(arrays, singles, cancel)| Case {
            cancel: cancel.index(arrays.len()),
            arrays,
            singles,
        })
}

/// One case in group `g<n>` of a store shared by the cases.
async fn cancelling_changes_only_the_array(db: &common::Db, n: usize, c: Case) {
    let s = &db.store;
    let g = format!("g{n}");
    let a = format!("a{n}");
    s.create_group(&group(&g), t(1)).await.unwrap();
    s.upsert_agent(&agent(&a, &g, "cpu=1000"), t(1))
        .await
        .unwrap();
    let mut members: Vec<Vec<(String, SessionState)>> = Vec::new();
    for (k, (states, max, stored)) in c.arrays.iter().enumerate() {
        let id = format!("r{n}k{k}");
        let last = states.len() as u32 - 1;
        insert_array(s, &id, &g, "alice", range(0, last, *max), 10 + k as i64).await;
        let stored = stored.index(states.len() + 1);
        if stored > 0 {
            corral_store::testing::store_array_sessions(s, &id, Some(stored as u32 - 1))
                .await
                .unwrap();
        }
        let mut these = Vec::new();
        for (i, state) in states.iter().enumerate() {
            let sid = format!("{id}x{i}");
            let state = if i < stored {
                set_state(&db.url, &sid, *state, &a).await;
                *state
            } else {
                SessionState::Pending
            };
            these.push((sid, state));
        }
        members.push(these);
    }
    for (i, state) in c.singles.iter().enumerate() {
        let sid = format!("s{n}i{i}");
        s.insert_session(&session(&sid, &g, "bob", "cpu=1", 20), &spec(), t(20))
            .await
            .unwrap();
        set_state(&db.url, &sid, *state, &a).await;
    }
    let before = everything(s).await;
    let held_before = s.get_agent(&a).await.unwrap().unwrap().allocated;
    let target = format!("r{n}k{}", c.cancel);
    let done = s
        .cancel_array(&target, t(50), "cancelled by alice")
        .await
        .unwrap();

    let active: Vec<&(String, SessionState)> = members[c.cancel]
        .iter()
        .filter(|(_, st)| !st.is_terminal())
        .collect();
    let expected: Vec<String> = active.iter().map(|(id, _)| id.clone()).collect();
    assert_eq!(done.cancelled, expected);
    assert_eq!(done.group, g);
    let after = everything(s).await;
    assert_eq!(after.len(), before.len());
    for (id, (row, history, events)) in &after {
        let (row0, history0, events0) = &before[id];
        if expected.contains(id) {
            assert_eq!(row["session"]["state"], "cancelled", "{id}");
            assert_eq!(row["end_reason"], "cancelled by alice", "{id}");
            assert_eq!(row["updated_at"], 50, "{id}");
            assert_eq!(*history, history0 + 1, "{id}");
            assert_eq!(*events, events0 + 1, "{id}");
        } else {
            assert_eq!(
                (row, history, events),
                (row0, history0, events0),
                "{id} changed"
            );
        }
    }
    // What its held sessions held is given back, nothing more.
    let freed = active.iter().filter(|(_, st)| st.holds_capacity()).count();
    let held_after = s.get_agent(&a).await.unwrap().unwrap().allocated;
    assert_eq!(
        held_after.get("cpu").milli(),
        held_before.get("cpu").milli() - 1000 * freed as u64
    );
    assert_eq!(done.agents.len(), usize::from(freed > 0));
    let counts = s.get_array(&target).await.unwrap().unwrap().counts;
    assert_eq!(counts, done.counts);
    assert_eq!(counts.active(), 0);
    assert_eq!(counts.total() as usize, members[c.cancel].len());
    // Again: nothing to cancel, nothing changes.
    let again = s
        .cancel_array(&target, t(60), "cancelled by alice")
        .await
        .unwrap();
    assert!(again.cancelled.is_empty());
    assert_eq!(everything(s).await, after);
}

fn property(db: common::Db, rt: tokio::runtime::Runtime) {
    let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig {
        cases: 24,
        ..ProptestConfig::default()
    });
    // Each case (shrunk ones too) in a group of its own.
    let n = std::cell::Cell::new(0);
    runner
        .run(&case(), |c| {
            n.set(n.get() + 1);
            rt.block_on(cancelling_changes_only_the_array(&db, n.get(), c));
            Ok(())
        })
        .unwrap();
}

#[test]
fn cancelling_an_array_cancels_its_sessions_not_ended_and_nothing_else_sqlite() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let db = rt.block_on(common::Db::sqlite());
    property(db, rt);
}

#[test]
fn cancelling_an_array_cancels_its_sessions_not_ended_and_nothing_else_postgres() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let Some(db) = rt.block_on(common::Db::postgres("array_cancel_property")) else {
        return;
    };
    property(db, rt);
}
