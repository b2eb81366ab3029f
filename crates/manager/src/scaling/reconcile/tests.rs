//! Table tests of the driver's decisions: each row gives the instances the store holds, what
//! the provider lists and when, and expects the actions, in order. `now` is 1000 s; the
//! provisioning time 600 s, the orphan grace 300 s, a call's timeout 120 s.
//!
//! Branches, and the rows that cover them:
//!
//! time_out: deadline reached, inclusive (T1); not yet (T2); each in-flight phase (T1 requested,
//! T3 launching, T4 provisioning); vendor id and a provider: terminated first (T4); no provider
//! (T5) or never started (T1, T3): nothing to terminate; phases not in flight never late (T6);
//! order kept (T7); texts (`time_out_texts`).
//!
//! settle_claims: a launching row past a call's timeout, inclusive (S1); younger (S2); other
//! phases (S7); proven and listed by agent id: adopted (S1); proven, not listed (S3), listed as
//! gone (S4), or under another or no agent id (S8): failed, never launched; not proven, listed
//! (S5) or not (S6): failed, never adopted; texts (`settle_texts`).
//!
//! orphans: known by vendor id (O1); by agent id where proven (O2), not where not proven (O3);
//! not proven, first seen: reported (O3, O4), seen before: left alone (O5); proven, first seen:
//! grace starts (O6, O11), grace over, inclusive: terminated (O7), a second short: waits (O8);
//! listed as gone: none, so forgotten (O9), no longer listed: forgotten (O10); an id listed
//! twice: the last live listing counts (O12, O13, O14); order as listed (O15); texts
//! (`orphan_texts`).
//!
//! vanished: joined and unlisted (V1) or listed as gone (V2): lost; joined, listed live (V3,
//! V4): none; terminating unlisted: terminated (V5), listed: waits (V6); provisioning unlisted
//! (V7) or listed live (V9): waits, listed as gone: failed (V8, V12); no vendor id (V10);
//! other phases with a vendor id (V11); an id listed gone and live (V12); order as known (V13);
//! texts (`vanished_texts`).
//!
//! reconcile: the three parts from one reading: an adopted claim is no orphan (R1); where the
//! list proves nothing, a claim fails and its instance is an orphan (R2); all at once (R3).

use corral_provider::InstanceState::{Gone, Pending, Running, Stopping};
use corral_store::InstancePhase::{
    Failed, Joined, Launching, Provisioning, Requested, Terminated, Terminating,
};

use super::*;

const NOW: i64 = 1000;

fn at(secs: i64) -> Timestamp {
    Timestamp(secs * 1000)
}

fn secs(t: Timestamp) -> i64 {
    t.0 / 1000
}

fn settings() -> LaunchSettings {
    LaunchSettings {
        max_provisioning_secs: 600,
        orphan_grace_secs: 300,
        call_timeout_secs: 120,
        ..LaunchSettings::default()
    }
}

/// An instance row, requested and last moved at `since` (seconds).
fn row(id: &str, phase: InstancePhase, vendor: Option<&str>, since: i64) -> InstanceRecord {
    InstanceRecord {
        id: id.to_string(),
        group: "g".to_string(),
        template: format!("t-{id}"),
        phase,
        provider_id: vendor.map(str::to_string),
        requested_at: at(since),
        updated_at: at(since),
        reason: None,
    }
}

/// An instance as the provider lists it.
fn inst(vendor: &str, agent: Option<&str>, state: InstanceState) -> Instance {
    Instance {
        id: vendor.to_string(),
        agent_id: agent.map(str::to_string),
        template: None,
        state,
    }
}

#[test]
fn late_instances() {
    struct Case {
        name: &'static str,
        rows: Vec<InstanceRecord>,
        connected: bool,
        /// (agent id, vendor id to terminate)
        want: Vec<(&'static str, Option<&'static str>)>,
    }
    let cases = [
        Case {
            name: "T1 requested, at its deadline: late, nothing to terminate",
            rows: vec![row("a1", Requested, None, 400)],
            connected: true,
            want: vec![("a1", None)],
        },
        Case {
            name: "T2 requested, a second before its deadline: waits",
            rows: vec![row("a1", Requested, None, 401)],
            connected: true,
            want: vec![],
        },
        Case {
            name: "T3 a claim past its deadline: late",
            rows: vec![row("a1", Launching, None, 0)],
            connected: true,
            want: vec![("a1", None)],
        },
        Case {
            name: "T4 provisioning, started, a provider: terminated first",
            rows: vec![row("a1", Provisioning, Some("i-1"), 0)],
            connected: true,
            want: vec![("a1", Some("i-1"))],
        },
        Case {
            name: "T5 provisioning, no provider: failed, terminated by a later reconciliation",
            rows: vec![row("a1", Provisioning, Some("i-1"), 0)],
            connected: false,
            want: vec![("a1", None)],
        },
        Case {
            name: "T6 joined, terminating, ended: never late",
            rows: vec![
                row("a1", Joined, Some("i-1"), 0),
                row("a2", Terminating, Some("i-2"), 0),
                row("a3", Terminated, Some("i-3"), 0),
                row("a4", Failed, None, 0),
            ],
            connected: true,
            want: vec![],
        },
        Case {
            name: "T7 several: the late ones, in the order read",
            rows: vec![
                row("a2", Provisioning, Some("i-2"), 0),
                row("a3", Requested, None, 900),
                row("a1", Requested, None, 100),
            ],
            connected: true,
            want: vec![("a2", Some("i-2")), ("a1", None)],
        },
    ];
    for case in cases {
        let got = time_out(&case.rows, case.connected, &settings(), at(NOW));
        let got: Vec<_> = got
            .iter()
            .map(|l| (l.id.as_str(), l.terminate.as_deref()))
            .collect();
        assert_eq!(got, case.want, "{}", case.name);
    }
}

#[test]
fn time_out_texts() {
    let rows = [
        row("a1", Provisioning, Some("i-1"), 0),
        row("a0", Requested, None, 0),
    ];
    let got = time_out(&rows, true, &settings(), at(NOW));
    let want = [
        Late {
            id: "a1".into(),
            template: "t-a1".into(),
            terminate: Some("i-1".into()),
            reason: "did not join within 600 s".into(),
            failure: "instance i-1 (agent a1) did not join within 600 s".into(),
        },
        Late {
            id: "a0".into(),
            template: "t-a0".into(),
            terminate: None,
            reason: "did not join within 600 s".into(),
            failure: "instance never started (agent a0) did not join within 600 s".into(),
        },
    ];
    assert_eq!(got, want);
}

const ADOPTED: &str = "launched by a driver that stopped before recording it";
const NEVER_LAUNCHED: &str = "claimed by a driver that stopped before launching it";
const UNRECORDED: &str = "claimed by a driver that stopped before recording a launch";

type Settled<'a> = (&'a str, InstancePhase, Option<&'a str>, &'static str);

fn settled(settle: &[Settle]) -> Vec<Settled<'_>> {
    settle
        .iter()
        .map(|s| (s.id.as_str(), s.to, s.vendor.as_deref(), s.reason))
        .collect()
}

#[test]
fn claims_of_a_stopped_driver() {
    struct Case {
        name: &'static str,
        known: Vec<InstanceRecord>,
        listed: Vec<Instance>,
        proven: bool,
        want: Vec<Settled<'static>>,
    }
    let claim = |since| vec![row("a1", Launching, None, since)];
    let cases = [
        Case {
            name: "S1 a call's timeout old, listed by agent id, proven: adopted",
            known: claim(879),
            listed: vec![inst("i-1", Some("a1"), Running)],
            proven: true,
            want: vec![("a1", Provisioning, Some("i-1"), ADOPTED)],
        },
        Case {
            name: "S2 younger than a call may take: left to its driver",
            known: claim(880),
            listed: vec![inst("i-1", Some("a1"), Running)],
            proven: true,
            want: vec![],
        },
        Case {
            name: "S3 proven, not listed: failed, never launched",
            known: claim(0),
            listed: vec![],
            proven: true,
            want: vec![("a1", Failed, None, NEVER_LAUNCHED)],
        },
        Case {
            name: "S4 proven, listed only as gone: failed",
            known: claim(0),
            listed: vec![inst("i-1", Some("a1"), Gone)],
            proven: true,
            want: vec![("a1", Failed, None, NEVER_LAUNCHED)],
        },
        Case {
            name: "S5 not proven, listed by agent id: failed, never adopted",
            known: claim(0),
            listed: vec![inst("i-1", Some("a1"), Running)],
            proven: false,
            want: vec![("a1", Failed, None, UNRECORDED)],
        },
        Case {
            name: "S6 not proven, not listed: failed",
            known: claim(0),
            listed: vec![],
            proven: false,
            want: vec![("a1", Failed, None, UNRECORDED)],
        },
        Case {
            name: "S7 other phases are no claims",
            known: vec![
                row("a1", Requested, None, 0),
                row("a2", Provisioning, Some("i-2"), 0),
                row("a3", Joined, Some("i-3"), 0),
            ],
            listed: vec![],
            proven: true,
            want: vec![],
        },
        Case {
            name: "S8 proven, listed under another agent id or none: failed",
            known: claim(0),
            listed: vec![inst("i-2", Some("a2"), Running), inst("i-3", None, Pending)],
            proven: true,
            want: vec![("a1", Failed, None, NEVER_LAUNCHED)],
        },
    ];
    for case in cases {
        let got = settle_claims(&case.known, &case.listed, case.proven, &settings(), at(NOW));
        assert_eq!(settled(&got), case.want, "{}", case.name);
    }
}

#[test]
fn settle_texts() {
    let known = [row("a1", Launching, None, 0), row("a2", Launching, None, 0)];
    let listed = [inst("i-1", Some("a1"), Running)];
    let got = settle_claims(&known, &listed, true, &settings(), at(NOW));
    let want = [
        Settle {
            id: "a1".into(),
            to: Provisioning,
            vendor: Some("i-1".into()),
            reason: ADOPTED,
            message: "instance of agent a1: launched by a driver that stopped before \
                      recording it; the provider lists it as i-1"
                .into(),
        },
        Settle {
            id: "a2".into(),
            to: Failed,
            vendor: None,
            reason: NEVER_LAUNCHED,
            message: "instance of agent a2: claimed by a driver that stopped before \
                      launching it; the provider lists it nowhere"
                .into(),
        },
    ];
    assert_eq!(got, want);
    let got = settle_claims(&known[..1], &listed, false, &settings(), at(NOW));
    assert_eq!(
        got[0].message,
        "instance of agent a1: claimed by a driver that stopped before recording a launch; \
         the provider lists it nowhere"
    );
}

/// What the driver does with an orphan this round.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Act {
    Wait,
    Report,
    Terminate,
}

fn orphaned(orphans: &[Orphan]) -> Vec<(&str, i64, Act)> {
    orphans
        .iter()
        .map(|o| {
            let act = match o.act {
                OrphanAct::Wait => Act::Wait,
                OrphanAct::Report(_) => Act::Report,
                OrphanAct::Terminate(_) => Act::Terminate,
            };
            (o.vendor.as_str(), secs(o.first_seen), act)
        })
        .collect()
}

struct OrphanCase {
    name: &'static str,
    known: Vec<InstanceRecord>,
    listed: Vec<Instance>,
    proven: bool,
    /// Orphans of earlier rounds: vendor id, first seen (seconds).
    seen: Vec<(&'static str, i64)>,
    want: Vec<(&'static str, i64, Act)>,
}

fn seen_before(seen: &[(&str, i64)]) -> HashMap<String, Timestamp> {
    seen.iter()
        .map(|(id, secs)| (id.to_string(), at(*secs)))
        .collect()
}

fn check_orphans(cases: Vec<OrphanCase>) {
    for case in cases {
        let got = orphans(
            &case.known,
            &case.listed,
            case.proven,
            &seen_before(&case.seen),
            &settings(),
            at(NOW),
        );
        assert_eq!(orphaned(&got), case.want, "{}", case.name);
    }
}

fn joined() -> Vec<InstanceRecord> {
    vec![row("a1", Joined, Some("i-1"), 0)]
}

fn claiming() -> Vec<InstanceRecord> {
    vec![row("a1", Launching, None, 0)]
}

/// i-9, no agent id: no launch of the group's.
fn stray(state: InstanceState) -> Vec<Instance> {
    vec![inst("i-9", None, state)]
}

#[test]
fn orphans_said_waiting_or_terminated() {
    use self::OrphanCase as Case;
    check_orphans(vec![
        Case {
            name: "O1 known by vendor id: ours",
            known: joined(),
            listed: vec![inst("i-1", Some("a1"), Running)],
            proven: true,
            seen: vec![],
            want: vec![],
        },
        Case {
            name: "O2 a launch not recorded yet, by agent id, proven: ours",
            known: claiming(),
            listed: vec![inst("i-1", Some("a1"), Running)],
            proven: true,
            seen: vec![],
            want: vec![],
        },
        Case {
            name: "O3 the same, not proven: an orphan, said once",
            known: claiming(),
            listed: vec![inst("i-1", Some("a1"), Running)],
            proven: false,
            seen: vec![],
            want: vec![("i-1", NOW, Act::Report)],
        },
        Case {
            name: "O4 unknown, not proven, first seen: said",
            known: joined(),
            listed: stray(Pending),
            proven: false,
            seen: vec![],
            want: vec![("i-9", NOW, Act::Report)],
        },
        Case {
            name: "O5 unknown, not proven, seen before: left alone, not said again",
            known: joined(),
            listed: stray(Running),
            proven: false,
            seen: vec![("i-9", 100)],
            want: vec![("i-9", 100, Act::Wait)],
        },
        Case {
            name: "O6 unknown, proven, first seen: its grace starts",
            known: joined(),
            listed: stray(Stopping),
            proven: true,
            seen: vec![],
            want: vec![("i-9", NOW, Act::Wait)],
        },
        Case {
            name: "O7 unknown, proven, seen a grace ago: terminated",
            known: joined(),
            listed: stray(Running),
            proven: true,
            seen: vec![("i-9", 700)],
            want: vec![("i-9", 700, Act::Terminate)],
        },
        Case {
            name: "O8 unknown, proven, a second within its grace: waits",
            known: joined(),
            listed: stray(Running),
            proven: true,
            seen: vec![("i-9", 701)],
            want: vec![("i-9", 701, Act::Wait)],
        },
    ]);
}

#[test]
fn orphans_as_listed() {
    use self::OrphanCase as Case;
    check_orphans(vec![
        Case {
            name: "O9 listed as gone: no orphan (so forgotten)",
            known: joined(),
            listed: stray(Gone),
            proven: true,
            seen: vec![("i-9", 0)],
            want: vec![],
        },
        Case {
            name: "O10 no longer listed: forgotten",
            known: joined(),
            listed: vec![inst("i-1", Some("a1"), Running)],
            proven: true,
            seen: vec![("i-8", 0)],
            want: vec![],
        },
        Case {
            name: "O11 an agent id the manager does not know, proven: an orphan",
            known: joined(),
            listed: vec![inst("i-9", Some("a9"), Running)],
            proven: true,
            seen: vec![],
            want: vec![("i-9", NOW, Act::Wait)],
        },
        Case {
            name: "O12 one id listed twice, last with a known agent id: ours",
            known: claiming(),
            listed: vec![
                inst("i-1", Some("a9"), Running),
                inst("i-1", Some("a1"), Pending),
            ],
            proven: true,
            seen: vec![],
            want: vec![],
        },
        Case {
            name: "O13 one id listed twice, last with an unknown agent id: an orphan",
            known: claiming(),
            listed: vec![
                inst("i-1", Some("a1"), Pending),
                inst("i-1", Some("a9"), Running),
            ],
            proven: true,
            seen: vec![],
            want: vec![("i-1", NOW, Act::Wait)],
        },
        Case {
            name: "O14 one id listed gone and live: the live listing counts",
            known: joined(),
            listed: vec![inst("i-9", None, Gone), inst("i-9", None, Running)],
            proven: true,
            seen: vec![("i-9", 0)],
            want: vec![("i-9", 0, Act::Terminate)],
        },
        Case {
            name: "O15 several: in the order listed",
            known: joined(),
            listed: vec![
                inst("i-b", None, Running),
                inst("i-1", Some("a1"), Running),
                inst("i-a", None, Running),
            ],
            proven: true,
            seen: vec![("i-a", 0)],
            want: vec![("i-b", NOW, Act::Wait), ("i-a", 0, Act::Terminate)],
        },
    ]);
}

#[test]
fn orphan_texts() {
    let listed = [inst("i-9", None, Running)];
    let got = orphans(&[], &listed, false, &HashMap::new(), &settings(), at(NOW));
    let said = "instance i-9 carries the group's tag but the manager never launched it; left \
                alone, as the provider cannot show whose it is";
    assert_eq!(got[0].act, OrphanAct::Report(said.into()));
    let seen = HashMap::from([("i-9".to_string(), at(0))]);
    let got = orphans(&[], &listed, true, &seen, &settings(), at(NOW));
    let said = "instance i-9 carries the group's tag but the manager does not know it; \
                terminated after 300 s";
    assert_eq!(got[0].act, OrphanAct::Terminate(said.into()));
}

fn ended(vanished: &[Vanished]) -> Vec<(&'static str, &str)> {
    vanished
        .iter()
        .map(|v| match v {
            Vanished::Lost { id, .. } => ("lost", id.as_str()),
            Vanished::Terminated { id } => ("terminated", id.as_str()),
            Vanished::Failed { id, .. } => ("failed", id.as_str()),
        })
        .collect()
}

struct VanishedCase {
    name: &'static str,
    known: Vec<InstanceRecord>,
    listed: Vec<Instance>,
    want: Vec<(&'static str, &'static str)>,
}

fn check_vanished(cases: Vec<VanishedCase>) {
    for case in cases {
        let got = vanished(&case.known, &case.listed);
        assert_eq!(ended(&got), case.want, "{}", case.name);
    }
}

/// One instance of agent a1, vendor id i-1.
fn one(phase: InstancePhase) -> Vec<InstanceRecord> {
    vec![row("a1", phase, Some("i-1"), 0)]
}

/// i-1 of agent a1, listed.
fn listed(state: InstanceState) -> Vec<Instance> {
    vec![inst("i-1", Some("a1"), state)]
}

#[test]
fn joined_and_terminating_instances_the_list_says_ended() {
    use self::VanishedCase as Case;
    check_vanished(vec![
        Case {
            name: "V1 joined, no longer listed: lost",
            known: one(Joined),
            listed: vec![],
            want: vec![("lost", "a1")],
        },
        Case {
            name: "V2 joined, listed as gone: lost",
            known: one(Joined),
            listed: listed(Gone),
            want: vec![("lost", "a1")],
        },
        Case {
            name: "V3 joined, listed running: nothing",
            known: one(Joined),
            listed: listed(Running),
            want: vec![],
        },
        Case {
            name: "V4 joined, listed stopping: still there",
            known: one(Joined),
            listed: listed(Stopping),
            want: vec![],
        },
        Case {
            name: "V5 terminating, no longer listed: terminated",
            known: one(Terminating),
            listed: vec![inst("i-2", None, Running)],
            want: vec![("terminated", "a1")],
        },
        Case {
            name: "V6 terminating, listed stopping: waits",
            known: one(Terminating),
            listed: listed(Stopping),
            want: vec![],
        },
        Case {
            name: "V13 several: in the order known",
            known: vec![
                row("a2", Terminating, Some("i-2"), 0),
                row("a1", Joined, Some("i-1"), 0),
            ],
            listed: vec![],
            want: vec![("terminated", "a2"), ("lost", "a1")],
        },
    ]);
}

#[test]
fn other_instances_the_list_says_ended() {
    use self::VanishedCase as Case;
    check_vanished(vec![
        Case {
            name: "V7 provisioning, not listed yet: waits (a fresh one may not be)",
            known: one(Provisioning),
            listed: vec![],
            want: vec![],
        },
        Case {
            name: "V8 provisioning, listed as gone: failed before joining",
            known: one(Provisioning),
            listed: listed(Gone),
            want: vec![("failed", "a1")],
        },
        Case {
            name: "V9 provisioning, listed pending: nothing",
            known: one(Provisioning),
            listed: listed(Pending),
            want: vec![],
        },
        Case {
            name: "V10 no vendor id: nothing to compare",
            known: vec![
                row("a1", Joined, None, 0),
                row("a2", Requested, None, 0),
                row("a3", Launching, None, 0),
                row("a4", Terminating, None, 0),
            ],
            listed: vec![],
            want: vec![],
        },
        Case {
            name: "V11 requested or launching with a vendor id: not for this check",
            known: vec![
                row("a1", Launching, Some("i-1"), 0),
                row("a2", Requested, Some("i-2"), 0),
            ],
            listed: vec![inst("i-2", None, Gone)],
            want: vec![],
        },
        Case {
            name: "V12 ids listed both gone and live: present, yet a provisioning one failed",
            known: vec![
                row("a1", Joined, Some("i-1"), 0),
                row("a2", Provisioning, Some("i-2"), 0),
            ],
            listed: vec![
                inst("i-1", None, Gone),
                inst("i-1", None, Running),
                inst("i-2", None, Running),
                inst("i-2", None, Gone),
            ],
            want: vec![("failed", "a2")],
        },
    ]);
}

#[test]
fn vanished_texts() {
    let known = [
        row("a1", Joined, Some("i-1"), 0),
        row("a2", Terminating, Some("i-2"), 0),
        row("a3", Provisioning, Some("i-3"), 0),
    ];
    let listed = [inst("i-3", Some("a3"), Gone)];
    let want = [
        Vanished::Lost {
            id: "a1".into(),
            vendor: "i-1".into(),
        },
        Vanished::Terminated { id: "a2".into() },
        Vanished::Failed {
            id: "a3".into(),
            template: "t-a3".into(),
            failure: "instance i-3 (agent a3) ended before joining".into(),
        },
    ];
    assert_eq!(vanished(&known, &listed), want);
}

#[test]
fn one_reconciliation() {
    struct Case {
        name: &'static str,
        known: Vec<InstanceRecord>,
        listed: Vec<Instance>,
        proven: bool,
        seen: Vec<(&'static str, i64)>,
        settle: Vec<Settled<'static>>,
        orphans: Vec<(&'static str, i64, Act)>,
        vanished: Vec<(&'static str, &'static str)>,
    }
    let cases = [
        Case {
            name: "R1 a stale claim's instance, proven: adopted, not an orphan",
            known: vec![row("a1", Launching, None, 0)],
            listed: vec![inst("i-1", Some("a1"), Running)],
            proven: true,
            seen: vec![],
            settle: vec![("a1", Provisioning, Some("i-1"), ADOPTED)],
            orphans: vec![],
            vanished: vec![],
        },
        Case {
            name: "R2 the same, not proven: the claim fails, its instance is said once",
            known: vec![row("a1", Launching, None, 0)],
            listed: vec![inst("i-1", Some("a1"), Running)],
            proven: false,
            seen: vec![],
            settle: vec![("a1", Failed, None, UNRECORDED)],
            orphans: vec![("i-1", NOW, Act::Report)],
            vanished: vec![],
        },
        Case {
            name: "R3 all at once",
            known: vec![
                row("a1", Launching, None, 0),
                row("a2", Joined, Some("i-2"), 0),
                row("a3", Terminating, Some("i-3"), 0),
                row("a4", Provisioning, Some("i-4"), 0),
            ],
            listed: vec![inst("i-9", None, Running), inst("i-4", Some("a4"), Gone)],
            proven: true,
            seen: vec![("i-9", 0)],
            settle: vec![("a1", Failed, None, NEVER_LAUNCHED)],
            orphans: vec![("i-9", 0, Act::Terminate)],
            vanished: vec![("lost", "a2"), ("terminated", "a3"), ("failed", "a4")],
        },
    ];
    for case in cases {
        let got = reconcile(
            &case.known,
            &case.listed,
            case.proven,
            &seen_before(&case.seen),
            &settings(),
            at(NOW),
        );
        assert_eq!(settled(&got.settle), case.settle, "{}", case.name);
        assert_eq!(orphaned(&got.orphans), case.orphans, "{}", case.name);
        assert_eq!(ended(&got.vanished), case.vanished, "{}", case.name);
    }
}
