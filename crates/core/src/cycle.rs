//! The cycle: one pure pass over a group's snapshot. Admit, then scale, then schedule.

use std::collections::{BTreeMap, HashMap};

use crate::admission::{standing_candidates, Admission};
use crate::decisions::{
    AgentDecision, Decisions, Launch, NoLaunch, Placement, Rejection, WaitReason, Waiting,
};
use crate::dense::{self, SlotIndex, Vector};
use crate::model::{AgentState, Session};
use crate::policy::{policy_for, ScaleInput};
use crate::schedule::{self, FreeIndex, Outcome, Request};
use crate::slots::Slots;
use crate::snapshot::Snapshot;

/// Turns a snapshot into decisions. Deterministic: the same snapshot gives the same decisions.
///
/// 1. admit: reject what no agent and no launchable template could ever hold;
/// 2. scale: the policy plans launches, unmarks, marks and terminations against the demand that
///    a trial placement on today's agents leaves unmet;
/// 3. schedule: place pending sessions, in sequencer order and under the head-of-line rule, on
///    agents that take sessions after the scaling decisions (never on one marked in this pass).
pub fn cycle(s: &Snapshot) -> Decisions {
    let pending: Vec<&Session> = s.pending().collect();
    let required: Vec<Slots> = pending.iter().map(|p| s.required_shares(p)).collect();
    let holding: Vec<(&Session, Slots)> = s
        .sessions
        .iter()
        .filter(|x| x.state.holds_capacity())
        .map(|x| (x, s.required_shares(x)))
        .collect();
    let index = SlotIndex::of(
        s.agents
            .iter()
            .flat_map(|a| [&a.capacity, &a.allocated])
            .chain(s.group.templates.iter().map(|t| &t.slots))
            .chain(required.iter())
            .chain(holding.iter().map(|(_, r)| r))
            .chain([&s.group.policy.headroom]),
    );

    // Equivalence classes of identical required shares.
    let mut class_of: HashMap<Vector, usize> = HashMap::new();
    let mut class_needs: Vec<Vector> = Vec::new();
    let classes: Vec<usize> = required
        .iter()
        .map(|r| {
            let v = index.vector(r);
            *class_of.entry(v.clone()).or_insert_with(|| {
                class_needs.push(v);
                class_needs.len() - 1
            })
        })
        .collect();

    // 1. Admit, once per class.
    let admission = Admission::new(&index, standing_candidates(s).map(|c| index.vector(c)));
    let verdicts: Vec<_> = class_needs
        .iter()
        .map(|n| admission.check(&index, n))
        .collect();
    let mut decisions = Decisions::default();
    let mut admitted: Vec<usize> = Vec::new();
    for (i, session) in pending.iter().enumerate() {
        match &verdicts[classes[i]] {
            Ok(()) => admitted.push(i),
            Err(reason) => decisions.rejections.push(Rejection {
                session: session.id.clone(),
                reason: reason.clone(),
            }),
        }
    }
    let sessions: Vec<&Session> = admitted.iter().map(|&i| pending[i]).collect();
    let needs: Vec<Vector> = admitted
        .iter()
        .map(|&i| class_needs[classes[i]].clone())
        .collect();
    let requests: Vec<Request> = admitted
        .iter()
        .zip(&needs)
        .map(|(&i, need)| Request {
            need,
            class: classes[i],
            blocked_passes: pending[i].blocked_passes,
        })
        .collect();

    // Queue order (DRF counts what each owner holds against the group's capacity).
    let mut usage: BTreeMap<&str, Vector> = BTreeMap::new();
    for (x, r) in &holding {
        let u = usage
            .entry(x.owner.as_str())
            .or_insert_with(|| vec![0; index.len()].into_boxed_slice());
        dense::add(u, &index.vector(r));
    }
    let mut total = vec![0u64; index.len()];
    for a in s
        .agents
        .iter()
        .filter(|a| matches!(a.state, AgentState::Alive | AgentState::Marked))
    {
        dense::add(&mut total, &index.vector(&a.capacity));
    }
    let config = &s.group.scheduler;
    let order = schedule::sequence(config.sequencer, &sessions, &needs, &usage, &total);

    // 2. Scale against what a trial placement (no head-of-line hold) leaves unmet.
    let free: Vec<Vector> = s
        .agents
        .iter()
        .map(|a| {
            let (cap, alloc) = (index.vector(&a.capacity), index.vector(&a.allocated));
            cap.iter()
                .zip(alloc.iter())
                .map(|(c, u)| c.saturating_sub(*u))
                .collect()
        })
        .collect();
    let open: Vec<bool> = s
        .agents
        .iter()
        .map(|a| a.state == AgentState::Alive)
        .collect();
    let mut trial = FreeIndex::new(index.len(), free.clone(), open.clone());
    let trial_out = schedule::place(
        config,
        &requests,
        &order,
        class_needs.len(),
        &mut trial,
        false,
    );
    let mut used = vec![false; s.agents.len()];
    for o in &trial_out {
        if let Outcome::Placed { agent } = o {
            used[*agent] = true;
        }
    }
    let unmet_items: Vec<usize> = order
        .iter()
        .copied()
        .filter(|&k| trial_out[k] == Outcome::NoRoom)
        .collect();
    let unmet: Vec<(&[u64], usize)> = unmet_items
        .iter()
        .map(|&k| (&*needs[k], requests[k].class))
        .collect();
    let trial_free: Vec<Vector> = (0..s.agents.len()).map(|a| trial.free(a).into()).collect();
    let plan = policy_for(s.group.policy.kind).plan(&ScaleInput {
        snapshot: s,
        index: &index,
        free: &trial_free,
        used: &used,
        unmet: &unmet,
        classes: class_needs.len(),
    });
    let agent_decision = |(a, reason): &(usize, String)| AgentDecision {
        agent: s.agents[*a].id.clone(),
        reason: reason.clone(),
    };
    decisions.launches = plan
        .launches
        .iter()
        .map(|(t, count, reason)| Launch {
            template: s.group.templates[*t].name.clone(),
            count: *count,
            reason: reason.clone(),
        })
        .collect();
    decisions.marks = plan.marks.iter().map(agent_decision).collect();
    decisions.unmarks = plan.unmarks.iter().map(agent_decision).collect();
    decisions.terminations = plan.terminations.iter().map(agent_decision).collect();
    decisions.scale_out_demand = index.slots(&plan.scale_out_demand);

    // 3. Schedule on the agents that take sessions once the scaling decisions apply. When
    //    nothing was unmarked and no blocked session holds the queue, the trial placement is the
    //    answer: agents marked now received nothing in it, so closing them changes no choice.
    let trial_stands = plan.unmarks.is_empty()
        && unmet_items
            .iter()
            .all(|&k| !config.holds_queue(requests[k].blocked_passes));
    let outcomes = if trial_stands {
        trial_out
    } else {
        let mut open = open;
        for &(a, _) in &plan.marks {
            open[a] = false;
        }
        for &(a, _) in &plan.unmarks {
            open[a] = true;
        }
        let mut placing = FreeIndex::new(index.len(), free, open);
        schedule::place(
            config,
            &requests,
            &order,
            class_needs.len(),
            &mut placing,
            true,
        )
    };
    let mut planned_wait: Vec<Option<&WaitReason>> = vec![None; sessions.len()];
    for (k, w) in unmet_items.iter().zip(&plan.waits) {
        planned_wait[*k] = w.as_ref();
    }
    for &k in &order {
        let session = sessions[k];
        match outcomes[k] {
            Outcome::Placed { agent } => decisions.placements.push(Placement {
                session: session.id.clone(),
                agent: s.agents[agent].id.clone(),
                slots: required[admitted[k]].clone(),
            }),
            Outcome::HeldBehind { blocker } => decisions.waiting.push(Waiting {
                session: session.id.clone(),
                reason: WaitReason::HeldBehind {
                    session: sessions[blocker].id.clone(),
                },
            }),
            Outcome::NoRoom => decisions.waiting.push(Waiting {
                session: session.id.clone(),
                reason: planned_wait[k].cloned().unwrap_or(WaitReason::NoRoom {
                    because: NoLaunch::Queue,
                }),
            }),
        }
    }
    decisions
}
