//! Nothing a test starts outlives it, containers included: [`RemoveContainers`] removes, when
//! dropped, every container (running or not) that a `docker ps` filter selects, such as the
//! label of the test's group, and optionally only those that mount a directory of the test;
//! also when the test fails.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// Removes, when dropped, the containers `docker ps --filter <filter>` lists.
pub struct RemoveContainers {
    filter: String,
    /// Only those with a mount from under this directory.
    mounting: Option<PathBuf>,
}

impl RemoveContainers {
    /// `filter` as `docker ps --filter` takes it: `label=corral.io/group=auto`,
    /// `ancestor=corral-agent:e2e`...
    pub fn new(filter: impl Into<String>) -> RemoveContainers {
        RemoveContainers {
            filter: filter.into(),
            mounting: None,
        }
    }

    /// Only the containers that mount something from under `dir`: those of this test where the
    /// filter alone (a fixed agent name, say) would also select another test's.
    pub fn mounting(mut self, dir: &Path) -> RemoveContainers {
        self.mounting = Some(dir.to_path_buf());
        self
    }

    /// Removes them now (with `docker rm -f`); how many there were. None without Docker.
    pub fn remove_now(&self) -> usize {
        let Ok(out) = Command::new("docker")
            .args(["ps", "--all", "--quiet", "--filter", &self.filter])
            .stderr(Stdio::null())
            .output()
        else {
            return 0;
        };
        let listed = String::from_utf8_lossy(&out.stdout).into_owned();
        let mut ids: Vec<&str> = listed.split_whitespace().collect();
        if let (Some(dir), false) = (&self.mounting, ids.is_empty()) {
            ids.retain(|id| mounts(id).iter().any(|source| source.starts_with(dir)));
        }
        if !ids.is_empty() {
            let _ = Command::new("docker")
                .args(["rm", "--force"])
                .args(&ids)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
        }
        ids.len()
    }
}

impl Drop for RemoveContainers {
    fn drop(&mut self) {
        self.remove_now();
    }
}

/// Where the container's mounts come from on the host.
fn mounts(id: &str) -> Vec<PathBuf> {
    let Ok(out) = Command::new("docker")
        .args([
            "inspect",
            "--format",
            "{{range .Mounts}}{{.Source}}\n{{end}}",
            id,
        ])
        .stderr(Stdio::null())
        .output()
    else {
        return Vec::new();
    };
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| !l.is_empty())
        .map(PathBuf::from)
        .collect()
}
