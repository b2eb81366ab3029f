//! The control loop: one worker per group runs the core cycle whenever something happens to the
//! group (and on a periodic tick), coalescing bursts into one pass.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use corral_core::{cycle, Timestamp};
use corral_store::{Applied, Backend, Fence, Lease, Store, StoreError, Wake, MAX_PENDING_PER_PASS};
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::agent_slots::AgentSlots;
use crate::changes::Changes;
use crate::leases::Leases;
use crate::metrics::{GroupLabels, Metrics, PassLabels, RejectionLabels, TemplateLabels};
use crate::now;
use crate::scaling::{DriverConfig, GroupDriver};
use crate::views::Views;

/// Attempts of one pass when its apply loses a race with another writer.
const CONFLICT_RETRIES: usize = 5;

pub struct Control {
    store: Store,
    tick: Duration,
    min_interval: Duration,
    /// The groups this manager runs (it holds their leases).
    owned: Mutex<HashMap<String, Owned>>,
    /// Numbers each ownership of a group, so that a worker or driver of an earlier one (the
    /// group lost and taken again, or deleted and made again) knows to stop.
    terms: AtomicU64,
    /// What admission at submit reads, per group.
    pub views: Views,
    /// Per agent, woken when something is placed on it (its sync may be waiting), and what its
    /// idle syncs read.
    pub agents: AgentSlots,
    /// Per session someone waits on (a blocking read), bumped when it changes.
    pub sessions: Arc<Changes>,
    /// What `GET /metrics` shows.
    pub metrics: Arc<Metrics>,
    driver_config: DriverConfig,
    /// Which groups this manager runs, shared with the others on its database.
    pub(crate) leases: Arc<Leases>,
}

impl Control {
    pub fn new(
        store: Store,
        tick: Duration,
        min_interval: Duration,
        driver_config: DriverConfig,
        leases: Arc<Leases>,
    ) -> Arc<Self> {
        Arc::new(Control {
            store,
            tick,
            min_interval,
            owned: Mutex::default(),
            terms: AtomicU64::new(0),
            views: Views::default(),
            agents: AgentSlots::default(),
            sessions: Arc::default(),
            metrics: Arc::default(),
            driver_config,
            leases,
        })
    }

    pub(crate) fn driver_config(&self) -> &DriverConfig {
        &self.driver_config
    }

    fn lock_owned(&self) -> std::sync::MutexGuard<'_, HashMap<String, Owned>> {
        self.owned.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// This manager runs the group (it holds its lease).
    pub(crate) fn owns(&self, group: &str) -> bool {
        self.lock_owned().contains_key(group)
    }

    /// This manager still runs the group as it did when it started the worker or driver of
    /// ownership `term`: one of an earlier ownership stops.
    pub(crate) fn runs(&self, group: &str, term: u64) -> bool {
        self.lock_owned().get(group).is_some_and(|o| o.term == term)
    }

    /// The groups this manager runs.
    pub(crate) fn owned(&self) -> Vec<String> {
        self.lock_owned().keys().cloned().collect()
    }

    /// The group's scaling driver, if this manager runs the group.
    pub fn driver(&self, group: &str) -> Option<Arc<GroupDriver>> {
        self.lock_owned().get(group).map(|o| o.driver.clone())
    }

    /// Something happened to `group`: its owner runs a pass soon (this manager, or the one
    /// holding its lease, told through the database). Wakes that arrive while a pass runs are
    /// folded into one more pass.
    pub fn wake(self: &Arc<Self>, group: &str) {
        self.views.invalidate(group);
        self.wake_queue(group);
    }

    /// New sessions in `group`'s queue: a pass soon, as [`Control::wake`], but what admission
    /// reads of the group (its agents, templates, images) is unchanged, so the admission view
    /// is kept: at hundreds of submits a second, dropping it made every submit read it again.
    pub fn wake_queue(self: &Arc<Self>, group: &str) {
        let worker = self.lock_owned().get(group).map(|o| o.worker.clone());
        if let Some(worker) = worker {
            worker.notify_one();
            return;
        }
        self.leases.unowned_woken(group);
        self.tell_others(Wake::Group(group.to_string()));
    }

    /// Tells the other managers on the database (PostgreSQL), in the background.
    pub(crate) fn tell_others(&self, wake: Wake) {
        if self.store.backend() != Backend::Postgres {
            return;
        }
        let store = self.store.clone();
        tokio::spawn(async move {
            if let Err(e) = store.notify(&wake).await {
                tracing::warn!(?wake, error = %e, "could not tell the other managers");
            }
        });
    }

    /// This manager took the group's lease: its worker and driver start, writing through a
    /// store fenced with the lease, the driver going on from the governor the last owner left.
    pub(crate) async fn own(self: &Arc<Self>, lease: &Lease) -> Result<(), StoreError> {
        let group = &lease.group;
        if self.owns(group) {
            return Ok(());
        }
        let governor = self.store.governor(group).await?;
        let store = self.store.fenced(Fence::from(lease));
        let owned = Owned {
            term: self.terms.fetch_add(1, Ordering::Relaxed),
            worker: Arc::new(Notify::new()),
            driver: Arc::new(GroupDriver::with(governor)),
        };
        owned.worker.notify_one();
        {
            let mut all = self.lock_owned();
            if all.contains_key(group) {
                return Ok(());
            }
            all.insert(group.to_string(), owned.clone());
        }
        tokio::spawn(self.clone().worker(
            group.to_string(),
            owned.term,
            owned.worker,
            store.clone(),
        ));
        tokio::spawn(crate::scaling::drive(
            self.clone(),
            group.to_string(),
            owned.term,
            owned.driver,
            store,
        ));
        Ok(())
    }

    /// Something changed for `agent`: answer its waiting sync now, wherever it waits.
    pub fn wake_agent(&self, agent: &str) {
        self.wake_agents(&[agent]);
    }

    /// [`Control::wake_agent`] for each of `agents`, with one word to the other managers.
    pub fn wake_agents(&self, agents: &[&str]) {
        for agent in agents {
            self.agents.wake(agent);
        }
        if !agents.is_empty() {
            self.tell_others(Wake::Agents(agents.iter().map(|a| a.to_string()).collect()));
        }
    }

    /// Another manager placed something on `agent`: answer its sync if it waits here.
    pub(crate) fn wake_agent_if_waiting(&self, agent: &str) {
        self.agents.wake_if_known(agent);
    }

    /// The group was deleted, or its lease lost or handed over: its worker stops at its next
    /// pass, its driver at its next round.
    pub fn disown(&self, group: &str) {
        self.remove_owned(group, None);
    }

    /// A worker or driver of ownership `term` found the group gone or its lease moved on: the
    /// group is disowned, unless it is run already under a later ownership.
    pub(crate) fn step_down(&self, group: &str, term: u64) {
        self.remove_owned(group, Some(term));
    }

    /// Ends the group's ownership (only if it is `term`, when given); its worker and driver
    /// wake to find it ended, and stop.
    fn remove_owned(&self, group: &str, term: Option<u64>) {
        let gone = {
            let mut owned = self.lock_owned();
            match owned.get(group) {
                Some(o) if term.is_none_or(|t| t == o.term) => owned.remove(group),
                _ => None,
            }
        };
        if let Some(gone) = gone {
            gone.worker.notify_one();
            gone.driver.kick();
        }
    }

    async fn worker(self: Arc<Self>, group: String, term: u64, notify: Arc<Notify>, store: Store) {
        let mut last_pass: Option<Instant> = None;
        // The next pass is due by then although nothing happens (a batching window closes).
        let mut recheck: Option<Duration> = None;
        loop {
            let wait = recheck.map_or(self.tick, |r| r.min(self.tick));
            tokio::select! {
                _ = notify.notified() => {}
                _ = tokio::time::sleep(wait) => {}
            }
            if let Some(at) = last_pass {
                tokio::time::sleep_until(at + self.min_interval).await;
            }
            // Disowned (and maybe owned again since): stop.
            if !self.runs(&group, term) {
                return;
            }
            last_pass = Some(Instant::now());
            recheck = None;
            let started = std::time::Instant::now();
            let pass = self.run_pass(&store, &group).await;
            let labels = PassLabels {
                group: group.clone(),
                outcome: if pass.is_ok() { "applied" } else { "failed" },
            };
            self.metrics
                .passes
                .get_or_create(&labels)
                .observe(started.elapsed().as_secs_f64());
            match pass {
                Ok(pass) => {
                    tracing::debug!(group, applied = ?pass.applied, "pass");
                    recheck = pass
                        .recheck_at
                        .map(|at| Duration::from_millis(now().ms_until(at)));
                }
                Err(StoreError::NotFound { .. }) => {
                    self.step_down(&group, term);
                    return;
                }
                Err(e @ StoreError::Fenced { .. }) => {
                    tracing::warn!(group, error = %e, "stopping the group's passes");
                    self.step_down(&group, term);
                    return;
                }
                Err(e) => {
                    tracing::warn!(group, error = %e, "pass failed; retrying at the next event or tick")
                }
            }
        }
    }
}

impl Control {
    /// Adds what a pass decided to the metrics' counters.
    fn count(&self, group: &str, decisions: &corral_core::Decisions) {
        use corral_core::decisions::Infeasible;
        let m = &self.metrics;
        let of_group = GroupLabels {
            group: group.to_string(),
        };
        m.placements
            .get_or_create(&of_group)
            .inc_by(decisions.placements.len() as u64);
        m.marks
            .get_or_create(&of_group)
            .inc_by(decisions.marks.len() as u64);
        m.terminations
            .get_or_create(&of_group)
            .inc_by(decisions.terminations.len() as u64);
        for r in &decisions.rejections {
            let reason = match r.reason {
                Infeasible::NoCapacity => "no_capacity",
                Infeasible::Exceeds(_) => "exceeds",
                Infeasible::NoSingleFit { .. } => "no_single_fit",
                Infeasible::NoDevices { .. } => "no_devices",
                Infeasible::BadDevices(_) => "bad_devices",
            };
            let labels = RejectionLabels {
                group: group.to_string(),
                reason,
            };
            m.rejections.get_or_create(&labels).inc();
        }
        for l in &decisions.launches {
            let labels = TemplateLabels {
                group: group.to_string(),
                template: l.template.clone(),
            };
            m.launches.get_or_create(&labels).inc_by(u64::from(l.count));
        }
    }
}

/// A group this manager runs: which of its ownerships of the group this is, its worker's
/// wake-up, its driver.
#[derive(Clone)]
struct Owned {
    term: u64,
    worker: Arc<Notify>,
    driver: Arc<GroupDriver>,
}

/// What a pass did, and when the next is due although nothing happens (at once after a pass
/// that read a full head of the queue and placed or rejected some of it).
#[derive(Debug)]
pub struct PassResult {
    pub applied: Applied,
    pub recheck_at: Option<Timestamp>,
}

/// One pass over a group: snapshot, cycle, apply; re-read and retry when the apply finds that
/// capacity changed since the snapshot.
impl Control {
    /// One pass over a group, writing through `store` (fenced with the group's lease).
    async fn run_pass(&self, store: &Store, group: &str) -> Result<PassResult, StoreError> {
        let mut attempt = 0;
        loop {
            let now = now();
            let generation = self.views.generation(group);
            let reading = std::time::Instant::now();
            let mut snapshot = store.snapshot(group, now).await?;
            let read = reading.elapsed();
            // The pass reads the head of the queue only: when that was full, more may wait
            // behind it (an array of 100,000), for the next pass at once rather than a tick.
            let head_only = snapshot.pending().count() >= MAX_PENDING_PER_PASS;
            let driver = self.driver(group);
            if let Some(driver) = &driver {
                snapshot.launch_limits = driver.limits(now);
            }
            let deciding = std::time::Instant::now();
            let decisions = cycle(&snapshot);
            let decided_in = deciding.elapsed();
            let changes_agents = !(decisions.marks.is_empty()
                && decisions.unmarks.is_empty()
                && decisions.terminations.is_empty());
            let applying = std::time::Instant::now();
            let result = store.apply(group, &snapshot, &decisions, now).await;
            // Where a pass's time goes, for an operator chasing a slow queue.
            tracing::debug!(
                group,
                pending = snapshot.pending().count(),
                placed = decisions.placements.len(),
                read_ms = read.as_secs_f64() * 1e3,
                cycle_ms = decided_in.as_secs_f64() * 1e3,
                apply_ms = applying.elapsed().as_secs_f64() * 1e3,
                "pass"
            );
            let of_group = GroupLabels {
                group: group.to_string(),
            };
            self.metrics
                .store_applies
                .get_or_create(&of_group)
                .observe(applying.elapsed().as_secs_f64());
            if matches!(result, Err(StoreError::Conflict { .. })) {
                self.metrics.store_conflicts.get_or_create(&of_group).inc();
            }
            match result {
                Err(StoreError::Conflict { .. }) if attempt + 1 < CONFLICT_RETRIES => attempt += 1,
                Ok(applied) => {
                    self.count(group, &decisions);
                    if let Some(driver) = &driver {
                        driver.launched(&decisions.launches, now);
                        if !(decisions.launches.is_empty() && decisions.terminations.is_empty()) {
                            driver.kick();
                        }
                    }
                    let mut placed_on: Vec<&str> = decisions
                        .placements
                        .iter()
                        .map(|p| p.agent.0.as_str())
                        .collect();
                    placed_on.sort_unstable();
                    placed_on.dedup();
                    self.wake_agents(&placed_on);
                    let decided = (decisions.placements.iter().map(|p| &p.session))
                        .chain(decisions.rejections.iter().map(|r| &r.session))
                        .chain(decisions.waiting.iter().map(|w| &w.session));
                    self.sessions.bump_each(decided.map(|s| s.0.as_str()));
                    if !changes_agents {
                        self.views.remember_view(snapshot, generation);
                    }
                    // The launches count against the budget whoever owns the group next.
                    if let (Some(driver), false) = (&driver, decisions.launches.is_empty()) {
                        driver.save(store, group).await?;
                    }
                    let progress =
                        !(decisions.placements.is_empty() && decisions.rejections.is_empty());
                    let recheck_at = if head_only && progress {
                        Some(now)
                    } else {
                        decisions.recheck_at
                    };
                    return Ok(PassResult {
                        applied,
                        recheck_at,
                    });
                }
                Err(e) => return Err(e),
            }
        }
    }
}
