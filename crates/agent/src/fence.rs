//! The agent fences itself (docs/high-availability.md): when its group says
//! `on_disconnect: stop` and it has not synced for `lost_after`, counted from the start of its
//! last sync that went through (so never later than the manager counts), it stops every session
//! it holds within the manager's grace. The manager gives them to other agents only after that
//! ([`corral_core::disconnect::release_after`]): a session never runs in two places at once.
//!
//! What the manager last said (`lost_after`, the grace, the group's `on_disconnect`) is kept in
//! `<work_root>/fence.json`, so that an agent restarted while cut off still fences the sessions
//! it re-adopts.

use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

use corral_core::OnDisconnect;
use serde::{Deserialize, Serialize};
use tokio::time::Instant;

const FILE: &str = "fence.json";

/// What the manager said about disconnections.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rules {
    pub lost_after_secs: u64,
    pub grace_secs: u64,
    pub on_disconnect: OnDisconnect,
}

/// When the agent is to stop its sessions.
#[derive(Debug)]
pub struct Fence {
    /// Unknown before the first join (and nothing kept): never fenced.
    rules: Option<Rules>,
    /// When its last sync (or join) that went through started.
    last_ok: Instant,
}

impl Fence {
    pub fn new(rules: Option<Rules>, now: Instant) -> Fence {
        Fence {
            rules,
            last_ok: now,
        }
    }

    pub fn rules(&self) -> Option<Rules> {
        self.rules
    }

    /// A join or sync that started at `started` went through; the manager said `rules`.
    /// Returns whether the rules changed (to be kept).
    pub fn heard(&mut self, rules: Rules, started: Instant) -> bool {
        self.last_ok = self.last_ok.max(started);
        let changed = self.rules != Some(rules);
        self.rules = Some(rules);
        changed
    }

    /// A sync that started at `started` went through, under the rules known.
    pub fn synced(&mut self, on_disconnect: OnDisconnect, started: Instant) -> Option<Rules> {
        let rules = Rules {
            on_disconnect,
            ..self.rules?
        };
        self.heard(rules, started).then_some(rules)
    }

    /// The silence so far, if it is long enough for the agent to stop its sessions (with the
    /// grace they get).
    pub fn due(&self, now: Instant) -> Option<(Duration, Duration)> {
        let rules = self.rules?;
        let silence = now.saturating_duration_since(self.last_ok);
        let due = rules.on_disconnect == OnDisconnect::Stop
            && silence >= Duration::from_secs(rules.lost_after_secs);
        due.then(|| (silence, Duration::from_secs(rules.grace_secs)))
    }
}

fn path(work_root: &Path) -> PathBuf {
    work_root.join(FILE)
}

/// Keeps the rules for a restart.
pub fn save(work_root: &Path, rules: &Rules) -> io::Result<()> {
    let bytes = serde_json::to_vec(rules).map_err(io::Error::other)?;
    corral_runtime::write_atomic(&path(work_root), &bytes)
}

/// The rules an earlier start kept, if readable.
pub fn load(work_root: &Path) -> Option<Rules> {
    let path = path(work_root);
    let bytes = std::fs::read(&path).ok()?;
    serde_json::from_slice(&bytes)
        .inspect_err(|e| tracing::warn!(file = %path.display(), error = %e, "unreadable fence rules ignored"))
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules(on_disconnect: OnDisconnect) -> Rules {
        Rules {
            lost_after_secs: 3,
            grace_secs: 1,
            on_disconnect,
        }
    }

    #[test]
    fn it_stops_once_silent_for_lost_after_counted_from_the_last_sync_that_went_through() {
        let t0 = Instant::now();
        let s = Duration::from_secs;
        let mut f = Fence::new(None, t0);
        assert_eq!(f.due(t0 + s(100)), None, "no rules yet: never");
        assert!(f.heard(rules(OnDisconnect::Stop), t0));
        assert_eq!(f.due(t0 + Duration::from_millis(2999)), None);
        assert_eq!(f.due(t0 + s(3)), Some((s(3), s(1))));
        // A sync that started at 2 s went through: counted from its start.
        assert_eq!(f.synced(OnDisconnect::Stop, t0 + s(2)), None, "unchanged");
        assert_eq!(f.due(t0 + s(4)), None);
        assert_eq!(f.due(t0 + s(5)), Some((s(3), s(1))));
        // One that started before the last that went through counts from the later.
        f.synced(OnDisconnect::Stop, t0 + s(1));
        assert_eq!(f.due(t0 + s(4)), None);
        assert_eq!(
            f.synced(OnDisconnect::Keep, t0 + s(2)),
            Some(rules(OnDisconnect::Keep)),
            "a change is to be kept"
        );
        assert_eq!(f.due(t0 + s(100)), None, "keep: never");
    }

    #[test]
    fn the_rules_are_kept_for_a_restart() {
        let root = tempfile::tempdir().unwrap();
        assert_eq!(load(root.path()), None);
        save(root.path(), &rules(OnDisconnect::Keep)).unwrap();
        assert_eq!(load(root.path()), Some(rules(OnDisconnect::Keep)));
        std::fs::write(root.path().join(FILE), "{").unwrap();
        assert_eq!(load(root.path()), None, "unreadable: as if none");
    }
}
