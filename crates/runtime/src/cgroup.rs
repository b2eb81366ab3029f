//! cgroup v2 for the process runtime: one `corral-<id>` cgroup per session with `cpu.max` and
//! `memory.max`, under the agent's own cgroup or a configured parent.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::Limits;

/// Where the unified (v2) hierarchy is mounted on systems that have it.
pub(crate) const CGROUP2_ROOT: &str = "/sys/fs/cgroup";

/// The CFS period written to `cpu.max`, in microseconds.
const CPU_PERIOD_US: u64 = 100_000;

/// The cgroup v2 directory under which sessions' cgroups are made.
#[derive(Debug, Clone)]
pub(crate) struct CgroupParent {
    path: PathBuf,
}

impl CgroupParent {
    /// The parent to use: `configured`, or else the agent's own cgroup if `/sys/fs/cgroup` is
    /// a cgroup v2 hierarchy (it has `cgroup.controllers`); provided the parent is a cgroup v2
    /// directory that we may write. `None` otherwise.
    pub fn detect(configured: Option<&Path>) -> Option<Self> {
        let path = match configured {
            Some(p) => p.to_path_buf(),
            None => {
                let root = Path::new(CGROUP2_ROOT);
                if !root.join("cgroup.controllers").is_file() {
                    return None;
                }
                let own = own_cgroup_v2(&fs::read_to_string("/proc/self/cgroup").ok()?)?;
                root.join(own.trim_start_matches('/'))
            }
        };
        if !path.join("cgroup.controllers").is_file() || !writable(&path) {
            return None;
        }
        Some(CgroupParent { path })
    }

    #[cfg(test)]
    pub fn at(path: &Path) -> Self {
        CgroupParent {
            path: path.to_path_buf(),
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Makes `corral-<id>` with the limits written. The controllers a limit needs are enabled
    /// in the parent's `cgroup.subtree_control` first; this fails (EBUSY) if the parent is not
    /// the root and holds processes itself, so the agent should run in a leaf of its own or be
    /// given a parent for sessions.
    pub fn create(&self, id: &str, limits: Limits) -> io::Result<SessionCgroup> {
        let mut needed = Vec::new();
        if limits.cpu_milli > 0 {
            needed.push("cpu");
        }
        if limits.mem_bytes > 0 {
            needed.push("memory");
        }
        let available = fs::read_to_string(self.path.join("cgroup.controllers"))?;
        let enabled = fs::read_to_string(self.path.join("cgroup.subtree_control"))?;
        for controller in needed {
            if !available.split_whitespace().any(|c| c == controller) {
                return Err(io::Error::other(format!(
                    "controller {controller} is not available in {}",
                    self.path.display()
                )));
            }
            if !enabled.split_whitespace().any(|c| c == controller) {
                fs::write(
                    self.path.join("cgroup.subtree_control"),
                    format!("+{controller}"),
                )?;
            }
        }
        let path = self.path.join(format!("corral-{id}"));
        if path.exists() {
            // Left by a session of the same id that ended while the agent was down.
            let _ = fs::remove_dir(&path);
        }
        fs::create_dir(&path)?;
        let cgroup = SessionCgroup { path };
        if let Err(e) = cgroup.write_limits(limits) {
            cgroup.remove_now();
            return Err(e);
        }
        Ok(cgroup)
    }
}

/// The cgroup of one session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SessionCgroup {
    pub path: PathBuf,
}

impl SessionCgroup {
    fn write_limits(&self, limits: Limits) -> io::Result<()> {
        if let Some(cpu_max) = cpu_max(limits.cpu_milli) {
            fs::write(self.path.join("cpu.max"), cpu_max)?;
        }
        if limits.mem_bytes > 0 {
            fs::write(self.path.join("memory.max"), limits.mem_bytes.to_string())?;
            // No swapping past the limit; absent where swap accounting is off.
            if let Err(e) = fs::write(self.path.join("memory.swap.max"), "0") {
                tracing::debug!(cgroup = %self.path.display(), error = %e, "memory.swap.max not set");
            }
        }
        Ok(())
    }

    /// `cgroup.procs`, opened for writing: the child writes "0" to it to move itself in.
    pub fn procs_file(&self) -> io::Result<fs::File> {
        fs::OpenOptions::new()
            .write(true)
            .open(self.path.join("cgroup.procs"))
    }

    /// The processes in it.
    pub fn pids(&self) -> Vec<i32> {
        fs::read_to_string(self.path.join("cgroup.procs"))
            .map(|text| text.lines().filter_map(|l| l.trim().parse().ok()).collect())
            .unwrap_or_default()
    }

    /// Sends `signal` to every process in it.
    pub fn signal_all(&self, signal: i32) {
        if signal == libc::SIGKILL && fs::write(self.path.join("cgroup.kill"), "1").is_ok() {
            return;
        }
        for pid in self.pids() {
            if let Err(e) = crate::procfs::signal_process(pid, signal) {
                tracing::warn!(pid, signal, error = %e, "could not signal a session process");
            }
        }
    }

    /// Kills what is left in it and removes it, retrying while processes die.
    pub async fn remove(&self) {
        for _ in 0..50 {
            if !self.path.exists() {
                return;
            }
            if !self.pids().is_empty() {
                self.signal_all(libc::SIGKILL);
            }
            if fs::remove_dir(&self.path).is_ok() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        tracing::warn!(cgroup = %self.path.display(), "could not remove the session's cgroup");
    }

    fn remove_now(&self) {
        let _ = fs::remove_dir(&self.path);
    }
}

/// The `cpu.max` line for a CPU limit in thousandths of a core, `None` for no limit.
pub(crate) fn cpu_max(cpu_milli: u64) -> Option<String> {
    if cpu_milli == 0 {
        return None;
    }
    // quota = cpu_milli / 1000 * period; the kernel refuses quotas under 1 ms.
    let quota = (cpu_milli.saturating_mul(CPU_PERIOD_US) / 1000).max(1000);
    Some(format!("{quota} {CPU_PERIOD_US}"))
}

/// The agent's cgroup v2 path from the text of `/proc/self/cgroup` (the `0::<path>` line).
pub(crate) fn own_cgroup_v2(proc_self_cgroup: &str) -> Option<String> {
    proc_self_cgroup
        .lines()
        .find_map(|l| l.strip_prefix("0::"))
        .map(|p| p.trim().to_string())
}

fn writable(path: &Path) -> bool {
    use std::os::unix::ffi::OsStrExt;
    let Ok(c_path) = std::ffi::CString::new(path.as_os_str().as_bytes()) else {
        return false;
    };
    // SAFETY: access(2) reads the NUL-terminated string we own for the duration of the call.
    unsafe { libc::access(c_path.as_ptr(), libc::W_OK) == 0 }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_max_is_quota_and_period() {
        assert_eq!(cpu_max(0), None);
        assert_eq!(cpu_max(1500).unwrap(), "150000 100000");
        assert_eq!(cpu_max(1).unwrap(), "1000 100000");
    }

    #[test]
    fn own_cgroup_is_the_unified_line() {
        let text = "4:memory:/a\n0::/user.slice/agent.service\n";
        assert_eq!(
            own_cgroup_v2(text).unwrap(),
            "/user.slice/agent.service".to_string()
        );
        assert_eq!(own_cgroup_v2("4:memory:/a\n"), None);
    }

    /// On a plain directory standing in for a cgroup v2 parent: the session's cgroup gets the
    /// limits and the controllers are enabled.
    #[test]
    fn a_session_cgroup_gets_its_limits() {
        let tmp = tempfile::tempdir().unwrap();
        fs::write(
            tmp.path().join("cgroup.controllers"),
            "cpu io memory pids\n",
        )
        .unwrap();
        fs::write(tmp.path().join("cgroup.subtree_control"), "").unwrap();
        let parent = CgroupParent::at(tmp.path());
        let cg = parent
            .create(
                "abc",
                Limits {
                    cpu_milli: 500,
                    mem_bytes: 64 << 20,
                },
            )
            .unwrap();
        assert_eq!(cg.path, tmp.path().join("corral-abc"));
        assert_eq!(
            fs::read_to_string(cg.path.join("cpu.max")).unwrap(),
            "50000 100000"
        );
        assert_eq!(
            fs::read_to_string(cg.path.join("memory.max")).unwrap(),
            (64u64 << 20).to_string()
        );
        // A plain file keeps only the last write; a real subtree_control accumulates.
        assert_eq!(
            fs::read_to_string(tmp.path().join("cgroup.subtree_control")).unwrap(),
            "+memory"
        );
        fs::write(tmp.path().join("cgroup.controllers"), "pids\n").unwrap();
        assert!(parent
            .create(
                "def",
                Limits {
                    cpu_milli: 500,
                    mem_bytes: 0
                }
            )
            .is_err());
    }
}
