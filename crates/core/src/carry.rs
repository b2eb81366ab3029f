//! What a pass made of each agent in dense form, kept for the next pass of the same group by a
//! caller that says which agents changed in between, and the device layout the agents' device
//! classes give, kept while they stay the same. The simulator changes its agents itself,
//! so it knows; a pass then remakes the ledgers and free vectors of those agents alone. The
//! manager reads a fresh snapshot each pass and keeps nothing.
//!
//! Under fair share, what each owner holds is kept too, once a pass has summed it, and kept up
//! to date by a caller that says which sessions were placed and which ended: a pass then reads
//! a sum per owner instead of every running session.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::dense::{Rows, SlotIndex, Vector};
use crate::ledger::{DeviceLayout, Ledger};
use crate::model::{Agent, AgentId, InstanceTemplate};
use crate::planner::PriceMemo;
use crate::slots::{same_text, Quantity, SlotName, Slots};
use crate::snapshot::Snapshot;

/// Kept per agent by id, in the dimensions of the pass that made them; and the device layout
/// of the last pass before its requests were resolved, with what it was made of.
#[derive(Debug, Default)]
pub struct Carry {
    /// The dimensions the kept forms are in: a pass in others drops them all.
    index: SlotIndex,
    /// Per agent of the last pass, in its order: its id, whether it changed since, its ledger
    /// and its free vector.
    ids: Vec<AgentId>,
    /// Whether `ids` are in their order.
    ids_sorted: bool,
    changed: Vec<bool>,
    ledgers: Vec<Ledger>,
    free: Rows,
    layout: Option<KeptLayout>,
    /// Whether this pass's agents are the last pass's, in its order: found once a pass (one
    /// walk over the ids), by the first step that asks, read until the forms are made.
    same_agents: Option<bool>,
    /// Slot names the agents' sets have named, and per agent (as `ids`) which of them its
    /// capacity and allocation name, as bits; none for an agent not read since it changed.
    agent_names: Vec<SlotName>,
    agent_name_bits: Vec<Option<u64>>,
    /// The templates' forms of a pass whose layout is not the kept one.
    fresh_templates: (Vec<Ledger>, Vec<Vector>),
    /// Per owner with sessions holding capacity: their required shares summed. Kept once a
    /// pass has read it (none before, and none while a pass reads it).
    held: Option<Held>,
    /// The launch planner's class prices, by the LP's inputs (lent to a pass as `held` is).
    prices: PriceMemo,
}

/// Per owner: the required shares of its sessions that hold capacity, summed (owners holding
/// nothing left out).
pub(crate) type Held = BTreeMap<String, Slots>;

/// What the sessions of `s` that hold capacity hold, per owner; none when a sum overflows (a
/// pass then reads the sessions one by one).
pub(crate) fn held_of(s: &Snapshot) -> Option<Held> {
    let mut held = Held::new();
    for x in s.sessions.iter().filter(|x| x.state.holds_capacity()) {
        let shares = s.required_shares_of(x);
        match held.get_mut(&x.owner) {
            Some(sum) => sum.try_add(&shares).ok()?,
            None => _ = held.insert(x.owner.clone(), shares.into_owned()),
        }
    }
    Some(held)
}

#[derive(Debug)]
struct KeptLayout {
    layout: Arc<DeviceLayout>,
    names: Vec<SlotName>,
    /// Per agent, in the snapshot's order, then per template: what the layout reads of it.
    shapes: Vec<Shape>,
    /// How many of `shapes` are agents'.
    agents: usize,
    /// The templates' ledgers and vectors in this layout, once a pass made them.
    templates: Option<(Vec<Ledger>, Vec<Vector>)>,
}

/// What a pass's dimensions borrow of a carry.
pub(crate) struct Forms<'c> {
    pub agent_ledgers: &'c [Ledger],
    pub agent_free: &'c Rows,
    pub template_ledgers: &'c [Ledger],
    pub templates: &'c [Vector],
}

/// Equal agent ids, eight bytes at a time: a pass compares every agent's id with the one kept
/// at its place, and ids share long prefixes (`n0000012`, a site's host names).
fn same_id(a: &AgentId, b: &AgentId) -> bool {
    let (a, b) = (a.0.as_bytes(), b.0.as_bytes());
    let word = |t: &[u8], i: usize| u64::from_ne_bytes(t[i..i + 8].try_into().expect("8 bytes"));
    let whole = a.len() / 8 * 8;
    a.len() == b.len()
        && (0..whole).step_by(8).all(|i| word(a, i) == word(b, i))
        && (a[whole..].iter().zip(&b[whole..])).all(|(x, y)| x == y)
}

/// Whether `agents` are those of `ids`, in their order.
fn in_place(ids: &[AgentId], agents: &[Agent]) -> bool {
    ids.len() == agents.len() && (ids.iter().zip(agents)).all(|(id, a)| same_id(id, &a.id))
}

/// Where `id` is among `ids`: most agents are where they were in the last pass, just after the
/// one found before (`cursor`), so they are looked for there first.
fn find(ids: &[AgentId], cursor: &mut usize, id: &AgentId) -> Option<usize> {
    let same = |i: &usize| same_id(&ids[*i], id);
    let at = Some(*cursor)
        .filter(|i| *i < ids.len() && same(i))
        .or_else(|| (0..ids.len()).find(same));
    if let Some(i) = at {
        *cursor = i + 1;
    }
    at
}

/// What the device layout (and a template's ledger) reads of an agent or a template: its
/// capacity, and its devices' classes (kind, model, memory) and counts.
#[derive(Debug, Default)]
struct Shape {
    capacity: Slots,
    classes: Vec<(SlotName, String, Quantity, u32)>,
}

impl Shape {
    fn of(
        capacity: &Slots,
        classes: impl Iterator<Item = (SlotName, String, Quantity, u32)>,
    ) -> Self {
        Shape {
            capacity: capacity.clone(),
            classes: classes.collect(),
        }
    }

    fn of_agent(a: &Agent) -> Self {
        let classes = a.devices.iter();
        Shape::of(
            &a.capacity,
            classes.map(|d| (d.kind.clone(), d.model.clone(), d.memory, 1)),
        )
    }

    fn of_template(t: &InstanceTemplate) -> Self {
        let classes = t.devices.iter();
        Shape::of(
            &t.slots,
            classes.map(|d| (d.kind.clone(), d.model.clone(), d.memory, d.count)),
        )
    }

    /// Models are compared in line: most are empty, and a call to `memcmp` per device cost
    /// more than the layout it saves.
    fn is<'a>(
        &self,
        capacity: &Slots,
        classes: impl ExactSizeIterator<Item = (&'a SlotName, &'a str, Quantity, u32)>,
    ) -> bool {
        self.capacity == *capacity
            && self.classes.len() == classes.len()
            && (self.classes.iter().zip(classes)).all(|((kind, model, memory, count), c)| {
                kind == c.0 && *memory == c.2 && *count == c.3 && same_text(model, c.1)
            })
    }

    fn is_of_agent(&self, a: &Agent) -> bool {
        let classes = a.devices.iter();
        self.is(
            &a.capacity,
            classes.map(|d| (&d.kind, d.model.as_str(), d.memory, 1)),
        )
    }

    fn is_of_template(&self, t: &InstanceTemplate) -> bool {
        let classes = t.devices.iter();
        self.is(
            &t.slots,
            classes.map(|d| (&d.kind, d.model.as_str(), d.memory, d.count)),
        )
    }
}

impl Carry {
    /// A session of `owner` was placed and holds `shares`, its required shares (the request,
    /// raised by its image's minimum): what the owner holds, if kept, grows by them.
    pub fn placed(&mut self, owner: &str, shares: &Slots) {
        let Some(held) = &mut self.held else { return };
        let Some(sum) = held.get_mut(owner) else {
            held.insert(owner.to_string(), shares.clone());
            return;
        };
        // Summed again from the sessions by the next pass that reads it.
        if sum.try_add(shares).is_err() {
            self.held = None;
        }
    }

    /// A session of `owner` that held `shares` ended: what the owner holds, if kept, shrinks
    /// by them.
    pub fn ended(&mut self, owner: &str, shares: &Slots) {
        let Some(held) = &mut self.held else { return };
        match held.get_mut(owner).map(|sum| (sum.try_sub(shares), sum)) {
            Some((Ok(()), sum)) if sum.is_empty() => _ = held.remove(owner),
            Some((Ok(()), _)) => {}
            // More than it was told the owner holds: summed again by the next pass.
            _ => self.held = None,
        }
    }

    /// What the owners of `s` hold, for a pass to read: as kept, or summed from the sessions.
    /// The pass gives it back with [`Carry::give_back_held`].
    pub(crate) fn take_held(&mut self, s: &Snapshot) -> Option<Held> {
        match self.held.take() {
            Some(held) => {
                // A caller that failed to say a session was placed or ended would get stale
                // fair shares: the tests' builds check the kept sums against fresh ones.
                debug_assert!(
                    Some(&held) == held_of(s).as_ref(),
                    "sessions were placed or ended and the carry was not told"
                );
                Some(held)
            }
            None => held_of(s),
        }
    }

    pub(crate) fn give_back_held(&mut self, held: Held) {
        self.held = Some(held);
    }

    pub(crate) fn take_prices(&mut self) -> PriceMemo {
        std::mem::take(&mut self.prices)
    }

    pub(crate) fn give_back_prices(&mut self, prices: PriceMemo) {
        self.prices = prices;
    }

    /// Agent `id`'s capacity, allocation or devices changed, or it left: what was kept of it is
    /// dropped, and the next pass makes it again.
    pub fn changed(&mut self, id: &AgentId) {
        // Agents are read in id order (the store's and the simulator's): a binary search then.
        let at = if self.ids_sorted {
            self.ids.binary_search(id).ok()
        } else {
            self.ids.iter().position(|k| same_id(k, id))
        };
        if let Some(i) = at {
            self.changed[i] = true;
        }
    }

    /// Whether `agents` are the last pass's, in its order (found once a pass).
    fn same_agents(&mut self, agents: &[Agent]) -> bool {
        let ids = &self.ids;
        *self
            .same_agents
            .get_or_insert_with(|| in_place(ids, agents))
    }

    /// The slot names the capacities and allocations of `agents` name, in no order: each
    /// agent's sets are read when it is new or changed since the last pass, and what the others
    /// named is kept. None when the agents name more slots than it keeps bits for (the pass
    /// reads every set then).
    pub(crate) fn agent_names(
        &mut self,
        agents: &[Agent],
    ) -> Option<impl Iterator<Item = &SlotName>> {
        // Kept bits (as the ids, the last pass's agents) of agents not changed since, moved
        // to the places of this pass's agents when some came or went.
        let same = self.same_agents(agents);
        for (bits, _) in (self.agent_name_bits.iter_mut().zip(&self.changed)).filter(|(_, c)| **c) {
            *bits = None;
        }
        if !same {
            let kept = std::mem::take(&mut self.agent_name_bits);
            let mut cursor = 0;
            self.agent_name_bits = (agents.iter())
                .map(|a| find(&self.ids, &mut cursor, &a.id).and_then(|j| *kept.get(j)?))
                .collect();
        }
        self.agent_name_bits.resize(agents.len(), None);
        let mut all = 0u64;
        for (i, agent) in agents.iter().enumerate() {
            let bits = match self.agent_name_bits[i] {
                Some(bits) => bits,
                None => {
                    let mut bits = 0u64;
                    for name in agent.capacity.names().chain(agent.allocated.names()) {
                        let at = match self.agent_names.iter().position(|n| n == name) {
                            Some(at) => at,
                            None if self.agent_names.len() < 64 => {
                                self.agent_names.push(name.clone());
                                self.agent_names.len() - 1
                            }
                            None => {
                                // Names of agents long gone may fill the list: it starts
                                // again from the agents of the next pass.
                                self.agent_names.clear();
                                self.agent_name_bits.clear();
                                return None;
                            }
                        };
                        bits |= 1 << at;
                    }
                    self.agent_name_bits[i] = Some(bits);
                    bits
                }
            };
            all |= bits;
        }
        // A caller that failed to say an agent changed would get stale names: the tests'
        // builds check every agent's kept bits against its sets.
        debug_assert!(
            (agents.iter().zip(&self.agent_name_bits)).all(|(agent, bits)| {
                let mut names = agent.capacity.names().chain(agent.allocated.names());
                let fresh = names.try_fold(0u64, |acc, name| {
                    let at = self.agent_names.iter().position(|n| n == name)?;
                    Some(acc | 1 << at)
                });
                *bits == fresh
            }),
            "an agent's slot names changed since the last pass and the carry was not told"
        );
        let named = (self.agent_names.iter().enumerate())
            .filter(move |(at, _)| all & (1 << at) != 0)
            .map(|(_, n)| n);
        Some(named)
    }

    /// The device layout of `s` over the named slots `names`: as kept, when the capacities and
    /// device classes of the agents and templates are those it was made of (allocations do not
    /// count), else as `make` makes it (and it is kept).
    pub(crate) fn layout(
        &mut self,
        names: &[SlotName],
        s: &Snapshot,
        make: impl FnOnce() -> DeviceLayout,
    ) -> Arc<DeviceLayout> {
        let same_agents = self.same_agents(&s.agents);
        if let Some(kept) = &self.layout {
            let templates = &s.group.templates;
            let (agents, rest) = kept.shapes.split_at(kept.agents);
            // An agent at its place of the last pass, not changed since, has the shape it had
            // then, which the kept layout was made of or checked against: only the others are
            // compared.
            let unchanged = |i: usize, a: &Agent| {
                let in_place = same_agents || (i < self.ids.len() && same_id(&self.ids[i], &a.id));
                in_place && !self.changed[i]
            };
            let same = kept.names == names
                && kept.agents == s.agents.len()
                && rest.len() == templates.len()
                && (agents.iter().zip(&s.agents).enumerate())
                    .all(|(i, (shape, a))| unchanged(i, a) || shape.is_of_agent(a))
                && (rest.iter().zip(templates)).all(|(shape, t)| shape.is_of_template(t));
            if same {
                debug_assert!(*kept.layout == make(), "a kept device layout differs");
                return kept.layout.clone();
            }
        }
        // Made again (agents came or went): the shapes of agents unchanged since the last pass
        // move over, and a layout equal to the kept one stays the same shared copy.
        let made = make();
        let mut old = self.layout.take();
        let same_layout = old.as_ref().is_some_and(|k| *k.layout == made);
        let layout = match &old {
            Some(kept) if same_layout => kept.layout.clone(),
            _ => Arc::new(made),
        };
        // The templates' forms carry over when neither the layout nor the templates changed.
        let kept_templates = old.as_mut().and_then(|k| {
            let theirs = &k.shapes[k.agents..];
            let same = same_layout
                && theirs.len() == s.group.templates.len()
                && (theirs.iter().zip(&s.group.templates)).all(|(t, u)| t.is_of_template(u));
            k.templates.take().filter(|_| same)
        });
        let mut cursor = 0;
        let mut shapes = Vec::with_capacity(s.agents.len() + s.group.templates.len());
        for a in &s.agents {
            let j = find(&self.ids, &mut cursor, &a.id).filter(|&j| !self.changed[j]);
            let kept = (old.as_mut().zip(j)).and_then(|(k, j)| k.shapes.get_mut(j));
            shapes.push(match kept {
                Some(shape) => std::mem::take(shape),
                None => Shape::of_agent(a),
            });
        }
        shapes.extend(s.group.templates.iter().map(Shape::of_template));
        self.layout = Some(KeptLayout {
            layout: layout.clone(),
            names: names.to_vec(),
            agents: s.agents.len(),
            shapes,
            templates: kept_templates,
        });
        layout
    }

    /// Per agent of `agents`, in `index`: its ledger and free vector, as kept, or as `make`
    /// makes them (and they are kept); agents no longer there are let go. And the templates'
    /// ledgers and vectors, as kept with the layout `index` has, or as `make_templates` makes
    /// them.
    pub(crate) fn forms(
        &mut self,
        index: &SlotIndex,
        agents: &[Agent],
        make: impl Fn(&Agent) -> (Ledger, Vector),
        make_templates: impl Fn() -> (Vec<Ledger>, Vec<Vector>),
    ) -> Forms<'_> {
        let width = index.len();
        if self.index != *index {
            // Nothing kept is in these dimensions (nor the answer about the agents, found
            // against the ids let go here).
            self.same_agents = None;
            self.ids.clear();
            self.changed.clear();
            self.ledgers.clear();
            self.free = Rows::with_capacity(width, 0);
            self.index = index.clone();
        }
        // A caller that failed to say an agent changed would get stale decisions: the tests'
        // builds check every kept form against a fresh one.
        let check_kept = |agent: &Agent, ledger: &Ledger, free: &[u64]| {
            debug_assert!(
                make(agent) == (ledger.clone(), Vector::from(free)),
                "agent {} changed since the last pass and the carry was not told",
                agent.id
            );
        };
        // The answer found this pass, read for the last time here.
        let same_agents = self.same_agents(agents);
        self.same_agents = None;
        debug_assert_eq!(
            same_agents,
            in_place(&self.ids, agents),
            "the layout's check saw other agents"
        );
        if same_agents {
            // The agents of the last pass, in its order (no agent came or went): the changed
            // ones are made again in place.
            for (i, agent) in agents.iter().enumerate() {
                if std::mem::take(&mut self.changed[i]) {
                    let (ledger, vector) = make(agent);
                    self.ledgers[i] = ledger;
                    self.free[i].copy_from_slice(&vector);
                } else {
                    check_kept(agent, &self.ledgers[i], &self.free[i]);
                }
            }
            return self.forms_with_templates(index, make_templates);
        }
        let mut ids = std::mem::replace(&mut self.ids, Vec::with_capacity(agents.len()));
        let changed = std::mem::replace(&mut self.changed, vec![false; agents.len()]);
        let mut ledgers = std::mem::replace(&mut self.ledgers, Vec::with_capacity(agents.len()));
        let free = std::mem::replace(&mut self.free, Rows::with_capacity(width, agents.len()));
        let mut cursor = 0;
        for agent in agents {
            let at = find(&ids, &mut cursor, &agent.id);
            match at {
                Some(i) if !changed[i] => {
                    check_kept(agent, &ledgers[i], &free[i]);
                    self.ledgers.push(std::mem::take(&mut ledgers[i]));
                    self.free.push(&free[i]);
                    self.ids.push(AgentId(std::mem::take(&mut ids[i].0)));
                }
                _ => {
                    let (ledger, vector) = make(agent);
                    self.ledgers.push(ledger);
                    self.free.push(&vector);
                    self.ids.push(agent.id.clone());
                }
            }
        }
        self.ids_sorted = self.ids.is_sorted();
        self.forms_with_templates(index, make_templates)
    }

    /// The agents' forms as kept, and the templates' forms: kept with the layout `index` has,
    /// or made by `make_templates`.
    fn forms_with_templates(
        &mut self,
        index: &SlotIndex,
        make_templates: impl Fn() -> (Vec<Ledger>, Vec<Vector>),
    ) -> Forms<'_> {
        // A layout copied for a group of this pass's requests is not the kept one: its
        // templates' forms are made for this pass alone.
        let kept =
            (self.layout.as_mut()).filter(|k| Arc::ptr_eq(&k.layout, index.shared_devices()));
        let templates = match kept {
            Some(kept) => {
                let forms = kept.templates.get_or_insert_with(&make_templates);
                debug_assert!(*forms == make_templates(), "kept template forms differ");
                &*forms
            }
            None => {
                self.fresh_templates = make_templates();
                &self.fresh_templates
            }
        };
        Forms {
            agent_ledgers: &self.ledgers,
            agent_free: &self.free,
            template_ledgers: &templates.0,
            templates: &templates.1,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_agent_told_changed_is_found_in_any_order_of_agents() {
        for order in [["n1", "n2", "n3"], ["n3", "n1", "n2"], ["n2", "n3", "n1"]] {
            let ids: Vec<AgentId> = order.iter().map(|i| AgentId(i.to_string())).collect();
            for (at, id) in ids.iter().enumerate() {
                let mut carry = Carry {
                    ids_sorted: ids.is_sorted(),
                    ids: ids.clone(),
                    changed: vec![false; ids.len()],
                    ..Carry::default()
                };
                carry.changed(id);
                let expected: Vec<bool> = (0..ids.len()).map(|i| i == at).collect();
                assert_eq!(carry.changed, expected, "{id} among {order:?}");
            }
        }
    }

    #[test]
    fn ids_are_the_same_when_their_texts_are() {
        let ids = [
            "",
            "n",
            "n0000012",
            "n0000013",
            "n00000120",
            "n00000121",
            "m0000012",
            "gpu-node-17.example.org",
            "gpu-node-17.example.orh",
            "gpu-node-18.example.org",
        ];
        for a in ids {
            for b in ids {
                let (x, y) = (AgentId(a.to_string()), AgentId(b.to_string()));
                assert_eq!(same_id(&x, &y), a == b, "{a:?} against {b:?}");
            }
        }
    }
}
