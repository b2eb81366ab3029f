//! Blocking reads: a request that waits for a session to change (its state, its wait reason, its
//! logs) subscribes to the session's counter here, and whatever changes the session bumps it.
//! Only sessions someone waits on have an entry; the last subscriber's leaving removes it.
//!
//! The counters live in one manager's memory. A change this manager does not make (another
//! manager's, on the same PostgreSQL) is found by the waiter's own re-read every
//! [`RECHECK`] instead.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

/// How often a waiting request reads again although it was not told of a change.
pub const RECHECK: Duration = Duration::from_secs(1);

/// The longest a request may wait (`wait_ms`), below the client's 60 s limit on a call.
pub const MAX_WAIT_MS: u64 = 30_000;

#[derive(Default)]
pub struct Changes {
    keys: Mutex<HashMap<String, watch::Sender<u64>>>,
}

impl Changes {
    /// Starts listening to `key`: changes from now on wake [`Subscription::changed`].
    pub fn subscribe(self: &Arc<Self>, key: &str) -> Subscription {
        let mut keys = self.keys.lock().unwrap_or_else(|p| p.into_inner());
        let receiver = keys
            .entry(key.to_string())
            .or_insert_with(|| watch::channel(0).0)
            .subscribe();
        Subscription {
            changes: self.clone(),
            key: key.to_string(),
            receiver: Some(receiver),
        }
    }

    /// `key` changed: wake whoever waits on it.
    pub fn bump(&self, key: &str) {
        self.bump_each([key]);
    }

    /// Each of `keys` changed (one lock for a pass's thousands of sessions).
    pub fn bump_each<'a>(&self, keys: impl IntoIterator<Item = &'a str>) {
        let keys_waited_on = self.keys.lock().unwrap_or_else(|p| p.into_inner());
        if keys_waited_on.is_empty() {
            return;
        }
        for key in keys {
            if let Some(sender) = keys_waited_on.get(key) {
                sender.send_modify(|n| *n = n.wrapping_add(1));
            }
        }
    }

    /// Keys with at least one subscriber (for tests of the clean-up).
    #[cfg(test)]
    fn len(&self) -> usize {
        self.keys.lock().unwrap().len()
    }
}

/// One waiting request's interest in a key.
pub struct Subscription {
    changes: Arc<Changes>,
    key: String,
    receiver: Option<watch::Receiver<u64>>,
}

impl Subscription {
    /// Waits until the key changes (since the subscription, or since the last call), until
    /// [`RECHECK`] has passed, or until `deadline`; then the caller reads again.
    pub async fn changed(&mut self, deadline: Instant) {
        let until = deadline.min(Instant::now() + RECHECK);
        if let Some(receiver) = &mut self.receiver {
            // The sender lives as long as any subscriber does, so this ends only by a change.
            let _ = tokio::time::timeout_at(until, receiver.changed()).await;
        }
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        drop(self.receiver.take());
        let mut keys = self.changes.keys.lock().unwrap_or_else(|p| p.into_inner());
        if keys
            .get(&self.key)
            .is_some_and(|sender| sender.receiver_count() == 0)
        {
            keys.remove(&self.key);
        }
    }
}

/// `?wait_ms=N` of a blocking read: hold the answer until what was asked for changes, for at
/// most N ms (default 0: answer at once).
#[derive(Debug, Default, serde::Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::IntoParams))]
#[serde(deny_unknown_fields)]
#[cfg_attr(feature = "openapi", into_params(parameter_in = Query))]
pub struct Wait {
    /// Hold the answer until there is something new, for at most this many ms (0 to 30,000).
    #[cfg_attr(feature = "openapi", param(maximum = 30_000))]
    pub wait_ms: Option<u64>,
}

impl Wait {
    /// Until when the request may be held; more than [`MAX_WAIT_MS`] is refused by name.
    pub fn deadline(&self) -> Result<Instant, crate::error::ApiError> {
        let ms = self.wait_ms.unwrap_or(0);
        if ms > MAX_WAIT_MS {
            return Err(crate::error::ApiError::invalid(
                "wait_ms",
                format!("{ms} is more than {MAX_WAIT_MS}"),
            ));
        }
        Ok(Instant::now() + Duration::from_millis(ms))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_bump_wakes_the_waiter_and_the_last_to_leave_removes_the_key() {
        let changes = Arc::new(Changes::default());
        let mut first = changes.subscribe("s1");
        let second = changes.subscribe("s1");
        assert_eq!(changes.len(), 1);
        let far = Instant::now() + Duration::from_secs(30);
        let waiting = tokio::spawn(async move {
            let started = Instant::now();
            first.changed(far).await;
            started.elapsed()
        });
        tokio::task::yield_now().await;
        changes.bump("s1");
        changes.bump("other");
        assert_eq!(waiting.await.unwrap(), Duration::ZERO);
        assert_eq!(changes.len(), 1, "one subscriber is left");
        drop(second);
        assert_eq!(changes.len(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn without_a_change_the_waiter_reads_again_after_the_recheck_or_the_deadline() {
        let changes = Arc::new(Changes::default());
        let mut sub = changes.subscribe("s1");
        let started = Instant::now();
        sub.changed(started + Duration::from_secs(30)).await;
        assert_eq!(started.elapsed(), RECHECK);
        let started = Instant::now();
        sub.changed(started + Duration::from_millis(300)).await;
        assert_eq!(started.elapsed(), Duration::from_millis(300));
    }

    #[tokio::test(start_paused = true)]
    async fn a_change_between_two_waits_is_not_missed() {
        let changes = Arc::new(Changes::default());
        let mut sub = changes.subscribe("s1");
        changes.bump("s1");
        let started = Instant::now();
        sub.changed(started + Duration::from_secs(30)).await;
        assert_eq!(started.elapsed(), Duration::ZERO);
    }
}
