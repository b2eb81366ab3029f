//! What the manager's watches decide, apart from the IO that carries it out
//! ([`super::watches`]): when a silent agent counts as lost and what its lost event says of its
//! sessions, whether a lost agent's sessions leave it, which running sessions the group's
//! termination policy ends, and which placed sessions waited too long for their inputs. Pure:
//! what the watch read and `now` in, actions out, in the order read.

use std::time::Duration;

use corral_core::{
    OnAgentLost, OnDisconnect, ScalingPolicy, Termination, TerminationMode, Timestamp,
};
use corral_store::SessionRecord;

/// The instants the liveness watch reads agents against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Deadlines {
    /// Agents taking part not heard from since then are lost.
    pub silent_before: Timestamp,
    /// Lost agents not heard from since then have surely stopped their sessions (`stop`): the
    /// sessions may go to others.
    pub release_before: Timestamp,
}

/// `now` less `lost_after`, and less [`corral_core::disconnect::release_after`].
pub(crate) fn deadlines(now: Timestamp, lost_after: Duration) -> Deadlines {
    let ago = |d: Duration| Timestamp(now.0 - i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
    Deadlines {
        silent_before: ago(lost_after),
        release_before: ago(corral_core::disconnect::release_after(lost_after)),
    }
}

/// What the `lost` event of an agent that missed its heartbeats says becomes of its sessions,
/// under its group's policy (`None`: no group, whose defaults apply).
pub(crate) fn fate(policy: Option<&ScalingPolicy>, lost_after: Duration) -> String {
    let on_disconnect = policy.map(|p| p.on_disconnect).unwrap_or_default();
    let requeue = policy.is_none_or(|p| p.on_agent_lost == OnAgentLost::Requeue);
    let release_after = corral_core::disconnect::release_after(lost_after);
    match (on_disconnect, requeue) {
        (OnDisconnect::Keep, _) => {
            "stay with it: it keeps running them, and they are requeued only if it is gone for good"
                .to_string()
        }
        (OnDisconnect::Stop, requeue) => format!(
            "stay with it while it stops them itself; {} in {} s unless it is back",
            if requeue { "requeued" } else { "failed" },
            (release_after - lost_after).as_secs_f64().ceil()
        ),
    }
}

/// Whether the sessions a lost agent still holds leave it now it has surely stopped them,
/// and how: `Some(true)` requeued, `Some(false)` failed; `None` they stay (no group, or its
/// agents keep running their sessions while cut off).
pub(crate) fn release(policy: Option<&ScalingPolicy>) -> Option<bool> {
    let policy = policy?;
    if policy.on_disconnect == OnDisconnect::Keep {
        return None;
    }
    Some(policy.on_agent_lost == OnAgentLost::Requeue)
}

/// Whether the termination policy ends any running session: a persistent one with no
/// maximum lifetime ends none, and its sessions are not read.
pub(crate) fn ends_any(t: &Termination) -> bool {
    t.mode != TerminationMode::Persistent || t.max_lifetime_secs.is_some()
}

/// A running session the termination policy ends now, with the reason it is cancelled.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Due<'a> {
    pub record: &'a SessionRecord,
    pub reason: String,
}

/// The running sessions of `running` the policy ends at `now`: past their maximum lifetime
/// from their start, or interactive and idle past the timeout from their last use (a session
/// with no start recorded counts from its last change, one never used from its start).
pub(crate) fn due<'a>(
    t: &Termination,
    running: &'a [SessionRecord],
    now: Timestamp,
) -> Vec<Due<'a>> {
    running
        .iter()
        .filter_map(|r| {
            let started = r.started_at.unwrap_or(r.updated_at);
            let active = r.last_activity.unwrap_or(started);
            let why = t.ends(r.session.kind, started, active, now)?;
            Some(Due {
                record: r,
                reason: format!("ended by the group's policy: {why}"),
            })
        })
        .collect()
}

/// The placed sessions of `scheduled` that have waited `input_wait_secs` since their
/// placement (their last change) at `now`: failed if an input is still missing.
pub(crate) fn overdue<'a>(
    t: &Termination,
    scheduled: &'a [SessionRecord],
    now: Timestamp,
) -> Vec<&'a SessionRecord> {
    scheduled
        .iter()
        .filter(|r| t.inputs_overdue(r.updated_at, now))
        .collect()
}

/// Why an overdue session fails, naming the inputs still `missing`; `None` when none is (it
/// stays, and starts).
pub(crate) fn inputs_failure(t: &Termination, missing: &[&str]) -> Option<String> {
    (!missing.is_empty()).then(|| {
        format!(
            "its inputs did not arrive within {} s of its placement (missing: {})",
            t.input_wait_secs,
            missing.join(", ")
        )
    })
}

#[cfg(test)]
mod tests;
