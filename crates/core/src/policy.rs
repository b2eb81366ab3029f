//! Scaling policies: the logic half of a scaling driver (when and how much; the provider does how).

use std::cell::{OnceCell, RefCell};

use crate::admission::Admission;
use crate::decisions::{NoLaunch, WaitReason};
use crate::dense::{self, fits, Rows, SlotIndex, Vector};
use crate::dimensions::Dimensions;
use crate::ledger::Ledger;
use crate::model::{Agent, AgentState, PlacementStrategy, PolicyKind, Timestamp};
use crate::planner::{self, DemandClass, Offer, PriceMemo};
use crate::schedule::FreeIndex;
use crate::slots::{same_text, Key};
use crate::snapshot::Snapshot;

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

/// Never launches, marks or terminates: pending sessions wait for running ones to end.
pub struct Fixed;

impl ScalingLogic for Fixed {
    fn plan(&self, input: &ScaleInput) -> ScalePlan {
        let mut live = LiveAgents::new(input);
        ScalePlan {
            waits: (0..input.unmet.len())
                .map(|k| {
                    let because = if live.could_hold(input, k) {
                        NoLaunch::FixedPolicy
                    } else {
                        unavailable(input, k)
                    };
                    Some(WaitReason::NoRoom { because })
                })
                .collect(),
            scale_out_demand: vec![0; input.index.len()].into_boxed_slice(),
            ..ScalePlan::default()
        }
    }
}

/// Whether a live agent could ever hold an unmet session (its whole capacity, were it idle), one
/// check per class: a session only agents drained, marked or lost could hold waits for one of
/// them to come back, not for running sessions to end.
struct LiveAgents {
    /// Built at the first question: most passes have no session without room.
    admission: Option<Admission>,
    per_class: Vec<Option<bool>>,
}

impl LiveAgents {
    fn new(input: &ScaleInput) -> Self {
        LiveAgents {
            admission: None,
            per_class: vec![None; input.classes],
        }
    }

    /// For unmet session `k`.
    fn could_hold(&mut self, input: &ScaleInput, k: usize) -> bool {
        let (need, class) = input.unmet[k];
        if let Some(known) = self.per_class[class] {
            return known;
        }
        let index = input.index;
        let admission = self.admission.get_or_insert_with(|| {
            let live = input
                .snapshot
                .agents
                .iter()
                .enumerate()
                .filter(|(_, a)| a.state == AgentState::Alive)
                .map(|(i, a)| input.dims.agent_capacity(i, a));
            Admission::new(index, live)
        });
        let holds = admission.check(index, need).is_ok();
        self.per_class[class] = Some(holds);
        holds
    }
}

/// Why an unmet session that no live agent and no template could hold waits: the agents that
/// could, which take no sessions now, named with their state (at most three, then a count).
fn unavailable(input: &ScaleInput, k: usize) -> NoLaunch {
    const NAMED: usize = 3;
    let need = input.unmet[k].0;
    let holders: Vec<String> = input
        .snapshot
        .agents
        .iter()
        .enumerate()
        .filter(|(i, a)| {
            matches!(a.state, AgentState::Marked | AgentState::Lost)
                && fits(need, &input.dims.agent_capacity(*i, a))
        })
        .map(|(_, a)| {
            let state = match a.state {
                AgentState::Marked if a.updating.is_some() => "updating",
                AgentState::Marked if a.drained_by_hand => "drained",
                AgentState::Marked => "marked for scale-in",
                other => return format!("{} ({other})", a.id),
            };
            format!("{} ({state})", a.id)
        })
        .collect();
    let agents = match holders.len() {
        0 => "agents that take no sessions now".to_string(),
        1 => format!("agent {}", holders[0]),
        n if n <= NAMED => format!("agents {}", holders.join(", ")),
        n => format!(
            "agents {} and {} more",
            holders[..NAMED].join(", "),
            n - NAMED
        ),
    };
    NoLaunch::Unavailable { agents }
}

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

/// Instances on their way: as many bins as demand could use, with what the demand placed on
/// them has left, and the free capacity of the others summed (a count in flight may be huge,
/// and one bin per instance would cost memory in proportion).
struct Launching {
    bins: FreeIndex,
    /// Per bin: its template.
    template: Vec<usize>,
    /// Per template: its instances on their way.
    per_template: Vec<u32>,
    /// Free capacity of the instances on their way that have no bin.
    unbinned: Vector,
}

impl Launching {
    /// Instances on their way.
    fn count(&self) -> u32 {
        self.per_template.iter().sum()
    }
}

/// Places unmet demand on the instances already launching (binpack), setting the waits of what
/// they hold. Returns them and the unmet sessions they do not hold, in queue order.
fn wait_for_in_flight(
    input: &ScaleInput,
    template_slots: &[Vector],
    waits: &mut [Option<WaitReason>],
) -> (Launching, Vec<usize>) {
    let s = input.snapshot;
    let templates = &s.group.templates;
    let mut bins = Rows::with_capacity(input.index.len(), 0);
    let mut bin_template: Vec<usize> = Vec::new();
    let mut bin_ledgers: Vec<Ledger> = Vec::new();
    let mut per_template = vec![0u32; templates.len()];
    let mut unbinned = vec![0u64; input.index.len()];
    for f in &s.in_flight {
        if let Some(t) = templates.iter().position(|t| t.name == f.template) {
            let count = f.count.min(s.group.policy.max_nodes);
            per_template[t] = per_template[t].saturating_add(count);
            // Each unmet session takes at most one bin, so more bins of a template than there
            // are sessions would never be used; the rest only add free capacity.
            let binned = count.min(u32::try_from(input.unmet.len()).unwrap_or(u32::MAX));
            for _ in 0..binned {
                bins.push(&template_slots[t]);
                bin_ledgers.push(input.dims.template_ledgers[t].clone());
                bin_template.push(t);
            }
            // Saturating: a sum this large already covers any headroom.
            let extra = u64::from(count - binned);
            for (u, v) in unbinned.iter_mut().zip(&template_slots[t]) {
                *u = u.saturating_add(v.saturating_mul(extra));
            }
        }
    }
    let mut launching = FreeIndex::new(input.index.len(), bins, vec![true; bin_template.len()])
        .with_devices(input.index.shared_devices(), bin_ledgers);
    let mut rest = Vec::with_capacity(input.unmet.len());
    // Bins only shrink: a class that found none is not searched again.
    let mut no_bin = vec![false; input.classes];
    for (k, &(need, class)) in input.unmet.iter().enumerate() {
        let found = if no_bin[class] {
            None
        } else {
            launching.find(need, PlacementStrategy::Binpack)
        };
        match found {
            Some(b) => {
                launching.take(b, need);
                waits[k] = Some(WaitReason::InFlight {
                    template: templates[bin_template[b]].name.clone(),
                });
            }
            None => {
                no_bin[class] = true;
                rest.push(k);
            }
        }
    }
    let launching = Launching {
        bins: launching,
        template: bin_template,
        per_template,
        unbinned: unbinned.into(),
    };
    (launching, rest)
}

/// Marked agents and which of them this pass unmarks.
struct Reuse {
    /// Free capacity per agent, less what returning demand takes on marked ones; none when no
    /// agent may be unmarked (nothing is taken from the agents' free capacity then).
    marked: Option<FreeIndex>,
    /// Per agent: marked, neither drained by hand nor updating (the policy may unmark it).
    reusable: Vec<bool>,
    /// Per agent: unmarked in this pass.
    unmarked: Vec<bool>,
}

impl Reuse {
    /// Agent `a`'s free capacity, less what returning demand takes on it.
    fn free<'a>(&'a self, input: &'a ScaleInput, a: usize) -> &'a [u64] {
        self.marked.as_ref().map_or(&input.free[a], |m| m.free(a))
    }
}

/// Places unmet demand on reusable marked agents (binpack) and unmarks those it lands on;
/// removes what they hold from `rest`.
fn unmark_for_demand(input: &ScaleInput, rest: &mut Vec<usize>) -> Reuse {
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

/// The group's headroom against its free capacity.
struct Headroom {
    /// The policy's headroom, per slot.
    target: Vector,
    /// Free capacity of agents taking sessions and of instances launching, in the slots the
    /// headroom asks for (0 in the others: nothing falls short of a headroom of 0).
    free: Vec<u64>,
    /// What `free` lacks of `target`, per slot, once marked agents are unmarked for it.
    deficit: Vector,
}

impl Headroom {
    fn deficit_of(target: &[u64], free: &[u64]) -> Vector {
        target
            .iter()
            .zip(free)
            .map(|(h, f)| h.saturating_sub(*f))
            .collect()
    }
}

/// Sums the free capacity of agents taking sessions and of instances launching, and unmarks
/// further reusable marked agents, in agent order, while it falls short of the headroom.
fn keep_headroom(input: &ScaleInput, launching: &Launching, reuse: &mut Reuse) -> Headroom {
    let s = input.snapshot;
    let target = input.index.vector(&s.group.policy.headroom);
    // The free capacity is summed in the slots the headroom asks for alone (a headroom names a
    // slot or two, an agent's vector has every slot and device dimension of the pass).
    let asked: Vec<usize> = (0..target.len()).filter(|&i| target[i] > 0).collect();
    let add = |free: &mut [u64], v: &[u64]| {
        for &i in &asked {
            free[i] = free[i].saturating_add(v[i]);
        }
    };
    let mut free = vec![0u64; input.index.len()];
    if !asked.is_empty() {
        for (a, agent) in s.agents.iter().enumerate() {
            if agent.state == AgentState::Alive || reuse.unmarked[a] {
                add(&mut free, reuse.free(input, a));
            }
        }
        for b in 0..launching.template.len() {
            add(&mut free, launching.bins.free(b));
        }
        add(&mut free, &launching.unbinned);
    }
    // Only marked agents that may be unmarked change the sum (most passes have none).
    if reuse.marked.is_some() {
        for a in 0..s.agents.len() {
            if target.iter().zip(&free).all(|(h, f)| f >= h) {
                break;
            }
            if reuse.reusable[a] && !reuse.unmarked[a] {
                reuse.unmarked[a] = true;
                add(&mut free, reuse.free(input, a));
            }
        }
    }
    let deficit = Headroom::deficit_of(&target, &free);
    Headroom {
        target,
        free,
        deficit,
    }
}

/// How many instances this pass may launch, and what holds launches back now.
struct Budget {
    /// Launches left under `max_nodes` and `max_launches_per_pass` (0 during the cooldown).
    launches: u32,
    /// Launches left under `max_nodes` alone.
    room: u32,
    /// The end of the cooldown, while it lasts.
    cooling_until: Option<Timestamp>,
    /// The end of the batching window, while it is open: launches for demand wait for it.
    batching_until: Option<Timestamp>,
    now: Timestamp,
}

impl Budget {
    /// Launches for demand (and headroom) this pass.
    fn for_demand(&self) -> u32 {
        if self.batching_until.is_some() {
            0
        } else {
            self.launches
        }
    }

    fn recheck_at(&self) -> Option<Timestamp> {
        self.cooling_until.or(self.batching_until)
    }

    /// Why the budget launches nothing for demand, if it is the budget's doing.
    fn holds(&self) -> Option<NoLaunch> {
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
fn launch_budget(
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

/// Every template as an offer: as many more as its `max` allows beside its agents and launching
/// instances, within its launch limit.
fn offers(input: &ScaleInput, launching: &Launching) -> Vec<Offer> {
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
fn launch_for_demand<'o>(
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
                        why_no_launch(input, template_slots, k, budget, launched, &mut live)
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
        .filter(|(_, slots)| fits(need, slots))
        .find_map(|(t, _)| s.launch_limits.get(&t.name))
    {
        NoLaunch::Held {
            reason: limit.reason.clone(),
        }
    } else {
        NoLaunch::TemplatesAtMax
    }
}

/// Agents that take sessions once this pass's unmarks apply.
fn serving(input: &ScaleInput, unmarked: &[bool]) -> u32 {
    let agents = &input.snapshot.agents;
    (0..agents.len())
        .filter(|&a| agents[a].state == AgentState::Alive || unmarked[a])
        .count() as u32
}

/// Tops the group up to `min_nodes` with the cheapest template that may still launch, within
/// `budget` more launches. `serving` counts agents taking sessions, launching instances and the
/// launches planned. Returns how many it adds.
fn keep_min_nodes<'o>(
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

/// Marks agents idle past the idle wait, longest idle first, while the `keep` nodes counted stay
/// above `min_nodes` and the free capacity left keeps the headroom.
fn mark_idle(input: &ScaleInput, mut keep: u32, headroom: &mut Headroom) -> Vec<AgentAction> {
    let s = input.snapshot;
    let policy = &s.group.policy;
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
    let mut marks = Vec::new();
    for a in idle {
        if keep <= policy.min_nodes {
            break;
        }
        let mut without = headroom.free.clone();
        for (w, f) in without.iter_mut().zip(input.free[a].iter()) {
            *w = w.saturating_sub(*f);
        }
        if headroom.target.iter().zip(&without).any(|(h, w)| w < h) {
            continue;
        }
        headroom.free = without;
        keep -= 1;
        marks.push(AgentAction::new(
            a,
            format!("idle for more than {} s", policy.idle_wait_secs),
        ));
    }
    marks
}

/// Marked agents this pass did not unmark that hold nothing: no session, no allocation.
fn terminate_marked_empty(s: &Snapshot, unmarked: &[bool]) -> Vec<AgentAction> {
    let candidate = |(a, agent): &(usize, &Agent)| {
        agent.state == AgentState::Marked
            && !unmarked[*a]
            && !agent.external
            && agent.updating.is_none()
            && agent.is_idle()
    };
    // Most passes have no marked agent: the sessions are read only when one may go, and
    // matched against the few that may (by id, in order).
    let mut candidates: Vec<(Key, usize)> = (s.agents.iter().enumerate())
        .filter(candidate)
        .map(|(a, agent)| (Key(&agent.id.0), a))
        .collect();
    if candidates.is_empty() {
        return Vec::new();
    }
    candidates.sort_unstable();
    let mut busy = vec![false; candidates.len()];
    for x in s.sessions.iter().filter(|x| x.state.holds_capacity()) {
        let on = x.agent.as_ref().map(|a| Key(&a.0));
        if let Some(k) = on.and_then(|on| candidates.binary_search_by(|c| c.0.cmp(&on)).ok()) {
            busy[k] = true;
        }
    }
    let mut empty: Vec<usize> = (candidates.iter().zip(&busy))
        .filter(|(_, &b)| !b)
        .map(|(&(_, a), _)| a)
        .collect();
    // In the agents' order, as before the sort.
    empty.sort_unstable();
    empty
        .into_iter()
        .map(|a| AgentAction::new(a, "marked and empty"))
        .collect()
}
