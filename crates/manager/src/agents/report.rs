//! What an agent's sync changes, decided apart from the IO that carries it out: the agent
//! itself (back from lost, draining), each session it reports (started, refused, stopped while
//! cut off, ended) and the running sessions it no longer reports. Pure: the agent's state, its
//! reports and the records the sync read in; what to record, run and stop out, in the order
//! the sync carries it out ([`super::sync`]). The clock is not read here: the store stamps
//! what it records with the sync's `now`.

use std::collections::HashMap;

use corral_api::protocol::{ReportedState, SessionReport};
use corral_core::{AgentState, SessionState};
use corral_store::SessionRecord;

/// What a sync does about the agent itself, before its reports.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Arrival {
    /// A lost agent is back: the `back` event's message (its group woken).
    pub back: Option<String>,
    /// It is set alive again: back and not draining (one back and draining goes straight to
    /// marked by its drain, never alive meanwhile).
    pub alive: bool,
    /// It drains itself: marked by hand, so the policy never unmarks it.
    pub drain: bool,
}

/// The agent's side of a sync. `dismissed`: an external agent told to leave, which is not
/// welcomed back.
pub(crate) fn arrival(id: &str, state: AgentState, draining: bool, dismissed: bool) -> Arrival {
    let back = state == AgentState::Lost && !dismissed;
    Arrival {
        back: back.then(|| format!("agent {id} is back")),
        alive: back && !draining,
        drain: draining,
    }
}

/// A session's change of state that one report records.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Transition {
    /// Placed and reported running: it started (`start_session`).
    Start,
    /// Placed, and refused by the agent before it started (`why`, its words): back to the
    /// queue (`requeue_session`), a conflict (a cancel meanwhile) ignored.
    Requeue { why: String, reason: String },
    /// Stopped by the agent itself, cut off from the manager, where the group's
    /// `on_agent_lost` requeues: back to the queue (`requeue_held_session`), a conflict ignored.
    RequeueHeld { reason: String },
    /// The same where `on_agent_lost` fails: failed with no exit code, a conflict ignored.
    FailHeld { reason: String },
    /// It ended on its own, succeeded or failed (`finish_session`).
    Finish {
        state: SessionState,
        exit_code: Option<i32>,
        reason: String,
    },
}

/// One transition to record, in the order the sessions were reported.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Step {
    pub session: String,
    /// Its group, woken once it is recorded (but for a start, which frees nothing).
    pub group: String,
    pub transition: Transition,
}

/// What a sync's reports decide.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Reports {
    /// The transitions to record, in the order reported.
    pub steps: Vec<Step>,
    /// Sessions of the agent it runs or is about to run (reported running or starting): not
    /// sent again, and stopped along with the rest if it is told to leave.
    pub running: Vec<String>,
    /// Sessions it reports running or starting that are not its own (ended, cancelled,
    /// requeued elsewhere, never placed there): to stop.
    pub stop: Vec<String>,
}

/// The session is placed on agent `id` and holds capacity there (scheduled or running).
pub(crate) fn ours(id: &str, record: &SessionRecord) -> bool {
    record.session.agent.as_ref().is_some_and(|a| a.0 == id)
        && record.session.state.holds_capacity()
}

/// The groups whose `on_agent_lost` the reports need: those of the agent's own sessions it
/// reports stopped while cut off. `records[i]` is what the store held of `reports[i]`.
pub(crate) fn policies_needed<'a>(
    id: &str,
    reports: &[SessionReport],
    records: &'a [Option<SessionRecord>],
) -> Vec<&'a str> {
    let mut groups: Vec<&str> = Vec::new();
    for (report, record) in reports.iter().zip(records) {
        let Some(record) = record.as_ref().filter(|r| ours(id, r)) else {
            continue;
        };
        let group = record.session.group.as_str();
        if report.state == ReportedState::Disconnected && !groups.contains(&group) {
            groups.push(group);
        }
    }
    groups
}

/// What agent `id`'s reports record, run and stop. `records[i]` is what the store held of
/// `reports[i]` (read before any of them is recorded); `requeue_on_lost` says, by group,
/// whether `on_agent_lost` requeues (a group not in it requeues, as one with no policy does).
/// A session reported twice is decided the second time as the first report left it, as a
/// read after the first write would find it.
pub(crate) fn reports(
    id: &str,
    reports: &[SessionReport],
    records: &[Option<SessionRecord>],
    requeue_on_lost: &HashMap<String, bool>,
) -> Reports {
    let mut out = Reports::default();
    // The state this sync leaves each session reported in, and its group; `None`: no longer
    // the agent's.
    let mut left: HashMap<&str, Option<(SessionState, &str)>> = HashMap::new();
    for (report, record) in reports.iter().zip(records) {
        let held = match left.get(report.id.as_str()) {
            Some(held) => *held,
            None => record
                .as_ref()
                .filter(|r| ours(id, r))
                .map(|r| (r.session.state, r.session.group.as_str())),
        };
        let Some((state, group)) = held else {
            // Ended, cancelled, requeued elsewhere, or never ours: stop it (if it still runs).
            if matches!(
                report.state,
                ReportedState::Running | ReportedState::Starting
            ) {
                out.stop.push(report.id.clone());
            }
            continue;
        };
        let transition = decide(id, report, state, requeue_on_lost.get(group).copied());
        let after = match &transition {
            None => Some((state, group)),
            Some(Transition::Start) => Some((SessionState::Running, group)),
            // Requeued or ended: no longer held by the agent.
            Some(_) => None,
        };
        left.insert(report.id.as_str(), after);
        if matches!(
            report.state,
            ReportedState::Running | ReportedState::Starting
        ) {
            out.running.push(report.id.clone());
        }
        if let Some(transition) = transition {
            out.steps.push(Step {
                session: report.id.clone(),
                group: group.to_string(),
                transition,
            });
        }
    }
    out
}

/// The transition one report of a session agent `id` holds (in `state`) records, if any.
/// `requeue`: whether the session's group requeues the sessions of a lost agent (`None`: no
/// policy, which requeues).
fn decide(
    id: &str,
    report: &SessionReport,
    state: SessionState,
    requeue: Option<bool>,
) -> Option<Transition> {
    match report.state {
        ReportedState::Running if state == SessionState::Scheduled => Some(Transition::Start),
        // Running already, or taken and waiting for devices a stopping session frees.
        ReportedState::Running | ReportedState::Starting => None,
        ReportedState::Refused if state == SessionState::Scheduled => {
            let why = report.reason.as_deref().unwrap_or("no reason given");
            Some(Transition::Requeue {
                reason: format!("requeued: agent {id} refused it: {why}"),
                why: why.to_string(),
            })
        }
        // Refusing what it already runs says nothing new: the running report stands.
        ReportedState::Refused => None,
        // It stopped the session itself, cut off from the manager: as for a lost agent.
        ReportedState::Disconnected => {
            let why = report.reason.as_deref().unwrap_or("it lost contact");
            Some(match requeue.unwrap_or(true) {
                true => Transition::RequeueHeld {
                    reason: format!("requeued: agent {id} stopped it: {why}"),
                },
                false => Transition::FailHeld {
                    reason: format!("agent {id} stopped it: {why}"),
                },
            })
        }
        ReportedState::Succeeded | ReportedState::Failed => {
            let state = match report.state {
                ReportedState::Succeeded => SessionState::Succeeded,
                _ => SessionState::Failed,
            };
            let reason = report
                .reason
                .clone()
                .unwrap_or_else(|| match report.exit_code {
                    Some(code) => format!("exited with code {code}"),
                    None => "ended".into(),
                });
            Some(Transition::Finish {
                state,
                exit_code: report.exit_code,
                reason,
            })
        }
    }
}

/// A running session the agent no longer reports: it restarted without it, so it failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Gone {
    pub session: String,
    /// Its group, woken once it is recorded.
    pub group: String,
    pub reason: String,
}

/// The sessions agent `id` holds running (`holding`, read once its reports were recorded)
/// that it neither runs (`running`) nor reports at all.
pub(crate) fn gone(
    id: &str,
    holding: &[SessionRecord],
    running: &[String],
    reports: &[SessionReport],
) -> Vec<Gone> {
    holding
        .iter()
        .filter(|r| {
            let sid = r.session.id.0.as_str();
            !running.iter().any(|r| r == sid) && !reports.iter().any(|r| r.id == sid)
        })
        .map(|r| Gone {
            session: r.session.id.0.clone(),
            group: r.session.group.clone(),
            reason: format!("agent {id} no longer runs it"),
        })
        .collect()
}

#[cfg(test)]
mod tests;
