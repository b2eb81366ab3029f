//! Grants against an agent's device list, on both sides of a placement: the manager adds up
//! what sessions hold on each device from their grants before a pass, and the agent checks a
//! new grant against its own account before it starts the session, refusing what its devices
//! cannot hold (the manager then puts the session back in the queue).
//!
//! A kind an agent gives only as a number (`gpu=2`) is that many stand-in devices of an unknown
//! model, `gpu0`, `gpu1`, ..., named as the ledger names them, so grants on them are counted one
//! by one too.

use std::fmt;

use crate::devices::{Device, DeviceGrant, DeviceSet, GPU};
use crate::ledger::MAX_DEVICES;
use crate::model::{Agent, InstanceTemplate};
use crate::slots::{Quantity, SlotName, Slots, SCALE};

/// Why an agent refuses a grant.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GrantConflict {
    #[error("device {id:?} ({kind}) is not one of this agent's devices")]
    UnknownDevice { id: String, kind: String },
    #[error("device {id:?} is granted twice")]
    GrantedTwice { id: String },
    #[error("device {id:?}: {asked} asked beside {held} held by {holders}, of {capacity}")]
    Full {
        id: String,
        /// What and how much: `share 0.5`, `memory 10GiB`.
        asked: String,
        held: String,
        capacity: String,
        holders: Holders,
    },
}

impl GrantConflict {
    /// The sessions holding the device in the way (none for an unknown device).
    pub fn holders(&self) -> &[String] {
        match self {
            GrantConflict::Full { holders, .. } => &holders.0,
            _ => &[],
        }
    }
}

/// Sessions named in a conflict.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Holders(pub Vec<String>);

impl fmt::Display for Holders {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() {
            return f.write_str("no session");
        }
        write!(f, "session(s) {}", self.0.join(", "))
    }
}

/// The stand-ins for `total` of `kind` given only as a number: whole devices named `{kind}0`,
/// `{kind}1`, ... and, for a fraction left over, one device of that share; at most
/// [`MAX_DEVICES`].
pub fn stand_ins(kind: &SlotName, total: Quantity) -> Vec<Device> {
    let mut left = total.milli().min(MAX_DEVICES as u64 * SCALE);
    let mut devices = Vec::new();
    while left > 0 {
        let share = left.min(SCALE);
        left -= share;
        devices.push(Device {
            id: format!("{kind}{}", devices.len()),
            kind: kind.clone(),
            model: String::new(),
            memory: Quantity::ZERO,
            share: Quantity::from_milli(share),
            allocated: Quantity::ZERO,
            allocated_memory: Quantity::ZERO,
        });
    }
    devices
}

/// The devices of an agent as grants name them: its list, then stand-ins for each of `kinds` it
/// gives only as a number in `capacity`.
pub fn with_stand_ins<'a>(
    devices: &[Device],
    capacity: &Slots,
    kinds: impl IntoIterator<Item = &'a SlotName>,
) -> Vec<Device> {
    let mut all = devices.to_vec();
    for kind in kinds {
        if !devices.iter().any(|d| &d.kind == kind) {
            all.extend(stand_ins(kind, capacity.get(kind.as_str())));
        }
    }
    all
}

/// Adds grants to what their devices hold (a grant of a device not in the list holds nothing:
/// the agent no longer reports it).
pub fn hold(devices: &mut [Device], grants: &[DeviceGrant]) {
    change_held(devices, grants, u64::saturating_add);
}

/// Takes grants back from what their devices hold (their session ended).
pub fn release(devices: &mut [Device], grants: &[DeviceGrant]) {
    change_held(devices, grants, u64::saturating_sub);
}

fn change_held(devices: &mut [Device], grants: &[DeviceGrant], change: fn(u64, u64) -> u64) {
    for g in grants {
        if let Some(d) = devices
            .iter_mut()
            .find(|d| d.id == g.id && d.kind == g.kind)
        {
            d.allocated = Quantity::from_milli(change(d.allocated.milli(), g.share.milli()));
            d.allocated_memory =
                Quantity::from_milli(change(d.allocated_memory.milli(), g.memory.milli()));
        }
    }
}

/// The first device holding more than it has: its share, or its memory where that is known.
pub fn overfull(devices: &[Device]) -> Option<&Device> {
    devices
        .iter()
        .find(|d| d.allocated > d.share || (!d.memory.is_zero() && d.allocated_memory > d.memory))
}

/// A fresh instance's devices, as its template's sets say: named `{kind}0`, `{kind}1`, ... per
/// kind, as the stand-ins are.
pub fn of_sets(sets: &[DeviceSet]) -> Vec<Device> {
    let mut devices: Vec<Device> = Vec::new();
    // Per kind, how many devices are named so far (a template lists a few kinds).
    let mut named: Vec<(&SlotName, usize)> = Vec::new();
    for set in sets {
        let at = match named.iter().position(|(kind, _)| **kind == set.kind) {
            Some(at) => at,
            None => {
                named.push((&set.kind, 0));
                named.len() - 1
            }
        };
        for _ in 0..(set.count as usize).min(MAX_DEVICES) {
            let ordinal = named[at].1;
            named[at].1 += 1;
            devices.push(Device {
                id: format!("{}{ordinal}", set.kind),
                kind: set.kind.clone(),
                model: set.model.clone(),
                memory: set.memory,
                share: Quantity::from_milli(SCALE),
                allocated: Quantity::ZERO,
                allocated_memory: Quantity::ZERO,
            });
        }
    }
    devices
}

/// The kinds the devices of `agents` and `templates` name, sorted, and `gpu` too if
/// `with_gpu`.
pub fn listed_kinds(
    agents: &[Agent],
    templates: &[InstanceTemplate],
    with_gpu: bool,
) -> Vec<SlotName> {
    // Borrowed and deduplicated first: thousands of devices name the same few kinds, in runs.
    let mut kinds: std::collections::BTreeSet<&SlotName> = Default::default();
    let mut previous = None;
    let listed = agents.iter().flat_map(|a| &a.devices).map(|d| &d.kind);
    let declared = templates.iter().flat_map(|t| &t.devices);
    for kind in listed.chain(declared.map(|d| &d.kind)) {
        if previous != Some(kind) {
            kinds.insert(kind);
            previous = Some(kind);
        }
    }
    let gpu = SlotName::new(GPU).expect("gpu is a slot name");
    if with_gpu {
        kinds.insert(&gpu);
    }
    kinds.into_iter().cloned().collect()
}

/// The manager's account of a snapshot's devices: each agent's stand-ins made explicit (for
/// `gpu` and every kind some agent or template lists devices of), the grants in `held` (agent
/// id, grants) added on, and then the use an agent's allocation counts that no grant names
/// (sessions placed before devices were counted one by one) spread over its stand-ins from the
/// first, as the ledger counted it before.
pub fn account<'a>(
    agents: &mut [Agent],
    templates: &[InstanceTemplate],
    held: impl IntoIterator<Item = (&'a str, &'a [DeviceGrant])>,
) {
    let kinds = listed_kinds(agents, templates, true);
    let mut listed = Vec::with_capacity(agents.len());
    for a in agents.iter_mut() {
        listed.push(a.devices.len());
        if kinds.iter().any(|k| !a.capacity.get(k.as_str()).is_zero()) {
            a.devices = with_stand_ins(&a.devices, &a.capacity, &kinds);
        }
    }
    for (agent, grants) in held {
        if let Some(a) = agents.iter_mut().find(|a| a.id.0 == agent) {
            hold(&mut a.devices, grants);
        }
    }
    for (a, listed) in agents.iter_mut().zip(listed) {
        let (_, stand_ins) = a.devices.split_at_mut(listed);
        for kind in &kinds {
            let of_kind = || stand_ins.iter().filter(|d| &d.kind == kind);
            let granted: u64 = of_kind().map(|d| d.allocated.milli()).sum();
            let mut ungranted = a
                .allocated
                .get(kind.as_str())
                .milli()
                .saturating_sub(granted);
            for d in stand_ins.iter_mut().filter(|d| &d.kind == kind) {
                let room = d.share.milli().saturating_sub(d.allocated.milli());
                let taken = room.min(ungranted);
                d.allocated = Quantity::from_milli(d.allocated.milli() + taken);
                ungranted -= taken;
            }
        }
    }
}

/// Checks the grants `asked` for one session against an agent's `devices` (with stand-ins,
/// [`with_stand_ins`]) and what its sessions hold there (`held`: session id and its grants).
pub fn check_grants<'a>(
    devices: &[Device],
    held: impl IntoIterator<Item = (&'a str, &'a [DeviceGrant])> + Clone,
    asked: &[DeviceGrant],
) -> Result<(), GrantConflict> {
    for (i, g) in asked.iter().enumerate() {
        if asked[..i].iter().any(|o| o.id == g.id && o.kind == g.kind) {
            return Err(GrantConflict::GrantedTwice { id: g.id.clone() });
        }
        let Some(device) = devices.iter().find(|d| d.id == g.id && d.kind == g.kind) else {
            return Err(GrantConflict::UnknownDevice {
                id: g.id.clone(),
                kind: g.kind.to_string(),
            });
        };
        let mut share = 0u64;
        let mut memory = 0u64;
        let mut holders = Vec::new();
        for (session, grants) in held.clone() {
            for h in grants.iter().filter(|h| h.id == g.id && h.kind == g.kind) {
                share = share.saturating_add(h.share.milli());
                memory = memory.saturating_add(h.memory.milli());
                if !holders.iter().any(|s| s == session) {
                    holders.push(session.to_string());
                }
            }
        }
        let full = |what, asked: u64, held: u64, capacity: u64, text: fn(u64) -> String| {
            GrantConflict::Full {
                id: g.id.clone(),
                asked: format!("{what} {}", text(asked)),
                held: text(held),
                capacity: text(capacity),
                holders: Holders(holders.clone()),
            }
        };
        let units = |m: u64| Quantity::from_milli(m).to_string();
        let bytes = |m: u64| crate::devices::bytes_text(Quantity::from_milli(m));
        if share.saturating_add(g.share.milli()) > device.share.milli() {
            return Err(full(
                "share",
                g.share.milli(),
                share,
                device.share.milli(),
                units,
            ));
        }
        // A device of unknown memory (0) is not counted by memory: grants on it name none.
        let capacity = device.memory.milli();
        if capacity > 0 && memory.saturating_add(g.memory.milli()) > capacity {
            return Err(full("memory", g.memory.milli(), memory, capacity, bytes));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::AgentId;

    #[test]
    fn a_templates_sets_name_devices_in_order_per_kind() {
        let set = |kind: &str, model: &str, count| DeviceSet {
            kind: SlotName::new(kind).unwrap(),
            model: model.into(),
            memory: Quantity::ZERO,
            count,
        };
        let devices = of_sets(&[
            set("gpu", "A100", 2),
            set("fpga", "U250", 1),
            set("gpu", "H100", 2),
        ]);
        let named: Vec<(&str, &str)> = devices
            .iter()
            .map(|d| (d.id.as_str(), d.model.as_str()))
            .collect();
        assert_eq!(
            named,
            [
                ("gpu0", "A100"),
                ("gpu1", "A100"),
                ("fpga0", "U250"),
                ("gpu2", "H100"),
                ("gpu3", "H100")
            ]
        );
    }

    fn agent(capacity: &str, allocated: &str) -> Agent {
        Agent {
            id: AgentId("a1".into()),
            group: String::new(),
            template: None,
            capacity: capacity.parse().unwrap(),
            allocated: allocated.parse().unwrap(),
            state: Default::default(),
            labels: Default::default(),
            external: false,
            drained_by_hand: false,
            version: None,
            platform: None,
            updating: None,
            idle_since: None,
            devices: Vec::new(),
        }
    }

    fn grant(id: &str, share: u64) -> DeviceGrant {
        DeviceGrant {
            id: id.into(),
            kind: SlotName::new(GPU).unwrap(),
            share: Quantity::from_milli(share),
            memory: Quantity::ZERO,
        }
    }

    fn allocated(a: &Agent) -> Vec<(String, u64)> {
        a.devices
            .iter()
            .map(|d| (d.id.clone(), d.allocated.milli()))
            .collect()
    }

    #[test]
    fn stand_ins_hold_their_grants_and_the_rest_from_the_first() {
        // gpu=2.5: two whole stand-ins and one half.
        let mut agents = [agent("cpu=4,gpu=2.5", "gpu=1.5")];
        let on_second = [grant("gpu1", 1000)];
        account(&mut agents, &[], [("a1", &on_second[..])]);
        let shares: Vec<u64> = agents[0].devices.iter().map(|d| d.share.milli()).collect();
        assert_eq!(shares, [1000, 1000, 500]);
        // gpu1 by its grant; the half no grant names (placed before grants) from the first.
        assert_eq!(
            allocated(&agents[0]),
            [
                ("gpu0".into(), 500),
                ("gpu1".into(), 1000),
                ("gpu2".into(), 0)
            ]
        );
    }

    #[test]
    fn listed_devices_hold_only_their_grants() {
        let mut a = agent("gpu=1", "gpu=1");
        a.devices = vec![Device::new("GPU-1", GPU, "A100", Quantity::ZERO).unwrap()];
        let mut agents = [a, agent("cpu=1", "")];
        account(&mut agents, &[], []);
        assert_eq!(allocated(&agents[0]), [("GPU-1".into(), 0)]);
        assert!(agents[1].devices.is_empty(), "no GPU, no stand-in");
    }
}
