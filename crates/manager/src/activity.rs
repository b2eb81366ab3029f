//! Session activity for the idle policy: API use of a session is written at most once per
//! `RESOLUTION` per session, so a client following logs does not write on every poll.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use corral_store::Store;

const RESOLUTION: Duration = Duration::from_secs(5);

#[derive(Default)]
pub struct Activity(Mutex<Written>);

impl Activity {
    /// Someone used `session`: record it unless recorded within the last `RESOLUTION`. The
    /// write runs on its own, so that a keystroke or an app's request never waits for it.
    pub fn touch(&self, store: &Store, session: &str) {
        let due = (self.0.lock().unwrap_or_else(|p| p.into_inner())).due(session, Instant::now());
        if due {
            let (store, session) = (store.clone(), session.to_string());
            tokio::spawn(async move {
                if let Err(e) = store.touch_session(&session, crate::now()).await {
                    tracing::warn!(session, error = %e, "could not record activity");
                }
            });
        }
    }
}

/// When each session's activity was last written, for those written within `RESOLUTION`.
#[derive(Default)]
struct Written {
    at: HashMap<String, Instant>,
    /// When entries older than `RESOLUTION` were last dropped: once per `RESOLUTION`, not at
    /// every use (a busy manager holds thousands).
    pruned: Option<Instant>,
}

impl Written {
    /// Whether a use of `session` at `now` is to be written (none was within `RESOLUTION`).
    fn due(&mut self, session: &str, now: Instant) -> bool {
        let old = |at: Instant| now.saturating_duration_since(at) >= RESOLUTION;
        if self.pruned.is_none_or(old) {
            self.at.retain(|_, at| !old(*at));
            self.pruned = Some(now);
        }
        match self.at.get(session) {
            Some(&at) if !old(at) => false,
            _ => {
                self.at.insert(session.to_string(), now);
                true
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_session_is_written_once_per_resolution_and_old_entries_go() {
        let start = Instant::now();
        let at = |secs: u64| start + Duration::from_secs(secs);
        let mut written = Written::default();
        assert!(written.due("s1", at(0)));
        assert!(!written.due("s1", at(1)));
        assert!(written.due("s2", at(1)));
        assert!(!written.due("s1", at(4)));
        // Five seconds after it was written, s1 is due again; s2 (written at 1) is not yet.
        assert!(written.due("s1", at(5)));
        assert!(!written.due("s2", at(5)));
        // Many sessions used once, then none of them for a while: they are dropped.
        for i in 0..1000 {
            assert!(written.due(&format!("many{i}"), at(6)));
        }
        assert!(written.due("s3", at(20)));
        assert_eq!(written.at.len(), 1);
    }
}
