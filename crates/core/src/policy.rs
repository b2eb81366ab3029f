//! Scaling policies: the logic half of a scaling driver (when and how much; the provider does how).

use std::collections::HashSet;

use crate::decisions::{NoLaunch, WaitReason};
use crate::dense::{self, fits, SlotIndex, Vector};
use crate::model::{AgentState, PlacementStrategy, PolicyKind};
use crate::planner::{self, DemandClass, Offer};
use crate::schedule::FreeIndex;
use crate::snapshot::Snapshot;

/// What the policy sees: the snapshot, and the pass's trial placement of admitted sessions on the
/// agents that take sessions now.
pub struct ScaleInput<'a> {
    pub snapshot: &'a Snapshot,
    pub index: &'a SlotIndex,
    /// Per agent (as in `snapshot.agents`): free capacity after the trial placement.
    pub free: &'a [Vector],
    /// Per agent: the trial placed something on it.
    pub used: &'a [bool],
    /// Admitted sessions the trial found no room for, in queue order: (required shares, class).
    pub unmet: &'a [(&'a [u64], usize)],
    pub classes: usize,
}

/// What the policy decides. Agents are indexes into `snapshot.agents`, templates into
/// `snapshot.group.templates`.
#[derive(Debug, Default)]
pub struct ScalePlan {
    pub launches: Vec<(usize, u32, String)>,
    pub marks: Vec<(usize, String)>,
    pub unmarks: Vec<(usize, String)>,
    pub terminations: Vec<(usize, String)>,
    /// Per unmet session (as in `ScaleInput::unmet`): `None` if an unmarked agent holds it now.
    pub waits: Vec<Option<WaitReason>>,
    /// The demand handed to the launch planner, plus the headroom deficit.
    pub scale_out_demand: Vector,
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

/// Never launches, marks or terminates: pending sessions wait for running ones to end.
pub struct Fixed;

impl ScalingLogic for Fixed {
    fn plan(&self, input: &ScaleInput) -> ScalePlan {
        ScalePlan {
            waits: vec![
                Some(WaitReason::NoRoom {
                    because: NoLaunch::FixedPolicy
                });
                input.unmet.len()
            ],
            scale_out_demand: vec![0; input.index.len()].into_boxed_slice(),
            ..ScalePlan::default()
        }
    }
}

/// Launches for unmet demand plus headroom, cheapest per fitted work; reuses marked agents first;
/// marks agents idle past the idle wait; terminates marked agents once empty.
pub struct Demand;

impl ScalingLogic for Demand {
    fn plan(&self, input: &ScaleInput) -> ScalePlan {
        let s = input.snapshot;
        let policy = &s.group.policy;
        let templates = &s.group.templates;
        let dims = input.index.len();
        let mut plan = ScalePlan {
            waits: vec![None; input.unmet.len()],
            scale_out_demand: vec![0; dims].into_boxed_slice(),
            ..ScalePlan::default()
        };
        let template_slots: Vec<Vector> = templates
            .iter()
            .map(|t| input.index.vector(&t.slots))
            .collect();
        let template_of = |name: &str| templates.iter().position(|t| t.name == name);

        // 1. Instances already launching are capacity: demand that fits them waits for them.
        let mut bins: Vec<Vector> = Vec::new();
        let mut bin_template: Vec<usize> = Vec::new();
        for f in &s.in_flight {
            if let Some(t) = template_of(&f.template) {
                for _ in 0..f.count.min(policy.max_nodes) {
                    bins.push(template_slots[t].clone());
                    bin_template.push(t);
                }
            }
        }
        let mut launching = FreeIndex::new(dims, bins, vec![true; bin_template.len()]);
        let mut rest = Vec::new();
        for (k, &(need, _)) in input.unmet.iter().enumerate() {
            match launching.find(need, PlacementStrategy::Binpack) {
                Some(b) => {
                    launching.take(b, need);
                    plan.waits[k] = Some(WaitReason::InFlight {
                        template: templates[bin_template[b]].name.clone(),
                    });
                }
                None => rest.push(k),
            }
        }

        // 2. Marked agents that demand returns to are unmarked before anything new is launched.
        let reusable: Vec<bool> = s
            .agents
            .iter()
            .map(|a| a.state == AgentState::Marked && !a.drained_by_hand)
            .collect();
        let mut marked = FreeIndex::new(dims, input.free.to_vec(), reusable.clone());
        let mut unmarked = vec![false; s.agents.len()];
        rest.retain(|&k| {
            let need = input.unmet[k].0;
            match marked.find(need, PlacementStrategy::Binpack) {
                Some(a) => {
                    marked.take(a, need);
                    unmarked[a] = true;
                    false
                }
                None => true,
            }
        });

        // Headroom: free capacity of agents taking sessions, and of instances on their way.
        let mut free_now = vec![0u64; dims];
        for (a, agent) in s.agents.iter().enumerate() {
            if agent.state == AgentState::Alive || unmarked[a] {
                dense::add(&mut free_now, marked.free(a));
            }
        }
        for b in 0..bin_template.len() {
            dense::add(&mut free_now, launching.free(b));
        }
        let headroom = input.index.vector(&policy.headroom);
        let deficit = |free: &[u64]| -> Vector {
            headroom
                .iter()
                .zip(free)
                .map(|(h, f)| h.saturating_sub(*f))
                .collect()
        };
        for a in 0..s.agents.len() {
            if deficit(&free_now).iter().all(|&d| d == 0) {
                break;
            }
            if reusable[a] && !unmarked[a] {
                unmarked[a] = true;
                dense::add(&mut free_now, marked.free(a));
            }
        }
        for (a, &u) in unmarked.iter().enumerate() {
            if u {
                plan.unmarks.push((a, "demand returned to it".into()));
            }
        }
        let headroom_deficit = deficit(&free_now);

        // 3. Launch for what is left, within every limit.
        let nodes = s
            .agents
            .iter()
            .filter(|a| a.state != AgentState::Terminated)
            .count() as u32;
        let in_flight = bin_template.len() as u32;
        let mut budget = policy
            .max_nodes
            .saturating_sub(nodes + in_flight)
            .min(policy.max_launches_per_pass);
        let cooling_until = s
            .last_scale_out
            .map(|t| t.plus_secs(policy.cooldown_secs))
            .filter(|&t| t > s.now);
        if cooling_until.is_some() {
            budget = 0;
        }
        let offers: Vec<Offer> = templates
            .iter()
            .enumerate()
            .map(|(t, tpl)| {
                let existing = s
                    .agents
                    .iter()
                    .filter(|a| {
                        a.state != AgentState::Terminated
                            && a.template.as_deref() == Some(&tpl.name)
                    })
                    .count()
                    + bin_template.iter().filter(|&&b| b == t).count();
                let mut available = tpl.max.saturating_sub(existing as u32);
                if let Some(limit) = s.launch_limits.get(&tpl.name) {
                    available = available.min(limit.allowed);
                }
                Offer::of(tpl, input.index, available)
            })
            .collect();
        // Group what is left by equivalence class, in queue order of first appearance.
        let mut class_pos = vec![usize::MAX; input.classes];
        let mut classes: Vec<DemandClass> = Vec::new();
        let mut members: Vec<Vec<usize>> = Vec::new();
        for &k in &rest {
            let (need, class) = input.unmet[k];
            if class_pos[class] == usize::MAX {
                class_pos[class] = classes.len();
                classes.push(DemandClass {
                    need: need.into(),
                    count: 0,
                });
                members.push(Vec::new());
            }
            classes[class_pos[class]].count += 1;
            members[class_pos[class]].push(k);
            dense::add(&mut plan.scale_out_demand, need);
        }
        dense::add(&mut plan.scale_out_demand, &headroom_deficit);
        let packed = planner::pack(&classes, &offers, budget, &headroom_deficit);
        let mut launched_total = 0;
        let mut sessions_for = vec![0u32; offers.len()];
        for &(o, n) in packed.served.iter().flatten() {
            sessions_for[o] += n;
        }
        for (t, &count) in packed.launches.iter().enumerate() {
            if count > 0 {
                launched_total += count;
                let reason = match sessions_for[t] {
                    0 => "the group keeps its headroom (minimum shares)".to_string(),
                    n => format!("{n} pending session(s) need it"),
                };
                plan.launches.push((t, count, reason));
            }
        }
        for (c, sessions) in members.iter().enumerate() {
            let mut served = packed.served[c]
                .iter()
                .flat_map(|&(o, n)| std::iter::repeat_n(o, n as usize));
            for &k in sessions {
                plan.waits[k] = Some(match served.next() {
                    Some(o) => WaitReason::Launching {
                        template: templates[o].name.clone(),
                    },
                    None => {
                        let because = if let Some(until) = cooling_until {
                            NoLaunch::Cooldown { until }
                        } else if !template_slots.iter().any(|t| fits(input.unmet[k].0, t)) {
                            NoLaunch::NoTemplate
                        } else if let Some(limit) = templates
                            .iter()
                            .zip(&template_slots)
                            .filter(|(_, slots)| fits(input.unmet[k].0, slots))
                            .find_map(|(t, _)| s.launch_limits.get(&t.name))
                        {
                            NoLaunch::Held {
                                reason: limit.reason.clone(),
                            }
                        } else {
                            NoLaunch::AtMax
                        };
                        WaitReason::NoRoom { because }
                    }
                });
            }
        }

        // Keep at least min_nodes: top up with the cheapest template that may still launch.
        let taking = |a: usize| s.agents[a].state == AgentState::Alive || unmarked[a];
        let serving =
            (0..s.agents.len()).filter(|&a| taking(a)).count() as u32 + in_flight + launched_total;
        let for_demand = launched_total;
        let short = policy
            .min_nodes
            .saturating_sub(serving)
            .min(budget.saturating_sub(launched_total));
        if short > 0 {
            let cheapest = (0..offers.len())
                .filter(|&t| offers[t].available > packed.launches[t])
                .min_by(|&a, &b| {
                    offers[a]
                        .price_per_hour
                        .total_cmp(&offers[b].price_per_hour)
                });
            if let Some(t) = cheapest {
                let n = short.min(offers[t].available - packed.launches[t]);
                launched_total += n;
                plan.launches.push((
                    t,
                    n,
                    format!("the group keeps at least {} nodes", policy.min_nodes),
                ));
            }
        }

        // 4. Scale in: mark agents idle past the idle wait, longest idle first, while the group
        //    stays at or above min_nodes and keeps its headroom.
        let mut keep = serving + (launched_total - for_demand);
        let mut idle: Vec<usize> = (0..s.agents.len())
            .filter(|&a| {
                let agent = &s.agents[a];
                agent.state == AgentState::Alive
                    && !agent.external
                    && !input.used[a]
                    && agent.is_idle()
                    && agent
                        .idle_since
                        .is_some_and(|t| t.plus_secs(policy.idle_wait_secs) <= s.now)
            })
            .collect();
        idle.sort_by_key(|&a| (s.agents[a].idle_since, &s.agents[a].id));
        for a in idle {
            if keep <= policy.min_nodes {
                break;
            }
            let mut without = free_now.clone();
            for (w, f) in without.iter_mut().zip(input.free[a].iter()) {
                *w = w.saturating_sub(*f);
            }
            if headroom.iter().zip(&without).any(|(h, w)| w < h) {
                continue;
            }
            free_now = without;
            keep -= 1;
            plan.marks
                .push((a, format!("idle for more than {} s", policy.idle_wait_secs)));
        }

        // 5. Terminate marked agents once empty (never in the pass that marks them).
        let busy: HashSet<&str> = s
            .sessions
            .iter()
            .filter(|x| x.state.holds_capacity())
            .filter_map(|x| x.agent.as_ref().map(|a| a.0.as_str()))
            .collect();
        for (a, agent) in s.agents.iter().enumerate() {
            if agent.state == AgentState::Marked
                && !unmarked[a]
                && !agent.external
                && agent.is_idle()
                && !busy.contains(agent.id.0.as_str())
            {
                plan.terminations.push((a, "marked and empty".into()));
            }
        }
        plan
    }
}
