//! Builders for snapshots written the way an operator describes a group.

use corral_core::plan::Problem;
use corral_core::Snapshot;

/// A snapshot from a planning problem in JSON (the `corral plan` format).
pub fn snapshot(json: serde_json::Value) -> Snapshot {
    let problem: Problem = serde_json::from_value(json).expect("valid problem");
    problem.into_snapshot().expect("valid snapshot")
}
