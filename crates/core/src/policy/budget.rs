//! The launch budget: how many instances a pass may launch (`max_nodes`,
//! `max_launches_per_pass`), and what holds launches back now (the cooldown, a burst's batching
//! window).

use super::ScaleInput;
use crate::decisions::NoLaunch;
use crate::dense::{fits, Vector};
use crate::model::{AgentState, Timestamp};

/// How many instances this pass may launch, and what holds launches back now.
pub(super) struct Budget {
    /// Launches left under `max_nodes` and `max_launches_per_pass` (0 during the cooldown).
    pub(super) launches: u32,
    /// Launches left under `max_nodes` alone.
    pub(super) room: u32,
    /// The end of the cooldown, while it lasts.
    cooling_until: Option<Timestamp>,
    /// The end of the batching window, while it is open: launches for demand wait for it.
    batching_until: Option<Timestamp>,
    now: Timestamp,
}

impl Budget {
    /// Launches for demand (and headroom) this pass.
    pub(super) fn for_demand(&self) -> u32 {
        if self.batching_until.is_some() {
            0
        } else {
            self.launches
        }
    }

    pub(super) fn recheck_at(&self) -> Option<Timestamp> {
        self.cooling_until.or(self.batching_until)
    }

    /// Why the budget launches nothing for demand, if it is the budget's doing.
    pub(super) fn holds(&self) -> Option<NoLaunch> {
        if let Some(until) = self.cooling_until {
            Some(NoLaunch::Cooldown {
                left_ms: self.now.ms_until(until),
            })
        } else {
            self.batching_until.map(|until| NoLaunch::Batching {
                left_ms: self.now.ms_until(until),
            })
        }
    }
}

/// The launches left under `max_nodes` (counting agents not terminated, external ones aside, and
/// `in_flight` instances) and `max_launches_per_pass`; none during the cooldown. Launches for the unmet
/// sessions in `rest` wait while their burst goes on: until none of those a template could hold
/// arrived for `batch_idle_ms`, or the first of them has waited `batch_max_ms`.
pub(super) fn launch_budget(
    input: &ScaleInput,
    template_slots: &[Vector],
    rest: &[usize],
    in_flight: u32,
) -> Budget {
    let s = input.snapshot;
    let policy = &s.group.policy;
    let nodes = s
        .agents
        .iter()
        .filter(|a| a.state != AgentState::Terminated && !a.external)
        .count() as u32;
    let room = policy.max_nodes.saturating_sub(nodes + in_flight);
    let mut launches = room.min(policy.max_launches_per_pass);
    let cooling_until = s
        .last_scale_out
        .map(|t| t.plus_secs(policy.cooldown_secs))
        .filter(|&t| t > s.now);
    if cooling_until.is_some() {
        launches = 0;
    }
    let mut burst: Option<(Timestamp, Timestamp)> = None;
    // Per class: whether a template holds it (asked once).
    let mut launchable: Vec<Option<bool>> = vec![None; input.classes];
    for &k in rest {
        let (need, class) = input.unmet[k];
        let fits_one =
            *launchable[class].get_or_insert_with(|| template_slots.iter().any(|t| fits(need, t)));
        if fits_one {
            let at = input.arrived[k];
            burst = Some(burst.map_or((at, at), |(first, last)| (first.min(at), last.max(at))));
        }
    }
    let batching_until = burst
        .map(|(first, last)| {
            last.plus_ms(policy.batch_idle_ms)
                .min(first.plus_ms(policy.batch_max_ms))
        })
        .filter(|&t| t > s.now && launches > 0 && policy.batch_idle_ms > 0);
    Budget {
        launches,
        room,
        cooling_until,
        batching_until,
        now: s.now,
    }
}
