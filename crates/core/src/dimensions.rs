//! The dense dimensions of one snapshot: the slot index with its device layout, and what every
//! agent and template has in that form, built once for a pass (or a submit's admission check).

use std::borrow::Cow;
use std::sync::Arc;

use crate::carry::Carry;
use crate::dense::{NamesSeen, Rows, SlotIndex, Vector};
use crate::devices::{DeviceConstraint, DeviceError, GPU};
use crate::ledger::{DeviceLayout, DeviceNeed, Ledger};
use crate::model::{Agent, AgentState, PolicyKind};
use crate::slots::{SlotName, Slots};
use crate::snapshot::Snapshot;

/// One snapshot's vectors and ledgers (the agents' and templates' borrowed from a [`Carry`]
/// that keeps them).
#[derive(Debug, Clone)]
pub struct Dimensions<'c> {
    pub index: SlotIndex,
    /// Per agent (as in `snapshot.agents`): what is free on each device now.
    pub agent_ledgers: Cow<'c, [Ledger]>,
    /// Per agent: its free capacity now (an over-allocated agent has none of that slot).
    pub agent_free: Cow<'c, Rows>,
    /// Per template (as in `snapshot.group.templates`): a fresh instance's devices.
    pub template_ledgers: Cow<'c, [Ledger]>,
    /// Per template: a fresh instance's capacity (made once: every step of a pass reads them).
    pub templates: Cow<'c, [Vector]>,
}

/// Dimensions being made: the named slots are fixed; the device groups grow as requests are
/// resolved, and fix the rest of the vectors at [`Builder::finish`].
pub struct Builder {
    /// The named slots alone.
    names: SlotIndex,
    /// Shared with a carry that keeps it; copied only when a request needs a group it lacks.
    layout: Arc<DeviceLayout>,
}

impl Builder {
    /// The named slots of `s` and of `sets` (the requests and whatever else the caller will
    /// put in vectors), and its devices' kinds and classes (as `carry` kept them, when the
    /// agents and templates they were made of are the same).
    pub fn new<'r>(
        s: &'r Snapshot,
        sets: impl IntoIterator<Item = &'r Slots>,
        mut carry: Option<&mut Carry>,
    ) -> Self {
        // The agents' names as a carry kept them (it reads the sets of agents new or changed
        // since the last pass), or from every set: capacities, then allocations (sets of the
        // same names come in longer runs so).
        let mut seen = NamesSeen::default();
        match carry.as_deref_mut().and_then(|c| c.agent_names(&s.agents)) {
            Some(names) => names.for_each(|n| seen.add_name(n)),
            None => {
                for a in &s.agents {
                    seen.add(&a.capacity);
                }
                for a in &s.agents {
                    seen.add(&a.allocated);
                }
            }
        }
        for t in &s.group.templates {
            seen.add(&t.slots);
        }
        for set in sets {
            seen.add(set);
        }
        seen.add(&s.group.policy.headroom);
        let names = seen.index();
        let make = || {
            DeviceLayout::of(
                device_kinds(s, &names),
                names.names(),
                &s.agents,
                &s.group.templates,
            )
        };
        let layout = match carry {
            Some(carry) => carry.layout(names.names(), s, make),
            None => Arc::new(make()),
        };
        Builder { names, layout }
    }

    /// A request over the named slots alone (its device dimensions are added by
    /// [`Dimensions::need`]).
    pub fn named(&self, request: &Slots) -> Vector {
        self.names.vector(request)
    }

    /// [`Builder::named`] into a buffer.
    pub fn named_into(&self, request: &Slots, v: &mut Vec<u64>) {
        self.names.vector_into(request, v)
    }

    /// What a request (over the named slots) asks of devices, or why devices cannot serve it.
    pub fn resolve(
        &mut self,
        named: &[u64],
        constraints: &[DeviceConstraint],
    ) -> Result<DeviceNeed, DeviceError> {
        match self.layout.resolve_named_known(named, constraints)? {
            Some(need) => Ok(need),
            None => Arc::make_mut(&mut self.layout).resolve_named(named, constraints),
        }
    }

    /// The dimensions, with every agent's ledger and free vector and every template's ledger and
    /// vector: taken from `carry` where it kept them in these dimensions, made (and kept there)
    /// for the others.
    pub fn finish<'c>(self, s: &Snapshot, carry: Option<&'c mut Carry>) -> Dimensions<'c> {
        let index = self.names.with_devices(self.layout);
        let made = |a: &Agent| {
            let ledger = index.devices().agent_ledger(a);
            let mut free = index.vector(&a.capacity);
            index.subtract(&mut free, &a.allocated);
            index.devices().write_free(&ledger, &mut free);
            (ledger, free)
        };
        let made_templates = || {
            let ledgers: Vec<Ledger> = (s.group.templates.iter())
                .map(|t| index.devices().template_ledger(t))
                .collect();
            let vectors = (s.group.templates.iter().zip(&ledgers))
                .map(|(t, ledger)| {
                    let mut v = index.vector(&t.slots);
                    index.devices().write_free(ledger, &mut v);
                    v
                })
                .collect();
            (ledgers, vectors)
        };
        match carry {
            Some(carry) => {
                let forms = carry.forms(&index, &s.agents, made, made_templates);
                Dimensions {
                    agent_ledgers: Cow::Borrowed(forms.agent_ledgers),
                    agent_free: Cow::Borrowed(forms.agent_free),
                    template_ledgers: Cow::Borrowed(forms.template_ledgers),
                    templates: Cow::Borrowed(forms.templates),
                    index,
                }
            }
            None => {
                let mut ledgers = Vec::with_capacity(s.agents.len());
                let mut free = Rows::with_capacity(index.len(), s.agents.len());
                for (ledger, v) in s.agents.iter().map(made) {
                    ledgers.push(ledger);
                    free.push(&v);
                }
                let (template_ledgers, templates) = made_templates();
                Dimensions {
                    agent_ledgers: Cow::Owned(ledgers),
                    agent_free: Cow::Owned(free),
                    template_ledgers: Cow::Owned(template_ledgers),
                    templates: Cow::Owned(templates),
                    index,
                }
            }
        }
    }
}

impl Dimensions<'_> {
    pub fn layout(&self) -> &DeviceLayout {
        self.index.devices()
    }

    /// What a request needs, devices included, from its named form.
    pub fn need(&self, named: &[u64], need: &DeviceNeed) -> Vector {
        let mut v = vec![0u64; self.index.len()].into_boxed_slice();
        v[..named.len()].copy_from_slice(named);
        self.layout().write_need(need, &mut v);
        v
    }

    /// Agent `a`'s whole capacity, as if idle.
    pub fn agent_capacity(&self, a: usize, agent: &Agent) -> Vector {
        let mut v = self.index.vector(&agent.capacity);
        self.layout().write_capacity(&self.agent_ledgers[a], &mut v);
        v
    }

    /// The capacities a session could ever get in the group: every agent that may take
    /// sessions again (alive, marked or drained, or lost and perhaps coming back) and the
    /// templates the policy may launch. A request only a drained or lost agent could hold is
    /// queued, as Slurm queues jobs for drained nodes, and waits with that reason.
    pub fn standing_candidates(&self, s: &Snapshot) -> Vec<Vector> {
        let mut all = Vec::with_capacity(s.agents.len() + s.group.templates.len());
        all.extend(
            (s.agents.iter().enumerate())
                .filter(|(_, a)| a.state != AgentState::Terminated)
                .map(|(i, a)| self.agent_capacity(i, a)),
        );
        all.extend(self.launchable_templates(s).map(Vector::from));
        all
    }

    /// The templates among [`Dimensions::standing_candidates`]: a fresh instance of each one
    /// the policy may launch.
    pub fn launchable_templates<'d>(&'d self, s: &'d Snapshot) -> impl Iterator<Item = &'d [u64]> {
        let policy = &s.group.policy;
        let launches = policy.kind == PolicyKind::Demand && policy.max_nodes > 0;
        (s.group.templates.iter().zip(self.templates.iter()))
            .filter(move |(t, _)| launches && t.max > 0)
            .map(|(_, v)| &**v)
    }
}

/// The device kinds of a snapshot: `gpu` wherever a slot or a device names it, and every kind
/// a device list names.
fn device_kinds(s: &Snapshot, names: &SlotIndex) -> Vec<SlotName> {
    let with_gpu = names.names().iter().any(|n| n.as_str() == GPU);
    crate::grants::listed_kinds(&s.agents, &s.group.templates, with_gpu)
}
