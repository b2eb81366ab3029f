//! Planning problems (`corral plan FILE.json`): a group's state written by hand or exported, turned
//! into a validated snapshot, run through the cycle, and summarised.

use std::collections::{BTreeMap, HashSet};

use serde::{Deserialize, Serialize};

use crate::cycle::cycle;
use crate::decisions::Decisions;
use crate::dense::SlotIndex;
use crate::devices::complete_template_slots;
use crate::model::*;
use crate::planner::{self, Offer};
use crate::slots::Slots;
use crate::snapshot::Snapshot;

/// A planning problem. Every field but the lists has a default; see docs/plan-format.md.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Problem {
    #[serde(default)]
    pub now: Timestamp,
    #[serde(default)]
    pub group: GroupSpec,
    #[serde(default)]
    pub templates: Vec<InstanceTemplate>,
    #[serde(default)]
    pub agents: Vec<Agent>,
    #[serde(default)]
    pub sessions: Vec<Session>,
    #[serde(default)]
    pub images: Vec<Image>,
    #[serde(default)]
    pub in_flight: Vec<InFlight>,
    #[serde(default)]
    pub last_scale_out: Option<Timestamp>,
}

/// A group's settings written flat, as people write them: `{"policy": "demand", "scheduler": "fifo"}`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GroupSpec {
    pub name: Option<String>,
    pub policy: Option<PolicyKind>,
    pub scheduler: Option<Sequencer>,
    pub placement: Option<PlacementStrategy>,
    pub head_of_line: Option<HeadOfLine>,
    pub skip_after: Option<u32>,
    pub min_nodes: Option<u32>,
    pub max_nodes: Option<u32>,
    pub headroom: Option<Slots>,
    pub idle_wait_secs: Option<u64>,
    pub cooldown_secs: Option<u64>,
    /// The batching window; 0 unless given, so that a plan answers as the pass that closes the
    /// window does (a manager's groups default to 1,000 and 10,000 ms).
    pub batch_idle_ms: Option<u64>,
    pub batch_max_ms: Option<u64>,
    pub max_launches_per_pass: Option<u32>,
    pub on_agent_lost: Option<OnAgentLost>,
    pub termination: Option<Termination>,
}

/// A problem that cannot be planned, naming what is wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProblemError {
    #[error("{kind} {id:?} appears twice")]
    Duplicate { kind: &'static str, id: String },
    #[error("{what} names template {template:?}, which is not in templates")]
    UnknownTemplate { what: String, template: String },
    #[error("session {session:?} names image {image:?}, which is not in images")]
    UnknownImage { session: String, image: String },
    #[error("template {template:?}: price must be a finite number ≥ 0")]
    BadPrice { template: String },
    #[error("group: min_nodes ({min}) is above max_nodes ({max})")]
    MinAboveMax { min: u32, max: u32 },
    #[error("template {template:?}: {why}")]
    Devices { template: String, why: String },
    #[error("{what}: name or id is empty")]
    EmptyName { what: &'static str },
    #[error("policy.{field}: {value} is above the most allowed, {max}")]
    TooLarge {
        field: &'static str,
        value: u64,
        max: u64,
    },
}

/// The longest batching window a policy may set: an hour.
const MAX_BATCH_MS: u64 = 3_600_000;

impl ScalingGroup {
    /// Checks what the types alone cannot: names, prices, limits.
    pub fn validate(&self) -> Result<(), ProblemError> {
        let p = &self.policy;
        if p.min_nodes > p.max_nodes {
            return Err(ProblemError::MinAboveMax {
                min: p.min_nodes,
                max: p.max_nodes,
            });
        }
        for (field, value) in [
            ("batch_idle_ms", p.batch_idle_ms),
            ("batch_max_ms", p.batch_max_ms),
        ] {
            if value > MAX_BATCH_MS {
                return Err(ProblemError::TooLarge {
                    field,
                    value,
                    max: MAX_BATCH_MS,
                });
            }
        }
        unique("template", self.templates.iter().map(|t| t.name.as_str()))?;
        for t in &self.templates {
            if t.name.is_empty() {
                return Err(ProblemError::EmptyName { what: "template" });
            }
            if !(t.price_per_hour.is_finite() && t.price_per_hour >= 0.0) {
                return Err(ProblemError::BadPrice {
                    template: t.name.clone(),
                });
            }
        }
        Ok(())
    }
}

fn unique<'a>(kind: &'static str, ids: impl Iterator<Item = &'a str>) -> Result<(), ProblemError> {
    let mut seen = HashSet::new();
    for id in ids {
        if id.is_empty() {
            return Err(ProblemError::EmptyName { what: kind });
        }
        if !seen.insert(id) {
            return Err(ProblemError::Duplicate {
                kind,
                id: id.to_string(),
            });
        }
    }
    Ok(())
}

impl Problem {
    /// The validated snapshot this problem describes.
    pub fn into_snapshot(self) -> Result<Snapshot, ProblemError> {
        let g = self.group;
        let d = ScalingPolicy::default();
        let mut group = ScalingGroup {
            name: g.name.unwrap_or_else(|| "default".into()),
            policy: ScalingPolicy {
                kind: g.policy.unwrap_or(d.kind),
                min_nodes: g.min_nodes.unwrap_or(d.min_nodes),
                max_nodes: g.max_nodes.unwrap_or(d.max_nodes),
                headroom: g.headroom.unwrap_or(d.headroom),
                idle_wait_secs: g.idle_wait_secs.unwrap_or(d.idle_wait_secs),
                cooldown_secs: g.cooldown_secs.unwrap_or(d.cooldown_secs),
                batch_idle_ms: g.batch_idle_ms.unwrap_or(0),
                batch_max_ms: g.batch_max_ms.unwrap_or(0),
                max_launches_per_pass: g.max_launches_per_pass.unwrap_or(d.max_launches_per_pass),
                on_agent_lost: g.on_agent_lost.unwrap_or(d.on_agent_lost),
                on_disconnect: d.on_disconnect,
                termination: g.termination.unwrap_or(d.termination),
                external: d.external,
                agent_update: d.agent_update.clone(),
                image_update: d.image_update,
                expected_nodes: d.expected_nodes,
            },
            scheduler: SchedulerConfig {
                sequencer: g.scheduler.unwrap_or_default(),
                placement: g.placement.unwrap_or_default(),
                head_of_line: g.head_of_line.unwrap_or_default(),
                skip_after: g.skip_after.unwrap_or_default(),
            },
            templates: self.templates,
        };
        for t in &mut group.templates {
            complete_template_slots(&mut t.slots, &t.devices).map_err(|e| {
                ProblemError::Devices {
                    template: t.name.clone(),
                    why: e.to_string(),
                }
            })?;
        }
        group.validate()?;
        let known_template = |name: &str| group.templates.iter().any(|t| t.name == name);
        unique("agent", self.agents.iter().map(|a| a.id.0.as_str()))?;
        for a in &self.agents {
            if let Some(t) = a.template.as_deref().filter(|t| !known_template(t)) {
                return Err(ProblemError::UnknownTemplate {
                    what: format!("agent {:?}", a.id.0),
                    template: t.into(),
                });
            }
        }
        if let Some(f) = self.in_flight.iter().find(|f| !known_template(&f.template)) {
            return Err(ProblemError::UnknownTemplate {
                what: "in_flight".into(),
                template: f.template.clone(),
            });
        }
        unique("image", self.images.iter().map(|i| i.name.as_str()))?;
        unique("session", self.sessions.iter().map(|s| s.id.0.as_str()))?;
        for s in &self.sessions {
            if let Some(image) = s
                .image
                .as_deref()
                .filter(|i| !self.images.iter().any(|x| x.name == *i))
            {
                return Err(ProblemError::UnknownImage {
                    session: s.id.0.clone(),
                    image: image.into(),
                });
            }
        }
        // A problem lists the sessions of its arrays that hold capacity: they are counted.
        let mut array_holding = BTreeMap::new();
        for s in self.sessions.iter().filter(|s| s.state.holds_capacity()) {
            if let Some(array) = s.array.as_ref().filter(|a| a.max_running.is_some()) {
                let n = array_holding.entry(array.id.clone()).or_insert(0u32);
                *n = n.saturating_add(1);
            }
        }
        Ok(Snapshot {
            now: self.now,
            group,
            agents: self.agents,
            sessions: self.sessions,
            images: self.images,
            in_flight: self.in_flight,
            last_scale_out: self.last_scale_out,
            launch_limits: Default::default(),
            array_holding,
            removed: Vec::new(),
        })
    }
}

/// The figures of one plan that people compare.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Summary {
    /// Instances launched per template.
    pub nodes: BTreeMap<String, u32>,
    pub node_count: u32,
    /// Price per hour of the launched instances.
    pub cost_per_hour: f64,
    /// The LP lower bound on the price per hour of covering the same scale-out demand; `None`
    /// when no template offers some slot of it.
    pub lower_bound_cost: Option<f64>,
    pub placed: usize,
    pub rejected: usize,
    /// Admitted sessions left pending.
    pub unplaced: usize,
    pub marked: usize,
    pub unmarked: usize,
    pub terminated: usize,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PlanOutput {
    pub summary: Summary,
    pub decisions: Decisions,
}

/// Runs the cycle on a snapshot and summarises it.
pub fn plan(snapshot: &Snapshot) -> PlanOutput {
    let decisions = cycle(snapshot);
    let summary = summarize(snapshot, &decisions);
    PlanOutput { summary, decisions }
}

pub fn summarize(s: &Snapshot, d: &Decisions) -> Summary {
    let mut nodes = BTreeMap::new();
    let mut cost = 0.0;
    for l in &d.launches {
        *nodes.entry(l.template.clone()).or_insert(0) += l.count;
        let price = s
            .group
            .templates
            .iter()
            .find(|t| t.name == l.template)
            .map_or(0.0, |t| t.price_per_hour);
        cost += price * f64::from(l.count);
    }
    Summary {
        node_count: nodes.values().sum(),
        nodes,
        cost_per_hour: cost,
        lower_bound_cost: lower_bound_cost(s, &d.scale_out_demand),
        placed: d.placements.len(),
        rejected: d.rejections.len(),
        unplaced: d.waiting.len(),
        marked: d.marks.len(),
        unmarked: d.unmarks.len(),
        terminated: d.terminations.len(),
    }
}

/// min Σ price·x subject to Σ capacity·x ≥ demand per slot, x ≥ 0, over the group's templates.
pub fn lower_bound_cost(s: &Snapshot, demand: &Slots) -> Option<f64> {
    if demand.is_empty() {
        return Some(0.0);
    }
    let index = SlotIndex::of(s.group.templates.iter().map(|t| &t.slots).chain([demand]));
    let offers: Vec<Offer> = s
        .group
        .templates
        .iter()
        .map(|t| Offer::of(t, &index, t.max))
        .collect();
    let demand: Vec<u128> = index
        .vector(demand)
        .iter()
        .map(|&v| u128::from(v))
        .collect();
    planner::lower_bound(&demand, &offers)
}
