//! A cgroup v2 directory a test may put sessions under: the host's unified hierarchy, or the
//! `unified` one of a hybrid (v1 + v2) host such as our CI machines. Without one the test is
//! skipped, which fails under `CI=true` like any missing service.

use std::path::PathBuf;

/// The writable cgroup v2 directory, or `None` after [`crate::skip`].
#[track_caller]
pub fn cgroup2_parent() -> Option<PathBuf> {
    crate::require_ok(
        "a writable cgroup v2 directory (root and cgroup2)",
        writable(),
    )
}

fn writable() -> Result<PathBuf, String> {
    let mut seen = Vec::new();
    for dir in ["/sys/fs/cgroup", "/sys/fs/cgroup/unified"] {
        let dir = PathBuf::from(dir);
        if !dir.join("cgroup.controllers").is_file() {
            seen.push(format!("{} is not cgroup v2", dir.display()));
            continue;
        }
        let probe = dir.join(format!("corral-probe{}", std::process::id()));
        match std::fs::create_dir(&probe) {
            Ok(()) => {
                let _ = std::fs::remove_dir(&probe);
                return Ok(dir);
            }
            Err(e) => seen.push(format!("{}: {e}", dir.display())),
        }
    }
    Err(seen.join("; "))
}
