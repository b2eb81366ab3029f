//! Capacity that is not in the group now but may come back: agents removed by hand within the
//! retention, and nodes the operator declares for the group. A queue survives maintenance: a
//! session only such capacity could hold waits for it, saying so, instead of being refused.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::decisions::human_ms;
use crate::devices::{self, Device, DeviceAsk, DeviceConstraint};
use crate::model::Timestamp;
use crate::slots::Slots;
use crate::snapshot::Snapshot;

/// The most nodes a group's policy may declare (`expected_nodes`).
pub const MAX_EXPECTED_NODES: usize = 1000;

/// An agent removed by hand (`corral agent rm`) within the manager's retention: its shape, as
/// it last was.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Removed {
    pub id: String,
    pub capacity: Slots,
    #[serde(default)]
    pub devices: Vec<Device>,
    pub removed_at: Timestamp,
}

/// One capacity that may come back, as the check sees it.
struct Away<'s> {
    name: &'s str,
    capacity: &'s Slots,
    /// Known devices (a removed agent's); a declared node gives only counts.
    devices: &'s [Device],
    removed_at: Option<Timestamp>,
}

fn away(s: &Snapshot) -> impl Iterator<Item = Away<'_>> {
    let removed = s.removed.iter().map(|r| Away {
        name: &r.id,
        capacity: &r.capacity,
        devices: &r.devices,
        removed_at: Some(r.removed_at),
    });
    let declared = declared(&s.group.policy.expected_nodes).map(|(name, capacity)| Away {
        name,
        capacity,
        devices: &[],
        removed_at: None,
    });
    removed.chain(declared)
}

fn declared(nodes: &BTreeMap<String, Slots>) -> impl Iterator<Item = (&str, &Slots)> {
    nodes.iter().map(|(n, c)| (n.as_str(), c))
}

impl Away<'_> {
    /// Whether it could hold `required` with `constraints`, were it back and idle. A constraint
    /// on a device's model or memory is met only by devices known to have them.
    fn could_hold(&self, required: &Slots, constraints: &[DeviceConstraint]) -> bool {
        if !required.fits_in(self.capacity) {
            return false;
        }
        constraints.iter().all(|c| {
            let accepted = |d: &&Device| d.kind == c.kind && c.accepts(&d.model, d.memory);
            match devices::ask(required, &c.kind) {
                Ok(Some(DeviceAsk::Whole(n))) => {
                    self.devices.iter().filter(accepted).count() >= n as usize
                }
                Ok(Some(DeviceAsk::Fraction { memory, .. })) => (self.devices.iter())
                    .filter(accepted)
                    .any(|d| d.memory.milli() >= memory),
                Ok(None) => true,
                Err(_) => false,
            }
        })
    }

    /// `node1 (cpu=8,mem=32GiB) was removed 5 min ago`, `node7 (cpu=8) is declared for the
    /// group`.
    fn describe(&self, now: Timestamp) -> String {
        match self.removed_at {
            Some(at) => format!(
                "{} ({}) was removed {} ago",
                self.name,
                self.capacity,
                human_ms(now.0.saturating_sub(at.0).max(0) as u64)
            ),
            None => format!(
                "{} ({}) is declared for the group and has not joined",
                self.name, self.capacity
            ),
        }
    }
}

/// What may come back and could hold the request, described (at most three, then a count);
/// `None` when nothing could.
pub fn holders(s: &Snapshot, required: &Slots, constraints: &[DeviceConstraint]) -> Option<String> {
    const NAMED: usize = 3;
    let all: Vec<String> = away(s)
        .filter(|a| a.could_hold(required, constraints))
        .map(|a| a.describe(s.now))
        .collect();
    match all.len() {
        0 => None,
        n if n <= NAMED => Some(all.join("; ")),
        n => Some(format!(
            "{}; and {} more",
            all[..NAMED].join("; "),
            n - NAMED
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::devices::parse_request;
    use crate::slots::Quantity;

    fn snapshot() -> Snapshot {
        let mut s: Snapshot = serde_json::from_value(serde_json::json!({
            "now": 300_000,
            "group": {"name": "g", "policy": {}, "scheduler": {}, "templates": []},
            "agents": [], "sessions": [], "images": [], "in_flight": [],
            "last_scale_out": null
        }))
        .unwrap();
        s.removed.push(Removed {
            id: "node1".into(),
            capacity: "cpu=8,mem=32GiB,gpu=2".parse().unwrap(),
            devices: vec![
                Device::new(
                    "GPU-0",
                    "gpu",
                    "NVIDIA A100-SXM4-80GB",
                    Quantity::from_milli(80 << 30),
                )
                .unwrap(),
                Device::new(
                    "GPU-1",
                    "gpu",
                    "NVIDIA A100-SXM4-80GB",
                    Quantity::from_milli(80 << 30),
                )
                .unwrap(),
            ],
            removed_at: Timestamp(0),
        });
        s
    }

    fn holds(s: &Snapshot, request: &str) -> Option<String> {
        let (slots, constraints) = parse_request(request).unwrap();
        holders(s, &slots, &constraints)
    }

    #[test]
    fn a_removed_agent_holds_what_fits_its_shape_and_devices() {
        let s = snapshot();
        assert_eq!(
            holds(&s, "cpu=8,mem=32GiB").as_deref(),
            Some("node1 (cpu=8,gpu=2,mem=32GiB) was removed 5 min ago")
        );
        assert!(holds(&s, "gpu=2,gpu.model=A100*").is_some());
        assert_eq!(holds(&s, "gpu=1,gpu.model=H100*"), None);
        assert_eq!(holds(&s, "cpu=9"), None);
    }

    #[test]
    fn a_declared_node_holds_counts_but_no_model_it_cannot_promise() {
        let mut s = snapshot();
        s.removed.clear();
        s.group
            .policy
            .expected_nodes
            .insert("node7".into(), "cpu=16,gpu=4".parse().unwrap());
        assert_eq!(
            holds(&s, "gpu=4").as_deref(),
            Some("node7 (cpu=16,gpu=4) is declared for the group and has not joined")
        );
        assert_eq!(holds(&s, "gpu=1,gpu.model=A100*"), None);
        assert_eq!(holds(&s, "gpu=5"), None);
    }
}
