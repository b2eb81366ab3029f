//! Scripts a test writes and then runs, written so that running them never fails with "Text
//! file busy" (ETXTBSY): a file still open for writing cannot be executed, and a process that
//! writes a file while other threads fork holds that descriptor in each child until it execs.
//! So the file is written by a `cp` of its own, whose descriptors no child of ours inherits.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};

/// Writes `text` to `path`, executable (0755), through a `cp` process of its own; panics on
/// failure (a test's set-up).
pub fn write_executable(path: &Path, text: &str) {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    // The text goes to a sibling that is never executed; `cp` writes the file that is.
    let source = path.with_extension(format!("source-{}-{n}", std::process::id()));
    std::fs::write(&source, text).unwrap_or_else(|e| panic!("{}: {e}", source.display()));
    let copied = Command::new("cp")
        .arg(&source)
        .arg(path)
        .status()
        .unwrap_or_else(|e| panic!("cp: {e}"));
    assert!(
        copied.success(),
        "cp {} {}: {copied}",
        source.display(),
        path.display()
    );
    let _ = std::fs::remove_file(&source);
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755))
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
}
