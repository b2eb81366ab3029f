//! Launches: the templates as offers, unmet demand and the headroom deficit packed onto them
//! (`planner::pack`), why a session gets no launch, and the top-up to `min_nodes`.

use super::budget::Budget;
use super::in_flight::Launching;
use super::live::{unavailable, LiveAgents};
use super::{PlannedLaunch, ScaleInput, ScalePlan};
use crate::decisions::{NoLaunch, WaitReason};
use crate::dense::{self, fits, Vector};
use crate::model::AgentState;
use crate::planner::{self, DemandClass, Offer};
use crate::slots::same_text;
use crate::snapshot::Snapshot;

/// Every template as an offer: as many more as its `max` allows beside its agents and launching
/// instances, within its launch limit.
pub(super) fn offers(input: &ScaleInput, launching: &Launching) -> Vec<Offer> {
    let s = input.snapshot;
    // Agents per template, in one walk: each agent's template looked up by name among the
    // few templates (unique names, the group's validation), lengths first.
    let templates = &s.group.templates;
    let mut agents = vec![0usize; templates.len()];
    for a in s
        .agents
        .iter()
        .filter(|a| a.state != AgentState::Terminated)
    {
        let Some(name) = a.template.as_deref() else {
            continue;
        };
        if let Some(t) = templates.iter().position(|t| same_text(&t.name, name)) {
            agents[t] += 1;
        }
    }
    s.group
        .templates
        .iter()
        .enumerate()
        .map(|(t, tpl)| {
            let existing = agents[t] + launching.per_template[t] as usize;
            let mut available = tpl.max.saturating_sub(existing as u32);
            if let Some(limit) = s.launch_limits.get(&tpl.name) {
                available = available.min(limit.allowed);
            }
            Offer {
                slots: input
                    .index
                    .devices()
                    .planning_capacity(&input.dims.templates[t]),
                price_per_hour: tpl.price_per_hour,
                available,
            }
        })
        .collect()
}

/// Packs the unmet sessions in `rest` and the headroom deficit onto new instances of the offers,
/// within the budget; writes the launches, the scale-out demand and every session's wait.
/// Returns the instances planned per template.
pub(super) fn launch_for_demand<'o>(
    input: &ScaleInput,
    template_slots: &[Vector],
    rest: &[usize],
    headroom_deficit: &[u64],
    offers: &dyn Fn() -> &'o [Offer],
    budget: &Budget,
    plan: &mut ScalePlan,
) -> Vec<u32> {
    // Group what is left by equivalence class, in queue order of first appearance.
    let mut class_pos = vec![usize::MAX; input.classes];
    let mut classes: Vec<DemandClass> = Vec::new();
    let mut members: Vec<Vec<usize>> = Vec::new();
    for &k in rest {
        let (need, class) = input.unmet[k];
        if class_pos[class] == usize::MAX {
            class_pos[class] = classes.len();
            classes.push(DemandClass {
                need: input.index.devices().planning_need(need),
                count: 0,
            });
            members.push(Vec::new());
        }
        classes[class_pos[class]].count += 1;
        members[class_pos[class]].push(k);
        dense::add(&mut plan.scale_out_demand, need);
    }
    dense::add(&mut plan.scale_out_demand, headroom_deficit);
    let templates = &input.snapshot.group.templates;
    // Nothing may be launched, or nothing is short: the packing would launch nothing.
    let (launches, served) = if budget.for_demand() == 0
        || (classes.is_empty() && headroom_deficit.iter().all(|&d| d == 0))
    {
        (vec![0; templates.len()], vec![Vec::new(); classes.len()])
    } else {
        let (offers, launches) = (offers(), budget.for_demand());
        let packed = match input.prices {
            Some(memo) => planner::pack_remembering(
                &classes,
                offers,
                launches,
                headroom_deficit,
                &mut memo.borrow_mut(),
            ),
            None => planner::pack(&classes, offers, launches, headroom_deficit),
        };
        (packed.launches, packed.served)
    };
    let launched: u32 = launches.iter().sum();

    let mut sessions_for = vec![0u32; templates.len()];
    for &(o, n) in served.iter().flatten() {
        sessions_for[o] += n;
    }
    for (t, &count) in launches.iter().enumerate() {
        if count > 0 {
            let reason = match sessions_for[t] {
                0 => "the group keeps its headroom (minimum shares)".to_string(),
                n => format!("{n} pending session(s) need it"),
            };
            plan.launches.push(PlannedLaunch {
                template: t,
                count,
                reason,
            });
        }
    }
    let mut live = LiveAgents::new(input);
    for (c, sessions) in members.iter().enumerate() {
        let mut served_by = served[c]
            .iter()
            .flat_map(|&(o, n)| std::iter::repeat_n(o, n as usize));
        // The class's sessions need the same: one reason for those left without a launch.
        let mut no_launch: Option<NoLaunch> = None;
        for &k in sessions {
            plan.waits[k] = Some(match served_by.next() {
                Some(o) => WaitReason::Launching {
                    template: templates[o].name.clone(),
                },
                None => WaitReason::NoRoom {
                    because: (no_launch.get_or_insert_with(|| {
                        why_no_launch(
                            input,
                            template_slots,
                            offers(),
                            k,
                            budget,
                            launched,
                            &mut live,
                        )
                    }))
                    .clone(),
                },
            });
        }
    }
    launches
}

/// Why nothing is launched for unmet session `k`, when the pass launches `launched` instances.
fn why_no_launch(
    input: &ScaleInput,
    template_slots: &[Vector],
    offers: &[Offer],
    k: usize,
    budget: &Budget,
    launched: u32,
    live: &mut LiveAgents,
) -> NoLaunch {
    let s = input.snapshot;
    let need = input.unmet[k].0;
    if !template_slots.iter().any(|t| fits(need, t)) {
        if live.could_hold(input, k) {
            NoLaunch::NoTemplate
        } else {
            unavailable(input, k)
        }
    } else if budget.room <= launched {
        NoLaunch::GroupAtMax {
            max_nodes: s.group.policy.max_nodes,
        }
    } else if let Some(hold) = budget.holds() {
        hold
    } else if budget.launches <= launched {
        NoLaunch::PassLimit {
            max_launches_per_pass: s.group.policy.max_launches_per_pass,
        }
    } else if let Some(limit) = s
        .group
        .templates
        .iter()
        .zip(template_slots)
        .zip(offers)
        .filter(|((_, slots), _)| fits(need, slots))
        // A limit binds where it, not the template's `max`, set what may still launch.
        .find_map(|((t, _), offer)| {
            s.launch_limits
                .get(&t.name)
                .filter(|limit| offer.available == limit.allowed)
        })
    {
        NoLaunch::Held {
            reason: limit.reason.clone(),
        }
    } else {
        NoLaunch::TemplatesAtMax
    }
}

/// Tops the group up to `min_nodes` with the cheapest template that may still launch, within
/// `budget` more launches. `serving` counts agents taking sessions, launching instances and the
/// launches planned. Returns how many it adds.
pub(super) fn keep_min_nodes<'o>(
    s: &Snapshot,
    offers: &dyn Fn() -> &'o [Offer],
    planned: &[u32],
    serving: u32,
    budget: u32,
    plan: &mut ScalePlan,
) -> u32 {
    let min_nodes = s.group.policy.min_nodes;
    let short = min_nodes.saturating_sub(serving).min(budget);
    if short == 0 {
        return 0;
    }
    let offers = offers();
    let cheapest = (0..offers.len())
        .filter(|&t| offers[t].available > planned[t])
        .min_by(|&a, &b| {
            offers[a]
                .price_per_hour
                .total_cmp(&offers[b].price_per_hour)
        });
    let Some(t) = cheapest else { return 0 };
    let count = short.min(offers[t].available - planned[t]);
    plan.launches.push(PlannedLaunch {
        template: t,
        count,
        reason: format!("the group keeps at least {min_nodes} nodes"),
    });
    count
}
