//! Scaling policies: the logic half of a scaling driver (when and how much; the provider does how).
//!
//! Files: this one holds what a policy sees and decides ([`ScaleInput`], [`ScalePlan`]), the
//! [`ScalingLogic`] trait and [`policy_for`]; `fixed.rs` the [`Fixed`] policy; `demand.rs` the
//! [`Demand`] policy, whose `plan` runs the steps the other files hold in its order:
//! `in_flight.rs` (wait for instances in flight), `reuse.rs` (unmark marked agents for returning
//! demand), `headroom.rs` (keep the headroom), `budget.rs` (how many may launch now, and what
//! holds launches back), `launch.rs` (launch for the rest, keep `min_nodes`, say why nothing is
//! launched), `scale_in.rs` (mark the idle, terminate marked and empty); `live.rs` says whether a
//! live agent could hold a session, and which unavailable ones could.

mod budget;
mod demand;
mod fixed;
mod headroom;
mod in_flight;
mod launch;
mod live;
mod reuse;
mod scale_in;

use std::cell::RefCell;

use crate::decisions::WaitReason;
use crate::dense::{Rows, SlotIndex, Vector};
use crate::dimensions::Dimensions;
use crate::ledger::Ledger;
use crate::model::{PolicyKind, Timestamp};
use crate::planner::PriceMemo;
use crate::snapshot::Snapshot;

pub use demand::Demand;
pub use fixed::Fixed;

/// What the policy sees: the snapshot, and the pass's trial placement of admitted sessions on the
/// agents that take sessions now.
pub struct ScaleInput<'a> {
    pub snapshot: &'a Snapshot,
    pub index: &'a SlotIndex,
    /// The snapshot's agents and templates in dense form (`index` is its index).
    pub dims: &'a Dimensions<'a>,
    /// Per agent (as in `snapshot.agents`): free capacity after the trial placement.
    pub free: &'a Rows,
    /// Per agent: what its devices have free after the trial placement (none without device
    /// dimensions).
    pub ledgers: &'a [Ledger],
    /// Per agent: the trial placed something on it.
    pub used: &'a [bool],
    /// Admitted sessions the trial found no room for, in queue order: (required shares, class).
    pub unmet: &'a [(&'a [u64], usize)],
    /// Per unmet session: when it was submitted (for the batching window).
    pub arrived: &'a [Timestamp],
    /// Unmet sessions from this index on wait behind a blocked one that holds the queue (under
    /// the head-of-line rule): no marked agent is brought back for them, since nothing would be
    /// placed on it.
    pub held_from: usize,
    pub classes: usize,
    /// Per class: capacity away now that could hold it (removed agents, declared nodes), where
    /// nothing in the group now can (empty when no class needs it).
    pub away: &'a [Option<String>],
    /// The launch planner's class prices solved by earlier passes (a carry's), if kept.
    pub prices: Option<&'a RefCell<PriceMemo>>,
}

/// What the policy decides. Agents are indexes into `snapshot.agents`, templates into
/// `snapshot.group.templates`.
#[derive(Debug, Default)]
pub struct ScalePlan {
    pub launches: Vec<PlannedLaunch>,
    pub marks: Vec<AgentAction>,
    pub unmarks: Vec<AgentAction>,
    pub terminations: Vec<AgentAction>,
    /// Per unmet session (as in `ScaleInput::unmet`): `None` if an unmarked agent holds it now.
    pub waits: Vec<Option<WaitReason>>,
    /// The demand handed to the launch planner, plus the headroom deficit.
    pub scale_out_demand: Vector,
    /// When a pass may decide otherwise with nothing else changed (window or cooldown ends).
    pub recheck_at: Option<Timestamp>,
}

/// Instances of one template to launch, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlannedLaunch {
    /// Index into `snapshot.group.templates`.
    pub template: usize,
    pub count: u32,
    pub reason: String,
}

/// Something done to one agent (mark, unmark, terminate), and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentAction {
    /// Index into `snapshot.agents`.
    pub agent: usize,
    pub reason: String,
}

impl AgentAction {
    fn new(agent: usize, reason: impl Into<String>) -> Self {
        AgentAction {
            agent,
            reason: reason.into(),
        }
    }
}

/// A scaling policy.
pub trait ScalingLogic {
    fn plan(&self, input: &ScaleInput) -> ScalePlan;
}

/// The policy a group's configuration names.
pub fn policy_for(kind: PolicyKind) -> &'static dyn ScalingLogic {
    match kind {
        PolicyKind::Fixed => &Fixed,
        PolicyKind::Demand => &Demand,
    }
}
