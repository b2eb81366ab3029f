//! Agents' heartbeats, written in batches: a sync notes in memory when its agent was heard, and
//! one statement every [`WRITE_EVERY`] writes the heartbeat times of all the agents heard since
//! (`last_seen`), instead of a write and an fsync per sync. A sync is answered only once its
//! heartbeat is written (a long poll's was, by the time it ends; one answered at once writes the
//! batch itself, with those of any syncs waiting beside it), so an agent never counts its fence
//! from a sync the database does not know of: a manager that dies with heartbeats unwritten has
//! answered none of those syncs.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use corral_core::Timestamp;
use corral_store::{Store, StoreError};

/// How often the heartbeats heard are written: far below any `lost_after`.
pub const WRITE_EVERY: Duration = Duration::from_millis(100);

/// The batch a heartbeat was noted in.
#[derive(Debug, Clone, Copy)]
pub struct Ticket(u64);

/// The heartbeats heard and not written yet.
pub struct Heartbeats {
    pending: Mutex<Pending>,
    /// One write at a time, so batches are written in order.
    writing: tokio::sync::Mutex<()>,
    /// The last batch written.
    written: AtomicU64,
}

struct Pending {
    /// The batch being filled; every earlier one is written or being written.
    batch: u64,
    heard: HashMap<String, Timestamp>,
}

impl Default for Heartbeats {
    fn default() -> Self {
        Self {
            pending: Mutex::new(Pending {
                batch: 1,
                heard: HashMap::new(),
            }),
            writing: tokio::sync::Mutex::new(()),
            written: AtomicU64::new(0),
        }
    }
}

impl Heartbeats {
    /// Agent `id` was heard at `at`.
    pub fn heard(&self, id: &str, at: Timestamp) -> Ticket {
        let mut pending = self.pending.lock().unwrap_or_else(|p| p.into_inner());
        let last = pending.heard.entry(id.to_string()).or_insert(at);
        *last = (*last).max(at);
        Ticket(pending.batch)
    }

    /// Returns once the heartbeat of `ticket` is written: at once if it is, else after writing
    /// the batch now (or finding it written by the write it waited for).
    pub async fn written(&self, ticket: Ticket, store: &Store) -> Result<(), StoreError> {
        if self.is_written(ticket) {
            return Ok(());
        }
        let _one = self.writing.lock().await;
        if self.is_written(ticket) {
            return Ok(());
        }
        self.write_batch(store).await
    }

    /// Writes the heartbeats heard so far, in one statement (per 500 agents). Those not
    /// written for a failure are kept for the next write.
    pub async fn write(&self, store: &Store) -> Result<(), StoreError> {
        let _one = self.writing.lock().await;
        self.write_batch(store).await
    }

    fn is_written(&self, ticket: Ticket) -> bool {
        self.written.load(Ordering::Acquire) >= ticket.0
    }

    /// [`Heartbeats::write`], its caller holding `writing`.
    async fn write_batch(&self, store: &Store) -> Result<(), StoreError> {
        let (batch, heard) = {
            let mut pending = self.pending.lock().unwrap_or_else(|p| p.into_inner());
            let batch = pending.batch;
            pending.batch += 1;
            (batch, std::mem::take(&mut pending.heard))
        };
        let rows: Vec<(String, Timestamp)> = heard.iter().map(|(a, t)| (a.clone(), *t)).collect();
        match store.touch_agents(&rows).await {
            Ok(()) => {
                self.written.store(batch, Ordering::Release);
                Ok(())
            }
            Err(e) => {
                let mut pending = self.pending.lock().unwrap_or_else(|p| p.into_inner());
                for (id, at) in heard {
                    let last = pending.heard.entry(id).or_insert(at);
                    *last = (*last).max(at);
                }
                Err(e)
            }
        }
    }
}

/// Writes the heartbeats heard every [`WRITE_EVERY`], for the manager's life.
pub async fn keep_writing(heartbeats: std::sync::Arc<Heartbeats>, store: Store) {
    let mut failing = false;
    loop {
        tokio::time::sleep(WRITE_EVERY).await;
        match heartbeats.write(&store).await {
            Ok(()) if failing => {
                failing = false;
                tracing::info!("agents' heartbeats are written again");
            }
            Ok(()) => {}
            // Said once per outage, not ten times a second.
            Err(e) if !failing => {
                failing = true;
                tracing::warn!(error = %e, "writing agents' heartbeats failed; trying again");
            }
            Err(_) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use corral_core::{Agent, ScalingGroup};

    use super::*;

    async fn store_with_agents(dir: &std::path::Path, ids: &[&str]) -> Store {
        let store = Store::open_sqlite_dir(dir).await.unwrap();
        let group = ScalingGroup {
            name: "g".into(),
            policy: Default::default(),
            scheduler: Default::default(),
            templates: Vec::new(),
        };
        store.create_group(&group, Timestamp(1)).await.unwrap();
        for id in ids {
            let agent: Agent = serde_json::from_value(
                serde_json::json!({"id": id, "group": "g", "capacity": {"cpu": 1}}),
            )
            .unwrap();
            store.upsert_agent(&agent, Timestamp(1)).await.unwrap();
        }
        store
    }

    async fn silent(store: &Store, before: i64) -> Vec<String> {
        let silent = store.silent_agents(Timestamp(before)).await.unwrap();
        silent.into_iter().map(|(a, _)| a).collect()
    }

    #[tokio::test]
    async fn a_heartbeat_is_written_with_those_heard_beside_it_before_its_sync_is_answered() {
        let dir = tempfile::tempdir().unwrap();
        let store = store_with_agents(dir.path(), &["a1", "a2", "a3"]).await;
        let beats = Heartbeats::default();
        let first = beats.heard("a1", Timestamp(10));
        beats.heard("a2", Timestamp(10));
        assert_eq!(silent(&store, 5).await.len(), 3, "noted, not written yet");
        beats.written(first, &store).await.unwrap();
        assert_eq!(silent(&store, 5).await, ["a3"], "a1 and a2 in one batch");
        // Written already: nothing more to write for it.
        let later = beats.heard("a3", Timestamp(20));
        beats.written(first, &store).await.unwrap();
        assert_eq!(silent(&store, 5).await, ["a3"]);
        beats.written(later, &store).await.unwrap();
        assert!(silent(&store, 5).await.is_empty());
    }
}
