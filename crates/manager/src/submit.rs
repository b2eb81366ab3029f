//! Group commit for submits: sessions submitted at about the same time are stored in one
//! transaction, so a burst costs one commit instead of one per session.

use std::sync::Arc;

use corral_core::Session;
use corral_store::{Store, StoreError};
use futures_util::future::join_all;
use tokio::sync::{mpsc, oneshot};

use crate::control::Control;
use crate::now;

/// Most sessions stored by one commit.
const MAX_BATCH: usize = 256;

struct Job {
    session: Session,
    spec: serde_json::Value,
    done: oneshot::Sender<Result<(), StoreError>>,
}

#[derive(Clone)]
pub struct Submitter {
    jobs: mpsc::Sender<Job>,
}

impl Submitter {
    pub fn start(store: Store, control: Arc<Control>) -> Self {
        let (jobs, rx) = mpsc::channel(4 * MAX_BATCH);
        tokio::spawn(writer(store, control, rx));
        Submitter { jobs }
    }

    /// Stores the session; returns once it is committed (or refused).
    pub async fn submit(
        &self,
        session: Session,
        spec: serde_json::Value,
    ) -> Result<(), StoreError> {
        let (done, answer) = oneshot::channel();
        let stopped = || StoreError::Refused("the manager is shutting down".into());
        self.jobs
            .send(Job {
                session,
                spec,
                done,
            })
            .await
            .map_err(|_| stopped())?;
        answer.await.map_err(|_| stopped())?
    }
}

async fn writer(store: Store, control: Arc<Control>, mut rx: mpsc::Receiver<Job>) {
    let mut batch = Vec::with_capacity(MAX_BATCH);
    while rx.recv_many(&mut batch, MAX_BATCH).await > 0 {
        let now = now();
        let rows: Vec<(&Session, &serde_json::Value)> =
            batch.iter().map(|j| (&j.session, &j.spec)).collect();
        let results: Vec<Result<(), StoreError>> = match store.insert_sessions(&rows, now).await {
            Ok(()) => batch.iter().map(|_| Ok(())).collect(),
            // One bad session must not fail the others: store them one by one. The commit may
            // have landed before its answer was lost, so a session found stored as given is
            // acknowledged, not refused as taken. All at once: with the database away, each
            // waits for a connection, and the batch must not wait for them in turn.
            Err(_) if batch.len() > 1 => {
                join_all(
                    batch
                        .iter()
                        .map(|j| store.insert_session_again(&j.session, &j.spec, now)),
                )
                .await
            }
            Err(e) => vec![Err(e)],
        };
        let mut groups: Vec<&str> = batch.iter().map(|j| j.session.group.as_str()).collect();
        groups.sort_unstable();
        groups.dedup();
        for g in groups {
            control.wake_queue(g);
        }
        for (job, result) in batch.drain(..).zip(results) {
            let _ = job.done.send(result);
        }
    }
}
