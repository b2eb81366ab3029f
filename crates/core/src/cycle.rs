//! The cycle: one pure pass over a group's snapshot. Admit, then scale, then schedule.

use std::borrow::Cow;
use std::cell::RefCell;
use std::collections::HashMap;

use foldhash::fast::FixedState;

use crate::admission;
use crate::arrays::Caps;
use crate::carry::{Carry, Held};
use crate::decisions::{
    AgentDecision, Decisions, Infeasible, Launch, NoLaunch, Placement, Rejection, WaitReason,
    Waiting,
};
use crate::dense::{fits, Rows, SlotIndex, Vector};
use crate::devices::{DeviceConstraint, DeviceGrant};
use crate::dimensions::{self, Dimensions};
use crate::expected;
use crate::ledger::{DeviceNeed, Ledger};
use crate::model::{AgentState, Sequencer, Session, SessionState, Timestamp};
use crate::planner::PriceMemo;
use crate::policy::{policy_for, AgentAction, ScaleInput, ScalePlan};
use crate::schedule::{self, FreeIndex, Outcome, Placed, Request, Usage};
use crate::slots::{Key, Quantity, Slots};
use crate::snapshot::Snapshot;

/// Turns a snapshot into decisions. Deterministic: the same snapshot gives the same decisions.
///
/// 1. admit: reject what no agent and no launchable template could ever hold;
/// 2. scale: the policy plans launches, unmarks, marks and terminations against the demand that
///    a trial placement on today's agents leaves unmet;
/// 3. schedule: place pending sessions, in sequencer order and under the head-of-line rule, on
///    agents that take sessions after the scaling decisions (never on one marked in this pass).
///
/// A session of an array with a limit (`%N`) whose array has as many sessions holding capacity
/// ([`Snapshot::array_holding`]) or ahead of it in the queue as the limit is left out of steps
/// 2 and 3: it is neither demand for scale-out nor placed, holds no one back, and waits with
/// [`WaitReason::ArrayLimit`].
pub fn cycle(s: &Snapshot) -> Decisions {
    run(s, None)
}

/// [`cycle`] for a caller that runs the passes of one group in turn and tells `carry` which
/// agents it changed in between (the simulator): what the others were in dense form is kept.
/// The same decisions as [`cycle`].
pub fn cycle_carrying(s: &Snapshot, carry: &mut Carry) -> Decisions {
    run(s, Some(carry))
}

fn run(s: &Snapshot, mut carry: Option<&mut Carry>) -> Decisions {
    // Under fair share, what owners hold, as a carry keeps it (lent to the pass).
    let held = match carry.as_deref_mut() {
        Some(carry) if s.group.scheduler.sequencer == Sequencer::Drf => carry.take_held(s),
        _ => None,
    };
    let prices = carry.as_deref_mut().map(|c| RefCell::new(c.take_prices()));
    let pass = Pass::of(s, carry.as_deref_mut(), held.as_ref());
    let mut decisions = Decisions::default();
    let queue = admit(s, &pass, &mut decisions);
    let scaled = scale(s, &pass, &queue, prices.as_ref(), &mut decisions);
    schedule(s, &pass, &queue, scaled, &mut decisions);
    drop(pass);
    if let Some(carry) = carry {
        if let Some(held) = held {
            carry.give_back_held(held);
        }
        if let Some(prices) = prices {
            carry.give_back_prices(prices.into_inner());
        }
    }
    decisions
}

/// What every step reads of the snapshot: the pending sessions, their required shares, the
/// dense dimensions (slots and devices), and one class per distinct need.
struct Pass<'a> {
    pending: Vec<&'a Session>,
    /// Per pending session: its required shares.
    required: Vec<Cow<'a, Slots>>,
    /// Under fair share, with a queue: what owners hold, by owner, one entry per session that
    /// holds capacity (its required shares) or, from a carry, per owner (their sum).
    holding: Vec<(&'a str, Cow<'a, Slots>)>,
    dims: Dimensions<'a>,
    /// Per pending session: its class (identical needs), or why what it asks of devices is
    /// not a valid request.
    classes: Vec<Result<usize, Infeasible>>,
    /// Per class: what it needs.
    class_needs: Vec<Vector>,
}

impl<'a> Pass<'a> {
    fn of(s: &'a Snapshot, mut carry: Option<&'a mut Carry>, held: Option<&'a Held>) -> Self {
        // Sized for every session: collected from a filter, they would grow step by step.
        let mut pending: Vec<&Session> = Vec::with_capacity(s.sessions.len());
        pending.extend(
            s.sessions
                .iter()
                .filter(|x| x.state == SessionState::Pending),
        );
        // Only fair share orders the queue by what owners hold: no queue, nothing to weigh.
        let mut holding: Vec<(&str, Cow<Slots>)> = Vec::new();
        if s.group.scheduler.sequencer == Sequencer::Drf && !pending.is_empty() {
            match held {
                Some(held) => holding
                    .extend((held.iter()).map(|(owner, sum)| (owner.as_str(), Cow::Borrowed(sum)))),
                None => {
                    holding.reserve_exact(s.sessions.len() - pending.len());
                    holding.extend(
                        (s.sessions.iter())
                            .filter(|x| x.state.holds_capacity())
                            .map(|x| (x.owner.as_str(), s.required_shares_of(x))),
                    );
                }
            }
        }
        let required: Vec<Cow<Slots>> = pending.iter().map(|p| s.required_shares_of(p)).collect();
        let mut dims = dimensions::Builder::new(
            s,
            required
                .iter()
                .chain(holding.iter().map(|(_, r)| r))
                .map(|r| &**r),
            carry.as_deref_mut(),
        );

        // Equivalence classes of identical needs: identical named requests under identical
        // constraints are resolved once. The key is the named request and the number of its
        // constraint list among the distinct ones, built in one buffer: a look-up allocates
        // nothing.
        let mut constraint_lists: HashMap<&[DeviceConstraint], u64, FixedState> =
            HashMap::default();
        let mut class_of: HashMap<Box<[u64]>, Result<usize, Infeasible>, FixedState> =
            HashMap::default();
        let mut named_needs: Vec<(Vector, DeviceNeed)> = Vec::new();
        let mut key: Vec<u64> = Vec::new();
        // Queues come in runs of identical requests (job arrays, sweeps): a session asking
        // what the one before it asked is of its class, found without a key.
        let mut previous: Option<(&Slots, &[DeviceConstraint])> = None;
        let mut classes: Vec<Result<usize, Infeasible>> = Vec::with_capacity(pending.len());
        for (r, p) in required.iter().zip(&pending) {
            let constraints = &p.constraints[..];
            if previous.is_some_and(|(r0, c0)| **r == *r0 && constraints == c0) {
                let class = classes.last().expect("the session before's").clone();
                classes.push(class);
                continue;
            }
            previous = Some((&**r, constraints));
            let next = constraint_lists.len() as u64 + 1;
            let list = match constraints {
                [] => 0,
                _ => *constraint_lists.entry(constraints).or_insert(next),
            };
            dims.named_into(r, &mut key);
            key.push(list);
            let class = match class_of.get(&key[..]) {
                Some(known) => known.clone(),
                None => {
                    let named = &key[..key.len() - 1];
                    let class = dims
                        .resolve(named, constraints)
                        .map(|need| {
                            named_needs.push((named.into(), need));
                            named_needs.len() - 1
                        })
                        .map_err(|e| Infeasible::BadDevices(e.to_string()));
                    class_of.insert(key[..].into(), class.clone());
                    class
                }
            };
            classes.push(class);
        }
        let dims = dims.finish(s, carry);
        // Classes whose named requests differ may still need the same: merged.
        let mut merged: HashMap<Vector, usize, FixedState> = HashMap::default();
        let mut class_needs: Vec<Vector> = Vec::new();
        let renumber: Vec<usize> = named_needs
            .iter()
            .map(|(named, need)| {
                let v = dims.need(named, need);
                *merged.entry(v.clone()).or_insert_with(|| {
                    class_needs.push(v);
                    class_needs.len() - 1
                })
            })
            .collect();
        let classes = classes
            .into_iter()
            .map(|c| c.map(|c| renumber[c]))
            .collect();
        Pass {
            pending,
            required,
            holding,
            dims,
            classes,
            class_needs,
        }
    }

    fn index(&self) -> &SlotIndex {
        &self.dims.index
    }
}

/// The admitted sessions, as the schedulers take them, and their queue order.
struct Queue<'p> {
    /// Per admitted session: its index among the pending ones.
    admitted: Vec<usize>,
    sessions: Vec<&'p Session>,
    /// Per admitted session: its required shares.
    needs: Vec<&'p [u64]>,
    requests: Vec<Request<'p>>,
    /// Indexes into `sessions`, in the sequencer's order: those the pass may place (its arrays'
    /// limits let them).
    order: Vec<usize>,
    /// Indexes into `sessions` of those their arrays' limits keep waiting, in the order of the
    /// sequencer's keys.
    capped: Vec<usize>,
    caps: Caps<'p>,
    /// Per class: what may come back and could hold it, where nothing in the group now can.
    away: Vec<Option<String>>,
}

/// Step 1: rejects, with the reason, the pending sessions that no agent and no launchable template
/// could ever hold (one check per class), and puts the others in the sequencer's order.
fn admit<'p>(s: &Snapshot, pass: &'p Pass, decisions: &mut Decisions) -> Queue<'p> {
    // Most passes have no pending session: no candidates to gather.
    let verdicts: Vec<_> = if pass.class_needs.is_empty() {
        Vec::new()
    } else {
        admission::verdicts(s, &pass.dims, &pass.class_needs)
    };
    let mut admitted: Vec<usize> = Vec::with_capacity(pass.pending.len());
    let mut admitted_class: Vec<usize> = Vec::with_capacity(pass.pending.len());
    // Per class nothing standing holds: what away now could (asked once per class).
    let mut away: Vec<Option<Option<String>>> = vec![None; pass.class_needs.len()];
    for (i, session) in pass.pending.iter().enumerate() {
        let verdict = match &pass.classes[i] {
            Ok(c) => match &verdicts[*c] {
                Ok(()) => Ok(*c),
                Err(reason) => {
                    let holders = away[*c].get_or_insert_with(|| {
                        expected::holders(s, &pass.required[i], &session.constraints)
                    });
                    if holders.is_some() {
                        Ok(*c)
                    } else {
                        Err(reason)
                    }
                }
            },
            Err(reason) => Err(reason),
        };
        match verdict {
            Ok(c) => {
                admitted.push(i);
                admitted_class.push(c);
            }
            Err(reason) => decisions.rejections.push(Rejection {
                session: session.id.clone(),
                reason: reason.clone(),
            }),
        }
    }
    let sessions: Vec<&Session> = admitted.iter().map(|&i| pass.pending[i]).collect();
    let needs: Vec<&[u64]> = admitted_class
        .iter()
        .map(|&c| &*pass.class_needs[c])
        .collect();
    let (order, capped, caps) = queue_order(s, pass, &sessions, &needs);
    let requests: Vec<Request> = admitted
        .iter()
        .zip(&admitted_class)
        .map(|(&i, &c)| Request {
            need: &pass.class_needs[c],
            class: c,
            blocked_passes: pass.pending[i].blocked_passes,
        })
        .collect();
    Queue {
        admitted,
        sessions,
        needs,
        requests,
        order,
        capped,
        caps,
        away: away.into_iter().map(Option::flatten).collect(),
    }
}

/// The sequencer's order of the admitted sessions that their arrays' limits let the pass place,
/// and those they keep waiting (DRF counts what each owner holds against the group's capacity,
/// over the named slots: a device's whole or fraction dimensions are not amounts, and its
/// shares are in the `gpu` slot already).
fn queue_order<'p>(
    s: &Snapshot,
    pass: &Pass,
    sessions: &[&'p Session],
    needs: &[&[u64]],
) -> (Vec<usize>, Vec<usize>, Caps<'p>) {
    let sequencer = s.group.scheduler.sequencer;
    if sessions.is_empty() {
        return Default::default();
    }
    // An array's sessions are let in by its limit in the keys' order (the lowest index first,
    // when the store gives them one submission time and ids in index order), before fair
    // share weighs owners: the sessions the limit keeps waiting count for none.
    let keyed = schedule::keyed_order(sequencer, sessions);
    let (caps, order, capped) = Caps::split(&s.array_holding, sessions, &keyed);
    if sequencer != Sequencer::Drf {
        return (order, capped, caps);
    }
    // Only fair share weighs what owners hold, and only for owners in the queue.
    let mut usage = Usage::default();
    let index = pass.index();
    let named = index.names().len();
    for &k in &order {
        usage
            .entry(Key(&sessions[k].owner))
            .or_insert_with(|| vec![0; named].into_boxed_slice());
    }
    for (owner, r) in &pass.holding {
        if let Some(u) = usage.get_mut(&Key(owner)) {
            index.add(u, r);
        }
    }
    let mut total = vec![0u64; named];
    for a in s
        .agents
        .iter()
        .filter(|a| matches!(a.state, AgentState::Alive | AgentState::Marked))
    {
        index.add(&mut total, &a.capacity);
    }
    let order = schedule::drf_order(&order, sessions, needs, &usage, &total);
    (order, capped, caps)
}

/// What step 2 leaves to step 3: the trial placement and the scaling plan made on it.
struct Scaled<'p> {
    /// Per agent: takes sessions before this pass's scaling decisions.
    open: Vec<bool>,
    /// Per admitted session: where the trial placed it, and on which devices.
    trial: Placed,
    /// Admitted sessions the trial found no room for, in queue order.
    unmet: Vec<usize>,
    /// Per agent: free capacity and devices once the trial placed the queue (the pass's own,
    /// borrowed, when there is no queue to place).
    trial_free: Cow<'p, Rows>,
    trial_ledgers: Cow<'p, [Ledger]>,
    plan: ScalePlan,
}

/// Step 2: places the queue on the agents that take sessions now, without holding the queue
/// behind a blocked session, and has the group's policy plan launches, unmarks, marks and
/// terminations against what that leaves unmet.
fn scale<'p>(
    s: &Snapshot,
    pass: &'p Pass,
    queue: &Queue,
    prices: Option<&RefCell<PriceMemo>>,
    decisions: &mut Decisions,
) -> Scaled<'p> {
    let index = pass.index();
    let open: Vec<bool> = s
        .agents
        .iter()
        .map(|a| a.state == AgentState::Alive)
        .collect();
    // Most passes have no queue, or one that no agent taking sessions has room for (it waits
    // for instances on their way, or for sessions to end): nothing to place, so nothing of the
    // agents to copy.
    let (trial, trial_free, trial_ledgers) = if !room_for_any(pass, queue, &open) {
        let (free, ledgers) = (&pass.dims.agent_free, &pass.dims.agent_ledgers);
        let ledgers = if index.devices().dims() > 0 {
            &ledgers[..]
        } else {
            &[]
        };
        let waiting = queue.requests.len();
        let trial = Placed {
            outcomes: vec![Outcome::NoRoom; waiting],
            grants: vec![Vec::new(); waiting],
        };
        (trial, Cow::Borrowed(&**free), Cow::Borrowed(ledgers))
    } else {
        let free = pass.dims.agent_free.clone().into_owned();
        let mut placing = FreeIndex::new(index.len(), free, open.clone())
            .with_devices(index.shared_devices(), pass.dims.agent_ledgers.to_vec());
        let trial = schedule::place(
            &s.group.scheduler,
            &queue.requests,
            &queue.order,
            pass.class_needs.len(),
            &mut placing,
            false,
        );
        let (free, ledgers) = placing.into_parts();
        (trial, Cow::Owned(free), Cow::Owned(ledgers))
    };
    let config = &s.group.scheduler;
    // Agents the queue will really use: nothing behind a blocked session that holds the queue
    // is placed, so what the trial put there keeps no agent from scale-in (else an idle agent
    // kept for held sessions could block the head forever, with the group at max_nodes).
    let mut used = vec![false; s.agents.len()];
    for &k in &queue.order {
        match trial.outcomes[k] {
            Outcome::Placed { agent } => used[agent] = true,
            Outcome::NoRoom if config.holds_queue(queue.requests[k].blocked_passes) => break,
            _ => {}
        }
    }
    let unmet: Vec<usize> = queue
        .order
        .iter()
        .copied()
        .filter(|&k| trial.outcomes[k] == Outcome::NoRoom)
        .collect();
    let held_from = unmet
        .iter()
        .position(|&k| config.holds_queue(queue.requests[k].blocked_passes))
        .map_or(unmet.len(), |blocker| blocker + 1);
    let unmet_needs: Vec<(&[u64], usize)> = unmet
        .iter()
        .map(|&k| (queue.needs[k], queue.requests[k].class))
        .collect();
    let arrived: Vec<Timestamp> = unmet
        .iter()
        .map(|&k| queue.sessions[k].submitted_at)
        .collect();
    let plan = policy_for(s.group.policy.kind).plan(&ScaleInput {
        snapshot: s,
        index,
        dims: &pass.dims,
        free: &trial_free,
        ledgers: &trial_ledgers,
        used: &used,
        unmet: &unmet_needs,
        arrived: &arrived,
        held_from,
        classes: pass.class_needs.len(),
        away: &queue.away,
        prices,
    });
    write_scaling(s, index, &plan, decisions);
    Scaled {
        open,
        trial,
        unmet,
        trial_free,
        trial_ledgers,
        plan,
    }
}

/// Whether an agent taking sessions (`open`) has room for one of the queue's classes, by its
/// free capacity alone: what its devices hold is within that, so where the free capacity has
/// no room, placement finds none either.
fn room_for_any(pass: &Pass, queue: &Queue, open: &[bool]) -> bool {
    let mut asked = vec![false; pass.class_needs.len()];
    queue.order.iter().map(|&k| &queue.requests[k]).any(|r| {
        !std::mem::replace(&mut asked[r.class], true)
            && (pass.dims.agent_free.iter().zip(open)).any(|(free, &o)| o && fits(r.need, free))
    })
}

/// The plan's launches, marks, unmarks, terminations and scale-out demand, by name.
fn write_scaling(s: &Snapshot, index: &SlotIndex, plan: &ScalePlan, decisions: &mut Decisions) {
    let agent_decision = |action: &AgentAction| AgentDecision {
        agent: s.agents[action.agent].id.clone(),
        reason: action.reason.clone(),
    };
    decisions.launches = plan
        .launches
        .iter()
        .map(|l| Launch {
            template: s.group.templates[l.template].name.clone(),
            count: l.count,
            reason: l.reason.clone(),
        })
        .collect();
    decisions.marks = plan.marks.iter().map(agent_decision).collect();
    decisions.unmarks = plan.unmarks.iter().map(agent_decision).collect();
    decisions.terminations = plan.terminations.iter().map(agent_decision).collect();
    decisions.scale_out_demand = index.slots(&plan.scale_out_demand);
    decisions.recheck_at = plan.recheck_at;
}

/// Step 3: places the queue on the agents that take sessions once the scaling decisions apply,
/// under the head-of-line rule; sessions left waiting get the reason the plan gave them.
fn schedule(s: &Snapshot, pass: &Pass, queue: &Queue, scaled: Scaled, decisions: &mut Decisions) {
    let Scaled {
        mut open,
        trial,
        unmet,
        trial_free: free,
        trial_ledgers: ledgers,
        plan,
    } = scaled;
    let config = &s.group.scheduler;
    // With no queue, or when nothing was unmarked and no blocked session holds the queue, the
    // trial placement is the answer: agents marked now received nothing in it, so closing them changes no choice.
    let trial_stands = queue.order.is_empty()
        || (plan.unmarks.is_empty()
            && (unmet.iter()).all(|&k| !config.holds_queue(queue.requests[k].blocked_passes)));
    let placed = if trial_stands {
        trial
    } else {
        for m in &plan.marks {
            open[m.agent] = false;
        }
        for u in &plan.unmarks {
            open[u.agent] = true;
        }
        // Back to the free capacity before the trial: only the agents it placed on changed,
        // each made again once however many sessions it took.
        let (mut free, mut ledgers) = (free.into_owned(), ledgers.into_owned());
        let mut reset = vec![false; free.len()];
        for outcome in &trial.outcomes {
            if let Outcome::Placed { agent } = *outcome {
                if std::mem::replace(&mut reset[agent], true) {
                    continue;
                }
                free[agent].copy_from_slice(&pass.dims.agent_free[agent]);
                if let Some(ledger) = ledgers.get_mut(agent) {
                    *ledger = pass.dims.agent_ledgers[agent].clone();
                }
            }
        }
        let mut placing = FreeIndex::new(pass.index().len(), free, open)
            .with_devices(pass.index().shared_devices(), ledgers);
        schedule::place(
            config,
            &queue.requests,
            &queue.order,
            pass.class_needs.len(),
            &mut placing,
            true,
        )
    };
    // The plan's reasons move to the decisions (a pass may keep thousands waiting).
    let mut planned_wait: Vec<Option<WaitReason>> = vec![None; queue.sessions.len()];
    for (k, w) in unmet.iter().zip(plan.waits) {
        planned_wait[*k] = w;
    }
    let placed_count = (placed.outcomes.iter())
        .filter(|o| matches!(o, Outcome::Placed { .. }))
        .count();
    decisions.placements.reserve_exact(placed_count);
    decisions
        .waiting
        .reserve_exact(queue.order.len() - placed_count + queue.capped.len());
    for &k in &queue.order {
        let session = queue.sessions[k];
        match placed.outcomes[k] {
            Outcome::Placed { agent } => decisions.placements.push(Placement {
                session: session.id.clone(),
                agent: s.agents[agent].id.clone(),
                slots: pass.required[queue.admitted[k]].clone().into_owned(),
                devices: placed.grants[k]
                    .iter()
                    .map(|g| {
                        let (id, kind) = pass.dims.layout().device_id(&s.agents[agent], g.device);
                        DeviceGrant {
                            id,
                            kind,
                            share: Quantity::from_milli(g.share),
                            memory: Quantity::from_milli(g.memory),
                        }
                    })
                    .collect(),
            }),
            Outcome::HeldBehind { blocker } => decisions.waiting.push(Waiting {
                session: session.id.clone(),
                reason: WaitReason::HeldBehind {
                    session: queue.sessions[blocker].id.clone(),
                },
            }),
            Outcome::NoRoom => decisions.waiting.push(Waiting {
                session: session.id.clone(),
                reason: planned_wait[k].take().unwrap_or(WaitReason::NoRoom {
                    because: NoLaunch::Queue,
                }),
            }),
        }
    }
    if queue.capped.is_empty() {
        return;
    }
    let placed_now = (queue.order.iter().copied())
        .filter(|&k| matches!(placed.outcomes[k], Outcome::Placed { .. }));
    let running = queue.caps.running(placed_now);
    for &k in &queue.capped {
        let Some((array, max_running, a)) = queue.caps.array_of(k) else {
            continue;
        };
        decisions.waiting.push(Waiting {
            session: queue.sessions[k].id.clone(),
            reason: WaitReason::ArrayLimit {
                array: array.to_string(),
                max_running,
                running: running[a],
            },
        });
    }
}
