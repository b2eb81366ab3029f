//! Marked agents brought back: returning demand unmarks the marked agents it lands on before
//! anything new is launched.

use super::ScaleInput;
use crate::model::{AgentState, PlacementStrategy};
use crate::schedule::FreeIndex;

/// Marked agents and which of them this pass unmarks.
pub(super) struct Reuse {
    /// Free capacity per agent, less what returning demand takes on marked ones; none when no
    /// agent may be unmarked (nothing is taken from the agents' free capacity then).
    pub(super) marked: Option<FreeIndex>,
    /// Per agent: marked, neither drained by hand nor updating (the policy may unmark it).
    pub(super) reusable: Vec<bool>,
    /// Per agent: unmarked in this pass.
    pub(super) unmarked: Vec<bool>,
}

impl Reuse {
    /// Agent `a`'s free capacity, less what returning demand takes on it.
    pub(super) fn free<'a>(&'a self, input: &'a ScaleInput, a: usize) -> &'a [u64] {
        self.marked.as_ref().map_or(&input.free[a], |m| m.free(a))
    }
}

/// Places unmet demand on reusable marked agents (binpack) and unmarks those it lands on;
/// removes what they hold from `rest`.
pub(super) fn unmark_for_demand(input: &ScaleInput, rest: &mut Vec<usize>) -> Reuse {
    let s = input.snapshot;
    let reusable: Vec<bool> = s
        .agents
        .iter()
        .map(|a| a.state == AgentState::Marked && !a.drained_by_hand && a.updating.is_none())
        .collect();
    let mut unmarked = vec![false; s.agents.len()];
    // Most passes have no marked agent: no index of them to make.
    let marked = reusable.contains(&true).then(|| {
        let mut marked = FreeIndex::new(input.index.len(), input.free.clone(), reusable.clone())
            .with_devices(input.index.shared_devices(), input.ledgers.to_vec());
        // Marked agents only shrink: a class that found none is not searched again.
        let mut no_room = vec![false; input.classes];
        rest.retain(|&k| {
            let (need, class) = input.unmet[k];
            if k >= input.held_from || no_room[class] {
                return true;
            }
            match marked.find(need, PlacementStrategy::Binpack) {
                Some(a) => {
                    marked.take(a, need);
                    unmarked[a] = true;
                    false
                }
                None => {
                    no_room[class] = true;
                    true
                }
            }
        });
        marked
    });
    Reuse {
        marked,
        reusable,
        unmarked,
    }
}
