//! The agent fences itself (docs/high-availability.md): when its group says
//! `on_disconnect: stop` and it has not synced for `lost_after`, counted from the start of its
//! last sync that went through (so never later than the manager counts), it stops every session
//! it holds within the manager's grace. The manager gives them to other agents only after that
//! ([`corral_core::disconnect::release_after`]): a session never runs in two places at once.
//!
//! What the manager last said (`lost_after`, the grace, the group's `on_disconnect`) is kept in
//! `<work_root>/fence.json`, so that an agent restarted while cut off still fences the sessions
//! it re-adopts.
//!
//! The agent's own watch cannot run while the agent is frozen (SIGSTOP, a hung call) and its
//! sessions run on: a guard process beside it ([`crate::guard`]) stops them then. After each sync
//! that went through the agent writes the deadline (`<work_root>/fence.deadline`, on
//! CLOCK_BOOTTIME, which both processes read alike and which counts a suspended machine's sleep);
//! the guard stops every session once it has passed, and marks each (`<work_root>/<id>/fenced`)
//! so that the agent reports it `disconnected` when it wakes.

use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

use corral_core::OnDisconnect;
use serde::{Deserialize, Serialize};

const FILE: &str = "fence.json";
const DEADLINE_FILE: &str = "fence.deadline";
const MARK_FILE: &str = "fenced";

/// What the manager said about disconnections.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rules {
    pub lost_after_secs: u64,
    pub grace_secs: u64,
    pub on_disconnect: OnDisconnect,
}

/// When the agent is to stop its sessions. Times are milliseconds of CLOCK_BOOTTIME
/// ([`boottime_ms`]), the clock the guard reads the same deadline on.
#[derive(Debug)]
pub struct Fence {
    /// Unknown before the first join (and nothing kept): never fenced.
    rules: Option<Rules>,
    /// When its last sync (or join) that went through started.
    last_ok_ms: u64,
}

impl Fence {
    pub fn new(rules: Option<Rules>, now_ms: u64) -> Fence {
        Fence {
            rules,
            last_ok_ms: now_ms,
        }
    }

    pub fn rules(&self) -> Option<Rules> {
        self.rules
    }

    /// A join or sync that started at `started_ms` went through; the manager said `rules`.
    /// Returns whether the rules changed (to be kept).
    pub fn heard(&mut self, rules: Rules, started_ms: u64) -> bool {
        self.last_ok_ms = self.last_ok_ms.max(started_ms);
        let changed = self.rules != Some(rules);
        self.rules = Some(rules);
        changed
    }

    /// A sync that started at `started_ms` went through, under the rules known.
    pub fn synced(&mut self, on_disconnect: OnDisconnect, started_ms: u64) -> Option<Rules> {
        let rules = Rules {
            on_disconnect,
            ..self.rules?
        };
        self.heard(rules, started_ms).then_some(rules)
    }

    /// When the sessions are to be stopped, if the group says so: what the guard is told.
    pub fn deadline(&self) -> Option<Deadline> {
        Deadline::after(self.last_ok_ms, self.rules)
    }

    /// The silence so far, if it is long enough for the agent to stop its sessions (with the
    /// grace they get).
    pub fn due(&self, now_ms: u64) -> Option<(Duration, Duration)> {
        let deadline = self.deadline().filter(|d| now_ms >= d.at_ms)?;
        let silence = Duration::from_millis(now_ms.saturating_sub(self.last_ok_ms));
        Some((silence, Duration::from_secs(deadline.grace_secs)))
    }
}

fn path(work_root: &Path) -> PathBuf {
    work_root.join(FILE)
}

/// When the guard is to stop the sessions, and the grace they get.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Deadline {
    /// CLOCK_BOOTTIME, in milliseconds.
    pub at_ms: u64,
    pub grace_secs: u64,
}

impl Deadline {
    /// The deadline of a sync that went through, started at `started_ms` (CLOCK_BOOTTIME) under
    /// `rules`; `None` when the group keeps its sessions.
    pub fn after(started_ms: u64, rules: Option<Rules>) -> Option<Deadline> {
        let rules = rules.filter(|r| r.on_disconnect == OnDisconnect::Stop)?;
        Some(Deadline {
            at_ms: started_ms.saturating_add(rules.lost_after_secs.saturating_mul(1000)),
            grace_secs: rules.grace_secs,
        })
    }
}

/// Milliseconds of CLOCK_BOOTTIME: since boot, the time suspended included, the same in every
/// process of the machine.
pub fn boottime_ms() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes into the struct we own; CLOCK_BOOTTIME exists on Linux.
    let done = unsafe { libc::clock_gettime(libc::CLOCK_BOOTTIME, &mut ts) };
    assert_eq!(done, 0, "clock_gettime(CLOCK_BOOTTIME) failed");
    u64::try_from(ts.tv_sec).unwrap_or(0) * 1000
        + u64::try_from(ts.tv_nsec).unwrap_or(0) / 1_000_000
}

/// Writes the guard's deadline, or takes it away (`None`: nothing to stop).
pub fn arm(work_root: &Path, deadline: Option<Deadline>) -> io::Result<()> {
    let path = work_root.join(DEADLINE_FILE);
    match deadline {
        Some(d) => {
            let bytes = serde_json::to_vec(&d).map_err(io::Error::other)?;
            corral_runtime::write_atomic(&path, &bytes)
        }
        None => match std::fs::remove_file(&path) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        },
    }
}

/// The deadline the agent last wrote, if any.
pub fn deadline(work_root: &Path) -> Option<Deadline> {
    let bytes = std::fs::read(work_root.join(DEADLINE_FILE)).ok()?;
    serde_json::from_slice(&bytes).ok()
}

/// The guard stopped session `id` (its directory exists: the session runs), for `why`.
pub fn mark(work_root: &Path, id: &str, why: &str) -> io::Result<()> {
    std::fs::write(work_root.join(id).join(MARK_FILE), why)
}

/// Why the guard stopped session `id`, if it did; the mark goes.
pub fn take_mark(work_root: &Path, id: &str) -> Option<String> {
    let path = work_root.join(id).join(MARK_FILE);
    let why = std::fs::read_to_string(&path).ok()?;
    let _ = std::fs::remove_file(&path);
    Some(why)
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
        let t0 = 1_000_000;
        let s = |secs: u64| secs * 1000;
        let d = Duration::from_secs;
        let mut f = Fence::new(None, t0);
        assert_eq!(f.due(t0 + s(100)), None, "no rules yet: never");
        assert!(f.heard(rules(OnDisconnect::Stop), t0));
        assert_eq!(f.due(t0 + 2999), None);
        assert_eq!(f.due(t0 + s(3)), Some((d(3), d(1))));
        // A sync that started at 2 s went through: counted from its start.
        assert_eq!(f.synced(OnDisconnect::Stop, t0 + s(2)), None, "unchanged");
        assert_eq!(f.due(t0 + s(4)), None);
        assert_eq!(f.due(t0 + s(5)), Some((d(3), d(1))));
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
    fn the_guards_deadline_is_lost_after_past_the_syncs_start_in_stop_groups_only() {
        let root = tempfile::tempdir().unwrap();
        let stop = Deadline::after(5_000, Some(rules(OnDisconnect::Stop)));
        assert_eq!(
            stop,
            Some(Deadline {
                at_ms: 8_000,
                grace_secs: 1
            })
        );
        assert_eq!(
            Deadline::after(5_000, Some(rules(OnDisconnect::Keep))),
            None
        );
        assert_eq!(Deadline::after(5_000, None), None);
        arm(root.path(), stop).unwrap();
        assert_eq!(deadline(root.path()), stop);
        arm(root.path(), None).unwrap();
        assert_eq!(deadline(root.path()), None);
        arm(root.path(), None).unwrap();
        let before = boottime_ms();
        assert!(boottime_ms() >= before);
        std::fs::create_dir(root.path().join("s1")).unwrap();
        assert_eq!(take_mark(root.path(), "s1"), None);
        mark(root.path(), "s1", "cut off").unwrap();
        assert_eq!(take_mark(root.path(), "s1").as_deref(), Some("cut off"));
        assert_eq!(take_mark(root.path(), "s1"), None, "taken once");
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
