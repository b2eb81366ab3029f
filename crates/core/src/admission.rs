//! Admission: refuse at once what no agent and no launchable template could ever hold.

use std::collections::HashSet;

use foldhash::fast::FixedState;

use crate::decisions::{Excess, Infeasible};
use crate::dense::{fits, SlotIndex, Vector};
use crate::devices::DeviceConstraint;
use crate::dimensions::{self, Dimensions};
use crate::slots::{Quantity, Slots};
use crate::snapshot::Snapshot;

/// Checks one request against a snapshot (the synchronous check at submit): its device asks
/// valid, and some agent that may take sessions again, launchable template, or capacity that
/// may come back ([`crate::expected`]) able to hold it.
pub fn admit(
    snapshot: &Snapshot,
    required: &Slots,
    constraints: &[DeviceConstraint],
) -> Result<(), Infeasible> {
    let mut dims = dimensions::Builder::new(snapshot, [required], None);
    let named = dims.named(required);
    let need = dims
        .resolve(&named, constraints)
        .map_err(|e| Infeasible::BadDevices(e.to_string()))?;
    let dims = dims.finish(snapshot, None);
    let need = dims.need(&named, &need);
    match verdicts(snapshot, &dims, &[need]).remove(0) {
        // Capacity away now (removed within the retention, declared) that could hold it: it
        // waits for it.
        Err(_) if crate::expected::holders(snapshot, required, constraints).is_some() => Ok(()),
        verdict => verdict,
    }
}

/// Each need's verdict against the standing candidates of `s`
/// ([`Dimensions::standing_candidates`]). A need a launchable template holds is admitted whatever the agents are: their capacities are
/// gathered only when some need fits no template (a fixed group's, or an odd request), and the
/// whole check then gives the verdict and its reason.
pub fn verdicts(
    s: &Snapshot,
    dims: &Dimensions<'_>,
    needs: &[impl AsRef<[u64]>],
) -> Vec<Result<(), Infeasible>> {
    let index = &dims.index;
    // Held by a launchable template: admitted (no candidates gathered, no reason to find).
    let held: Vec<bool> = (needs.iter())
        .map(|n| dims.launchable_templates(s).any(|t| fits(n.as_ref(), t)))
        .collect();
    let admission =
        (!held.iter().all(|&h| h)).then(|| Admission::new(index, dims.standing_candidates(s)));
    (needs.iter().zip(held))
        .map(|(n, held)| match &admission {
            Some(admission) if !held => admission.check(index, n.as_ref()),
            _ => Ok(()),
        })
        .collect()
}

/// Candidates an admission check makes distinct by a look along them; past them, by a set.
const FEW_CANDIDATES: usize = 16;

/// Candidate capacities reduced to those no other candidate dominates, so a check costs a few
/// comparisons however many agents share a shape.
#[derive(Debug, Clone)]
pub struct Admission {
    frontier: Vec<Vector>,
    largest: Vector,
}

impl Admission {
    pub fn new(index: &SlotIndex, capacities: impl IntoIterator<Item = Vector>) -> Self {
        // Agents come in a few shapes: each kept once (a look-up in a set costs less than
        // sorting every agent's vector; among a few candidates, a look along them costs less
        // than the set). The order kept changes no check's answer.
        let mut all: Vec<Vector> = capacities.into_iter().collect();
        if all.len() <= FEW_CANDIDATES {
            let mut kept = 0;
            for i in 0..all.len() {
                if !all[..kept].contains(&all[i]) {
                    all.swap(kept, i);
                    kept += 1;
                }
            }
            all.truncate(kept);
        } else {
            let distinct: HashSet<Vector, FixedState> = all.into_iter().collect();
            all = distinct.into_iter().collect();
        }
        let mut largest = vec![0u64; index.len()].into_boxed_slice();
        for c in &all {
            for (l, v) in largest.iter_mut().zip(c.iter()) {
                *l = (*l).max(*v);
            }
        }
        let dominated: Vec<bool> = (all.iter())
            .map(|c| all.iter().any(|d| d != c && fits(c, d)))
            .collect();
        let frontier = (all.into_iter().zip(dominated))
            .filter_map(|(c, dominated)| (!dominated).then_some(c))
            .collect();
        Admission { frontier, largest }
    }

    pub fn check(&self, index: &SlotIndex, need: &[u64]) -> Result<(), Infeasible> {
        if self.frontier.iter().any(|c| fits(need, c)) {
            return Ok(());
        }
        if self.frontier.is_empty() {
            return Err(Infeasible::NoCapacity);
        }
        let excess: Vec<Excess> = index
            .names()
            .iter()
            .zip(need.iter().zip(self.largest.iter()))
            .filter(|(_, (n, l))| n > l)
            .map(|(slot, (n, l))| Excess {
                slot: slot.clone(),
                requested: Quantity::from_milli(*n),
                largest: Quantity::from_milli(*l),
            })
            .collect();
        let named = index.names().len();
        if excess.is_empty() {
            let slots_fit = self
                .frontier
                .iter()
                .any(|c| fits(&need[..named], &c[..named]));
            Err(if slots_fit {
                Infeasible::NoDevices {
                    requested: index.slots(need),
                    wanted: index.devices().describe(need),
                }
            } else {
                Infeasible::NoSingleFit {
                    requested: index.slots(need),
                }
            })
        } else {
            Err(Infeasible::Exceeds(excess))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::*;

    fn group(kind: PolicyKind, templates: &[(&str, &str, u32)]) -> Snapshot {
        Snapshot {
            now: Timestamp(0),
            group: ScalingGroup {
                name: "g".into(),
                policy: ScalingPolicy {
                    kind,
                    ..ScalingPolicy::default()
                },
                scheduler: SchedulerConfig::default(),
                templates: templates
                    .iter()
                    .map(|(name, slots, max)| InstanceTemplate {
                        name: name.to_string(),
                        slots: slots.parse().unwrap(),
                        price_per_hour: 1.0,
                        max: *max,
                        labels: Default::default(),
                        devices: Vec::new(),
                    })
                    .collect(),
            },
            agents: vec![],
            sessions: vec![],
            images: vec![],
            in_flight: vec![],
            last_scale_out: None,
            launch_limits: Default::default(),
            array_holding: Default::default(),
            removed: Default::default(),
        }
    }

    fn agent(id: &str, capacity: &str, state: AgentState) -> Agent {
        Agent {
            id: id.into(),
            group: "g".into(),
            template: None,
            capacity: capacity.parse().unwrap(),
            allocated: Slots::new(),
            state,
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

    fn check(s: &Snapshot, request: &str) -> Result<(), String> {
        let (slots, constraints) = crate::devices::parse_request(request).unwrap();
        admit(s, &slots, &constraints).map_err(|e| e.to_string())
    }

    #[test]
    fn refuses_more_gpu_than_any_template_offers() {
        let s = group(
            PolicyKind::Demand,
            &[
                ("g1", "cpu=8,gpu=1,mem=32GiB", 10),
                ("c", "cpu=64,mem=128GiB", 10),
            ],
        );
        assert_eq!(
            check(&s, "gpu=2"),
            Err("gpu=2 requested; the largest agent or template offers gpu=1".into())
        );
        assert_eq!(
            check(&s, "gpu=1.5"),
            Err("gpu=1.5: ask for whole devices (gpu=1, gpu=2, ...) or for a fraction of one device (gpu=0.5); a request is never split over devices".into())
        );
        assert_eq!(check(&s, "gpu=1,cpu=8"), Ok(()));
        assert_eq!(
            check(&s, "gpu=1,cpu=16"),
            Err(
                "cpu=16,gpu=1 requested; no single agent or template offers all of it at once"
                    .into()
            )
        );
        assert_eq!(
            check(&s, "fpga=1"),
            Err("fpga=1 requested; no agent or template of the group has a \"fpga\" slot".into())
        );
    }

    #[test]
    fn templates_count_only_when_the_policy_can_launch_them() {
        let fixed = group(PolicyKind::Fixed, &[("g1", "gpu=1", 10)]);
        assert_eq!(
            check(&fixed, "gpu=1"),
            Err("the group has no agent and no launchable template".into())
        );
        let zero_max = group(PolicyKind::Demand, &[("g1", "gpu=1", 0)]);
        assert!(check(&zero_max, "gpu=1").is_err());
    }

    #[test]
    fn agents_that_can_come_back_count_and_terminated_ones_do_not() {
        let mut s = group(PolicyKind::Fixed, &[]);
        s.agents = vec![
            agent("a", "gpu=8", AgentState::Marked),
            agent("b", "gpu=4", AgentState::Lost),
            agent("c", "gpu=2", AgentState::Alive),
            agent("d", "gpu=16", AgentState::Terminated),
        ];
        assert_eq!(check(&s, "gpu=2"), Ok(()));
        assert_eq!(check(&s, "gpu=8"), Ok(()), "a drained agent may be back");
        assert_eq!(
            check(&s, "gpu=9"),
            Err("gpu=9 requested; the largest agent or template offers gpu=8".into())
        );
        s.agents.retain(|a| a.state == AgentState::Terminated);
        assert_eq!(
            check(&s, "gpu=1"),
            Err("the group has no agent and no launchable template".into())
        );
    }

    #[test]
    fn agents_removed_within_the_retention_and_declared_nodes_count() {
        let mut s = group(PolicyKind::Fixed, &[]);
        s.removed.push(crate::expected::Removed {
            id: "node1".into(),
            capacity: "cpu=8,mem=32GiB".parse().unwrap(),
            devices: Vec::new(),
            removed_at: Timestamp(0),
        });
        assert_eq!(check(&s, "cpu=8,mem=32GiB"), Ok(()));
        assert_eq!(
            check(&s, "cpu=9"),
            Err("the group has no agent and no launchable template".into())
        );
        s.removed.clear();
        (s.group.policy.expected_nodes).insert("node7".into(), "cpu=16".parse().unwrap());
        assert_eq!(check(&s, "cpu=9"), Ok(()));
        assert_eq!(check(&s, "gpu=1").map_err(|_| ()), Err(()));
    }

    #[test]
    fn many_shapes_of_agents_are_all_counted() {
        let mut s = group(PolicyKind::Fixed, &[]);
        // Forty agents of twenty shapes, each shape twice, in no order: past the few
        // candidates an admission looks along.
        s.agents = (0..40)
            .map(|i| {
                let cpu = 1 + (i * 7) % 20;
                let capacity = format!("cpu={cpu},mem={}GiB", 21 - cpu);
                agent(&format!("a{i}"), &capacity, AgentState::Alive)
            })
            .collect();
        assert_eq!(check(&s, "cpu=20,mem=1GiB"), Ok(()));
        assert_eq!(check(&s, "cpu=1,mem=20GiB"), Ok(()));
        assert_eq!(check(&s, "cpu=10,mem=11GiB"), Ok(()));
        assert_eq!(
            check(&s, "cpu=10,mem=12GiB"),
            Err(
                "cpu=10,mem=12GiB requested; no single agent or template offers all of it at once"
                    .into()
            )
        );
        assert_eq!(
            check(&s, "cpu=21"),
            Err("cpu=21 requested; the largest agent or template offers cpu=20".into())
        );
        // And eight of four shapes (cpu 1, 8, 15 and 2), each twice: among the few.
        s.agents.truncate(4);
        s.agents.extend(s.agents.clone());
        assert_eq!(check(&s, "cpu=15,mem=6GiB"), Ok(()));
        assert_eq!(check(&s, "cpu=2,mem=19GiB"), Ok(()));
        assert_eq!(
            check(&s, "cpu=16"),
            Err("cpu=16 requested; the largest agent or template offers cpu=15".into())
        );
    }

    #[test]
    fn total_capacity_counts_not_free_capacity() {
        let mut s = group(PolicyKind::Fixed, &[]);
        let mut busy = agent("a", "cpu=4", AgentState::Alive);
        busy.allocated = "cpu=4".parse().unwrap();
        s.agents = vec![busy];
        assert_eq!(check(&s, "cpu=4"), Ok(()));
    }
}
