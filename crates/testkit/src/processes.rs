//! Nothing a test starts outlives it: [`KillLeftovers`] SIGKILLs, when dropped, every process
//! that works in a directory of the test or names one on its command line (a `corral server
//! --data-dir`, an agent's `--work-dir`, a session in its work directory), with every process
//! of the sessions they lead (an agent started with `setsid` and what it runs). Dropped also
//! when the test fails, so a failed assertion leaves nothing running either.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use corral_runtime::procfs;

/// How many times the processes are looked for again, for those forked meanwhile.
const PASSES: usize = 50;

/// Kills, when dropped, the processes that belong to a directory (see the module's comment).
/// Declare it after the directory's `TempDir`, so that it drops first.
pub struct KillLeftovers {
    /// The directory as given and, where it differs, as the kernel shows it (no symlinks).
    dirs: Vec<PathBuf>,
}

impl KillLeftovers {
    pub fn new(dir: &Path) -> KillLeftovers {
        let mut dirs = vec![dir.to_path_buf()];
        if let Ok(real) = dir.canonicalize() {
            if real != dir {
                dirs.push(real);
            }
        }
        KillLeftovers { dirs }
    }

    /// Kills them now; how many processes it found.
    pub fn kill_now(&self) -> usize {
        let me = std::process::id() as i32;
        // SAFETY: getsid(2) takes a plain integer and touches no memory of ours.
        let my_session = unsafe { libc::getsid(0) };
        let mut found = 0;
        for _ in 0..PASSES {
            let pids: Vec<i32> = all_pids()
                .into_iter()
                .filter(|&pid| pid != me && self.belongs(pid))
                .collect();
            if pids.is_empty() {
                break;
            }
            found += pids.len();
            for pid in pids {
                let leads_a_session = procfs::stat(pid).is_some_and(|s| s.session == pid);
                if leads_a_session && pid != my_session {
                    for group in procfs::session_groups(pid) {
                        let _ = procfs::signal_group(group, libc::SIGKILL);
                    }
                }
                // SAFETY: kill(2) takes plain integers; pid > 1 comes from /proc.
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
            // The kernel ends them a moment later; the next pass sees who is left.
            std::thread::sleep(Duration::from_millis(10));
        }
        found
    }

    /// A live process working under one of the directories, or naming one as an argument (or
    /// as the value of a `--flag=value` argument).
    fn belongs(&self, pid: i32) -> bool {
        if !procfs::stat(pid).is_some_and(|s| s.alive()) {
            return false;
        }
        let under = |path: &Path| self.dirs.iter().any(|dir| path.starts_with(dir));
        if std::fs::read_link(format!("/proc/{pid}/cwd")).is_ok_and(|cwd| under(&cwd)) {
            return true;
        }
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        cmdline.split(|&b| b == 0).any(|arg| {
            let value = arg.splitn(2, |&b| b == b'=').last().unwrap_or(arg);
            under(Path::new(OsStr::from_bytes(arg))) || under(Path::new(OsStr::from_bytes(value)))
        })
    }
}

impl Drop for KillLeftovers {
    fn drop(&mut self) {
        self.kill_now();
    }
}

fn all_pids() -> Vec<i32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|&pid| pid > 1)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::{Command, Stdio};

    /// A process in a group of its own, beside the shell's.
    const PYTHON_GROUP: &str =
        "python3 -c 'import os, time; os.setpgid(0, 0); time.sleep(300)' & sleep 300";

    #[test]
    fn processes_of_a_directory_and_their_sessions_are_killed_and_others_are_not() {
        let dir = tempfile::tempdir().unwrap();
        let other = tempfile::tempdir().unwrap();
        // Nothing outlives the test if it fails before it kills them itself.
        let _cleanup = (
            KillLeftovers::new(dir.path()),
            KillLeftovers::new(other.path()),
        );
        // Works in the directory; leads a session with a child in another group of it.
        let mut leader = Command::new("setsid")
            .args(["sh", "-c", PYTHON_GROUP])
            .current_dir(dir.path())
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        // Names the directory on its command line (one process: no child to orphan).
        let mut named = Command::new("python3")
            .args(["-c", "import time; time.sleep(300)"])
            .arg(format!("--data-dir={}", dir.path().join("data").display()))
            .spawn()
            .unwrap();
        // Neither.
        let mut stranger = Command::new("sleep")
            .arg("300")
            .current_dir(other.path())
            .spawn()
            .unwrap();
        let leader_pid = leader.id() as i32;
        crate::eventually(
            "the session's second group",
            Duration::from_secs(10),
            || procfs::session_groups(leader_pid).len() == 2,
        );

        assert!(KillLeftovers::new(dir.path()).kill_now() >= 2);
        assert!(
            leader.wait().unwrap().code().is_none(),
            "killed by a signal"
        );
        assert!(named.wait().unwrap().code().is_none(), "killed by a signal");
        crate::eventually(
            "the session's processes are gone",
            Duration::from_secs(10),
            || procfs::session_groups(leader_pid).is_empty(),
        );
        assert!(
            stranger.try_wait().unwrap().is_none(),
            "a stranger was killed"
        );
        stranger.kill().unwrap();
        stranger.wait().unwrap();
    }
}
