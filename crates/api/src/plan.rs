//! A plan as the API (`GET /groups/{name}/plan`) and `corral plan` write it: the core's
//! `PlanOutput` with every reason as the text people read. These are the types that read it
//! back; a test below checks they read what the core writes.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use corral_core::Slots;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct PlanView {
    pub summary: Summary,
    #[serde(default)]
    pub decisions: Decisions,
}

/// The figures of one plan that people compare.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Summary {
    /// Instances launched per template.
    #[serde(default)]
    pub nodes: BTreeMap<String, u64>,
    pub node_count: u64,
    pub cost_per_hour: f64,
    /// The LP lower bound on the price per hour of the same scale-out; none when no template
    /// offers some demanded slot.
    pub lower_bound_cost: Option<f64>,
    pub placed: u64,
    pub rejected: u64,
    /// Admitted sessions left pending.
    pub unplaced: u64,
    pub marked: u64,
    pub unmarked: u64,
    pub terminated: u64,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(default)]
pub struct Decisions {
    pub rejections: Vec<SessionReason>,
    pub launches: Vec<Launch>,
    pub marks: Vec<AgentReason>,
    pub unmarks: Vec<AgentReason>,
    pub terminations: Vec<AgentReason>,
    pub placements: Vec<Placement>,
    pub waiting: Vec<SessionReason>,
    pub scale_out_demand: Slots,
    /// When a pass would decide otherwise with nothing else changed (a batching window or the
    /// cooldown ends); `None` when nothing waits on time.
    #[serde(default)]
    pub recheck_at: Option<corral_core::Timestamp>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SessionReason {
    pub session: String,
    pub reason: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct AgentReason {
    pub agent: String,
    pub reason: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Launch {
    pub template: String,
    pub count: u64,
    pub reason: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Placement {
    pub session: String,
    pub agent: String,
    pub slots: Slots,
    /// The devices it takes there.
    #[serde(default)]
    pub devices: Vec<corral_core::DeviceGrant>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_what_the_core_writes() {
        // The documented example (docs/plan-format.md): launches, placements and waits.
        let problem: corral_core::plan::Problem =
            serde_json::from_str(include_str!("../../../examples/plan.json")).unwrap();
        let written = corral_core::plan::plan(&problem.into_snapshot().unwrap());
        let json = serde_json::to_value(&written).unwrap();
        let read: PlanView = serde_json::from_value(json.clone()).expect("the core's plan reads");
        assert_eq!(
            serde_json::to_value(&read).unwrap(),
            json,
            "nothing lost or renamed"
        );
        assert_eq!(
            read.summary.node_count as usize,
            read.summary.nodes.values().sum::<u64>() as usize
        );
        assert!(!read.decisions.launches.is_empty() && !read.decisions.placements.is_empty());
    }
}
