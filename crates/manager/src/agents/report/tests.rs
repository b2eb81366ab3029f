//! Table tests of what a sync decides: each row gives the agent's reports and the records the
//! store held of them, and expects the transitions (in order), what it runs and what to stop.
//! The agent is `a1`; groups `g1` (on_agent_lost: requeue) and `g2` (fail).
//!
//! Branches, and the rows that cover them:
//!
//! arrival: lost and not dismissed: back, alive (A1); back draining: not alive, drains (A2);
//! lost and dismissed: not back (A3); alive, marked: not back (A4, A5), draining: drains (A5).
//!
//! reports: not the agent's (no record R4, another agent's R5, ended R6, pending R18): running
//! or starting stopped (R4, R5, R6, R18), other reports nothing (R7, R8, R23); running: a
//! placed one started (R1), a running one only runs (R2); starting: runs, nothing recorded
//! (R3); refused: placed, requeued with its reason (R9) or none given (R10), running: nothing
//! (R11); disconnected: requeued where the group requeues (R12), failed where it fails (R13), a
//! group with no policy requeues and no reason given (R14); succeeded and failed: the exit code
//! said (R15), the agent's reason kept (R16), neither (R17); a session reported twice: decided
//! as the first report left it (R19 started, R20 requeued, R21 ended); several at once, in
//! order (R22).
//!
//! policies_needed: the groups of the agent's own sessions reported disconnected, once each,
//! in order; nothing for other reports or sessions not its own (`policies`).
//!
//! gone: running sessions neither run nor reported (G1); reported in any state (G2); none held
//! (G3); order kept (G4).

use std::collections::HashMap;

use corral_api::protocol::ReportedState::{
    Disconnected, Failed as EndedFailed, Refused, Running as Runs, Starting, Succeeded,
};
use corral_core::SessionState::{Cancelled, Failed, Pending, Running, Scheduled};
use corral_core::{AgentId, Session, SessionId, SessionType, Slots, Timestamp};

use super::*;

const AGENT: &str = "a1";

/// A session of `group` in `state`, placed on `agent` (if any).
fn record(id: &str, group: &str, agent: Option<&str>, state: SessionState) -> SessionRecord {
    SessionRecord {
        session: Session {
            id: SessionId(id.to_string()),
            group: group.to_string(),
            owner: "u".to_string(),
            priority: 0,
            request: Slots::new(),
            image: None,
            kind: SessionType::Batch,
            submitted_at: Timestamp(0),
            state,
            agent: agent.map(AgentId::from),
            blocked_passes: 0,
            constraints: Vec::new(),
            devices: Vec::new(),
            array: None,
        },
        spec: serde_json::Value::Null,
        allocation: None,
        wait_reason: None,
        end_reason: None,
        exit_code: None,
        started_at: None,
        last_activity: None,
        updated_at: Timestamp(0),
        batch_job: None,
        array_index: None,
        history: Vec::new(),
    }
}

/// A session of the agent's, of group `g1`.
fn held(id: &str, state: SessionState) -> Option<SessionRecord> {
    Some(record(id, "g1", Some(AGENT), state))
}

/// A session of the agent's, of `group`.
fn held_in(id: &str, group: &str, state: SessionState) -> Option<SessionRecord> {
    Some(record(id, group, Some(AGENT), state))
}

fn report(id: &str, state: ReportedState) -> SessionReport {
    SessionReport {
        id: id.to_string(),
        state,
        exit_code: None,
        reason: None,
    }
}

fn ended(id: &str, state: ReportedState, code: Option<i32>, reason: Option<&str>) -> SessionReport {
    SessionReport {
        exit_code: code,
        reason: reason.map(str::to_string),
        ..report(id, state)
    }
}

fn requeue_on_lost() -> HashMap<String, bool> {
    HashMap::from([("g1".to_string(), true), ("g2".to_string(), false)])
}

fn finish(state: SessionState, code: Option<i32>, reason: &str) -> Transition {
    Transition::Finish {
        state,
        exit_code: code,
        reason: reason.to_string(),
    }
}

#[test]
fn arrivals() {
    struct Case {
        name: &'static str,
        state: AgentState,
        draining: bool,
        dismissed: bool,
        want: Arrival,
    }
    let back = || Some("agent a1 is back".to_string());
    let cases = [
        Case {
            name: "A1 lost, back: alive again, with an event",
            state: AgentState::Lost,
            draining: false,
            dismissed: false,
            want: Arrival {
                back: back(),
                alive: true,
                drain: false,
            },
        },
        Case {
            name: "A2 lost, back draining: straight to marked, never alive",
            state: AgentState::Lost,
            draining: true,
            dismissed: false,
            want: Arrival {
                back: back(),
                alive: false,
                drain: true,
            },
        },
        Case {
            name: "A3 lost and dismissed: not welcomed back",
            state: AgentState::Lost,
            draining: false,
            dismissed: true,
            want: Arrival::default(),
        },
        Case {
            name: "A4 alive: nothing",
            state: AgentState::Alive,
            draining: false,
            dismissed: false,
            want: Arrival::default(),
        },
        Case {
            name: "A5 marked, draining: drains",
            state: AgentState::Marked,
            draining: true,
            dismissed: false,
            want: Arrival {
                drain: true,
                ..Arrival::default()
            },
        },
    ];
    for case in cases {
        let got = arrival(AGENT, case.state, case.draining, case.dismissed);
        assert_eq!(got, case.want, "{}", case.name);
    }
}

#[test]
fn report_transitions() {
    struct Case {
        name: &'static str,
        reports: Vec<SessionReport>,
        records: Vec<Option<SessionRecord>>,
        /// (session, group, transition), in order.
        steps: Vec<(&'static str, &'static str, Transition)>,
        running: Vec<&'static str>,
        stop: Vec<&'static str>,
    }
    let cases = [
        Case {
            name: "R1 running, placed: started",
            reports: vec![report("s1", Runs)],
            records: vec![held("s1", Scheduled)],
            steps: vec![("s1", "g1", Transition::Start)],
            running: vec!["s1"],
            stop: vec![],
        },
        Case {
            name: "R2 running, running: runs, nothing recorded",
            reports: vec![report("s1", Runs)],
            records: vec![held("s1", Running)],
            steps: vec![],
            running: vec!["s1"],
            stop: vec![],
        },
        Case {
            name: "R3 starting, placed: runs (not sent again), nothing recorded",
            reports: vec![report("s1", Starting)],
            records: vec![held("s1", Scheduled)],
            steps: vec![],
            running: vec!["s1"],
            stop: vec![],
        },
        Case {
            name: "R4 running, no such session: stopped",
            reports: vec![report("s1", Runs)],
            records: vec![None],
            steps: vec![],
            running: vec![],
            stop: vec!["s1"],
        },
        Case {
            name: "R5 running, another agent's: stopped",
            reports: vec![report("s1", Runs)],
            records: vec![Some(record("s1", "g1", Some("a2"), Running))],
            steps: vec![],
            running: vec![],
            stop: vec!["s1"],
        },
        Case {
            name: "R6 starting, cancelled meanwhile: stopped",
            reports: vec![report("s1", Starting)],
            records: vec![held("s1", Cancelled)],
            steps: vec![],
            running: vec![],
            stop: vec!["s1"],
        },
        Case {
            name: "R7 succeeded or failed, not its own: nothing",
            reports: vec![
                ended("s1", Succeeded, Some(0), None),
                ended("s2", EndedFailed, Some(1), None),
            ],
            records: vec![held("s1", Cancelled), None],
            steps: vec![],
            running: vec![],
            stop: vec![],
        },
        Case {
            name: "R8 refused, not its own: nothing",
            reports: vec![report("s1", Refused)],
            records: vec![Some(record("s1", "g1", Some("a2"), Scheduled))],
            steps: vec![],
            running: vec![],
            stop: vec![],
        },
        Case {
            name: "R9 refused, placed: requeued with the agent's reason",
            reports: vec![ended("s1", Refused, None, Some("no device gpu3"))],
            records: vec![held("s1", Scheduled)],
            steps: vec![(
                "s1",
                "g1",
                Transition::Requeue {
                    why: "no device gpu3".to_string(),
                    reason: "requeued: agent a1 refused it: no device gpu3".to_string(),
                },
            )],
            running: vec![],
            stop: vec![],
        },
        Case {
            name: "R10 refused, placed, no reason: requeued, saying so",
            reports: vec![report("s1", Refused)],
            records: vec![held("s1", Scheduled)],
            steps: vec![(
                "s1",
                "g1",
                Transition::Requeue {
                    why: "no reason given".to_string(),
                    reason: "requeued: agent a1 refused it: no reason given".to_string(),
                },
            )],
            running: vec![],
            stop: vec![],
        },
        Case {
            name: "R11 refused, running already: the running report stands",
            reports: vec![report("s1", Refused)],
            records: vec![held("s1", Running)],
            steps: vec![],
            running: vec![],
            stop: vec![],
        },
        Case {
            name: "R12 disconnected, a group that requeues: requeued",
            reports: vec![ended("s1", Disconnected, None, Some("cut off 30 s"))],
            records: vec![held_in("s1", "g1", Running)],
            steps: vec![(
                "s1",
                "g1",
                Transition::RequeueHeld {
                    reason: "requeued: agent a1 stopped it: cut off 30 s".to_string(),
                },
            )],
            running: vec![],
            stop: vec![],
        },
        Case {
            name: "R13 disconnected, a group that fails: failed",
            reports: vec![ended("s1", Disconnected, None, Some("cut off 30 s"))],
            records: vec![held_in("s1", "g2", Scheduled)],
            steps: vec![(
                "s1",
                "g2",
                Transition::FailHeld {
                    reason: "agent a1 stopped it: cut off 30 s".to_string(),
                },
            )],
            running: vec![],
            stop: vec![],
        },
        Case {
            name: "R14 disconnected, a group with no policy, no reason: requeued",
            reports: vec![report("s1", Disconnected)],
            records: vec![held_in("s1", "g9", Running)],
            steps: vec![(
                "s1",
                "g9",
                Transition::RequeueHeld {
                    reason: "requeued: agent a1 stopped it: it lost contact".to_string(),
                },
            )],
            running: vec![],
            stop: vec![],
        },
        Case {
            name: "R15 succeeded with an exit code: said",
            reports: vec![ended("s1", Succeeded, Some(0), None)],
            records: vec![held("s1", Running)],
            steps: vec![(
                "s1",
                "g1",
                finish(SessionState::Succeeded, Some(0), "exited with code 0"),
            )],
            running: vec![],
            stop: vec![],
        },
        Case {
            name: "R16 failed with a reason: kept, with its exit code",
            reports: vec![ended(
                "s1",
                EndedFailed,
                Some(137),
                Some("killed: out of memory"),
            )],
            records: vec![held("s1", Running)],
            steps: vec![(
                "s1",
                "g1",
                finish(Failed, Some(137), "killed: out of memory"),
            )],
            running: vec![],
            stop: vec![],
        },
        Case {
            name: "R17 failed, placed, neither code nor reason: ended",
            reports: vec![report("s1", EndedFailed)],
            records: vec![held("s1", Scheduled)],
            steps: vec![("s1", "g1", finish(Failed, None, "ended"))],
            running: vec![],
            stop: vec![],
        },
        Case {
            name: "R18 running, requeued meanwhile (pending, no agent): stopped",
            reports: vec![report("s1", Runs)],
            records: vec![Some(record("s1", "g1", None, Pending))],
            steps: vec![],
            running: vec![],
            stop: vec!["s1"],
        },
        Case {
            name: "R19 reported running twice, placed: started once, runs",
            reports: vec![report("s1", Runs), report("s1", Runs)],
            records: vec![held("s1", Scheduled), held("s1", Scheduled)],
            steps: vec![("s1", "g1", Transition::Start)],
            running: vec!["s1", "s1"],
            stop: vec![],
        },
        Case {
            name: "R20 refused then running: requeued, then stopped",
            reports: vec![report("s1", Refused), report("s1", Runs)],
            records: vec![held("s1", Scheduled), held("s1", Scheduled)],
            steps: vec![(
                "s1",
                "g1",
                Transition::Requeue {
                    why: "no reason given".to_string(),
                    reason: "requeued: agent a1 refused it: no reason given".to_string(),
                },
            )],
            running: vec![],
            stop: vec!["s1"],
        },
        Case {
            name: "R21 running (placed) then succeeded: started, ended; again: stopped",
            reports: vec![
                report("s1", Runs),
                ended("s1", Succeeded, Some(0), None),
                report("s1", Runs),
            ],
            records: vec![held("s1", Scheduled); 3],
            steps: vec![
                ("s1", "g1", Transition::Start),
                (
                    "s1",
                    "g1",
                    finish(SessionState::Succeeded, Some(0), "exited with code 0"),
                ),
            ],
            running: vec!["s1"],
            stop: vec!["s1"],
        },
        Case {
            name: "R22 several: in the order reported",
            reports: vec![
                report("s3", Runs),
                report("s1", Starting),
                ended("s2", EndedFailed, Some(2), None),
                report("s4", Runs),
                report("s5", Runs),
            ],
            records: vec![
                held("s3", Scheduled),
                held("s1", Scheduled),
                held_in("s2", "g2", Running),
                None,
                held("s5", Running),
            ],
            steps: vec![
                ("s3", "g1", Transition::Start),
                ("s2", "g2", finish(Failed, Some(2), "exited with code 2")),
            ],
            running: vec!["s3", "s1", "s5"],
            stop: vec!["s4"],
        },
        Case {
            name: "R23 disconnected, not its own: nothing",
            reports: vec![report("s1", Disconnected)],
            records: vec![Some(record("s1", "g1", Some("a2"), Running))],
            steps: vec![],
            running: vec![],
            stop: vec![],
        },
    ];
    for case in cases {
        let got = reports(AGENT, &case.reports, &case.records, &requeue_on_lost());
        let steps: Vec<_> = got
            .steps
            .iter()
            .map(|s| (s.session.as_str(), s.group.as_str(), s.transition.clone()))
            .collect();
        assert_eq!(steps, case.steps, "{}: steps", case.name);
        assert_eq!(got.running, case.running, "{}: running", case.name);
        assert_eq!(got.stop, case.stop, "{}: stop", case.name);
    }
}

#[test]
fn policies() {
    let reports = [
        report("s1", Disconnected),
        report("s2", Disconnected),
        report("s3", Disconnected),
        report("s4", Runs),
        report("s5", Disconnected),
        report("s6", Disconnected),
    ];
    let records = [
        held_in("s1", "g2", Running),
        held_in("s2", "g1", Running),
        held_in("s3", "g2", Scheduled),
        held_in("s4", "g3", Scheduled),
        Some(record("s5", "g4", Some("a2"), Running)),
        None,
    ];
    assert_eq!(
        policies_needed(AGENT, &reports, &records),
        vec!["g2", "g1"],
        "the agent's own disconnected sessions' groups, once each, in order"
    );
    assert!(policies_needed(AGENT, &[], &[]).is_empty());
}

#[test]
fn gone_sessions() {
    struct Case {
        name: &'static str,
        holding: Vec<&'static str>,
        running: Vec<&'static str>,
        reported: Vec<&'static str>,
        want: Vec<&'static str>,
    }
    let cases = [
        Case {
            name: "G1 held running, neither run nor reported: gone",
            holding: vec!["s1", "s2"],
            running: vec!["s1"],
            reported: vec!["s1"],
            want: vec!["s2"],
        },
        Case {
            name: "G2 reported in any state (ended, refused...): not gone",
            holding: vec!["s1", "s2"],
            running: vec![],
            reported: vec!["s1", "s2"],
            want: vec![],
        },
        Case {
            name: "G3 none held: none gone",
            holding: vec![],
            running: vec!["s1"],
            reported: vec!["s1"],
            want: vec![],
        },
        Case {
            name: "G4 several: in the order held",
            holding: vec!["s3", "s1", "s2"],
            running: vec![],
            reported: vec!["s1"],
            want: vec!["s3", "s2"],
        },
    ];
    for case in cases {
        let holding: Vec<_> = case
            .holding
            .iter()
            .map(|id| record(id, "g1", Some(AGENT), Running))
            .collect();
        let running: Vec<String> = case.running.iter().map(|s| s.to_string()).collect();
        let reported: Vec<_> = case
            .reported
            .iter()
            .map(|id| report(id, Succeeded))
            .collect();
        let got = gone(AGENT, &holding, &running, &reported);
        let ids: Vec<_> = got.iter().map(|g| g.session.as_str()).collect();
        assert_eq!(ids, case.want, "{}", case.name);
        for g in &got {
            assert_eq!(g.group, "g1", "{}", case.name);
            assert_eq!(g.reason, "agent a1 no longer runs it", "{}", case.name);
        }
    }
}
