//! Session activity for the idle policy: API use of a session is written at most once per
//! `RESOLUTION` per session, so a client following logs does not write on every poll.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use corral_store::Store;

const RESOLUTION: Duration = Duration::from_secs(5);

#[derive(Default)]
pub struct Activity(Mutex<HashMap<String, Instant>>);

impl Activity {
    /// Someone used `session`: record it unless recorded within the last `RESOLUTION`.
    pub async fn touch(&self, store: &Store, session: &str) {
        let due = {
            let mut seen = self.0.lock().unwrap_or_else(|p| p.into_inner());
            seen.retain(|_, at| at.elapsed() < RESOLUTION);
            match seen.get(session) {
                Some(_) => false,
                None => {
                    seen.insert(session.to_string(), Instant::now());
                    true
                }
            }
        };
        if due {
            if let Err(e) = store.touch_session(session, crate::now()).await {
                tracing::warn!(session, error = %e, "could not record activity");
            }
        }
    }
}
