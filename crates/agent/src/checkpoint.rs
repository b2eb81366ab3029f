//! What the agent was asked to run, kept beside each session
//! (`<work_root>/<id>/assignment.json`): an agent that restarts while its sessions run reads it
//! back, so it still saves their outputs and counts the devices they hold, as a kubelet's device
//! manager keeps its checkpoint. The environment is left out: it may carry secrets, and a
//! session that already runs needs it no more.

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};

use corral_api::protocol::Assignment;
use corral_runtime::{write_atomic, SessionPaths};

const FILE: &str = "assignment.json";

fn path(work_root: &Path, id: &str) -> PathBuf {
    SessionPaths::new(work_root, id).dir.join(FILE)
}

/// Keeps `a` (its id already checked as a path component), replacing any earlier record whole.
pub fn save(work_root: &Path, a: &Assignment) -> io::Result<()> {
    let path = path(work_root, &a.id);
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let kept = Assignment {
        environment: BTreeMap::new(),
        ..a.clone()
    };
    write_atomic(&path, &serde_json::to_vec(&kept).map_err(io::Error::other)?)
}

/// How much of `limit_secs` session `id` has left: counted from its record's writing, just
/// before it started (now, without a record).
pub fn time_left(work_root: &Path, id: &str, limit_secs: u64) -> std::time::Duration {
    let limit = std::time::Duration::from_secs(limit_secs);
    let ran = std::fs::metadata(path(work_root, id))
        .and_then(|m| m.modified())
        .ok()
        .and_then(|at| at.elapsed().ok())
        .unwrap_or_default();
    limit.saturating_sub(ran)
}

/// What session `id` was asked to run, if a readable record of it is there (a session started
/// by an agent that kept none has none).
pub fn load(work_root: &Path, id: &str) -> Option<Assignment> {
    let path = path(work_root, id);
    let bytes = match std::fs::read(&path) {
        Ok(b) => b,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return None,
        Err(e) => {
            tracing::warn!(file = %path.display(), error = %e, "session record not read");
            return None;
        }
    };
    match serde_json::from_slice::<Assignment>(&bytes) {
        Ok(a) if a.id == id => Some(a),
        Ok(a) => {
            tracing::warn!(file = %path.display(), names = a.id, "session record of another id ignored");
            None
        }
        Err(e) => {
            tracing::warn!(file = %path.display(), error = %e, "unreadable session record ignored");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn assignment(id: &str) -> Assignment {
        serde_json::from_value(serde_json::json!({
            "id": id, "type": "batch", "image": null, "command": ["true"],
            "environment": {"TOKEN": "secret"}, "outputs": ["out.txt"],
            "allocation": {"gpu": "0.5"},
            "devices": [{"id": "GPU-1", "kind": "gpu", "share": "0.5"}],
        }))
        .unwrap()
    }

    #[test]
    fn a_record_comes_back_without_its_environment() {
        let root = tempfile::tempdir().unwrap();
        let a = assignment("s1");
        save(root.path(), &a).unwrap();
        let back = load(root.path(), "s1").unwrap();
        assert_eq!(back.outputs, a.outputs);
        assert_eq!(back.devices, a.devices);
        assert!(back.environment.is_empty());
        let text = std::fs::read_to_string(path(root.path(), "s1")).unwrap();
        assert!(!text.contains("secret"), "{text}");
    }

    #[test]
    fn a_missing_unreadable_or_foreign_record_is_none() {
        let root = tempfile::tempdir().unwrap();
        assert!(load(root.path(), "s1").is_none());
        save(root.path(), &assignment("s2")).unwrap();
        std::fs::create_dir_all(root.path().join("s1")).unwrap();
        std::fs::copy(path(root.path(), "s2"), path(root.path(), "s1")).unwrap();
        assert!(load(root.path(), "s1").is_none());
        std::fs::write(path(root.path(), "s1"), "{").unwrap();
        assert!(load(root.path(), "s1").is_none());
    }
}
