//! Devices in the dense form of a pass: what each agent's devices hold, summarised per group
//! of device classes so that the free-capacity index answers "which agents can hold this"
//! without walking devices.
//!
//! A device's class is its kind, model and memory. A request of a device kind accepts a set of
//! classes (all of the kind, or those its constraints and its fraction's memory allow): a
//! *group*. Each group has three dimensions after the named slots of a pass's vectors:
//!
//! - `whole`: idle devices of the group, in thousandths (a request of `gpu=2` needs 2000);
//! - `fraction`: the largest free share on one device of the group (`gpu=0.5` needs 500);
//! - `memory`: the most free memory on one device of the group (`gpu.mem=10GiB` needs that).
//!
//! All three only shrink as sessions are placed, as the index's cursors need. The first two are
//! exact; a fraction that also asks for memory needs one device with both, which the summary
//! cannot say, so [`Ledger::can_hold`] looks at the devices for those ([`DeviceLayout::exact`]).

use std::collections::HashMap;
use std::sync::Arc;

use foldhash::fast::FixedState;

use crate::devices::{ask_amounts, Device, DeviceAsk, DeviceConstraint, DeviceError};
use crate::model::{Agent, InstanceTemplate};
use crate::slots::{same_text, Quantity, SlotName, Slots, SCALE};

const WHOLE: usize = 0;
const FRACTION: usize = 1;
const MEMORY: usize = 2;
const DIMS: usize = 3;

/// Most devices of one kind an agent or template stands for: a number beyond (`gpu=1P`, which
/// no machine has) must not make a pass build billions of them.
pub const MAX_DEVICES: usize = 1024;

/// The device part of one pass's dense vectors: kinds, classes and groups.
#[derive(Debug, Clone, Default)]
pub struct DeviceLayout {
    /// Device kinds, sorted.
    kinds: Vec<SlotName>,
    /// Per class: its kind (index into `kinds`), model and memory (thousandths of bytes).
    classes: Vec<(usize, String, u64)>,
    /// Classes by kind and memory, then model.
    class_of: HashMap<(usize, u64), Vec<(String, u32)>, FixedState>,
    /// Per group: its kind and which classes it holds (by class index).
    groups: Vec<(usize, Vec<bool>)>,
    group_of: HashMap<(usize, Vec<bool>), usize, FixedState>,
    /// Per kind: the group of all its classes.
    all: Vec<usize>,
    /// Where the device dimensions start in a vector (after the named slots).
    offset: usize,
    /// Per kind: where its amount and its fraction's memory (`gpu`, `gpu.mem`) are among the
    /// named slots, when the layout was made with them ([`DeviceLayout::of`]).
    positions: Vec<(Option<usize>, Option<usize>)>,
}

/// Equal layouts have the same kinds, classes, groups and positions; the look-up tables are
/// made of those, so they are not compared (a pass compares its layout with the one a carry
/// kept, and comparing the tables' model names took a call to `memcmp` each).
impl PartialEq for DeviceLayout {
    fn eq(&self, other: &Self) -> bool {
        let same_class = |a: &(usize, String, u64), b: &(usize, String, u64)| {
            a.0 == b.0 && a.2 == b.2 && same_text(&a.1, &b.1)
        };
        self.offset == other.offset
            && self.kinds == other.kinds
            && self.positions == other.positions
            && self.groups == other.groups
            && self.classes.len() == other.classes.len()
            && (self.classes.iter().zip(&other.classes)).all(|(a, b)| same_class(a, b))
    }
}

impl Eq for DeviceLayout {}

/// What one placement takes of one device (index into the agent's device list).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Grant {
    pub device: usize,
    pub share: u64,
    pub memory: u64,
}

impl DeviceLayout {
    /// The layout of `kinds` over the classes of `devices`, starting at `offset`.
    pub fn new<'a>(
        kinds: Vec<SlotName>,
        devices: impl IntoIterator<Item = &'a Device>,
        offset: usize,
    ) -> Self {
        let classes = devices
            .into_iter()
            .map(|d| (&d.kind, d.model.as_str(), d.memory.milli()));
        Self::of_classes(kinds, classes, offset)
    }

    /// The layout of `kinds` over classes given as (kind, model, memory), starting at `offset`.
    fn of_classes<'a>(
        mut kinds: Vec<SlotName>,
        classes: impl IntoIterator<Item = (&'a SlotName, &'a str, u64)>,
        offset: usize,
    ) -> Self {
        kinds.sort_unstable();
        kinds.dedup();
        // Borrowed and deduplicated first: thousands of devices share a few classes.
        let mut keys: std::collections::BTreeSet<(usize, &str, u64)> = Default::default();
        let mut previous = None;
        for class in classes {
            // Devices come in runs of one class (an agent's eight GPUs).
            if previous.is_some_and(|p| same_key(p, class)) {
                continue;
            }
            previous = Some(class);
            let (kind, model, memory) = class;
            if let Ok(kind) = kinds.binary_search(kind) {
                keys.insert((kind, model, memory));
            }
        }
        let keys: Vec<(usize, String, u64)> = keys
            .into_iter()
            .map(|(kind, model, memory)| (kind, model.to_string(), memory))
            .collect();
        let mut class_of: HashMap<(usize, u64), Vec<(String, u32)>, FixedState> =
            HashMap::default();
        for (i, (kind, model, memory)) in keys.iter().enumerate() {
            class_of
                .entry((*kind, *memory))
                .or_default()
                .push((model.clone(), i as u32));
        }
        let mut layout = DeviceLayout {
            kinds,
            classes: keys,
            class_of,
            offset,
            ..DeviceLayout::default()
        };
        layout.positions = vec![(None, None); layout.kinds.len()];
        layout.all = (0..layout.kinds.len())
            .map(|k| {
                let members = layout.classes.iter().map(|c| c.0 == k).collect();
                layout.intern(k, members)
            })
            .collect();
        layout
    }

    /// The layout of a snapshot: `kinds` over the classes of the agents' and templates'
    /// devices (and, for a kind one gives only as a number, the unknown model), after the
    /// named slots `names`.
    pub fn of(
        kinds: Vec<SlotName>,
        names: &[SlotName],
        agents: &[Agent],
        templates: &[InstanceTemplate],
    ) -> Self {
        // A kind some agent or template gives only as a number: its unknown-model class.
        let stands_in = |kind: &SlotName| {
            let by_number = |slots: &Slots, devices: &[Device]| {
                !slots.get(kind.as_str()).is_zero() && !devices.iter().any(|d| &d.kind == kind)
            };
            let by_set = |slots: &Slots, sets: &[crate::devices::DeviceSet]| {
                !slots.get(kind.as_str()).is_zero() && !sets.iter().any(|d| &d.kind == kind)
            };
            agents.iter().any(|a| by_number(&a.capacity, &a.devices))
                || templates.iter().any(|t| by_set(&t.slots, &t.devices))
        };
        let stand_ins: Vec<&SlotName> = kinds.iter().filter(|k| stands_in(k)).collect();
        let classes = stand_ins
            .into_iter()
            .map(|k| (k, "", 0))
            .chain(
                agents
                    .iter()
                    .flat_map(|a| &a.devices)
                    .map(|d| (&d.kind, d.model.as_str(), d.memory.milli())),
            )
            .chain(
                templates
                    .iter()
                    .flat_map(|t| &t.devices)
                    .map(|d| (&d.kind, d.model.as_str(), d.memory.milli())),
            );
        // The classes borrow the kinds they name; the layout keeps its own list.
        let mut layout = Self::of_classes(kinds.clone(), classes, names.len());
        layout.positions = layout
            .kinds
            .iter()
            .map(|k| {
                let at = |n: &str| names.binary_search_by(|x| x.as_str().cmp(n)).ok();
                (at(k.as_str()), at(&crate::devices::memory_slot(k)))
            })
            .collect();
        layout
    }

    /// Where the device dimensions start: the number of named slots.
    pub fn offset(&self) -> usize {
        self.offset
    }

    /// Dimensions after the named slots.
    pub fn dims(&self) -> usize {
        DIMS * self.groups.len()
    }

    fn intern(&mut self, kind: usize, members: Vec<bool>) -> usize {
        if let Some(&g) = self.group_of.get(&(kind, members.clone())) {
            return g;
        }
        self.groups.push((kind, members.clone()));
        self.group_of.insert((kind, members), self.groups.len() - 1);
        self.groups.len() - 1
    }

    /// The group a request of `kind` accepts under `constraint`, whose fraction asks for
    /// `memory` (a device with less memory in all can never hold it), or, when it is not made
    /// yet, its classes.
    fn group(
        &self,
        kind: usize,
        constraint: Option<&DeviceConstraint>,
        memory: u64,
    ) -> Result<usize, Vec<bool>> {
        if constraint.is_none() && memory == 0 {
            return Ok(self.all[kind]);
        }
        let members = self
            .classes
            .iter()
            .map(|(k, model, mem)| {
                *k == kind
                    && *mem >= memory
                    && constraint.is_none_or(|c| c.accepts(model, Quantity::from_milli(*mem)))
            })
            .collect();
        let key = (kind, members);
        match self.group_of.get(&key) {
            Some(&g) => Ok(g),
            None => Err(key.1),
        }
    }

    /// Resolves a request's device asks into groups (made as needed): the request's
    /// [`DeviceNeed`].
    pub fn resolve(
        &mut self,
        request: &Slots,
        constraints: &[DeviceConstraint],
    ) -> Result<DeviceNeed, DeviceError> {
        let amounts: Vec<(u64, u64)> = self
            .kinds
            .iter()
            .map(|k| {
                let memory = request.get(&crate::devices::memory_slot(k));
                (request.get(k.as_str()).milli(), memory.milli())
            })
            .collect();
        self.resolve_amounts(&amounts, constraints)
    }

    /// [`DeviceLayout::resolve`] for a request already in dense form over the named slots
    /// (the layout made by [`DeviceLayout::of`]): its amounts read by position.
    pub fn resolve_named(
        &mut self,
        named: &[u64],
        constraints: &[DeviceConstraint],
    ) -> Result<DeviceNeed, DeviceError> {
        let amounts = self.named_amounts(named);
        self.resolve_amounts(&amounts, constraints)
    }

    /// [`DeviceLayout::resolve_named`] with the groups made so far: `Ok(None)` when the request
    /// needs one that is not made yet.
    pub fn resolve_named_known(
        &self,
        named: &[u64],
        constraints: &[DeviceConstraint],
    ) -> Result<Option<DeviceNeed>, DeviceError> {
        let amounts = self.named_amounts(named);
        Ok(self.resolve_known(&amounts, constraints)?.ok())
    }

    /// Per kind, what a request over the named slots gives of it and of its fraction's memory.
    fn named_amounts(&self, named: &[u64]) -> Vec<(u64, u64)> {
        self.positions
            .iter()
            .map(|(amount, memory)| {
                let at = |p: &Option<usize>| p.map_or(0, |i| named[i]);
                (at(amount), at(memory))
            })
            .collect()
    }

    /// Per kind, what a request gives of it and of its fraction's memory (thousandths): the
    /// groups it needs are made as they are found missing.
    fn resolve_amounts(
        &mut self,
        amounts: &[(u64, u64)],
        constraints: &[DeviceConstraint],
    ) -> Result<DeviceNeed, DeviceError> {
        loop {
            match self.resolve_known(amounts, constraints)? {
                Ok(need) => return Ok(need),
                Err((kind, members)) => {
                    self.intern(kind, members);
                }
            }
        }
    }

    /// [`DeviceLayout::resolve_amounts`] with the groups made so far, or the first group
    /// missing (its kind and classes).
    fn resolve_known(
        &self,
        amounts: &[(u64, u64)],
        constraints: &[DeviceConstraint],
    ) -> Result<Result<DeviceNeed, (usize, Vec<bool>)>, DeviceError> {
        let mut asks = Vec::new();
        for (k, &(amount, memory)) in amounts.iter().enumerate() {
            let Some(a) = ask_amounts(&self.kinds[k], amount, memory)? else {
                continue;
            };
            let constraint = constraints.iter().find(|c| c.kind == self.kinds[k]);
            let memory = match a {
                DeviceAsk::Fraction { memory, .. } => memory,
                DeviceAsk::Whole(_) => 0,
            };
            match self.group(k, constraint, memory) {
                Ok(g) => asks.push((g, a)),
                Err(members) => return Ok(Err((k, members))),
            }
        }
        Ok(Ok(DeviceNeed { asks }))
    }

    /// An agent's ledger: its devices, and, for a kind it gives only as a number, that many
    /// whole devices of the unknown model (a fraction left over is one device of that share)
    /// holding what its allocation says, in device order. Their indexes follow its list
    /// ([`DeviceLayout::device_id`]).
    pub fn agent_ledger(&self, agent: &Agent) -> Ledger {
        let mut ledger = self.ledger(&agent.devices);
        let mut index = agent.devices.len() as u32;
        for kind in self.legacy_kinds(&agent.devices) {
            let total = agent.capacity.get(kind.as_str()).milli();
            // Most agents have none of most kinds: nothing to look up.
            if total == 0 {
                continue;
            }
            let used = agent.allocated.get(kind.as_str()).milli();
            let Some(class) = self.class_key(kind, "", 0) else {
                continue;
            };
            ledger.stand_in(class, total, used, &mut index);
        }
        ledger
    }

    /// A fresh instance's ledger.
    pub fn template_ledger(&self, template: &InstanceTemplate) -> Ledger {
        let mut ledger = Ledger::default();
        let mut index = 0u32;
        for set in &template.devices {
            let Some(class) = self.class_key(&set.kind, &set.model, set.memory.milli()) else {
                continue;
            };
            for _ in 0..(set.count as usize).min(MAX_DEVICES) {
                (ledger.slots_mut()).push(DeviceSlot::idle(index, class, set.memory.milli()));
                index += 1;
            }
        }
        let declared: Vec<&SlotName> = template.devices.iter().map(|d| &d.kind).collect();
        for kind in self.kinds.iter().filter(|k| !declared.contains(k)) {
            let total = template.slots.get(kind.as_str()).milli();
            if let Some(class) = self.class_key(kind, "", 0) {
                ledger.stand_in(class, total, 0, &mut index);
            }
        }
        ledger
    }

    /// The id and kind of an agent's device by its ledger index: from its list, or the name of
    /// a stand-in (`gpu0`, `gpu1`, ...).
    pub fn device_id(&self, agent: &Agent, index: usize) -> (String, SlotName) {
        if let Some(d) = agent.devices.get(index) {
            return (d.id.clone(), d.kind.clone());
        }
        let mut ordinal = index - agent.devices.len();
        for kind in self.legacy_kinds(&agent.devices) {
            let n = (agent.capacity.get(kind.as_str()).milli().div_ceil(SCALE) as usize)
                .min(MAX_DEVICES);
            if ordinal < n {
                return (format!("{kind}{ordinal}"), kind.clone());
            }
            ordinal -= n;
        }
        (format!("device{index}"), self.kinds[0].clone())
    }

    /// The kinds a device list does not declare.
    fn legacy_kinds<'a>(&'a self, devices: &'a [Device]) -> impl Iterator<Item = &'a SlotName> {
        self.kinds
            .iter()
            .filter(move |k| !devices.iter().any(|d| &d.kind == *k))
    }

    fn class_key(&self, kind: &SlotName, model: &str, memory: u64) -> Option<u32> {
        let kind = self.kinds.binary_search(kind).ok()?;
        self.class_of
            .get(&(kind, memory))?
            .iter()
            .find(|(m, _)| same_text(m, model))
            .map(|&(_, c)| c)
    }

    /// Writes a need's device dimensions into `out` (a vector over the pass's index).
    pub fn write_need(&self, need: &DeviceNeed, out: &mut [u64]) {
        for &(g, a) in &need.asks {
            let at = self.offset + DIMS * g;
            match a {
                DeviceAsk::Whole(n) => out[at + WHOLE] = u64::from(n) * SCALE,
                DeviceAsk::Fraction { share, memory } => {
                    out[at + FRACTION] = share;
                    out[at + MEMORY] = memory;
                }
            }
        }
    }

    /// Whether a need's dimensions say all: a fraction that asks for memory needs one device
    /// with both free, which the summary cannot tell.
    pub fn exact(&self, need: &[u64]) -> bool {
        (0..self.groups.len()).all(|g| {
            let at = self.offset + DIMS * g;
            need[at + FRACTION] == 0 || need[at + MEMORY] == 0
        })
    }

    /// The ledger of a list of devices (devices of kinds or classes the layout does not know
    /// are left out: no request of the pass can use them).
    pub fn ledger(&self, devices: &[Device]) -> Ledger {
        // Devices come in runs of one class (an agent's eight GPUs): looked up once a run.
        let mut run: Option<(&Device, Option<u32>)> = None;
        let devices = devices
            .iter()
            .enumerate()
            .filter_map(|(index, d)| {
                let class = match run {
                    Some((p, class)) if same_class(p, d) => class,
                    _ => self.class(d),
                };
                run = Some((d, class));
                let class = class?;
                let cap = d.share.milli().min(SCALE) as u32;
                Some(DeviceSlot {
                    index: index as u32,
                    class,
                    cap,
                    free: cap.saturating_sub(d.allocated.milli().min(SCALE) as u32),
                    mem_cap: d.memory.milli(),
                    mem_free: d.memory.milli().saturating_sub(d.allocated_memory.milli()),
                })
            })
            .collect();
        Ledger::of(devices)
    }

    fn class(&self, d: &Device) -> Option<u32> {
        self.class_key(&d.kind, &d.model, d.memory.milli())
    }

    /// Writes the ledger's summary into the device dimensions of `out`.
    pub fn write_free(&self, ledger: &Ledger, out: &mut [u64]) {
        self.write_summary(ledger, out, |d| *d);
    }

    /// [`DeviceLayout::write_free`] of [`Ledger::fresh`], without making the fresh ledger.
    pub fn write_capacity(&self, ledger: &Ledger, out: &mut [u64]) {
        self.write_summary(ledger, out, DeviceSlot::fresh);
    }

    fn write_summary(
        &self,
        ledger: &Ledger,
        out: &mut [u64],
        seen_as: impl Fn(&DeviceSlot) -> DeviceSlot,
    ) {
        for (g, (_, members)) in self.groups.iter().enumerate() {
            let (mut whole, mut fraction, mut memory) = (0u64, 0u64, 0u64);
            for d in ledger.slots().iter().filter(|d| members[d.class as usize]) {
                let d = seen_as(d);
                if d.is_idle() {
                    whole += SCALE;
                }
                fraction = fraction.max(u64::from(d.free));
                memory = memory.max(d.mem_free);
            }
            let at = self.offset + DIMS * g;
            out[at + WHOLE] = whole;
            out[at + FRACTION] = fraction;
            out[at + MEMORY] = memory;
        }
    }

    /// A need in the planner's additive form: a fraction counts as the share of a device that
    /// a device full of such fractions gives each (`1/⌊1/q⌋`: 0.3 counts as 1/3, 0.6 as a
    /// whole device), added to the whole devices; its memory stays, a sum. Exact for devices
    /// shared by equal fractions, never short (a plan never launches too little for them). A
    /// request any device of its kind may serve is counted in the kind's named slot alone
    /// (`gpu`, which already adds devices up), so the planner's prices see no slot twice.
    pub fn planning_need(&self, need: &[u64]) -> Box<[u64]> {
        let mut v: Box<[u64]> = need.into();
        for (g, &(kind, _)) in self.groups.iter().enumerate() {
            let at = self.offset + DIMS * g;
            let q = v[at + FRACTION];
            let counted = if q > 0 {
                SCALE / (SCALE / q.min(SCALE))
            } else {
                0
            };
            match self.positions[kind].0.filter(|_| self.all[kind] == g) {
                Some(named) => {
                    if q > 0 {
                        v[named] = counted;
                    }
                    v[at..at + DIMS].fill(0);
                }
                None => {
                    v[at + WHOLE] += counted;
                    v[at + FRACTION] = 0;
                }
            }
        }
        v
    }

    /// A fresh instance's capacity in the planner's additive form: its whole devices, and their
    /// memory summed (as many times the largest as it has devices of the group); for the group
    /// of all a kind's devices, the kind's named slot alone ([`DeviceLayout::planning_need`]).
    pub fn planning_capacity(&self, capacity: &[u64]) -> Box<[u64]> {
        let mut v: Box<[u64]> = capacity.into();
        for (g, &(kind, _)) in self.groups.iter().enumerate() {
            let at = self.offset + DIMS * g;
            if self.positions[kind].0.is_some() && self.all[kind] == g {
                v[at..at + DIMS].fill(0);
                continue;
            }
            v[at + FRACTION] = 0;
            v[at + MEMORY] = v[at + MEMORY].saturating_mul(v[at + WHOLE] / SCALE);
        }
        v
    }

    /// People's words for the device part of a need: `2 whole gpu`, `gpu=0.5 of one device
    /// with 10GiB free`, and the classes its group accepts.
    pub fn describe(&self, need: &[u64]) -> Vec<String> {
        let mut out = Vec::new();
        for (g, (kind, members)) in self.groups.iter().enumerate() {
            let at = self.offset + DIMS * g;
            let (whole, fraction) = (need[at + WHOLE], need[at + FRACTION]);
            let kind_name = &self.kinds[*kind];
            let what = if whole > 0 {
                format!("{} whole {kind_name} device(s)", whole / SCALE)
            } else if fraction > 0 {
                let mem = need[at + MEMORY];
                let mut s = format!(
                    "{kind_name}={} on one device",
                    Quantity::from_milli(fraction)
                );
                if mem > 0 {
                    s.push_str(&format!(
                        " with {} of its memory",
                        crate::devices::bytes_text(Quantity::from_milli(mem))
                    ));
                }
                s
            } else {
                continue;
            };
            let accepted: Vec<String> = self
                .classes
                .iter()
                .enumerate()
                .filter(|(c, _)| members[*c])
                .map(|(_, (_, model, mem))| class_text(model, *mem))
                .collect();
            let all = self.all[*kind] == g;
            out.push(match (all, accepted.is_empty()) {
                (_, true) => format!("{what} (no device of the group matches its constraints)"),
                (true, false) => what,
                (false, false) => format!("{what} of {}", accepted.join(" or ")),
            });
        }
        out
    }
}

/// Whether two devices are of one class (kind, model, memory).
fn same_class(a: &Device, b: &Device) -> bool {
    same_key(
        (&a.kind, &a.model, a.memory.milli()),
        (&b.kind, &b.model, b.memory.milli()),
    )
}

/// Whether two (kind, model, memory) keys name one class, numbers first.
fn same_key(a: (&SlotName, &str, u64), b: (&SlotName, &str, u64)) -> bool {
    a.2 == b.2 && a.0 == b.0 && same_text(a.1, b.1)
}

fn class_text(model: &str, memory: u64) -> String {
    let model = if model.is_empty() {
        "unknown model"
    } else {
        model
    };
    if memory == 0 {
        model.to_string()
    } else {
        format!(
            "{model} ({})",
            crate::devices::bytes_text(Quantity::from_milli(memory))
        )
    }
}

/// A request's device asks, each with the group of classes it accepts.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DeviceNeed {
    pub asks: Vec<(usize, DeviceAsk)>,
}

/// One agent's (or a fresh instance's) devices during a pass: what each has free.
///
/// Shared until changed: every step of a pass copies the agents' ledgers and changes those of
/// the few agents it places on, so a copy is a count, and a placement copies the devices of
/// its agent alone. No devices, no allocation.
#[derive(Debug, Clone, Default)]
pub struct Ledger {
    devices: Option<Arc<Vec<DeviceSlot>>>,
}

impl PartialEq for Ledger {
    fn eq(&self, other: &Self) -> bool {
        self.slots() == other.slots()
    }
}

impl Eq for Ledger {}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct DeviceSlot {
    /// Index in the agent's device list.
    index: u32,
    class: u32,
    /// Share of one device it has, and has free (thousandths).
    cap: u32,
    free: u32,
    mem_cap: u64,
    mem_free: u64,
}

impl DeviceSlot {
    fn idle(index: u32, class: u32, memory: u64) -> Self {
        DeviceSlot {
            index,
            class,
            cap: SCALE as u32,
            free: SCALE as u32,
            mem_cap: memory,
            mem_free: memory,
        }
    }

    /// The same device with nothing held on it.
    fn fresh(&self) -> DeviceSlot {
        DeviceSlot {
            free: self.cap,
            mem_free: self.mem_cap,
            ..*self
        }
    }

    fn is_idle(&self) -> bool {
        self.cap as u64 == SCALE && self.free == self.cap && self.mem_free == self.mem_cap
    }
}

impl Ledger {
    fn of(devices: Vec<DeviceSlot>) -> Self {
        Ledger {
            devices: (!devices.is_empty()).then(|| Arc::new(devices)),
        }
    }

    fn slots(&self) -> &[DeviceSlot] {
        self.devices.as_deref().map_or(&[], |d| d)
    }

    /// The devices to change: copied first if another ledger shares them.
    fn slots_mut(&mut self) -> &mut Vec<DeviceSlot> {
        Arc::make_mut(self.devices.get_or_insert_with(Arc::default))
    }

    /// Stand-ins for `total` thousandths of a kind given only as a number: whole devices and a
    /// last one of the share left over, holding `used` in device order.
    fn stand_in(&mut self, class: u32, total: u64, mut used: u64, index: &mut u32) {
        let mut left = total.min(MAX_DEVICES as u64 * SCALE);
        if left == 0 {
            return;
        }
        let devices = self.slots_mut();
        devices.reserve(left.div_ceil(SCALE) as usize);
        while left > 0 {
            let cap = left.min(SCALE);
            let taken = used.min(cap);
            used -= taken;
            left -= cap;
            devices.push(DeviceSlot {
                index: *index,
                class,
                cap: cap as u32,
                free: (cap - taken) as u32,
                mem_cap: 0,
                mem_free: 0,
            });
            *index += 1;
        }
    }

    /// Whether the devices can hold the device part of `need`.
    pub fn can_hold(&self, layout: &DeviceLayout, need: &[u64]) -> bool {
        self.choose(layout, need).is_some()
    }

    /// Takes the device part of `need`: whole asks on idle devices in order, fractions on the
    /// device of the group with the least free share that holds them (best fit: devices already
    /// shared before idle ones, so idle devices stay whole). `None`, and nothing taken, when
    /// they do not fit.
    pub fn take(&mut self, layout: &DeviceLayout, need: &[u64]) -> Option<Vec<Grant>> {
        let grants = self.choose(layout, need)?;
        for g in &grants {
            let d = (self.slots_mut().iter_mut())
                .find(|d| d.index as usize == g.device)
                .expect("a chosen device is in the ledger");
            d.free -= g.share as u32;
            d.mem_free -= g.memory;
        }
        Some(grants)
    }

    fn choose(&self, layout: &DeviceLayout, need: &[u64]) -> Option<Vec<Grant>> {
        let mut grants: Vec<Grant> = Vec::new();
        for (g, (_, members)) in layout.groups.iter().enumerate() {
            let at = layout.offset + DIMS * g;
            let (whole, fraction, memory) =
                (need[at + WHOLE], need[at + FRACTION], need[at + MEMORY]);
            let eligible = || {
                (self.slots().iter())
                    .filter(|d| members[d.class as usize])
                    .filter(|d| !grants.iter().any(|x| x.device == d.index as usize))
            };
            if whole > 0 {
                let n = (whole / SCALE) as usize;
                let idle: Vec<Grant> = eligible()
                    .filter(|d| d.is_idle())
                    .take(n)
                    .map(|d| Grant {
                        device: d.index as usize,
                        share: u64::from(d.cap),
                        memory: d.mem_cap,
                    })
                    .collect();
                if idle.len() < n {
                    return None;
                }
                grants.extend(idle);
            } else if fraction > 0 {
                let best = eligible()
                    .filter(|d| u64::from(d.free) >= fraction && d.mem_free >= memory)
                    .min_by_key(|d| (d.free, d.mem_free, d.index))?;
                grants.push(Grant {
                    device: best.index as usize,
                    share: fraction,
                    memory,
                });
            }
        }
        Some(grants)
    }
}
