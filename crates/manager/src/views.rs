//! Admission views: per group, what admission at submit needs (the group, its agents, the
//! images; no sessions), kept in memory so a submit reads nothing but what it writes.
//!
//! Every change this manager makes to a group bumps the group's generation and drops its view;
//! a view read before the bump is never kept after it. Views also expire after `VIEW_TTL`, for
//! changes made by other managers on the same database; the cycle re-checks admission anyway.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use corral_core::Snapshot;

const VIEW_TTL: Duration = Duration::from_secs(1);

#[derive(Default)]
pub struct Views(Mutex<HashMap<String, Entry>>);

#[derive(Default)]
struct Entry {
    generation: u64,
    view: Option<(Arc<Snapshot>, Instant)>,
}

impl Views {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Entry>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The group changed: its view is stale.
    pub fn invalidate(&self, group: &str) {
        let mut map = self.lock();
        let e = map.entry(group.to_string()).or_default();
        e.generation += 1;
        e.view = None;
    }

    /// Something every group reads changed (an image).
    pub fn invalidate_all(&self) {
        for e in self.lock().values_mut() {
            e.generation += 1;
            e.view = None;
        }
    }

    /// Take this before reading the store; pass it to `remember`.
    pub fn generation(&self, group: &str) -> u64 {
        self.lock().get(group).map_or(0, |e| e.generation)
    }

    pub fn get(&self, group: &str) -> Option<Arc<Snapshot>> {
        let map = self.lock();
        let (view, at) = map.get(group)?.view.as_ref()?;
        (at.elapsed() < VIEW_TTL).then(|| view.clone())
    }

    /// Keeps `snapshot` (without its sessions) as the group's view, unless the group changed
    /// since `generation` was taken.
    pub fn remember(&self, mut snapshot: Snapshot, generation: u64) -> Arc<Snapshot> {
        snapshot.sessions = Vec::new();
        let view = Arc::new(snapshot);
        let mut map = self.lock();
        let e = map.entry(view.group.name.clone()).or_default();
        if e.generation == generation {
            e.view = Some((view.clone(), Instant::now()));
        }
        view
    }
}
