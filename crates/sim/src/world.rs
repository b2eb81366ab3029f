//! The simulated group between passes: its agents, queue, running sessions and instances in
//! flight, the snapshot a pass reads of them, and what a pass's decisions do to them (as the
//! store's `apply` and the scaling driver do to the real ones). Nothing here decides: every
//! decision comes from `corral_core::cycle`.

use std::collections::{BTreeMap, HashSet};

use corral_core::grants;
use corral_core::schedule::{by_keys, queue_order, MAX_PENDING_PER_PASS};
use corral_core::{
    Agent, AgentId, AgentState, Carry, Decisions, DeviceGrant, Governor, HeadOfLine, InFlight,
    Placement, Sequencer, Session, SessionId, SessionState, SlotName, Slots, Snapshot, Timestamp,
};

use crate::clock::{Clock, Event};
use crate::config::SimConfig;
use crate::trace::TraceJob;
use crate::SimError;

/// What became of one job of the trace.
#[derive(Debug, Clone, PartialEq)]
pub struct SessionRecord {
    pub submitted: Timestamp,
    /// When it was placed (and, in the simulation, started).
    pub started: Option<Timestamp>,
    pub ended: Option<Timestamp>,
    /// The node it ran on (index into [`Outcome::nodes`](crate::Outcome)).
    pub node: Option<usize>,
    /// What it took on its node: its required shares.
    pub slots: Slots,
    /// The devices it was given there.
    pub devices: Vec<DeviceGrant>,
    /// Why admission refused it.
    pub rejected: Option<String>,
}

/// One agent's life: present from the start, or launched from a template.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeRecord {
    pub id: AgentId,
    /// Index into the configuration's templates; `None` for agents present from the start.
    pub template: Option<usize>,
    pub capacity: Slots,
    pub price_per_hour: f64,
    /// From when it is paid for: its launch, or the trace's start.
    pub paid_from: Timestamp,
    /// When it took sessions.
    pub joined: Timestamp,
    /// When it was terminated; `None` while it lives.
    pub terminated: Option<Timestamp>,
}

/// An instance asked of the simulated provider that has not joined yet.
struct Instance {
    template: usize,
    requested: Timestamp,
}

pub(crate) struct World<'a> {
    config: &'a SimConfig,
    jobs: &'a [TraceJob],
    /// Agents not terminated, in id order (ids grow with each node), as the store reads them;
    /// the pending sessions the next pass reads (at most `MAX_PENDING_PER_PASS`) and, under DRF,
    /// those holding capacity. Kept from pass to pass: a pass copies nothing of it.
    snapshot: Snapshot,
    /// Per session of `snapshot.sessions`, in its order: its job's index in the trace (what its
    /// id names, kept so that nothing reads the id back).
    snapshot_jobs: Vec<usize>,
    /// Pending in `snapshot.sessions`.
    pending: usize,
    /// Pending sessions beyond `MAX_PENDING_PER_PASS`, merged back in the queue's order.
    backlog: Vec<Session>,
    /// Under DRF, the jobs whose sessions ended since the last pass (their places in the
    /// snapshot are let go).
    ended_since_pass: Vec<usize>,
    /// Per job of the trace: where its session was in the snapshot when a pass's decisions
    /// were last applied (see `apply`).
    place_of_job: Vec<usize>,
    pub sessions: Vec<SessionRecord>,
    pub nodes: Vec<NodeRecord>,
    instances: BTreeMap<u64, Instance>,
    /// Instances were asked for, joined or failed since `snapshot.in_flight` was counted.
    instances_changed: bool,
    next_instance: u64,
    /// The device kinds agents count one by one (`gpu`, and those templates list).
    device_kinds: Vec<SlotName>,
    governor: Governor,
    /// What the last pass made of each agent in dense form, and what each owner holds: told of
    /// every agent whose allocation changes or that leaves, so that the next pass remakes only
    /// those, and of every session placed or ended.
    carry: Carry,
    rng: corral_core::rng::Rng,
    pub running: usize,
    pub arrived: usize,
    pub started: usize,
    pub ended: usize,
    pub rejected: usize,
    pub launched: u64,
    pub launch_failures: u64,
    pub terminated: u64,
}

impl<'a> World<'a> {
    pub fn new(config: &'a SimConfig, jobs: &'a [TraceJob]) -> Self {
        let mut world = World {
            config,
            jobs,
            snapshot: Snapshot {
                now: Timestamp(0),
                group: config.group("sim"),
                agents: Vec::new(),
                sessions: Vec::new(),
                images: Vec::new(),
                in_flight: Vec::new(),
                last_scale_out: None,
                launch_limits: BTreeMap::new(),
                array_holding: BTreeMap::new(),
                removed: Default::default(),
            },
            pending: 0,
            backlog: Vec::new(),
            snapshot_jobs: Vec::new(),
            ended_since_pass: Vec::new(),
            place_of_job: vec![0; jobs.len()],
            sessions: jobs
                .iter()
                .map(|j| SessionRecord {
                    submitted: Timestamp::default().plus_secs(j.submit_secs),
                    started: None,
                    ended: None,
                    node: None,
                    slots: Slots::new(),
                    devices: Vec::new(),
                    rejected: None,
                })
                .collect(),
            nodes: Vec::new(),
            instances: BTreeMap::new(),
            instances_changed: false,
            next_instance: 0,
            device_kinds: grants::listed_kinds(&[], &config.templates, true),
            governor: Governor::default(),
            carry: Carry::default(),
            rng: corral_core::rng::Rng::new(config.provisioning.seed),
            running: 0,
            arrived: 0,
            started: 0,
            ended: 0,
            rejected: 0,
            launched: 0,
            launch_failures: 0,
            terminated: 0,
        };
        for spec in &config.agents {
            for _ in 0..spec.count {
                let agent = world.add_node(None, spec.slots.clone(), spec.price_per_hour);
                world.snapshot.agents[agent].external = spec.external;
            }
        }
        world
    }

    pub fn pending(&self) -> usize {
        self.pending + self.backlog.len()
    }

    fn drf(&self) -> bool {
        self.snapshot.group.scheduler.sequencer == Sequencer::Drf
    }

    /// Instances in flight, per template index.
    pub fn in_flight_by_kind(&self) -> BTreeMap<usize, u32> {
        let mut counts = BTreeMap::new();
        for i in self.instances.values() {
            *counts.entry(i.template).or_default() += 1;
        }
        counts
    }

    /// Live agents: per node, its index into [`World::nodes`], and its allocation.
    pub fn agents(&self) -> impl Iterator<Item = (usize, &Agent)> {
        self.snapshot.agents.iter().map(|a| (node_of(&a.id), a))
    }

    /// A new agent, taking sessions from `now`, with its devices one by one (its template's
    /// sets, and stand-ins for a kind given as a number), as the manager counts them; returns
    /// its position among the agents.
    fn add_node(&mut self, template: Option<usize>, capacity: Slots, price: f64) -> usize {
        let now = self.snapshot.now;
        let sets = template.map_or(&[][..], |t| &self.config.templates[t].devices);
        let devices = grants::with_stand_ins(&grants::of_sets(sets), &capacity, &self.device_kinds);
        let node = self.nodes.len();
        let id = AgentId(format!("n{node:07}"));
        self.nodes.push(NodeRecord {
            id: id.clone(),
            template,
            capacity: capacity.clone(),
            price_per_hour: price,
            paid_from: now,
            joined: now,
            terminated: None,
        });
        self.snapshot.agents.push(Agent {
            id,
            group: self.snapshot.group.name.clone(),
            template: template.map(|t| self.config.templates[t].name.clone()),
            capacity,
            allocated: Slots::new(),
            state: AgentState::Alive,
            labels: BTreeMap::new(),
            external: false,
            drained_by_hand: false,
            version: None,
            platform: None,
            updating: None,
            idle_since: Some(now),
            devices,
        });
        self.snapshot.agents.len() - 1
    }

    fn agent_mut(&mut self, id: &AgentId) -> Result<&mut Agent, SimError> {
        let at = self.position(id).ok_or_else(|| gone(id))?;
        Ok(&mut self.snapshot.agents[at])
    }

    /// Where the agent is among the live ones (kept in id order).
    fn position(&self, id: &AgentId) -> Option<usize> {
        self.snapshot.agents.binary_search_by(|a| a.id.cmp(id)).ok()
    }

    /// An agent that has just become idle may be marked once it has been for the idle wait.
    fn wake_after_idle_wait(&self, node: usize, clock: &mut Clock) {
        let wait = self.snapshot.group.policy.idle_wait_secs;
        let since = self.snapshot.now;
        clock.at(since.plus_secs(wait), Event::IdleWait { node, since });
    }

    /// The node's agent takes sessions and has been idle since `since`: its idle wait runs.
    fn idle_since(&self, node: usize, since: Timestamp) -> bool {
        (self.position(&self.nodes[node].id))
            .map(|at| &self.snapshot.agents[at])
            .is_some_and(|a| {
                a.state == AgentState::Alive && a.is_idle() && a.idle_since == Some(since)
            })
    }

    /// Applies one event at `now`, and says whether it calls for a pass: an idle wait whose
    /// agent took a session again, or left, does not (no timer runs out then).
    pub fn happen(
        &mut self,
        now: Timestamp,
        event: Event,
        clock: &mut Clock,
    ) -> Result<bool, SimError> {
        self.snapshot.now = now;
        match event {
            Event::Arrive(j) => {
                let job = &self.jobs[j];
                let session = Session {
                    id: session_id(j),
                    group: self.snapshot.group.name.clone(),
                    owner: job.owner.clone(),
                    priority: 0,
                    request: job.request.clone(),
                    image: None,
                    kind: corral_core::SessionType::Batch,
                    submitted_at: now,
                    state: SessionState::Pending,
                    agent: None,
                    blocked_passes: 0,
                    constraints: Vec::new(),
                    devices: Vec::new(),
                    array: None,
                };
                if self.pending < MAX_PENDING_PER_PASS && self.backlog.is_empty() {
                    self.snapshot.sessions.push(session);
                    self.snapshot_jobs.push(j);
                    self.pending += 1;
                } else {
                    self.backlog.push(session);
                }
                self.arrived += 1;
            }
            Event::Finish(j) => {
                let record = &mut self.sessions[j];
                record.ended = Some(now);
                let node = record.node.expect("a session that ends was placed");
                let devices = std::mem::take(&mut record.devices);
                let (slots, id) = (&self.sessions[j].slots, &self.nodes[node].id);
                self.carry.changed(id);
                self.carry.ended(&self.jobs[j].owner, slots);
                let at = self.position(id).ok_or_else(|| gone(id))?;
                let agent = &mut self.snapshot.agents[at];
                agent.allocated.try_sub(slots).map_err(|e| {
                    SimError::Engine(format!("agent {id} frees more than it holds: {e}"))
                })?;
                grants::release(&mut agent.devices, &devices);
                if agent.is_idle() {
                    agent.idle_since = Some(now);
                    self.wake_after_idle_wait(node, clock);
                }
                if self.drf() {
                    self.ended_since_pass.push(j);
                }
                self.running -= 1;
                self.ended += 1;
            }
            Event::Join(n) => {
                let instance = self
                    .instances
                    .remove(&n)
                    .ok_or_else(|| SimError::Engine(format!("instance {n} joins twice")))?;
                self.instances_changed = true;
                let template = &self.config.templates[instance.template];
                let (slots, price, name) = (
                    template.slots.clone(),
                    template.price_per_hour,
                    template.name.clone(),
                );
                let at = self.add_node(Some(instance.template), slots, price);
                let node = node_of(&self.snapshot.agents[at].id);
                self.nodes[node].paid_from = instance.requested;
                self.governor.succeeded(&name);
                self.wake_after_idle_wait(node, clock);
            }
            Event::LaunchFailed(n) => {
                let instance = self
                    .instances
                    .remove(&n)
                    .ok_or_else(|| SimError::Engine(format!("instance {n} fails twice")))?;
                self.instances_changed = true;
                let name = self.config.templates[instance.template].name.clone();
                let settings = &self.config.launch;
                self.governor.failed(
                    settings,
                    &name,
                    false,
                    "the simulated provider refused the launch",
                    now,
                );
                self.launch_failures += 1;
                let failures = self.governor.failures().get(name.as_str()).copied();
                let backoff = settings.backoff_secs(failures.unwrap_or(1));
                clock.at(now.plus_secs(backoff), Event::Wake);
            }
            Event::Wake => {}
            Event::IdleWait { node, since } => return Ok(self.idle_since(node, since)),
        }
        Ok(true)
    }

    /// One pass at `now`: the snapshot as the store would read it, the cycle, and its decisions
    /// applied.
    pub fn pass(&mut self, now: Timestamp, clock: &mut Clock) -> Result<(), SimError> {
        self.snapshot.now = now;
        self.snapshot.launch_limits = self.governor.limits(&self.config.launch, now);
        if std::mem::take(&mut self.instances_changed) {
            self.snapshot.in_flight = self.in_flight_by_template();
        }
        if !self.ended_since_pass.is_empty() {
            let ended = std::mem::take(&mut self.ended_since_pass);
            self.retain_sessions(|s, j| s.state == SessionState::Pending || !ended.contains(&j));
        }
        if !self.backlog.is_empty() {
            self.refill_from_backlog();
        }
        let mut decisions = corral_core::cycle_carrying(&self.snapshot, &mut self.carry);
        // The placements' shares and devices move to the sessions' records.
        self.apply(&mut decisions, clock)?;
        // Placed sessions stay under DRF (they hold capacity); decided ones leave.
        let drf = self.drf();
        if !decisions.rejections.is_empty() || (!drf && !decisions.placements.is_empty()) {
            self.retain_sessions(|s, _| {
                s.state == SessionState::Pending || (drf && s.state == SessionState::Running)
            });
        }
        // Every decided session was pending.
        self.pending -= decisions.rejections.len() + decisions.placements.len();
        Ok(())
    }

    /// Keeps the sessions of the snapshot, and their jobs, that `keep` says to keep (it is given
    /// each session and its job).
    fn retain_sessions(&mut self, keep: impl Fn(&Session, usize) -> bool) {
        let kept: Vec<bool> = (self.snapshot.sessions.iter().zip(&self.snapshot_jobs))
            .map(|(s, &j)| keep(s, j))
            .collect();
        // `retain` visits each element once, in order.
        let mut flags = kept.iter();
        (self.snapshot.sessions).retain(|_| *flags.next().expect("a flag per session"));
        let mut flags = kept.iter();
        (self.snapshot_jobs).retain(|_| *flags.next().expect("a flag per job"));
    }

    /// The head of the whole queue in the sequencer's order, up to `MAX_PENDING_PER_PASS`, into
    /// the snapshot (as the store reads it); the rest back to the backlog.
    fn refill_from_backlog(&mut self) {
        let (pending, holding): (Vec<Session>, Vec<Session>) =
            std::mem::take(&mut self.snapshot.sessions)
                .into_iter()
                .partition(|s| s.state == SessionState::Pending);
        let mut queue = pending;
        queue.append(&mut self.backlog);
        let keys = queue_order(self.snapshot.group.scheduler.sequencer);
        queue.sort_by(|a, b| by_keys(keys, a, b));
        let rest = queue.split_off(queue.len().min(MAX_PENDING_PER_PASS));
        self.pending = queue.len();
        self.snapshot.sessions = holding;
        self.snapshot.sessions.append(&mut queue);
        // Sessions moved (rare: only a queue beyond a pass's reading does): read their jobs.
        self.snapshot_jobs = self
            .snapshot
            .sessions
            .iter()
            .map(|s| job_of(&s.id))
            .collect();
        self.backlog = rest;
    }

    fn in_flight_by_template(&self) -> Vec<InFlight> {
        let mut by_template: BTreeMap<usize, InFlight> = BTreeMap::new();
        for i in self.instances.values() {
            let f = by_template.entry(i.template).or_insert_with(|| InFlight {
                template: self.config.templates[i.template].name.clone(),
                count: 0,
                since: i.requested,
            });
            f.count += 1;
            f.since = f.since.min(i.requested);
        }
        by_template.into_values().collect()
    }

    /// The decisions, in the store's order: rejections, launches, unmarks, placements, marks,
    /// terminations, waits. A decision the world contradicts (a placement over capacity, on an
    /// agent that takes nothing) is an engine error, never applied.
    fn apply(&mut self, d: &mut Decisions, clock: &mut Clock) -> Result<(), SimError> {
        let now = self.snapshot.now;
        let (reject_at, place_at) = self.places_of_decided(d)?;
        let mut decided: Vec<(usize, Option<String>)> = Vec::new();
        for (r, at) in d.rejections.iter().zip(reject_at) {
            decided.push((at, Some(r.reason.to_string())));
        }
        self.launch(d, clock);
        self.unmark(d, clock)?;
        for (p, at) in d.placements.iter_mut().zip(place_at) {
            self.place(p, at, clock)?;
            decided.push((at, None));
        }
        for m in &d.marks {
            self.agent_mut(&m.agent)?.state = AgentState::Marked;
        }
        if !(d.marks.is_empty() && d.terminations.is_empty()) {
            // Marked agents that are empty are terminated by the next pass (the manager's tick),
            // and an agent let go may make room under max_nodes (its driver wakes the group).
            clock.at(now, Event::Wake);
        }
        self.terminate(d)?;
        self.count_blocked_passes(d);
        self.settle(decided);
        if let Some(at) = d.recheck_at {
            clock.at(at.max(now), Event::Wake);
        }
        Ok(())
    }

    /// Where the rejected and the placed sessions are in the snapshot, in the decisions' order.
    fn places_of_decided(&mut self, d: &Decisions) -> Result<(Vec<usize>, Vec<usize>), SimError> {
        if d.rejections.is_empty() && d.placements.is_empty() {
            return Ok((Vec::new(), Vec::new()));
        }
        // Each session's place in the pass, by its trace index (what its id names): written
        // for the sessions of this pass, and checked against the job kept there on reading.
        let jobs = &self.snapshot_jobs;
        for (i, &j) in jobs.iter().enumerate() {
            self.place_of_job[j] = i;
        }
        let places = &self.place_of_job;
        let position = |id: &SessionId| {
            let j = job_of(id);
            let at = places.get(j).copied();
            (at.filter(|&i| jobs.get(i) == Some(&j))).ok_or_else(|| unknown(id))
        };
        let reject_at: Vec<usize> =
            (d.rejections.iter().map(|r| position(&r.session))).collect::<Result<_, _>>()?;
        let place_at: Vec<usize> =
            (d.placements.iter().map(|p| position(&p.session))).collect::<Result<_, _>>()?;
        Ok((reject_at, place_at))
    }

    /// The unmarks: the agents take sessions again, and an idle one's idle wait starts anew.
    fn unmark(&mut self, d: &Decisions, clock: &mut Clock) -> Result<(), SimError> {
        let now = self.snapshot.now;
        for u in &d.unmarks {
            let agent = self.agent_mut(&u.agent)?;
            agent.state = AgentState::Alive;
            if agent.is_idle() {
                agent.idle_since = Some(now);
                self.wake_after_idle_wait(node_of(&u.agent), clock);
            }
        }
        Ok(())
    }

    /// One placement, of the session at `at` in the snapshot: its agent takes its shares and
    /// devices (within its capacity, else an engine error), its record moves to its node with
    /// them, and its end is due after its duration.
    fn place(&mut self, p: &mut Placement, at: usize, clock: &mut Clock) -> Result<(), SimError> {
        let now = self.snapshot.now;
        self.carry.changed(&p.agent);
        self.carry
            .placed(&self.snapshot.sessions[at].owner, &p.slots);
        let agent = self.agent_mut(&p.agent)?;
        let added = agent.allocated.try_add(&p.slots).is_ok();
        match added {
            true if agent.state == AgentState::Alive
                && agent.allocated.fits_in(&agent.capacity) =>
            {
                agent.idle_since = None;
                grants::hold(&mut agent.devices, &p.devices);
                if let Some(d) = grants::overfull(&agent.devices) {
                    return Err(SimError::Engine(format!(
                        "placing session {} on agent {} fills device {} beyond its share \
                         ({} of {}) or memory",
                        p.session, p.agent, d.id, d.allocated, d.share
                    )));
                }
            }
            _ => {
                if added {
                    // Reported as it was before.
                    agent.allocated.try_sub(&p.slots).ok();
                }
                return Err(SimError::Engine(format!(
                    "placing session {} on agent {} ({:?}, {} allocated of {}) with {}",
                    p.session, p.agent, agent.state, agent.allocated, agent.capacity, p.slots
                )));
            }
        }
        let j = job_of(&p.session);
        let record = &mut self.sessions[j];
        record.started = Some(now);
        record.node = Some(node_of(&p.agent));
        record.slots = std::mem::take(&mut p.slots);
        record.devices = std::mem::take(&mut p.devices);
        clock.at(now.plus_secs(self.jobs[j].duration_secs), Event::Finish(j));
        self.running += 1;
        self.started += 1;
        Ok(())
    }

    /// The terminations: each agent leaves (an error if it still holds anything), its node's
    /// life ends now.
    fn terminate(&mut self, d: &Decisions) -> Result<(), SimError> {
        let now = self.snapshot.now;
        for t in &d.terminations {
            let at = self.position(&t.agent).ok_or_else(|| {
                SimError::Engine(format!("terminating agent {}, which is gone", t.agent))
            })?;
            let agent = self.snapshot.agents.remove(at);
            self.carry.changed(&agent.id);
            if !agent.is_idle() {
                return Err(SimError::Engine(format!(
                    "terminating agent {} that holds {}",
                    agent.id, agent.allocated
                )));
            }
            self.nodes[node_of(&agent.id)].terminated = Some(now);
            self.terminated += 1;
        }
        Ok(())
    }

    /// The decided sessions of the snapshot, by their place (`at`): rejected with the reason
    /// given, or else running on the node their record names.
    fn settle(&mut self, decided: Vec<(usize, Option<String>)>) {
        for (at, rejected) in decided {
            let session = &mut self.snapshot.sessions[at];
            let j = self.snapshot_jobs[at];
            match rejected {
                Some(reason) => {
                    session.state = SessionState::Rejected;
                    self.sessions[j].rejected = Some(reason);
                    self.rejected += 1;
                }
                None => {
                    session.state = SessionState::Running;
                    session.agent = self.sessions[j].node.map(|n| self.nodes[n].id.clone());
                }
            }
        }
    }

    /// The launches: each instance joins after the provisioning delay, or is refused by the
    /// provider at once with the configured probability.
    fn launch(&mut self, d: &Decisions, clock: &mut Clock) {
        let now = self.snapshot.now;
        if d.launches.is_empty() {
            return;
        }
        self.snapshot.last_scale_out = Some(now);
        let provisioning = &self.config.provisioning;
        for l in &d.launches {
            let template = self
                .config
                .templates
                .iter()
                .position(|t| t.name == l.template)
                .expect("the cycle launches the group's templates");
            self.governor
                .launched(&self.config.launch, &l.template, l.count, now);
            for _ in 0..l.count {
                let n = self.next_instance;
                self.next_instance += 1;
                self.instances_changed = true;
                self.instances.insert(
                    n,
                    Instance {
                        template,
                        requested: now,
                    },
                );
                self.launched += 1;
                // A draw in [0, 1) with 53 bits, below the failure rate: refused.
                let draw = (self.rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
                if draw < provisioning.failure_rate {
                    clock.at(now, Event::LaunchFailed(n));
                } else {
                    clock.at(now.plus_secs(provisioning.delay_secs), Event::Join(n));
                }
            }
        }
        // The launch budget's window moves on: a pass then may launch what it held back.
        clock.at(
            now.plus_secs(self.config.launch.budget_window_secs),
            Event::Wake,
        );
    }

    /// As the store counts them: sessions that found no room (not those held behind another)
    /// count one more blocked pass, under backfill, up to `skip_after`.
    fn count_blocked_passes(&mut self, d: &Decisions) {
        let scheduler = self.snapshot.group.scheduler;
        // With `skip_after = 0` (the default), no count ever holds the queue: none is kept.
        if scheduler.head_of_line != HeadOfLine::Backfill
            || scheduler.skip_after == 0
            || d.waiting.is_empty()
        {
            return;
        }
        let blocked: HashSet<&SessionId> = d
            .waiting
            .iter()
            .filter(|w| w.reason.counts_as_blocked())
            .map(|w| &w.session)
            .collect();
        for s in &mut self.snapshot.sessions {
            if s.state == SessionState::Pending
                && s.blocked_passes < scheduler.skip_after
                && blocked.contains(&s.id)
            {
                s.blocked_passes += 1;
            }
        }
    }
}

fn gone(id: &AgentId) -> SimError {
    SimError::Engine(format!("decisions name agent {id}, which is gone"))
}

fn unknown(id: &SessionId) -> SimError {
    SimError::Engine(format!(
        "decisions name session {id}, which is not in the pass"
    ))
}

fn session_id(job: usize) -> SessionId {
    // Digit by digit below 10^8 (every job of a real trace): formatting cost more than the
    // replay's own work on an arrival.
    if job >= 100_000_000 {
        return SessionId(format!("s{job:08}"));
    }
    let mut id = String::with_capacity(9);
    id.push('s');
    for place in (0..8).rev() {
        let digit = (job / 10usize.pow(place)) % 10;
        id.push(char::from(b'0' + digit as u8));
    }
    SessionId(id)
}

/// The trace index a session id stands for (read digit by digit: a pass asks it of every
/// session holding capacity, and `str::parse` checks what these ids never hold).
fn job_of(id: &SessionId) -> usize {
    let digits = &id.0.as_bytes()[1..];
    debug_assert!(
        digits.iter().all(u8::is_ascii_digit),
        "session ids are s<index>"
    );
    (digits.iter()).fold(0, |n, d| n * 10 + usize::from(d - b'0'))
}

/// The node index an agent id stands for.
fn node_of(id: &AgentId) -> usize {
    id.0[1..].parse().expect("agent ids are n<index>")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn session_ids_name_their_job_as_formatting_would() {
        for job in [0, 7, 42, 1_000, 99_999_999, 100_000_000, 123_456_789] {
            let id = session_id(job);
            assert_eq!(id.0, format!("s{job:08}"));
            assert_eq!(job_of(&id), job);
        }
    }
}
