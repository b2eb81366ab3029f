//! The `Demand` policy: its plan runs the steps in order (wait for instances in flight, unmark
//! for returning demand, keep headroom, launch for the rest, keep `min_nodes`, mark the idle,
//! terminate marked and empty).

use std::cell::OnceCell;

use super::budget::launch_budget;
use super::headroom::keep_headroom;
use super::in_flight::wait_for_in_flight;
use super::launch::{keep_min_nodes, launch_for_demand, offers};
use super::reuse::unmark_for_demand;
use super::scale_in::{mark_idle, terminate_marked_empty};
use super::{AgentAction, ScaleInput, ScalePlan, ScalingLogic};
use crate::model::AgentState;

/// Launches for unmet demand plus headroom, cheapest per fitted work; reuses marked agents first;
/// marks agents idle past the idle wait; terminates marked agents once empty.
pub struct Demand;

impl ScalingLogic for Demand {
    fn plan(&self, input: &ScaleInput) -> ScalePlan {
        let mut plan = ScalePlan {
            waits: vec![None; input.unmet.len()],
            scale_out_demand: vec![0; input.index.len()].into_boxed_slice(),
            ..ScalePlan::default()
        };
        let template_slots = &input.dims.templates[..];

        // 1. Instances already launching are capacity: demand that fits them waits for them.
        let (launching, mut rest) = wait_for_in_flight(input, template_slots, &mut plan.waits);
        // 2. Marked agents that demand returns to are unmarked before anything new is launched.
        let mut reuse = unmark_for_demand(input, &mut rest);
        // Headroom: free capacity of agents taking sessions and of instances on their way,
        //    topped up by unmarking more marked agents.
        let mut headroom = keep_headroom(input, &launching, &mut reuse);
        plan.unmarks = (0..reuse.unmarked.len())
            .filter(|&a| reuse.unmarked[a])
            .map(|a| AgentAction::new(a, "demand returned to it"))
            .collect();
        // 3. Launch for what is left, within every limit, once the burst it belongs to has
        //    ended; then keep at least min_nodes.
        let budget = launch_budget(input, template_slots, &rest, launching.count());
        plan.recheck_at = budget.recheck_at();
        // The templates as offers, made only when a launch may need them (most passes launch
        // nothing: no launch is allowed, or nothing is short).
        let offered = OnceCell::new();
        let offers_now = || offered.get_or_init(|| offers(input, &launching)).as_slice();
        let planned = launch_for_demand(
            input,
            template_slots,
            &rest,
            &headroom.deficit,
            &offers_now,
            &budget,
            &mut plan,
        );
        let for_demand: u32 = planned.iter().sum();
        let serving = serving(input, &reuse.unmarked) + launching.count() + for_demand;
        let topped_up = keep_min_nodes(
            input.snapshot,
            &offers_now,
            &planned,
            serving,
            budget.launches.saturating_sub(for_demand),
            &mut plan,
        );
        // 4. Scale in: mark agents idle past the idle wait.
        plan.marks = mark_idle(input, serving + topped_up, &mut headroom);
        // 5. Terminate marked agents once empty (never in the pass that marks them).
        plan.terminations = terminate_marked_empty(input.snapshot, &reuse.unmarked);
        plan
    }
}

/// Agents that take sessions once this pass's unmarks apply.
fn serving(input: &ScaleInput, unmarked: &[bool]) -> u32 {
    let agents = &input.snapshot.agents;
    (0..agents.len())
        .filter(|&a| agents[a].state == AgentState::Alive || unmarked[a])
        .count() as u32
}
