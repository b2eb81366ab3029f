//! Table tests of what the watches decide. `now` is 1000 s; `lost_after` 30 s unless a row
//! says otherwise (its stop's grace 10 s, its release 41 s after the agent was last heard).
//!
//! Branches, and the rows that cover them:
//!
//! deadlines: `lost_after` and the release before `now` (D1), a short `lost_after` whose grace
//! is a third of it (D2).
//!
//! fate: `keep`, whatever `on_agent_lost` (F1, F2); `stop` with requeue (F3) or fail (F4); no
//! group: the defaults, stop and requeue (F5); a wait that is not whole seconds, rounded up (F6).
//!
//! release: no group (L1); `keep` (L2); `stop` with requeue (L3) or fail (L4).
//!
//! ends_any: persistent with no maximum lifetime (E1); persistent with one (E2); idle (E3).
//!
//! due: maximum lifetime reached, inclusive (M1), a second short (M2); no start recorded:
//! from the last change (M3); idle, interactive, past the timeout from its last use, inclusive
//! (M4), a second short (M5), never used: from its start (M6); batch never idle (M7);
//! persistent never idle (M8); both due: the lifetime said (M9); order kept (M10).
//!
//! overdue: waited `input_wait_secs` from its placement, inclusive (O1); a second short (O2);
//! order kept (O3). inputs_failure: none missing (I1); the missing named (I2).

use corral_core::{AgentId, Session, SessionId, SessionState, SessionType, Slots};

use super::*;

const NOW: i64 = 1000;

fn at(secs: i64) -> Timestamp {
    Timestamp(secs * 1000)
}

fn policy(on_disconnect: OnDisconnect, on_agent_lost: OnAgentLost) -> ScalingPolicy {
    ScalingPolicy {
        on_disconnect,
        on_agent_lost,
        ..ScalingPolicy::default()
    }
}

/// A running session of `kind`, last changed at `changed`, started and last used when given
/// (seconds).
fn session(
    id: &str,
    kind: SessionType,
    changed: i64,
    started: Option<i64>,
    used: Option<i64>,
) -> SessionRecord {
    SessionRecord {
        session: Session {
            id: SessionId(id.to_string()),
            group: "g".to_string(),
            owner: "u".to_string(),
            priority: 0,
            request: Slots::new(),
            image: None,
            kind,
            submitted_at: Timestamp(0),
            state: SessionState::Running,
            agent: Some(AgentId::from("a1")),
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
        started_at: started.map(at),
        last_activity: used.map(at),
        updated_at: at(changed),
        batch_job: None,
        array_index: None,
        history: Vec::new(),
    }
}

fn termination(mode: TerminationMode, max: Option<u64>) -> Termination {
    Termination {
        mode,
        idle_timeout_secs: 60,
        max_lifetime_secs: max,
        default_time_limit_secs: None,
        input_wait_secs: 900,
    }
}

#[test]
fn liveness_deadlines() {
    let s = Duration::from_secs;
    let d1 = deadlines(at(NOW), s(30));
    assert_eq!(d1.silent_before, at(970), "D1 lost after 30 s");
    assert_eq!(d1.release_before, at(959), "D1 released 41 s after");
    let d2 = deadlines(at(NOW), s(3));
    assert_eq!(d2.silent_before, at(997), "D2 lost after 3 s");
    assert_eq!(
        d2.release_before,
        at(995),
        "D2 released 5 s after (grace 1 s, and 1 s)"
    );
}

#[test]
fn lost_fates() {
    use corral_core::OnAgentLost::{Fail, Requeue};
    use corral_core::OnDisconnect::{Keep, Stop};
    let keep = "stay with it: it keeps running them, and they are requeued only if it is gone \
                for good";
    let cases = [
        (
            "F1 keep, requeue",
            Some(policy(Keep, Requeue)),
            30_000,
            keep.to_string(),
        ),
        (
            "F2 keep, fail",
            Some(policy(Keep, Fail)),
            30_000,
            keep.to_string(),
        ),
        (
            "F3 stop, requeue",
            Some(policy(Stop, Requeue)),
            30_000,
            "stay with it while it stops them itself; requeued in 11 s unless it is back"
                .to_string(),
        ),
        (
            "F4 stop, fail",
            Some(policy(Stop, Fail)),
            30_000,
            "stay with it while it stops them itself; failed in 11 s unless it is back".to_string(),
        ),
        (
            "F5 no group: stop, requeue",
            None,
            30_000,
            "stay with it while it stops them itself; requeued in 11 s unless it is back"
                .to_string(),
        ),
        (
            "F6 lost after 2.5 s: 1.83 s rounded up",
            Some(policy(Stop, Requeue)),
            2_500,
            "stay with it while it stops them itself; requeued in 2 s unless it is back"
                .to_string(),
        ),
    ];
    for (name, policy, lost_after_ms, want) in cases {
        let got = fate(policy.as_ref(), Duration::from_millis(lost_after_ms));
        assert_eq!(got, want, "{name}");
    }
}

#[test]
fn releases() {
    use corral_core::OnAgentLost::{Fail, Requeue};
    use corral_core::OnDisconnect::{Keep, Stop};
    let cases = [
        ("L1 no group: they stay", None, None),
        ("L2 keep: they stay", Some(policy(Keep, Requeue)), None),
        ("L3 stop, requeue", Some(policy(Stop, Requeue)), Some(true)),
        ("L4 stop, fail", Some(policy(Stop, Fail)), Some(false)),
    ];
    for (name, policy, want) in cases {
        assert_eq!(release(policy.as_ref()), want, "{name}");
    }
}

#[test]
fn policies_that_end_sessions() {
    use corral_core::TerminationMode::{Idle, Persistent};
    assert!(!ends_any(&termination(Persistent, None)), "E1");
    assert!(ends_any(&termination(Persistent, Some(100))), "E2");
    assert!(ends_any(&termination(Idle, None)), "E3");
}

#[test]
fn terminations_due() {
    use corral_core::SessionType::{Batch, Interactive};
    use corral_core::TerminationMode::{Idle, Persistent};
    struct Case {
        name: &'static str,
        policy: Termination,
        running: Vec<SessionRecord>,
        /// (session, why), in order.
        want: Vec<(&'static str, &'static str)>,
    }
    let lifetime = "ran for its maximum lifetime of 100 s";
    let idle = "idle for 60 s";
    let cases = [
        Case {
            name: "M1 started 100 s ago, a lifetime of 100 s: ends",
            policy: termination(Persistent, Some(100)),
            running: vec![session("s1", Batch, 900, Some(900), None)],
            want: vec![("s1", lifetime)],
        },
        Case {
            name: "M2 started 99 s ago: runs on",
            policy: termination(Persistent, Some(100)),
            running: vec![session("s1", Batch, 901, Some(901), None)],
            want: vec![],
        },
        Case {
            name: "M3 no start recorded: counted from its last change",
            policy: termination(Persistent, Some(100)),
            running: vec![
                session("s1", Batch, 900, None, None),
                session("s2", Batch, 950, None, None),
            ],
            want: vec![("s1", lifetime)],
        },
        Case {
            name: "M4 interactive, last used 60 s ago: idle",
            policy: termination(Idle, None),
            running: vec![session("s1", Interactive, 0, Some(0), Some(940))],
            want: vec![("s1", idle)],
        },
        Case {
            name: "M5 interactive, last used 59 s ago: runs on",
            policy: termination(Idle, None),
            running: vec![session("s1", Interactive, 0, Some(0), Some(941))],
            want: vec![],
        },
        Case {
            name: "M6 interactive, never used: idle from its start",
            policy: termination(Idle, None),
            running: vec![
                session("s1", Interactive, 0, Some(940), None),
                session("s2", Interactive, 0, Some(941), None),
            ],
            want: vec![("s1", idle)],
        },
        Case {
            name: "M7 batch, unused for long: never idle",
            policy: termination(Idle, None),
            running: vec![session("s1", Batch, 0, Some(0), None)],
            want: vec![],
        },
        Case {
            name: "M8 persistent with a lifetime, interactive unused: not idle",
            policy: termination(Persistent, Some(10_000)),
            running: vec![session("s1", Interactive, 0, Some(0), None)],
            want: vec![],
        },
        Case {
            name: "M9 idle and past its lifetime: the lifetime said",
            policy: termination(Idle, Some(100)),
            running: vec![session("s1", Interactive, 0, Some(0), None)],
            want: vec![("s1", lifetime)],
        },
        Case {
            name: "M10 several: the due ones, in the order read",
            policy: termination(Idle, Some(100)),
            running: vec![
                session("s3", Interactive, 0, Some(950), Some(950)),
                session("s1", Batch, 0, Some(0), None),
                session("s4", Batch, 0, Some(990), None),
                session("s2", Interactive, 0, Some(930), Some(930)),
            ],
            want: vec![("s1", lifetime), ("s2", idle)],
        },
    ];
    for case in cases {
        let got = due(&case.policy, &case.running, at(NOW));
        let got: Vec<_> = got
            .iter()
            .map(|d| (d.record.session.id.0.as_str(), d.reason.clone()))
            .collect();
        let want: Vec<_> = case
            .want
            .iter()
            .map(|(id, why)| (*id, format!("ended by the group's policy: {why}")))
            .collect();
        assert_eq!(got, want, "{}", case.name);
    }
}

#[test]
fn inputs_overdue() {
    let t = termination(TerminationMode::Persistent, None);
    let placed = |id, changed| session(id, SessionType::Batch, changed, None, None);
    let scheduled = [
        placed("s3", 100),
        placed("s1", 101),
        placed("s2", 0),
        placed("s4", 999),
    ];
    let got: Vec<_> = overdue(&t, &scheduled, at(NOW))
        .iter()
        .map(|r| r.session.id.0.as_str())
        .collect();
    assert_eq!(
        got,
        vec!["s3", "s2"],
        "O1 placed 900 s ago: overdue; O2 899 s ago: not yet; O3 in the order read"
    );

    assert_eq!(inputs_failure(&t, &[]), None, "I1 none missing: it stays");
    let missing = ["data.csv", "conf/a.toml"];
    assert_eq!(
        inputs_failure(&t, &missing).as_deref(),
        Some(
            "its inputs did not arrive within 900 s of its placement \
             (missing: data.csv, conf/a.toml)"
        ),
        "I2 the missing named"
    );
}
