//! The replay: a discrete-event loop that jumps from one event to the next and runs a pass of
//! the cycle when the manager would, at the first event after the last pass but never sooner
//! than the pass interval after it (events in between are coalesced into that pass).

use corral_core::{SlotName, Timestamp};

use crate::clock::{Clock, Event};
use crate::config::SimConfig;
use crate::trace::Trace;
use crate::world::{NodeRecord, SessionRecord, World};
use crate::SimError;

/// Samples the time series is cut into when the configuration does not say.
const DEFAULT_SAMPLES: u64 = 500;

/// Passes in a row in which no session arrives, starts, ends or is refused before the replay
/// gives up: the group can never run its queue, or its scaling goes round in circles.
pub(crate) const MAX_PASSES_WITHOUT_PROGRESS: u64 = 10_000;

/// Everything the replay saw, for the report and the plot.
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    /// Per job of the trace, in the trace's order.
    pub sessions: Vec<SessionRecord>,
    pub nodes: Vec<NodeRecord>,
    /// The kinds of node the samples count: `agents` (those present from the start), then the
    /// templates in the configuration's order.
    pub node_kinds: Vec<String>,
    /// The slots the samples' utilisation is given for.
    pub slots: Vec<SlotName>,
    pub samples: Vec<Sample>,
    pub passes: u64,
    /// Instances launched (asked of the provider), and of those, refused.
    pub launched: u64,
    pub launch_failures: u64,
    /// Agents terminated by scale-in.
    pub terminated: u64,
    /// When the last session ended (or the last job arrived): node time is counted up to it.
    pub end: Timestamp,
}

/// The group at one instant.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    /// Seconds from the trace's start.
    pub at_secs: u64,
    pub pending: usize,
    pub running: usize,
    /// Per node kind (as in [`Outcome::node_kinds`]): live agents, and instances in flight
    /// under their template.
    pub nodes: Vec<u32>,
    /// Per slot (as in [`Outcome::slots`]): allocated over the capacity of live agents.
    pub utilisation: Vec<f64>,
}

/// How far the replay is, for a progress bar.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Progress {
    /// Jobs placed and finished, or refused.
    pub done: usize,
    pub total: usize,
}

/// Replays `trace` on the group `config` describes. Deterministic: the same trace and
/// configuration give the same outcome.
pub fn simulate(
    trace: &Trace,
    config: &SimConfig,
    progress: &mut dyn FnMut(Progress),
) -> Result<Outcome, SimError> {
    let mut world = World::new(config, &trace.jobs);
    let mut clock = Clock::starting_with(trace.jobs.iter().enumerate().map(|(j, job)| {
        (
            Timestamp::default().plus_secs(job.submit_secs),
            Event::Arrive(j),
        )
    }));
    let interval = config.simulation.pass_interval_ms;
    let span_secs = trace
        .jobs
        .iter()
        .map(|j| j.submit_secs + j.duration_secs)
        .max()
        .unwrap_or(0);
    let sample_ms = 1000
        * config
            .simulation
            .sample_secs
            .unwrap_or((span_secs / DEFAULT_SAMPLES).max(1));
    let mut sampler = Sampler::new(config, sample_ms);

    let total = trace.jobs.len();
    let step = (total / 100).max(1);
    let mut last_reported = 0;
    let mut last_pass: Option<Timestamp> = None;
    let mut wanted: Option<Timestamp> = None;
    let mut passes = 0u64;
    let (mut progress_seen, mut passes_without_progress) = (0u64, 0u64);
    loop {
        let pass_at = wanted.map(|w| match last_pass {
            Some(last) => w.max(last.plus_ms(interval)),
            None => w,
        });
        let next_event = clock.next_time();
        let at = match (pass_at, next_event) {
            (None, None) => break,
            (Some(p), Some(e)) => p.min(e),
            (Some(t), None) | (None, Some(t)) => t,
        };
        sampler.until(at, &world);
        if let Some((t, event)) = clock.pop_until(pass_at.unwrap_or(at)) {
            if world.happen(t, event, &mut clock)? {
                wanted = Some(wanted.map_or(t, |w| w.min(t)));
            }
            continue;
        }
        let Some(now) = pass_at else { continue };
        world.pass(now, &mut clock)?;
        passes += 1;
        last_pass = Some(now);
        wanted = None;
        let moved = (world.arrived + world.ended + world.rejected + world.started) as u64;
        if moved == progress_seen {
            passes_without_progress += 1;
            if passes_without_progress >= MAX_PASSES_WITHOUT_PROGRESS {
                return Err(SimError::Stalled {
                    at_secs: now.0 / 1000,
                    pending: world.pending(),
                    running: world.running,
                });
            }
        } else {
            (progress_seen, passes_without_progress) = (moved, 0);
        }
        let done = world.ended + world.rejected;
        if done >= last_reported + step || done == total {
            if done != last_reported {
                progress(Progress { done, total });
            }
            last_reported = done;
        }
    }
    let end = world
        .sessions
        .iter()
        .map(|s| s.ended.unwrap_or(s.submitted))
        .max()
        .unwrap_or_default();
    sampler.until(end.plus_ms(1), &world);
    Ok(Outcome {
        node_kinds: sampler.kinds,
        slots: sampler.slots,
        samples: sampler.samples,
        passes,
        launched: world.launched,
        launch_failures: world.launch_failures,
        terminated: world.terminated,
        end,
        sessions: world.sessions,
        nodes: world.nodes,
    })
}

/// Takes a sample each `every_ms` of simulated time.
struct Sampler {
    every_ms: u64,
    next: Timestamp,
    kinds: Vec<String>,
    slots: Vec<SlotName>,
    samples: Vec<Sample>,
}

impl Sampler {
    fn new(config: &SimConfig, every_ms: u64) -> Self {
        Sampler {
            every_ms,
            next: Timestamp(0),
            kinds: std::iter::once("agents".to_string())
                .chain(config.templates.iter().map(|t| t.name.clone()))
                .collect(),
            slots: config.slot_names(),
            samples: Vec::new(),
        }
    }

    /// Samples the world, as it is, at each sample instant before `at` (nothing changes
    /// between events, so it is the world at those instants).
    fn until(&mut self, at: Timestamp, world: &World) {
        while self.next < at {
            let mut nodes = vec![0u32; self.kinds.len()];
            let mut allocated = vec![0u64; self.slots.len()];
            let mut capacity = vec![0u64; self.slots.len()];
            for (node, agent) in world.agents() {
                let kind = world.nodes[node].template.map_or(0, |t| t + 1);
                nodes[kind] += 1;
                for (i, slot) in self.slots.iter().enumerate() {
                    allocated[i] += agent.allocated.get(slot.as_str()).milli();
                    capacity[i] += agent.capacity.get(slot.as_str()).milli();
                }
            }
            for (template, count) in world.in_flight_by_kind() {
                nodes[template + 1] += count;
            }
            self.samples.push(Sample {
                at_secs: (self.next.0 / 1000) as u64,
                pending: world.pending(),
                running: world.running,
                nodes,
                utilisation: allocated
                    .iter()
                    .zip(&capacity)
                    .map(|(&a, &c)| if c == 0 { 0.0 } else { a as f64 / c as f64 })
                    .collect(),
            });
            self.next = self.next.plus_ms(self.every_ms);
        }
    }
}
