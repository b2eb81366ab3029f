//! The cycle as an operator sees it: what gets rejected, launched, marked, unmarked, terminated
//! and placed, and why sessions wait.

mod common;

use common::snapshot;
use corral_core::{cycle, Decisions, Timestamp};
use serde_json::json;

const G1: &str = "cpu=8,mem=32GiB,gpu=1";
const G4: &str = "cpu=32,mem=244GiB,gpu=4";

fn templates() -> serde_json::Value {
    json!([
        {"name": "g1", "slots": G1, "price": 1.0, "max": 10},
        {"name": "g4", "slots": G4, "price": 3.0, "max": 10}
    ])
}

fn session(id: &str, request: &str) -> serde_json::Value {
    json!({"id": id, "owner": "alice", "request": request, "submitted_at": id[1..].parse::<i64>().unwrap()})
}

fn agent(
    id: &str,
    template: &str,
    capacity: &str,
    allocated: &str,
    state: &str,
) -> serde_json::Value {
    json!({"id": id, "template": template, "capacity": capacity, "allocated": allocated, "state": state, "idle_since": 0})
}

fn launches(d: &Decisions) -> Vec<(String, u32)> {
    d.launches
        .iter()
        .map(|l| (l.template.clone(), l.count))
        .collect()
}

fn placed(d: &Decisions) -> Vec<(String, String)> {
    d.placements
        .iter()
        .map(|p| (p.session.0.clone(), p.agent.0.clone()))
        .collect()
}

fn waiting(d: &Decisions) -> Vec<(String, String)> {
    d.waiting
        .iter()
        .map(|w| (w.session.0.clone(), w.reason.to_string()))
        .collect()
}

fn ids(list: &[corral_core::AgentDecision]) -> Vec<&str> {
    list.iter().map(|a| a.agent.0.as_str()).collect()
}

#[test]
fn an_impossible_request_is_rejected_with_its_reason_and_launches_nothing() {
    let s = snapshot(json!({
        "group": {"policy": "demand"},
        "templates": [{"name": "g1", "slots": G1, "price": 1.0, "max": 10}],
        "sessions": [session("s1", "gpu=2,cpu=1"), session("s2", "cpu=8,mem=64GiB")]
    }));
    let d = cycle(&s);
    assert!(d.launches.is_empty(), "{:?}", d.launches);
    let reasons: Vec<(String, String)> = d
        .rejections
        .iter()
        .map(|r| (r.session.0.clone(), r.reason.to_string()))
        .collect();
    assert_eq!(
        reasons,
        [
            (
                "s1".to_string(),
                "gpu=2 requested; the largest agent or template offers gpu=1".to_string()
            ),
            (
                "s2".to_string(),
                "mem=64GiB requested; the largest agent or template offers mem=32GiB".to_string()
            ),
        ]
    );
    assert!(d.waiting.is_empty() && d.placements.is_empty());
}

#[test]
fn a_request_only_a_standing_agent_holds_is_admitted_beside_those_templates_hold() {
    // The one large agent (of no template) is busy: s2 fits it alone, s1 fits g1, s3 nothing.
    let s = snapshot(json!({
        "group": {"policy": "demand"},
        "templates": [{"name": "g1", "slots": G1, "price": 1.0, "max": 10}],
        "agents": [{"id": "a1", "capacity": G4, "allocated": "cpu=32", "state": "alive"}],
        "sessions": [
            session("s1", "gpu=1,cpu=1"),
            session("s2", "gpu=4,cpu=1"),
            session("s3", "gpu=8,cpu=1"),
        ]
    }));
    let d = cycle(&s);
    let rejected: Vec<(String, String)> = (d.rejections.iter())
        .map(|r| (r.session.0.clone(), r.reason.to_string()))
        .collect();
    assert_eq!(
        rejected,
        [(
            "s3".to_string(),
            "gpu=8 requested; the largest agent or template offers gpu=4".to_string()
        )]
    );
    assert_eq!(launches(&d), [("g1".to_string(), 1)]);
    let waiting: Vec<String> = d.waiting.iter().map(|w| w.session.0.clone()).collect();
    assert_eq!(waiting, ["s1", "s2"]);
}

#[test]
fn demand_launches_the_cheapest_fit_and_sessions_wait_for_it() {
    let s = snapshot(json!({
        "group": {"policy": "demand"},
        "templates": templates(),
        "sessions": [session("s1", "gpu=1"), session("s2", "gpu=1"), session("s3", "gpu=1")]
    }));
    let d = cycle(&s);
    // Three 1-GPU instances cost 3.0, one 4-GPU instance 3.0 too; either is cheapest, and the
    // plan must hold all three sessions for that price.
    let cost: f64 = d
        .launches
        .iter()
        .map(|l| l.count as f64 * if l.template == "g1" { 1.0 } else { 3.0 })
        .sum();
    assert!((cost - 3.0).abs() < 1e-9, "{:?}", d.launches);
    assert_eq!(d.waiting.len(), 3);
    assert!(
        d.waiting
            .iter()
            .all(|w| w.reason.to_string().starts_with("waits for a new g")),
        "{:?}",
        waiting(&d)
    );
}

#[test]
fn launches_in_flight_count_so_the_same_demand_never_launches_twice() {
    let s = snapshot(json!({
        "group": {"policy": "demand", "cooldown_secs": 0},
        "templates": templates(),
        "in_flight": [{"template": "g4", "count": 1}],
        "sessions": [session("s1", "gpu=1"), session("s2", "gpu=2")]
    }));
    let d = cycle(&s);
    assert!(d.launches.is_empty(), "{:?}", d.launches);
    assert!(
        d.waiting
            .iter()
            .all(|w| w.reason.to_string() == "waits for a g4 instance that is starting"),
        "{:?}",
        waiting(&d)
    );
}

#[test]
fn a_request_no_starting_instance_holds_leaves_them_to_smaller_ones() {
    let s = snapshot(json!({
        "group": {"policy": "demand", "cooldown_secs": 0},
        "templates": templates(),
        "in_flight": [{"template": "g1", "count": 1}],
        "sessions": [session("s1", "gpu=4"), session("s2", "gpu=1")]
    }));
    let d = cycle(&s);
    assert_eq!(launches(&d), [("g4".to_string(), 1)]);
    assert_eq!(
        waiting(&d),
        [
            (
                "s1".into(),
                "waits for a new g4 instance (launched in this pass)".into()
            ),
            (
                "s2".into(),
                "waits for a g1 instance that is starting".into()
            )
        ]
    );
}

#[test]
fn a_request_no_marked_agent_holds_leaves_them_to_smaller_ones() {
    let s = snapshot(json!({
        "group": {"policy": "demand", "cooldown_secs": 0},
        "templates": templates(),
        "agents": [agent("a1", "g1", G1, "", "marked")],
        "sessions": [session("s1", "gpu=4"), session("s2", "gpu=1")]
    }));
    let d = cycle(&s);
    assert_eq!(ids(&d.unmarks), ["a1"]);
    assert_eq!(placed(&d), [("s2".into(), "a1".into())]);
    assert_eq!(launches(&d), [("g4".to_string(), 1)]);
}

#[test]
fn a_marked_agent_gets_demand_back_before_anything_is_launched() {
    let s = snapshot(json!({
        "group": {"policy": "demand"},
        "templates": templates(),
        "agents": [agent("a1", "g4", G4, "", "marked")],
        "sessions": [session("s1", "gpu=2")]
    }));
    let d = cycle(&s);
    assert_eq!(ids(&d.unmarks), ["a1"]);
    assert!(d.launches.is_empty() && d.terminations.is_empty());
    assert_eq!(placed(&d), [("s1".into(), "a1".into())]);
}

#[test]
fn an_agent_drained_by_hand_is_never_unmarked_by_the_policy() {
    let mut drained = agent("a1", "g4", G4, "", "marked");
    drained["drained_by_hand"] = json!(true);
    let s = snapshot(json!({
        "group": {"policy": "demand"},
        "templates": templates(),
        "agents": [drained],
        "sessions": [session("s1", "gpu=2")]
    }));
    let d = cycle(&s);
    assert!(d.unmarks.is_empty());
    assert!(d.placements.is_empty());
    assert_eq!(launches(&d).len(), 1);
    assert_eq!(
        ids(&d.terminations),
        ["a1"],
        "a drained, empty agent is terminated"
    );
}

#[test]
fn scale_in_marks_agents_idle_past_the_wait_and_keeps_min_nodes() {
    let idle_old = |id: &str| agent(id, "g1", G1, "", "alive");
    let mut idle_new = agent("a3", "g1", G1, "", "alive");
    idle_new["idle_since"] = json!(550_000);
    let busy = agent("a4", "g1", G1, "cpu=1", "alive");
    let s = snapshot(json!({
        "now": 600_000,
        "group": {"policy": "demand", "min_nodes": 3, "idle_wait_secs": 300},
        "templates": templates(),
        "agents": [idle_old("a1"), idle_old("a2"), idle_new, busy],
    }));
    let d = cycle(&s);
    // a3 has been idle 50 s only; a4 is busy; of a1 and a2 one goes, leaving min_nodes = 3.
    assert_eq!(ids(&d.marks), ["a1"]);
    assert!(
        d.terminations.is_empty(),
        "nothing is terminated in the pass that marks it"
    );
}

#[test]
fn marked_agents_are_terminated_once_empty_and_never_by_a_fixed_policy() {
    let problem = |policy: &str| {
        json!({
            "group": {"policy": policy},
            "templates": templates(),
            "agents": [agent("a1", "g1", G1, "", "marked"), agent("a2", "g1", G1, "cpu=2", "marked")],
        })
    };
    let d = cycle(&snapshot(problem("demand")));
    assert_eq!(ids(&d.terminations), ["a1"]);
    let d = cycle(&snapshot(problem("fixed")));
    assert!(d.terminations.is_empty() && d.marks.is_empty() && d.launches.is_empty());
}

#[test]
fn a_marked_agent_a_running_session_names_is_not_terminated_though_it_reads_empty() {
    // The session's start is recorded before its agent's allocation (a sync in between).
    let s = snapshot(json!({
        "group": {"policy": "demand"},
        "templates": templates(),
        "agents": [
            agent("a1", "g1", G1, "", "marked"),
            agent("a2", "g1", G1, "", "marked"),
            agent("a3", "g1", G1, "", "marked")
        ],
        "sessions": [
            {"id": "s1", "owner": "alice", "request": "cpu=1", "submitted_at": 1, "state": "running", "agent": "a2"}
        ],
    }));
    let d = cycle(&s);
    assert_eq!(ids(&d.terminations), ["a1", "a3"]);
}

#[test]
fn cooldown_and_max_nodes_hold_launches_back_and_say_so() {
    let s = snapshot(json!({
        "now": 30_000,
        "last_scale_out": 0,
        "group": {"policy": "demand", "cooldown_secs": 60},
        "templates": templates(),
        "sessions": [session("s1", "gpu=1")]
    }));
    let d = cycle(&s);
    assert!(d.launches.is_empty());
    assert_eq!(
        waiting(&d),
        [(
            "s1".into(),
            "no agent has room; scale-out cools down, next launch in 30 s".into()
        )]
    );
    assert_eq!(
        d.recheck_at,
        Some(Timestamp(60_000)),
        "a pass runs as it ends"
    );

    let s = snapshot(json!({
        "group": {"policy": "demand", "max_nodes": 1},
        "templates": templates(),
        "agents": [agent("a1", "g1", G1, "gpu=1", "alive")],
        "sessions": [session("s1", "gpu=1")]
    }));
    let d = cycle(&s);
    assert!(d.launches.is_empty());
    assert_eq!(
        waiting(&d),
        [(
            "s1".into(),
            "no agent has room; the group is at max_nodes (1), so it waits for running \
             sessions to end"
                .into()
        )]
    );

    // An external agent does not count toward max_nodes: with a1 external, one is launched.
    let mut external = agent("a1", "g1", G1, "gpu=1", "alive");
    external["external"] = json!(true);
    let d = cycle(&snapshot(json!({
        "group": {"policy": "demand", "max_nodes": 1, "batch_idle_ms": 0, "batch_max_ms": 0},
        "templates": templates(),
        "agents": [external],
        "sessions": [session("s1", "gpu=1")]
    })));
    assert_eq!(launches(&d).len(), 1, "{:?}", d.waiting);

    // At max_nodes, the reason is max_nodes even when a launch budget was spent too.
    let mut s = s;
    s.launch_limits.insert(
        "g1".into(),
        corral_core::LaunchLimit {
            allowed: 0,
            reason: "template g1 launched 20 of its budget of 20 per 60 s".into(),
        },
    );
    assert!(waiting(&cycle(&s))[0].1.contains("max_nodes (1)"));

    // The pass's own launches reach max_nodes: the sessions left say so.
    let s = snapshot(json!({
        "group": {"policy": "demand", "max_nodes": 2},
        "templates": [{"name": "g1", "slots": G1, "price": 1.0, "max": 10}],
        "sessions": [session("s1", "gpu=1"), session("s2", "gpu=1"), session("s3", "gpu=1")]
    }));
    let d = cycle(&s);
    assert_eq!(launches(&d), [("g1".to_string(), 2)]);
    let w = waiting(&d);
    assert!(w[2].1.contains("max_nodes (2)"), "{w:?}");
}

fn at(id: &str, request: &str, submitted_at: i64) -> serde_json::Value {
    json!({"id": id, "owner": "alice", "request": request, "submitted_at": submitted_at})
}

#[test]
fn a_burst_is_planned_once_it_ends_and_waits_say_when() {
    let burst = |now: i64| {
        snapshot(json!({
            "now": now,
            "group": {"policy": "demand", "batch_idle_ms": 1000, "batch_max_ms": 10_000},
            "templates": [{"name": "g1", "slots": G1, "price": 1.0, "max": 10}],
            "sessions": [at("s1", "gpu=1", 1000), at("s2", "gpu=1", 1400)]
        }))
    };
    // Still arriving: nothing launches, and the pass that closes the window is asked for.
    let d = cycle(&burst(1500));
    assert!(d.launches.is_empty(), "{:?}", d.launches);
    assert_eq!(
        d.recheck_at,
        Some(Timestamp(2400)),
        "1 s after the last arrival"
    );
    assert_eq!(
        waiting(&d)[1].1,
        "no agent has room; sessions are still arriving, scale-out plans for all of them in \
         0.9 s at most"
    );
    // No arrival for batch_idle_ms: one launch for the whole burst.
    let d = cycle(&burst(2400));
    assert_eq!(launches(&d), [("g1".to_string(), 2)]);
    assert_eq!(d.recheck_at, None);
}

#[test]
fn a_burst_that_never_pauses_is_planned_after_batch_max_ms() {
    // One session every 900 ms: the idle window never closes, the maximum does.
    let sessions: Vec<_> = (0..12)
        .map(|i| at(&format!("s{i}"), "gpu=1", i * 900))
        .collect();
    let problem = |now: i64| {
        snapshot(json!({
            "now": now,
            "group": {"policy": "demand", "batch_idle_ms": 1000, "batch_max_ms": 10_000},
            "templates": [{"name": "g1", "slots": G1, "price": 1.0, "max": 20}],
            "sessions": sessions.iter().filter(|s| s["submitted_at"].as_i64().unwrap() <= now)
                .collect::<Vec<_>>()
        }))
    };
    let d = cycle(&problem(9_950));
    assert!(d.launches.is_empty());
    assert_eq!(d.recheck_at, Some(Timestamp(10_000)));
    assert_eq!(launches(&cycle(&problem(10_000))), [("g1".to_string(), 12)]);
}

#[test]
fn sessions_no_template_holds_open_no_window_and_old_demand_launches_at_once() {
    let s = snapshot(json!({
        "now": 100_000,
        "group": {"policy": "demand", "batch_idle_ms": 1000, "batch_max_ms": 10_000},
        "templates": [{"name": "g1", "slots": G1, "price": 1.0, "max": 10}],
        "agents": [agent("a1", "g1", "cpu=64,mem=64GiB,gpu=1", "cpu=64", "alive")],
        // s1 fits only a1 (busy); s2 was requeued, submitted long ago.
        "sessions": [at("s1", "cpu=64", 99_900), at("s2", "cpu=1,gpu=1", 1000)]
    }));
    let d = cycle(&s);
    assert_eq!(launches(&d), [("g1".to_string(), 1)]);
    assert_eq!(d.recheck_at, None);
}

#[test]
fn min_nodes_and_headroom_are_kept() {
    let s = snapshot(json!({
        "group": {"policy": "demand", "min_nodes": 2},
        "templates": templates(),
    }));
    assert_eq!(
        launches(&cycle(&s)),
        [("g1".into(), 2)],
        "the cheapest template tops the group up to min_nodes"
    );

    let s = snapshot(json!({
        "group": {"policy": "demand", "headroom": "gpu=2"},
        "templates": templates(),
        "agents": [agent("a1", "g1", G1, "", "alive")],
    }));
    let d = cycle(&s);
    let new_gpus: u32 = d
        .launches
        .iter()
        .map(|l| l.count * if l.template == "g1" { 1 } else { 4 })
        .sum();
    assert!(
        new_gpus >= 1,
        "one free GPU exists, headroom wants two: {:?}",
        d.launches
    );
    assert!(
        d.marks.is_empty(),
        "an idle agent that holds headroom is not marked"
    );
}

#[test]
fn placement_skips_marked_agents_and_binpacks_or_spreads() {
    let agents = json!([
        agent("a1", "g4", G4, "gpu=3", "alive"),
        agent("a2", "g4", G4, "", "alive"),
        agent("a3", "g4", G4, "", "lost"),
        agent("a4", "g4", G4, "gpu=2", "marked"),
    ]);
    let problem = |placement: &str| json!({"group": {"placement": placement}, "templates": templates(), "agents": agents.clone(), "sessions": [session("s1", "gpu=1")]});
    assert_eq!(
        placed(&cycle(&snapshot(problem("binpack")))),
        [("s1".into(), "a1".into())]
    );
    assert_eq!(
        placed(&cycle(&snapshot(problem("spread")))),
        [("s1".into(), "a2".into())]
    );
}

#[test]
fn strict_head_of_line_says_who_holds_the_queue() {
    let s = snapshot(json!({
        "group": {"head_of_line": "strict"},
        "templates": templates(),
        "agents": [agent("a1", "g4", G4, "gpu=2", "alive")],
        "sessions": [session("s1", "gpu=4"), session("s2", "gpu=1")]
    }));
    let d = cycle(&s);
    assert!(d.placements.is_empty());
    assert_eq!(
        waiting(&d),
        [
            (
                "s1".into(),
                "no agent has room; the policy is fixed, so it waits for running sessions to end"
                    .into()
            ),
            (
                "s2".into(),
                "held behind session s1 at the head of the queue".into()
            )
        ]
    );
}

#[test]
fn a_strict_head_at_max_nodes_frees_the_idle_agent_that_only_held_sessions_fit() {
    // max_nodes 1: the idle CPU agent fits only s2, which waits behind the GPU head s1 (found
    // by the simulator: the agent was kept for s2, or marked and brought back for it, forever).
    let group =
        json!({"policy": "demand", "max_nodes": 1, "idle_wait_secs": 0, "head_of_line": "strict"});
    let problem = |state: &str| {
        json!({
            "now": 1000,
            "group": group,
            "templates": [{"name": "cpu", "slots": "cpu=4", "price": 1.0, "max": 3},
                          {"name": "g1", "slots": G1, "price": 4.0, "max": 2}],
            "agents": [agent("a1", "cpu", "cpu=4", "", state)],
            "sessions": [session("s1", "cpu=1,gpu=1"), session("s2", "cpu=1")]
        })
    };
    let d = cycle(&snapshot(problem("alive")));
    assert_eq!(ids(&d.marks), ["a1"]);
    assert!(d.placements.is_empty());
    let d = cycle(&snapshot(problem("marked")));
    assert!(
        d.unmarks.is_empty(),
        "s2 is held behind s1: nothing lands on a1"
    );
    assert_eq!(ids(&d.terminations), ["a1"]);
}

#[test]
fn image_minimums_raise_what_a_session_needs() {
    let s = snapshot(json!({
        "templates": templates(),
        "images": [{"name": "cuda", "min_slots": "gpu=1,mem=16GiB"}],
        "agents": [agent("a1", "g4", G4, "", "alive")],
        "sessions": [{"id": "s1", "request": "cpu=1", "image": "cuda"}]
    }));
    let d = cycle(&s);
    assert_eq!(d.placements[0].slots.to_string(), "cpu=1,gpu=1,mem=16GiB");
}

#[test]
fn drf_serves_the_owner_holding_least_first() {
    let s = snapshot(json!({
        "group": {"scheduler": "drf"},
        "templates": templates(),
        "agents": [agent("a1", "g4", G4, "gpu=2", "alive")],
        "sessions": [
            {"id": "r1", "owner": "alice", "request": "gpu=2", "state": "running", "agent": "a1"},
            {"id": "s1", "owner": "alice", "request": "gpu=1", "submitted_at": 1},
            {"id": "s2", "owner": "bob", "request": "gpu=1", "submitted_at": 2},
            {"id": "s3", "owner": "bob", "request": "gpu=1", "submitted_at": 3}
        ]
    }));
    let d = cycle(&s);
    let mut got: Vec<String> = d.placements.iter().map(|p| p.session.0.clone()).collect();
    got.sort();
    assert_eq!(
        got,
        ["s2", "s3"],
        "bob holds nothing, so both his sessions go before alice's second"
    );
}

#[test]
fn a_session_waits_while_its_only_agent_is_lost_and_says_so() {
    let s = snapshot(json!({
        "templates": templates(),
        "agents": [agent("a1", "g1", G1, "", "lost")],
        "sessions": [session("s1", "gpu=1")]
    }));
    let d = cycle(&s);
    assert!(
        d.rejections.is_empty(),
        "the agent may come back: {:?}",
        d.rejections
    );
    assert_eq!(
        waiting(&d),
        [(
            "s1".to_string(),
            "no agent has room; only agent a1 (lost) could hold it, so it waits for one of them \
             to take sessions again"
                .to_string()
        )]
    );
    // A new request is queued as well (as Slurm queues jobs for drained nodes), but not one
    // the agent could never hold.
    assert!(corral_core::admission::admit(&s, &"gpu=1".parse().unwrap(), &[]).is_ok());
    assert!(corral_core::admission::admit(&s, &"gpu=9".parse().unwrap(), &[]).is_err());
}

#[test]
fn a_template_in_backoff_is_passed_over_for_the_next_cheapest_and_waits_say_why() {
    let mut s = snapshot(json!({
        "group": {"policy": "demand"},
        "templates": templates(),
        "sessions": [session("s1", "gpu=1,cpu=2"), session("s2", "gpu=1,cpu=2")]
    }));
    assert_eq!(
        launches(&cycle(&s)),
        [("g1".to_string(), 2)],
        "g1 is cheapest"
    );

    // g1 failed (say, out of capacity): the policy takes g4 instead, within its allowance.
    let held = |allowed| corral_core::LaunchLimit {
        allowed,
        reason: "template g1 backs off for 60 s more after 1 failure(s): no capacity".into(),
    };
    s.launch_limits.insert("g1".into(), held(0));
    assert_eq!(launches(&cycle(&s)), [("g4".to_string(), 1)]);

    // A budget that allows one more g1 launches one, and the other session goes to g4.
    s.launch_limits.insert("g1".into(), held(1));
    let d = cycle(&s);
    assert_eq!(
        launches(&d).iter().map(|l| l.1).sum::<u32>(),
        2,
        "{:?}",
        launches(&d)
    );
    assert!(
        launches(&d).contains(&("g1".to_string(), 1)),
        "{:?}",
        launches(&d)
    );

    // With every template that fits held back, sessions wait and say why.
    s.launch_limits.insert("g1".into(), held(0));
    s.launch_limits.insert(
        "g4".into(),
        corral_core::LaunchLimit {
            allowed: 0,
            reason: "template g4 launched 20 of its budget of 20 per 60 s".into(),
        },
    );
    let d = cycle(&s);
    assert!(d.launches.is_empty());
    assert!(d.rejections.is_empty(), "held back is not impossible");
    let w = waiting(&d);
    assert_eq!(w.len(), 2);
    assert!(w[0].1.contains("template g1 backs off"), "{w:?}");
}

#[test]
fn a_template_at_its_max_says_so_even_with_launch_budget_left() {
    let mut s = snapshot(json!({
        "group": {"policy": "demand", "batch_idle_ms": 0, "batch_max_ms": 0},
        "templates": [{"name": "g1", "slots": G1, "price": 1.0, "max": 1}],
        "agents": [agent("a1", "g1", G1, "gpu=1", "alive")],
        "sessions": [session("s1", "gpu=1")]
    }));
    s.launch_limits.insert(
        "g1".into(),
        corral_core::LaunchLimit {
            allowed: 16,
            reason: "template g1 launched 4 of its budget of 20 per 60 s".into(),
        },
    );
    let d = cycle(&s);
    assert!(d.launches.is_empty(), "{:?}", d.launches);
    let w = waiting(&d);
    assert!(
        w[0].1
            .contains("every template that fits is at its maximum"),
        "{w:?}"
    );
    assert!(!w[0].1.contains("budget"), "{w:?}");
}

/// Found by fuzzing: a huge count in flight cost one bin per instance (2.4 GB for 10^8). Now it
/// costs what the demand can use, and still counts as capacity and against the limits.
#[test]
fn a_huge_count_in_flight_is_counted_without_a_bin_each() {
    let s = snapshot(json!({
        "group": {"policy": "demand", "max_nodes": 100_000_000, "cooldown_secs": 0,
                  "headroom": "gpu=1000"},
        "templates": [{"name": "g1", "slots": G1, "price": 1.0, "max": 100_000_000}],
        "in_flight": [{"template": "g1", "count": 100_000_000}],
        "sessions": [session("s1", "gpu=1"), session("s2", "gpu=1")]
    }));
    let d = cycle(&s);
    assert!(d.launches.is_empty(), "{:?}", d.launches);
    assert_eq!(
        waiting(&d),
        [
            (
                "s1".to_string(),
                "waits for a g1 instance that is starting".to_string()
            ),
            (
                "s2".to_string(),
                "waits for a g1 instance that is starting".to_string()
            ),
        ]
    );
}
