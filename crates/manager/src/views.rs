//! What the manager keeps in memory per group so that the busiest requests read nothing else:
//! admission views (what admission at submit needs: the group, its agents, the images; no
//! sessions) and the group's policy (what an agent's sync needs of it).
//!
//! Every change this manager makes to a group bumps the group's generation and drops what is
//! kept of it; a value read before the bump is never kept after it. Values also expire after a
//! second, for changes made by other managers on the same database; the cycle re-checks
//! admission anyway.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use corral_core::{ScalingPolicy, Snapshot};
use corral_store::Store;

const TTL: Duration = Duration::from_secs(1);

/// Per group, a value read from the store, kept for [`TTL`] unless the group changes.
pub struct Remembered<V>(Mutex<HashMap<String, Entry<V>>>);

struct Entry<V> {
    generation: u64,
    value: Option<(V, Instant)>,
}

impl<V> Default for Remembered<V> {
    fn default() -> Self {
        Remembered(Mutex::default())
    }
}

impl<V: Clone> Remembered<V> {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Entry<V>>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The group changed: what is kept of it is stale.
    pub fn invalidate(&self, group: &str) {
        let mut map = self.lock();
        let e = map.entry(group.to_string()).or_insert(Entry {
            generation: 0,
            value: None,
        });
        e.generation += 1;
        e.value = None;
    }

    /// Something every group reads changed (an image).
    pub fn invalidate_all(&self) {
        for e in self.lock().values_mut() {
            e.generation += 1;
            e.value = None;
        }
    }

    /// Take this before reading the store; pass it to `remember`.
    pub fn generation(&self, group: &str) -> u64 {
        self.lock().get(group).map_or(0, |e| e.generation)
    }

    pub fn get(&self, group: &str) -> Option<V> {
        let map = self.lock();
        let (value, at) = map.get(group)?.value.as_ref()?;
        (at.elapsed() < TTL).then(|| value.clone())
    }

    /// Keeps `value` for `group`, unless the group changed since `generation` was taken.
    pub fn remember(&self, group: &str, value: V, generation: u64) {
        let mut map = self.lock();
        let e = map.entry(group.to_string()).or_insert(Entry {
            generation: 0,
            value: None,
        });
        if e.generation == generation {
            e.value = Some((value, Instant::now()));
        }
    }
}

/// Admission views.
pub type Views = Remembered<Arc<Snapshot>>;

impl Views {
    /// Keeps `snapshot` (without its sessions) as the group's view, unless the group changed
    /// since `generation` was taken.
    pub fn remember_view(&self, mut snapshot: Snapshot, generation: u64) -> Arc<Snapshot> {
        snapshot.sessions = Vec::new();
        let view = Arc::new(snapshot);
        self.remember(&view.group.name.clone(), view.clone(), generation);
        view
    }
}

/// Groups' policies (`None`: no such group).
pub type Policies = Remembered<Option<Arc<ScalingPolicy>>>;

impl Policies {
    /// `group`'s policy, as kept or read now.
    pub async fn policy(
        &self,
        store: &Store,
        group: &str,
    ) -> corral_store::Result<Option<Arc<ScalingPolicy>>> {
        if let Some(policy) = self.get(group) {
            return Ok(policy);
        }
        let generation = self.generation(group);
        let policy = store.get_group(group).await?.map(|g| Arc::new(g.policy));
        self.remember(group, policy.clone(), generation);
        Ok(policy)
    }
}
