//! What a group's scaling driver decides about the instances it already has, apart from the
//! IO that carries it out: which in-flight instances are too late, how a stopped driver's
//! claims settle, and what the provider's list says of orphans and vanished instances.
//! Pure: what the driver read and `now` in, actions out, in the order the driver takes them.

use std::collections::{HashMap, HashSet};

use corral_core::{LaunchSettings, Timestamp};
use corral_provider::{Instance, InstanceState};
use corral_store::{InstancePhase, InstanceRecord};

/// An in-flight instance that did not join in time: it fails, as its template's failure.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Late {
    /// Its agent id.
    pub id: String,
    pub template: String,
    /// The vendor id to terminate first: none when it never started or no provider is there
    /// (reconciliation terminates it later).
    pub terminate: Option<String>,
    /// Why it failed (the row's reason).
    pub reason: String,
    /// The failure, as the template's backoff event says it.
    pub failure: String,
}

/// Instances in flight (requested, launching, provisioning) past `max_provisioning_secs`
/// from their request. `connected`: whether a provider is there to terminate them.
pub(crate) fn time_out(
    in_flight: &[InstanceRecord],
    connected: bool,
    settings: &LaunchSettings,
    now: Timestamp,
) -> Vec<Late> {
    let reason = format!("did not join within {} s", settings.max_provisioning_secs);
    in_flight
        .iter()
        .filter(|r| InstancePhase::IN_FLIGHT.contains(&r.phase))
        .filter(|r| r.requested_at.plus_secs(settings.max_provisioning_secs) <= now)
        .map(|r| {
            let vendor = r.provider_id.as_deref().unwrap_or("never started");
            Late {
                id: r.id.clone(),
                template: r.template.clone(),
                terminate: r.provider_id.clone().filter(|_| connected),
                failure: format!("instance {vendor} (agent {}) {reason}", r.id),
                reason: reason.clone(),
            }
        })
        .collect()
}

/// A launch claimed by a driver that stopped before saying how it went, settled from the
/// provider's list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Settle {
    /// Its agent id.
    pub id: String,
    /// Provisioning (adopted) or failed; never launched again.
    pub to: InstancePhase,
    /// The vendor id it is adopted with.
    pub vendor: Option<String>,
    pub reason: &'static str,
    /// The `launch_settled` event's message.
    pub message: String,
}

/// Claims (launching rows) older than a launch call may take: the driver that made them
/// stopped (its manager died or lost the group). This driver's own claims are settled within
/// its round, before it reconciles. `proven`: the provider lists only its own instances.
pub(crate) fn settle_claims(
    known: &[InstanceRecord],
    listed: &[Instance],
    proven: bool,
    settings: &LaunchSettings,
    now: Timestamp,
) -> Vec<Settle> {
    let settled_by = |r: &InstanceRecord| r.updated_at.plus_secs(settings.call_timeout_secs + 1);
    known
        .iter()
        .filter(|r| r.phase == InstancePhase::Launching && settled_by(r) <= now)
        .map(|r| {
            // Adopted by its agent id only where the list proves it ours: a batch job named
            // like the pilot may be anyone's, and never becomes the manager's to act on.
            let found = listed.iter().find(|i| {
                proven
                    && i.agent_id.as_deref() == Some(r.id.as_str())
                    && i.state != InstanceState::Gone
            });
            let (to, vendor, reason) = match found {
                Some(i) => (
                    InstancePhase::Provisioning,
                    Some(i.id.as_str()),
                    "launched by a driver that stopped before recording it",
                ),
                None if proven => (
                    InstancePhase::Failed,
                    None,
                    "claimed by a driver that stopped before launching it",
                ),
                None => (
                    InstancePhase::Failed,
                    None,
                    "claimed by a driver that stopped before recording a launch",
                ),
            };
            let message = format!(
                "instance of agent {}: {reason}; the provider lists it {}",
                r.id,
                vendor.map_or("nowhere".to_string(), |v| format!("as {v}"))
            );
            Settle {
                id: r.id.clone(),
                to,
                vendor: vendor.map(str::to_string),
                reason,
                message,
            }
        })
        .collect()
}

/// A listed instance with the group's tag that the manager does not know.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Orphan {
    /// Its vendor id.
    pub vendor: String,
    /// When it was first seen: kept from earlier rounds, or `now`. The driver remembers it
    /// before acting; orphans no longer listed are forgotten.
    pub first_seen: Timestamp,
    pub act: OrphanAct,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum OrphanAct {
    /// Left alone this round: within its grace, or already reported.
    Wait,
    /// Where the tag proves nothing: said once (the `orphan` event's message), left alone,
    /// as it may be anyone's.
    Report(String),
    /// Past its grace: terminated; once that succeeds, forgotten and said (the message).
    Terminate(String),
}

/// The instances listed and not gone, one per vendor id (the last listed where an id comes
/// twice), in the order first listed.
fn present(listed: &[Instance]) -> Vec<&Instance> {
    let last: HashMap<&str, &Instance> = listed
        .iter()
        .filter(|i| i.state != InstanceState::Gone)
        .map(|i| (i.id.as_str(), i))
        .collect();
    let mut seen = HashSet::new();
    listed
        .iter()
        .filter(|i| i.state != InstanceState::Gone && seen.insert(i.id.as_str()))
        .filter_map(|i| last.get(i.id.as_str()).copied())
        .collect()
}

/// Unknown listed instances: terminated once past the grace period where the list proves
/// them the group's (`proven`); otherwise said once and left alone. `seen`: the orphans of
/// earlier rounds, by vendor id, with when each was first seen.
pub(crate) fn orphans(
    known: &[InstanceRecord],
    listed: &[Instance],
    proven: bool,
    seen: &HashMap<String, Timestamp>,
    settings: &LaunchSettings,
    now: Timestamp,
) -> Vec<Orphan> {
    let known_vendor: HashSet<&str> = known
        .iter()
        .filter_map(|r| r.provider_id.as_deref())
        .collect();
    let known_agent: HashSet<&str> = known.iter().map(|r| r.id.as_str()).collect();
    let mut found = Vec::new();
    for i in present(listed) {
        // Known by its vendor id, or (where the list proves it) by the agent id it joins as:
        // a launch not recorded yet.
        let ours = known_vendor.contains(i.id.as_str())
            || proven
                && i.agent_id
                    .as_deref()
                    .is_some_and(|a| known_agent.contains(a));
        if ours {
            continue;
        }
        let before = seen.get(&i.id).copied();
        let first_seen = before.unwrap_or(now);
        let act = if !proven {
            match before {
                None => OrphanAct::Report(format!(
                    "instance {} carries the group's tag but the manager never launched it; \
                     left alone, as the provider cannot show whose it is",
                    i.id
                )),
                Some(_) => OrphanAct::Wait,
            }
        } else if first_seen.plus_secs(settings.orphan_grace_secs) <= now {
            OrphanAct::Terminate(format!(
                "instance {} carries the group's tag but the manager does not know it; \
                 terminated after {} s",
                i.id, settings.orphan_grace_secs
            ))
        } else {
            OrphanAct::Wait
        };
        found.push(Orphan {
            vendor: i.id.clone(),
            first_seen,
            act,
        });
    }
    found
}

/// A known instance the provider's list says has ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Vanished {
    /// Joined, no longer listed (or listed as gone): its agent is lost and terminated.
    Lost { id: String, vendor: String },
    /// Being terminated, and no longer listed: terminated.
    Terminated { id: String },
    /// Provisioning, and listed as gone: it died before joining, as its template's failure.
    Failed {
        id: String,
        template: String,
        failure: String,
    },
}

/// Known instances with a vendor id, against the provider's list. A provisioning instance
/// missing from the list is left alone: a fresh one may not be listed yet, only a listed end
/// counts.
pub(crate) fn vanished(known: &[InstanceRecord], listed: &[Instance]) -> Vec<Vanished> {
    let present: HashSet<&str> = listed
        .iter()
        .filter(|i| i.state != InstanceState::Gone)
        .map(|i| i.id.as_str())
        .collect();
    known
        .iter()
        .filter_map(|r| {
            let vendor = r.provider_id.as_deref()?;
            let gone = !present.contains(vendor);
            let listed_gone = listed
                .iter()
                .any(|i| i.id == vendor && i.state == InstanceState::Gone);
            match r.phase {
                InstancePhase::Joined if gone => Some(Vanished::Lost {
                    id: r.id.clone(),
                    vendor: vendor.to_string(),
                }),
                InstancePhase::Terminating if gone => {
                    Some(Vanished::Terminated { id: r.id.clone() })
                }
                InstancePhase::Provisioning if listed_gone => Some(Vanished::Failed {
                    id: r.id.clone(),
                    template: r.template.clone(),
                    failure: format!("instance {vendor} (agent {}) ended before joining", r.id),
                }),
                _ => None,
            }
        })
        .collect()
}

/// One reconciliation: the provider's list against the live instances the manager knows,
/// all three parts decided from the same reading. The driver carries them out in this order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Reconciliation {
    pub settle: Vec<Settle>,
    pub orphans: Vec<Orphan>,
    pub vanished: Vec<Vanished>,
}

pub(crate) fn reconcile(
    known: &[InstanceRecord],
    listed: &[Instance],
    proven: bool,
    seen: &HashMap<String, Timestamp>,
    settings: &LaunchSettings,
    now: Timestamp,
) -> Reconciliation {
    Reconciliation {
        settle: settle_claims(known, listed, proven, settings, now),
        orphans: orphans(known, listed, proven, seen, settings, now),
        vanished: vanished(known, listed),
    }
}

#[cfg(test)]
mod tests;
