//! What this host offers: CPU, memory (both bounded by the agent's cgroup) and NVIDIA GPUs.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// The `nvidia-smi` found on `PATH`.
pub const DEFAULT_NVIDIA_SMI: &str = "nvidia-smi";

/// How long `nvidia-smi` may take.
const NVIDIA_SMI_TIMEOUT: Duration = Duration::from_secs(20);

/// What this host offers to sessions.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Capacity {
    /// CPU in thousandths of a core.
    pub cpu_milli: u64,
    /// Memory in bytes.
    pub mem_bytes: u64,
    /// NVIDIA GPUs, as `nvidia-smi` lists them.
    pub gpus: Vec<Gpu>,
}

/// One GPU.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Gpu {
    pub index: u32,
    pub name: String,
    /// Its memory in bytes.
    pub mem_bytes: u64,
}

/// Detects this host's capacity (blocking: it may run `nvidia-smi`).
///
/// - CPU: the CPUs this process may run on (`Cpus_allowed_list` in `/proc/self/status`, else
///   `available_parallelism`), lowered to the CPU quota of the agent's cgroup and its
///   ancestors (v2 `cpu.max`, v1 `cpu.cfs_quota_us`) if one is set.
/// - Memory: `MemTotal` of `/proc/meminfo`, lowered to the cgroup's memory limit (v2
///   `memory.max`, v1 `memory.limit_in_bytes`) if one is set.
/// - GPUs: `nvidia_smi --query-gpu=index,name,memory.total --format=csv,noheader,nounits`.
///   No such program: no GPUs. A program that fails or answers something else: no GPUs and a
///   warning.
pub fn detect_capacity(nvidia_smi: &Path) -> Capacity {
    let sys = Sys::real();
    Capacity {
        cpu_milli: sys.cpu_milli(),
        mem_bytes: sys.mem_bytes(),
        gpus: detect_gpus(nvidia_smi),
    }
}

/// The files capacity is read from, under `root` (`/` on a real host, a temporary directory
/// in tests).
struct Sys {
    root: PathBuf,
}

impl Sys {
    fn real() -> Self {
        Sys { root: "/".into() }
    }

    fn path(&self, absolute: &Path) -> PathBuf {
        self.root
            .join(absolute.strip_prefix("/").unwrap_or(absolute))
    }

    fn read(&self, absolute: &Path) -> Option<String> {
        std::fs::read_to_string(self.path(absolute)).ok()
    }

    fn cpu_milli(&self) -> u64 {
        let cpus = self
            .read(Path::new("/proc/self/status"))
            .and_then(|status| {
                status
                    .lines()
                    .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
                    .and_then(|list| count_cpu_list(list.trim()))
            })
            .or_else(|| {
                std::thread::available_parallelism()
                    .ok()
                    .map(|n| n.get() as u64)
            })
            .unwrap_or(1);
        let mut milli = cpus * 1000;
        if let Some(quota) = self.cgroup_limit(Limit::Cpu) {
            milli = milli.min(quota.max(1));
        }
        milli
    }

    fn mem_bytes(&self) -> u64 {
        let total = self
            .read(Path::new("/proc/meminfo"))
            .and_then(|text| parse_mem_total(&text))
            .unwrap_or(0);
        match self.cgroup_limit(Limit::Memory) {
            Some(limit) if total == 0 || limit < total => limit,
            _ => total,
        }
    }

    /// The tightest limit of one kind over the agent's cgroups and their ancestors, in every
    /// hierarchy (v1 and v2) that sets one.
    fn cgroup_limit(&self, kind: Limit) -> Option<u64> {
        let own = self.read(Path::new("/proc/self/cgroup"))?;
        let mounts = parse_mountinfo(&self.read(Path::new("/proc/self/mountinfo"))?);
        let mut best: Option<u64> = None;
        for line in own.lines() {
            let mut parts = line.splitn(3, ':');
            let (Some(hierarchy), Some(controllers), Some(path)) =
                (parts.next(), parts.next(), parts.next())
            else {
                continue;
            };
            let v2 = hierarchy == "0" && controllers.is_empty();
            let controller = match kind {
                Limit::Cpu => "cpu",
                Limit::Memory => "memory",
            };
            let mount = mounts.iter().find(|m| {
                if v2 {
                    m.fstype == "cgroup2"
                } else {
                    m.fstype == "cgroup"
                        && controllers.split(',').any(|c| c == controller)
                        && m.options.iter().any(|o| o == controller)
                }
            });
            let Some(mount) = mount else { continue };
            for dir in self.cgroup_dirs(mount, path) {
                let limit = match (kind, v2) {
                    (Limit::Cpu, true) => self
                        .read(&dir.join("cpu.max"))
                        .and_then(|t| parse_cpu_max(&t)),
                    (Limit::Cpu, false) => {
                        let quota = self.read(&dir.join("cpu.cfs_quota_us"));
                        let period = self.read(&dir.join("cpu.cfs_period_us"));
                        quota.zip(period).and_then(|(q, p)| parse_cfs(&q, &p))
                    }
                    (Limit::Memory, true) => self
                        .read(&dir.join("memory.max"))
                        .and_then(|t| parse_mem_limit(&t)),
                    (Limit::Memory, false) => self
                        .read(&dir.join("memory.limit_in_bytes"))
                        .and_then(|t| parse_mem_limit(&t)),
                };
                if let Some(limit) = limit {
                    best = Some(best.map_or(limit, |b| b.min(limit)));
                }
            }
        }
        best
    }

    /// The agent's cgroup directory in a mounted hierarchy and its ancestors up to the mount
    /// point. Inside a cgroup namespace or a container the path may not exist under the mount;
    /// then the mount point itself is the agent's cgroup.
    fn cgroup_dirs(&self, mount: &Mount, path: &str) -> Vec<PathBuf> {
        let point = PathBuf::from(&mount.point);
        let below = path
            .strip_prefix(mount.root.as_str())
            .unwrap_or("")
            .trim_start_matches('/');
        let mut dir = point.join(below);
        if !self.path(&dir).is_dir() {
            dir = point.clone();
        }
        let mut dirs = Vec::new();
        let mut current = Some(dir.as_path());
        while let Some(d) = current {
            dirs.push(d.to_path_buf());
            if d == point {
                break;
            }
            current = d.parent();
        }
        dirs
    }
}

#[derive(Clone, Copy)]
enum Limit {
    Cpu,
    Memory,
}

/// One line of `/proc/self/mountinfo`, the parts this module needs.
#[derive(Debug, PartialEq, Eq)]
struct Mount {
    /// The directory of the hierarchy mounted (field 4).
    root: String,
    /// Where it is mounted (field 5).
    point: String,
    fstype: String,
    /// Super options (for cgroup v1, the controllers).
    options: Vec<String>,
}

fn parse_mountinfo(text: &str) -> Vec<Mount> {
    text.lines()
        .filter_map(|line| {
            let (before, after) = line.split_once(" - ")?;
            let fields: Vec<&str> = before.split(' ').collect();
            let after: Vec<&str> = after.split(' ').collect();
            Some(Mount {
                root: unescape(fields.get(3)?),
                point: unescape(fields.get(4)?),
                fstype: after.first()?.to_string(),
                options: after
                    .get(2)
                    .map(|o| o.split(',').map(str::to_string).collect())
                    .unwrap_or_default(),
            })
        })
        .collect()
}

/// Undoes mountinfo's octal escapes (`\040` for a space).
fn unescape(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'\\' && i + 4 <= bytes.len() {
            let digits = std::str::from_utf8(&bytes[i + 1..i + 4]).ok();
            if let Some(code) = digits.and_then(|d| u8::from_str_radix(d, 8).ok()) {
                out.push(code);
                i += 4;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Counts a CPU list such as `0-3,8,10-11`.
fn count_cpu_list(list: &str) -> Option<u64> {
    let mut count = 0;
    for part in list.split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b): (u64, u64) = (a.trim().parse().ok()?, b.trim().parse().ok()?);
                count += b.checked_sub(a)? + 1;
            }
            None => {
                part.trim().parse::<u64>().ok()?;
                count += 1;
            }
        }
    }
    (count > 0).then_some(count)
}

fn parse_mem_total(meminfo: &str) -> Option<u64> {
    let line = meminfo.lines().find_map(|l| l.strip_prefix("MemTotal:"))?;
    let kib: u64 = line.split_whitespace().next()?.parse().ok()?;
    kib.checked_mul(1024)
}

/// cgroup v2 `cpu.max` (`max 100000` or `150000 100000`) in thousandths of a core.
fn parse_cpu_max(text: &str) -> Option<u64> {
    let mut parts = text.split_whitespace();
    let quota = parts.next()?;
    let period: u64 = parts.next().map_or(Some(100_000), |p| p.parse().ok())?;
    if quota == "max" || period == 0 {
        return None;
    }
    Some(quota.parse::<u64>().ok()? * 1000 / period)
}

/// cgroup v1 `cpu.cfs_quota_us` (-1: none) and `cpu.cfs_period_us`, in thousandths of a core.
fn parse_cfs(quota: &str, period: &str) -> Option<u64> {
    let quota: i64 = quota.trim().parse().ok()?;
    let period: u64 = period.trim().parse().ok()?;
    if quota <= 0 || period == 0 {
        return None;
    }
    Some(quota as u64 * 1000 / period)
}

/// A memory limit in bytes (`max`, or v1's near-`i64::MAX` "unlimited", are none).
fn parse_mem_limit(text: &str) -> Option<u64> {
    let text = text.trim();
    if text == "max" {
        return None;
    }
    let bytes: u64 = text.parse().ok()?;
    (bytes < 1 << 62).then_some(bytes)
}

/// Parses `nvidia-smi --query-gpu=index,name,memory.total --format=csv,noheader,nounits`.
fn parse_nvidia_smi(text: &str) -> Result<Vec<Gpu>, String> {
    let mut gpus = Vec::new();
    for line in text.lines().map(str::trim).filter(|l| !l.is_empty()) {
        let fields: Vec<&str> = line.split(',').map(str::trim).collect();
        let [index, name, mem_mib] = fields[..] else {
            return Err(format!("expected 3 fields in {line:?}"));
        };
        let index: u32 = index
            .parse()
            .map_err(|_| format!("bad GPU index in {line:?}"))?;
        if name.is_empty() {
            return Err(format!("no GPU name in {line:?}"));
        }
        let mem_mib: u64 = mem_mib
            .parse()
            .map_err(|_| format!("bad memory size in {line:?}"))?;
        gpus.push(Gpu {
            index,
            name: name.to_string(),
            mem_bytes: mem_mib.saturating_mul(1 << 20),
        });
    }
    Ok(gpus)
}

fn detect_gpus(nvidia_smi: &Path) -> Vec<Gpu> {
    let program = nvidia_smi.display().to_string();
    let child = Command::new(nvidia_smi)
        .args([
            "--query-gpu=index,name,memory.total",
            "--format=csv,noheader,nounits",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn();
    let mut child = match child {
        Ok(child) => child,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            tracing::debug!(program, "no nvidia-smi: no GPUs");
            return Vec::new();
        }
        Err(e) => {
            tracing::warn!(program, error = %e, "could not run nvidia-smi: no GPUs");
            return Vec::new();
        }
    };
    // Read the pipes on threads so a large answer cannot block the program, and give up on
    // one that hangs.
    let mut stdout = child.stdout.take();
    let mut stderr = child.stderr.take();
    let (tx, rx) = mpsc::channel();
    let err_reader = std::thread::spawn(move || {
        let mut text = String::new();
        if let Some(pipe) = stderr.as_mut() {
            let _ = pipe.read_to_string(&mut text);
        }
        text
    });
    std::thread::spawn(move || {
        let mut bytes = Vec::new();
        if let Some(pipe) = stdout.as_mut() {
            let _ = pipe.read_to_end(&mut bytes);
        }
        let _ = tx.send(bytes);
    });
    let out = match rx.recv_timeout(NVIDIA_SMI_TIMEOUT) {
        Ok(out) => out,
        Err(_) => {
            let _ = child.kill();
            let _ = child.wait();
            tracing::warn!(program, "nvidia-smi did not answer in time: no GPUs");
            return Vec::new();
        }
    };
    let status = child.wait();
    let err_text = err_reader.join().unwrap_or_default();
    match status {
        Ok(status) if status.success() => {}
        Ok(status) => {
            tracing::warn!(program, %status, stderr = %err_text.trim(), "nvidia-smi failed: no GPUs");
            return Vec::new();
        }
        Err(e) => {
            tracing::warn!(program, error = %e, "waiting for nvidia-smi: no GPUs");
            return Vec::new();
        }
    }
    let text = String::from_utf8_lossy(&out);
    match parse_nvidia_smi(&text) {
        Ok(gpus) => gpus,
        Err(why) => {
            tracing::warn!(program, why, "unexpected answer from nvidia-smi: no GPUs");
            Vec::new()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    #[test]
    fn nvidia_smi_lines_are_parsed() {
        let gpus =
            parse_nvidia_smi("0, NVIDIA A100-SXM4-40GB, 40960\n1, NVIDIA A100-SXM4-40GB, 40960\n")
                .unwrap();
        assert_eq!(gpus.len(), 2);
        assert_eq!(gpus[1].index, 1);
        assert_eq!(gpus[0].name, "NVIDIA A100-SXM4-40GB");
        assert_eq!(gpus[0].mem_bytes, 40960 << 20);
        assert_eq!(parse_nvidia_smi("").unwrap(), vec![]);
        assert!(parse_nvidia_smi("0, Tesla T4, [N/A]").is_err());
        assert!(parse_nvidia_smi("hello world").is_err());
    }

    #[test]
    fn limits_are_parsed() {
        assert_eq!(parse_cpu_max("max 100000\n"), None);
        assert_eq!(parse_cpu_max("150000 100000\n"), Some(1500));
        assert_eq!(parse_cfs("-1\n", "100000\n"), None);
        assert_eq!(parse_cfs("50000\n", "100000\n"), Some(500));
        assert_eq!(parse_mem_limit("max\n"), None);
        assert_eq!(parse_mem_limit("9223372036854771712\n"), None);
        assert_eq!(parse_mem_limit("1073741824\n"), Some(1 << 30));
        assert_eq!(count_cpu_list("0-3,8,10-11"), Some(7));
        assert_eq!(count_cpu_list("0"), Some(1));
        assert_eq!(count_cpu_list("x"), None);
        assert_eq!(
            parse_mem_total("MemTotal:       24683584 kB\nMemFree: 1 kB\n"),
            Some(24683584 * 1024)
        );
        assert_eq!(unescape("/a\\040b"), "/a b");
    }

    fn write(root: &Path, path: &str, text: &str) {
        let p = root.join(path);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(p, text).unwrap();
    }

    /// A host whose agent runs in a cgroup v2 `/agent` under a parent with 1.5 CPUs and 2 GiB.
    #[test]
    fn cgroup_v2_limits_lower_the_capacity() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path();
        write(
            root,
            "proc/self/status",
            "Name: x\nCpus_allowed_list:\t0-7\n",
        );
        write(root, "proc/meminfo", "MemTotal: 16777216 kB\n");
        write(root, "proc/self/cgroup", "0::/parent/agent\n");
        write(
            root,
            "proc/self/mountinfo",
            "25 1 0:22 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n",
        );
        write(root, "sys/fs/cgroup/parent/cpu.max", "150000 100000\n");
        write(root, "sys/fs/cgroup/parent/memory.max", "2147483648\n");
        write(root, "sys/fs/cgroup/parent/agent/cpu.max", "max 100000\n");
        write(root, "sys/fs/cgroup/parent/agent/memory.max", "max\n");
        let sys = Sys {
            root: root.to_path_buf(),
        };
        assert_eq!(sys.cpu_milli(), 1500);
        assert_eq!(sys.mem_bytes(), 2 << 30);
    }

    /// A cgroup v1 host (as in a container) where the agent's path is not visible under the
    /// mount: the mount point's limits count; without limits the host's values do.
    #[test]
    fn cgroup_v1_limits_and_no_limits() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path();
        write(root, "proc/self/status", "Cpus_allowed_list:\t0-3\n");
        write(root, "proc/meminfo", "MemTotal: 16777216 kB\n");
        write(
            root,
            "proc/self/cgroup",
            "4:memory:/docker/abc\n2:cpu,cpuacct:/docker/abc\n",
        );
        write(
            root,
            "proc/self/mountinfo",
            "31 23 0:28 / /sys/fs/cgroup rw - tmpfs tmpfs rw\n\
             32 31 0:29 /docker/abc /sys/fs/cgroup/cpu,cpuacct rw - cgroup cgroup rw,cpu,cpuacct\n\
             35 31 0:32 /docker/abc /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n",
        );
        write(root, "sys/fs/cgroup/cpu,cpuacct/cpu.cfs_quota_us", "-1\n");
        write(
            root,
            "sys/fs/cgroup/cpu,cpuacct/cpu.cfs_period_us",
            "100000\n",
        );
        write(
            root,
            "sys/fs/cgroup/memory/memory.limit_in_bytes",
            "9223372036854771712\n",
        );
        let sys = Sys {
            root: root.to_path_buf(),
        };
        assert_eq!(sys.cpu_milli(), 4000);
        assert_eq!(sys.mem_bytes(), 16 << 30);
        write(
            root,
            "sys/fs/cgroup/cpu,cpuacct/cpu.cfs_quota_us",
            "250000\n",
        );
        write(
            root,
            "sys/fs/cgroup/memory/memory.limit_in_bytes",
            "1073741824\n",
        );
        assert_eq!(sys.cpu_milli(), 2500);
        assert_eq!(sys.mem_bytes(), 1 << 30);
    }
}
