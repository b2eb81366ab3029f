//! The group's headroom: the free capacity of agents taking sessions and of instances on their
//! way, topped up by unmarking marked agents; what it still lacks is launched for.

use super::in_flight::Launching;
use super::reuse::Reuse;
use super::ScaleInput;
use crate::dense::Vector;
use crate::model::AgentState;

/// The group's headroom against its free capacity.
pub(super) struct Headroom {
    /// The policy's headroom, per slot.
    pub(super) target: Vector,
    /// Free capacity of agents taking sessions and of instances launching, in the slots the
    /// headroom asks for (0 in the others: nothing falls short of a headroom of 0).
    pub(super) free: Vec<u64>,
    /// What `free` lacks of `target`, per slot, once marked agents are unmarked for it.
    pub(super) deficit: Vector,
}

impl Headroom {
    fn deficit_of(target: &[u64], free: &[u64]) -> Vector {
        target
            .iter()
            .zip(free)
            .map(|(h, f)| h.saturating_sub(*f))
            .collect()
    }
}

/// Sums the free capacity of agents taking sessions and of instances launching, and unmarks
/// further reusable marked agents, in agent order, while it falls short of the headroom.
pub(super) fn keep_headroom(
    input: &ScaleInput,
    launching: &Launching,
    reuse: &mut Reuse,
) -> Headroom {
    let s = input.snapshot;
    let target = input.index.vector(&s.group.policy.headroom);
    // The free capacity is summed in the slots the headroom asks for alone (a headroom names a
    // slot or two, an agent's vector has every slot and device dimension of the pass).
    let asked: Vec<usize> = (0..target.len()).filter(|&i| target[i] > 0).collect();
    let add = |free: &mut [u64], v: &[u64]| {
        for &i in &asked {
            free[i] = free[i].saturating_add(v[i]);
        }
    };
    let mut free = vec![0u64; input.index.len()];
    if !asked.is_empty() {
        for (a, agent) in s.agents.iter().enumerate() {
            if agent.state == AgentState::Alive || reuse.unmarked[a] {
                add(&mut free, reuse.free(input, a));
            }
        }
        for b in 0..launching.template.len() {
            add(&mut free, launching.bins.free(b));
        }
        add(&mut free, &launching.unbinned);
    }
    // Only marked agents that may be unmarked change the sum (most passes have none).
    if reuse.marked.is_some() {
        for a in 0..s.agents.len() {
            if target.iter().zip(&free).all(|(h, f)| f >= h) {
                break;
            }
            if reuse.reusable[a] && !reuse.unmarked[a] {
                reuse.unmarked[a] = true;
                add(&mut free, reuse.free(input, a));
            }
        }
    }
    let deficit = Headroom::deficit_of(&target, &free);
    Headroom {
        target,
        free,
        deficit,
    }
}
