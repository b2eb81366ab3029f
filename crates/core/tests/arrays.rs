//! Session arrays in the cycle: an array with `%N` never has more than N sessions scheduled or
//! running after a pass, the sessions its limit keeps waiting hold no one back and launch
//! nothing, and the rest of the queue is placed as if they were not there.

mod common;

use std::collections::BTreeMap;

use common::snapshot;
use corral_core::workload::Rng;
use corral_core::*;
use proptest::prelude::*;
use serde_json::json;

/// `n` pending sessions of array `id` with limit `max`, submitted together, ids in index order.
fn array(id: &str, n: u32, max: Option<u32>, request: &str, at: i64) -> Vec<serde_json::Value> {
    (0..n)
        .map(|i| {
            json!({
                "id": format!("{id}-{i:05}"), "owner": "alice", "request": request,
                "submitted_at": at, "array": {"id": id, "max_running": max}
            })
        })
        .collect()
}

fn placed(d: &Decisions) -> Vec<&str> {
    d.placements.iter().map(|p| p.session.0.as_str()).collect()
}

fn waits(d: &Decisions) -> Vec<(&str, String)> {
    (d.waiting.iter())
        .map(|w| (w.session.0.as_str(), w.reason.to_string()))
        .collect()
}

/// What a store does once a pass is applied: the placed sessions hold capacity on their agents,
/// and their arrays count them.
fn apply(s: &mut Snapshot, d: &Decisions) {
    for p in &d.placements {
        let x = (s.sessions.iter_mut())
            .find(|x| x.id == p.session)
            .expect("a placed session is in the snapshot");
        x.state = SessionState::Running;
        x.agent = Some(p.agent.clone());
        let a = (s.agents.iter_mut())
            .find(|a| a.id == p.agent)
            .expect("placed on an agent of the snapshot");
        a.allocated = a.allocated.checked_add(&p.slots).expect("no overflow");
        a.idle_since = None;
        if let Some(array) = x.array.as_ref().filter(|a| a.max_running.is_some()) {
            *s.array_holding.entry(array.id.clone()).or_default() += 1;
        }
    }
}

/// What a store does when a session that holds capacity ends: it is gone from the snapshot, its
/// agent has its slots back, its array counts one less.
fn end(s: &mut Snapshot, id: &str) {
    let at = (s.sessions.iter())
        .position(|x| x.id.0 == id && x.state.holds_capacity())
        .expect("a session holding capacity");
    let x = s.sessions.remove(at);
    let shares = s.required_shares(&x);
    let a = (s.agents.iter_mut())
        .find(|a| Some(&a.id) == x.agent.as_ref())
        .expect("its agent");
    a.allocated = a.allocated.checked_sub(&shares).expect("it held them");
    if a.allocated.is_empty() {
        a.idle_since = Some(s.now);
    }
    if let Some(array) = &x.array {
        if let Some(n) = s.array_holding.get_mut(&array.id) {
            *n -= 1;
        }
    }
}

#[test]
fn an_array_of_10_with_3_at_once_places_3_and_2_more_when_2_end() {
    let mut s = snapshot(json!({
        "group": {"policy": "fixed"},
        "agents": [{"id": "n1", "capacity": "cpu=64", "state": "alive"}],
        "sessions": array("a-1", 10, Some(3), "cpu=1", 5),
    }));
    let d = cycle(&s);
    assert_eq!(placed(&d), ["a-1-00000", "a-1-00001", "a-1-00002"]);
    let limit = "its array a-1 has 3 running, its limit (%3)".to_string();
    let expected: Vec<(&str, String)> = (3..10)
        .map(|i| (s.sessions[i].id.0.as_str(), limit.clone()))
        .collect();
    assert_eq!(waits(&d), expected);
    assert!(d.waiting.iter().all(|w| matches!(
        &w.reason,
        WaitReason::ArrayLimit { array, max_running: 3, running: 3 } if array == "a-1"
    )));

    apply(&mut s, &d);
    end(&mut s, "a-1-00000");
    end(&mut s, "a-1-00002");
    let d = cycle(&s);
    assert_eq!(placed(&d), ["a-1-00003", "a-1-00004"]);
    assert_eq!(d.waiting.len(), 5);
    assert!(
        waits(&d).iter().all(|(_, w)| *w == limit),
        "{:?}",
        waits(&d)
    );
}

#[test]
fn sessions_beyond_the_limit_hold_no_one_back_and_the_rest_say_they_are_ahead() {
    // Strict head of line: the array's allowed sessions find no room (cpu=8 each), the
    // ordinary session behind them is held, but never by a session the limit keeps waiting.
    let mut sessions = array("big", 4, Some(2), "cpu=8", 1);
    sessions.push(json!({"id": "s9", "owner": "bob", "request": "cpu=1", "submitted_at": 9}));
    let s = snapshot(json!({
        "group": {"policy": "fixed", "head_of_line": "strict"},
        "agents": [{"id": "n1", "capacity": "cpu=8", "allocated": "cpu=4", "state": "alive"}],
        "sessions": sessions,
    }));
    let d = cycle(&s);
    assert!(d.placements.is_empty());
    assert_eq!(
        waits(&d),
        [
            (
                "big-00000",
                "no agent has room; the policy is fixed, so it waits for running sessions to end"
                    .to_string()
            ),
            (
                "big-00001",
                "held behind session big-00000 at the head of the queue".into()
            ),
            (
                "s9",
                "held behind session big-00000 at the head of the queue".into()
            ),
            (
                "big-00002",
                "its array big has 0 running and 2 ahead of it in the queue, its limit (%2)".into()
            ),
            (
                "big-00003",
                "its array big has 0 running and 2 ahead of it in the queue, its limit (%2)".into()
            ),
        ]
    );
    // Backfill: a full array's sessions are passed over, the ordinary one is placed.
    let mut sessions = array("full", 4, Some(1), "cpu=1", 1);
    sessions.push(json!({"id": "s9", "owner": "bob", "request": "cpu=1", "submitted_at": 9}));
    let mut s = snapshot(json!({
        "group": {"policy": "fixed", "head_of_line": "backfill", "skip_after": 3},
        "agents": [{"id": "n1", "capacity": "cpu=2", "allocated": "cpu=1", "state": "alive"}],
        "sessions": sessions,
    }));
    s.array_holding.insert("full".into(), 1);
    let d = cycle(&s);
    assert_eq!(placed(&d), ["s9"]);
    assert!(d.waiting.iter().all(|w| !w.reason.counts_as_blocked()));
}

#[test]
fn the_limit_leaves_no_demand_for_scale_out_beyond_it() {
    // Three agents of one cpu each hold three running sessions of the array; seven more wait.
    let agents: Vec<serde_json::Value> = (1..=3)
        .map(|i| json!({"id": format!("n{i}"), "template": "one", "capacity": "cpu=1", "allocated": "cpu=1", "state": "alive"}))
        .collect();
    let problem = |max: u32| {
        let mut sessions = array("a-7", 10, Some(max), "cpu=1", 1);
        for x in &mut sessions[..3] {
            x["state"] = json!("running");
        }
        snapshot(json!({
            "group": {"policy": "demand", "max_nodes": 100},
            "templates": [{"name": "one", "slots": "cpu=1", "price": 1.0, "max": 100}],
            "agents": agents,
            "sessions": sessions,
        }))
    };
    // At its limit: nothing launched, nothing asked of scale-out.
    let s = problem(3);
    assert_eq!(s.array_holding.get("a-7"), Some(&3), "the plan counts them");
    let d = cycle(&s);
    assert!(d.launches.is_empty(), "{:?}", d.launches);
    assert!(d.scale_out_demand.is_empty(), "{}", d.scale_out_demand);
    assert_eq!(d.waiting.len(), 7);
    assert!(waits(&d)
        .iter()
        .all(|(_, w)| w == "its array a-7 has 3 running, its limit (%3)"));
    // Two below it: two instances, for the two it lets start.
    let d = cycle(&problem(5));
    let launched: Vec<(&str, u32)> = (d.launches.iter())
        .map(|l| (l.template.as_str(), l.count))
        .collect();
    assert_eq!(launched, [("one", 2)]);
    assert_eq!(d.scale_out_demand.to_string(), "cpu=2");
    let by_limit = (d.waiting.iter())
        .filter(|w| matches!(w.reason, WaitReason::ArrayLimit { .. }))
        .count();
    assert_eq!(by_limit, 5);
}

#[test]
fn arrays_without_a_limit_and_unknown_holdings_are_served_as_ordinary_sessions() {
    let mut sessions = array("free", 5, None, "cpu=1", 1);
    sessions.extend(array("capped", 5, Some(2), "cpu=1", 2));
    let s = snapshot(json!({
        "group": {"policy": "fixed"},
        "agents": [{"id": "n1", "capacity": "cpu=64", "state": "alive"}],
        "sessions": sessions,
    }));
    assert!(s.array_holding.is_empty());
    let d = cycle(&s);
    assert_eq!(d.placements.len(), 7);
    assert_eq!(d.waiting.len(), 3);
}

#[test]
fn a_capped_array_of_100_000_is_passed_over_once_full() {
    // Not a timing: the pass's work for a full array's sessions is a comparison each, and its
    // decisions are a wait each.
    let n = 100_000;
    let sessions: Vec<Session> = (0..n)
        .map(|i| Session {
            id: SessionId(format!("big-{i:06}")),
            group: "g".into(),
            owner: "alice".into(),
            priority: 0,
            request: "cpu=1".parse().unwrap(),
            image: None,
            kind: SessionType::Batch,
            submitted_at: Timestamp(1),
            state: SessionState::Pending,
            agent: None,
            blocked_passes: 0,
            constraints: Vec::new(),
            devices: Vec::new(),
            array: Some(ArrayMember {
                id: "big".into(),
                max_running: Some(100),
            }),
        })
        .collect();
    let mut s = snapshot(json!({
        "group": {"policy": "fixed"},
        "agents": [{"id": "n1", "capacity": "cpu=1000", "allocated": "cpu=40", "state": "alive"}],
    }));
    s.sessions = sessions;
    s.array_holding.insert("big".into(), 40);
    let d = cycle(&s);
    assert_eq!(d.placements.len(), 60);
    assert_eq!(d.waiting.len(), n - 60);
    assert_eq!(
        d.waiting[0].reason.to_string(),
        "its array big has 100 running, its limit (%100)"
    );
}

/// A random group for [`the_limit_holds_over_passes`]: agents, arrays with their limits and
/// ordinary sessions, the scheduler, and the seed of which sessions end between passes.
#[derive(Debug, Clone)]
struct Case {
    agents: Vec<u64>,
    arrays: Vec<(u32, Option<u32>, u64, i64)>,
    ordinary: Vec<(u64, i64, u8)>,
    sequencer: u8,
    strict: bool,
    skip_after: u32,
    passes: usize,
    seed: u64,
}

fn cases() -> impl Strategy<Value = Case> {
    (
        prop::collection::vec(1..=16u64, 1..5),
        prop::collection::vec(
            (1..30u32, prop::option::of(1..6u32), 1..=3u64, 0..20i64),
            1..4,
        ),
        prop::collection::vec((1..=6u64, 0..20i64, 0..3u8), 0..12),
        (0..4u8, any::<bool>(), 0..3u32),
        (1..8usize, any::<u64>()),
    )
        .prop_map(
            |(agents, arrays, ordinary, (sequencer, strict, skip_after), (passes, seed))| Case {
                agents,
                arrays,
                ordinary,
                sequencer,
                strict,
                skip_after,
                passes,
                seed,
            },
        )
}

fn slots(cpu: u64) -> Slots {
    format!("cpu={cpu}").parse().expect("slots")
}

fn session(id: String, owner: String, cpu: u64, at: i64, array: Option<ArrayMember>) -> Session {
    Session {
        id: SessionId(id),
        group: "g".into(),
        owner,
        priority: 0,
        request: slots(cpu),
        image: None,
        kind: SessionType::Batch,
        submitted_at: Timestamp(at),
        state: SessionState::Pending,
        agent: None,
        blocked_passes: 0,
        constraints: Vec::new(),
        devices: Vec::new(),
        array,
    }
}

fn group(c: &Case) -> Snapshot {
    let sequencer = ["fifo", "lifo", "priority", "drf"][c.sequencer as usize];
    let head_of_line = if c.strict { "strict" } else { "backfill" };
    let mut s = snapshot(json!({
        "group": {
            "policy": "fixed",
            "scheduler": sequencer,
            "head_of_line": head_of_line,
            "skip_after": c.skip_after,
        },
    }));
    s.agents = (c.agents.iter().enumerate())
        .map(|(i, &cpu)| Agent {
            id: AgentId(format!("n{i}")),
            group: "g".into(),
            template: None,
            capacity: slots(cpu),
            allocated: Slots::new(),
            state: AgentState::Alive,
            labels: Default::default(),
            external: false,
            drained_by_hand: false,
            idle_since: Some(Timestamp(0)),
            devices: Vec::new(),
            version: None,
            platform: None,
            updating: None,
        })
        .collect();
    for (j, &(n, max, cpu, at)) in c.arrays.iter().enumerate() {
        for i in 0..n {
            let member = ArrayMember {
                id: format!("arr{j}"),
                max_running: max,
            };
            let id = format!("arr{j}-{i:03}");
            s.sessions
                .push(session(id, format!("u{}", j % 2), cpu, at, Some(member)));
        }
    }
    for (i, &(cpu, at, owner)) in c.ordinary.iter().enumerate() {
        s.sessions.push(session(
            format!("s{i:02}"),
            format!("u{owner}"),
            cpu,
            at,
            None,
        ));
    }
    s
}

/// Per capped array: its limit, and how many of its sessions hold capacity now.
fn holding(s: &Snapshot) -> BTreeMap<String, (u32, u32)> {
    let mut held = BTreeMap::new();
    for x in &s.sessions {
        if let Some(ArrayMember {
            id,
            max_running: Some(max),
        }) = &x.array
        {
            let entry = held.entry(id.clone()).or_insert((*max, 0));
            entry.1 += u32::from(x.state.holds_capacity());
        }
    }
    held
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Over passes, with sessions ending between them as a store would see them end: no array
    /// ever has more sessions holding capacity than its limit; a waiting session the limit does
    /// not keep waiting never fits an open agent under backfill that skips at once; the limit's
    /// waits say how many run and are ahead; and no one is held behind a session the limit
    /// keeps waiting.
    #[test]
    fn the_limit_holds_over_passes(c in cases()) {
        let mut s = group(&c);
        let mut rng = Rng::new(c.seed);
        for _ in 0..c.passes {
            let d = cycle(&s);
            apply(&mut s, &d);
            let held = holding(&s);
            for (id, (max, n)) in &held {
                prop_assert!(n <= max, "array {} holds {} with limit %{}", id, n, max);
                prop_assert_eq!(s.array_holding.get(id).copied().unwrap_or(0), *n);
            }
            let capped: Vec<&SessionId> = (d.waiting.iter())
                .filter(|w| matches!(w.reason, WaitReason::ArrayLimit { .. }))
                .map(|w| &w.session)
                .collect();
            for w in &d.waiting {
                match &w.reason {
                    WaitReason::ArrayLimit { array, max_running, running } => {
                        let (max, n) = held[array];
                        prop_assert_eq!((*max_running, *running), (max, n));
                        // The others of the array still pending are those ahead of it.
                        let ahead = (s.sessions.iter())
                            .filter(|x| x.state == SessionState::Pending)
                            .filter(|x| x.array.as_ref().is_some_and(|a| a.id == *array))
                            .filter(|x| !capped.contains(&&x.id))
                            .count() as u32;
                        prop_assert_eq!(ahead, max - n);
                    }
                    WaitReason::HeldBehind { session } => {
                        prop_assert!(!capped.contains(&session), "held behind {}", session);
                    }
                    _ if !c.strict && c.skip_after == 0 => {
                        let x = s.sessions.iter().find(|x| x.id == w.session).unwrap();
                        let fits = (s.agents.iter()).any(|a| x.request.fits_in(&a.available()));
                        prop_assert!(!fits, "{} waits ({}) though an agent has room", x.id, w.reason);
                    }
                    _ => {}
                }
            }
            // Between passes, some of the sessions holding capacity end.
            let running: Vec<String> = (s.sessions.iter())
                .filter(|x| x.state.holds_capacity())
                .map(|x| x.id.0.clone())
                .collect();
            for id in running {
                if rng.below(3) == 0 {
                    end(&mut s, &id);
                }
            }
        }
    }

    /// Sessions the limit keeps waiting change nothing else: without them, the pass places,
    /// launches and asks scale-out for the same, and a carried pass decides as a fresh one.
    #[test]
    fn capped_sessions_launch_nothing_and_change_no_other_decision(
        c in cases(), demand in any::<bool>(), free in 0..3usize,
    ) {
        let mut s = group(&c);
        // A demand group with a template, its agents' room taken by running sessions of the
        // arrays (as many as their limits allow) but on `free` of them.
        s.group.policy.kind = if demand { PolicyKind::Demand } else { PolicyKind::Fixed };
        s.group.policy.batch_idle_ms = 0;
        s.group.policy.batch_max_ms = 0;
        s.group.templates = vec![InstanceTemplate {
            name: "t".into(), slots: slots(8), price_per_hour: 1.0, max: 50,
            labels: Default::default(), devices: Vec::new(),
        }];
        let first = cycle(&s);
        apply(&mut s, &first);
        for a in s.agents.iter_mut().skip(free) {
            a.allocated = a.capacity.clone();
            a.idle_since = None;
        }
        s.now = Timestamp(1_000_000);
        let d = cycle(&s);
        let capped: Vec<&SessionId> = (d.waiting.iter())
            .filter(|w| matches!(w.reason, WaitReason::ArrayLimit { .. }))
            .map(|w| &w.session)
            .collect();
        let mut without = s.clone();
        without.sessions.retain(|x| !capped.contains(&&x.id));
        let other = cycle(&without);
        prop_assert_eq!(&d.placements, &other.placements);
        prop_assert_eq!(&d.launches, &other.launches);
        prop_assert_eq!(&d.scale_out_demand, &other.scale_out_demand);
        prop_assert_eq!(&d.marks, &other.marks);
        let mut rest = d.waiting.clone();
        rest.retain(|w| !capped.contains(&&w.session));
        prop_assert_eq!(rest, other.waiting);

        let mut carry = Carry::default();
        cycle_carrying(&group(&c), &mut carry);
        for a in &s.agents {
            carry.changed(&a.id);
        }
        // Under fair share, what owners hold: the sessions placed since.
        for x in s.sessions.iter().filter(|x| x.state.holds_capacity()) {
            carry.placed(&x.owner, &s.required_shares(x));
        }
        prop_assert_eq!(cycle_carrying(&s, &mut carry), d);
    }
}
