//! What this host offers: CPU, memory (both bounded by the agent's cgroup) and NVIDIA GPUs,
//! whole or split into MIG instances.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use corral_core::devices::GPU;
use corral_core::{Device, Quantity};
use serde::{Deserialize, Serialize};

/// The `nvidia-smi` found on `PATH`.
pub const DEFAULT_NVIDIA_SMI: &str = "nvidia-smi";

/// How long `nvidia-smi` may take.
const NVIDIA_SMI_TIMEOUT: Duration = Duration::from_secs(20);

/// The arguments of the query that lists the GPUs.
const QUERY_ARGS: [&str; 2] = [
    "--query-gpu=index,uuid,name,memory.total",
    "--format=csv,noheader,nounits",
];

/// The arguments that list the GPUs with their MIG instances.
const LIST_ARGS: [&str; 1] = ["-L"];

/// What this host offers to sessions.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Capacity {
    /// CPU in thousandths of a core.
    pub cpu_milli: u64,
    /// Memory in bytes.
    pub mem_bytes: u64,
    /// NVIDIA GPUs, as `nvidia-smi` lists them, including those split into MIG instances (which
    /// are no devices themselves: see [`Capacity::devices`]).
    pub gpus: Vec<Gpu>,
}

impl Capacity {
    /// The devices sessions can be given: each GPU without MIG instances (its UUID, name and
    /// memory) and each MIG instance (its UUID, `<GPU name> MIG <profile>`, the memory its
    /// profile names: see [`Mig::mem_bytes`]). A GPU split into MIG instances is not one: CUDA
    /// cannot use it whole. (A GPU in MIG mode with no instance made yet is listed whole: the
    /// query does not ask for the MIG mode.)
    pub fn devices(&self) -> Vec<Device> {
        let mut devices = Vec::new();
        // A GPU without a UUID (read from an older serialised form) has no id to be granted by.
        for gpu in self.gpus.iter().filter(|g| !g.uuid.is_empty()) {
            if gpu.mig.is_empty() {
                devices.push(gpu_device(&gpu.uuid, &gpu.name, gpu.mem_bytes));
            }
            for mig in &gpu.mig {
                let model = format!("{} MIG {}", gpu.name, mig.profile);
                devices.push(gpu_device(&mig.uuid, &model, mig.mem_bytes()));
            }
        }
        devices
    }
}

fn gpu_device(id: &str, model: &str, mem_bytes: u64) -> Device {
    // Beyond 16 PiB a Quantity of bytes overflows: unknown, as nvidia-smi would not say that.
    let memory = Quantity::from_units(mem_bytes).unwrap_or(Quantity::ZERO);
    Device::new(id, GPU, model, memory).expect("`gpu` is a valid slot name")
}

/// One GPU.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Gpu {
    pub index: u32,
    /// Its UUID (`GPU-…`): its device id.
    #[serde(default)]
    pub uuid: String,
    pub name: String,
    /// Its memory in bytes.
    pub mem_bytes: u64,
    /// Its MIG instances, as `nvidia-smi -L` lists them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mig: Vec<Mig>,
}

/// One MIG instance of a GPU.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Mig {
    /// Its UUID: `MIG-…`, or `MIG-GPU-<GPU uuid>/<gi>/<ci>` from drivers before R470.
    pub uuid: String,
    /// Its profile, such as `1g.5gb` or `1g.10gb+me`.
    pub profile: String,
}

impl Mig {
    /// The memory its profile names, `<n>gb` read as n GiB (`1g.5gb`: 5 GiB; `1c.2g.10gb`,
    /// `1g.10gb+me`: 10 GiB); 0 (unknown) when it names none. The figure is NVIDIA's rounded
    /// one: the memory CUDA sees in the instance is somewhat less.
    pub fn mem_bytes(&self) -> u64 {
        let base = self.profile.split('+').next().unwrap_or_default();
        base.rsplit('.')
            .next()
            .and_then(|last| last.strip_suffix("gb"))
            .and_then(|n| n.parse::<u64>().ok())
            .map_or(0, |n| n.saturating_mul(1 << 30))
    }
}

/// Detects this host's capacity (blocking: it may run `nvidia-smi`).
///
/// - CPU: the CPUs this process may run on (`Cpus_allowed_list` in `/proc/self/status`, else
///   `available_parallelism`), lowered to the CPU quota of the agent's cgroup and its
///   ancestors (v2 `cpu.max`, v1 `cpu.cfs_quota_us`) if one is set.
/// - Memory: `MemTotal` of `/proc/meminfo`, lowered to the cgroup's memory limit (v2
///   `memory.max`, v1 `memory.limit_in_bytes`) if one is set.
/// - GPUs: `nvidia_smi --query-gpu=index,uuid,name,memory.total --format=csv,noheader,nounits`,
///   then `nvidia_smi -L` for their MIG instances. No such program: no GPUs. A query that
///   fails or answers something else: no GPUs and a warning. A `-L` that fails or answers
///   something else: the GPUs without MIG instances (each counted whole) and a warning.
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

/// Whether `text` can be a device id: 1 to 128 characters, no space, comma, `=` or control
/// character (ids are joined with commas and paired with `=` in sessions' variables).
fn valid_id(text: &str) -> bool {
    !text.is_empty()
        && text.len() <= 128
        && !text
            .chars()
            .any(|c| c.is_whitespace() || c.is_control() || c == ',' || c == '=')
}

/// Parses `nvidia-smi --query-gpu=index,uuid,name,memory.total --format=csv,noheader,nounits`
/// (memory in MiB). Errors name the line.
fn parse_query(text: &str) -> Result<Vec<Gpu>, String> {
    let mut gpus: Vec<Gpu> = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        let bad = |what: &str| format!("line {}: {what}: {line:?}", n + 1);
        let fields: Vec<&str> = line.split(',').map(str::trim).collect();
        let [index, uuid, name, mem_mib] = fields[..] else {
            return Err(bad("expected 4 fields (index, uuid, name, memory.total)"));
        };
        let index: u32 = index.parse().map_err(|_| bad("bad GPU index"))?;
        if !valid_id(uuid) {
            return Err(bad("bad GPU uuid"));
        }
        if gpus.iter().any(|g| g.uuid == uuid) {
            return Err(bad("GPU uuid listed twice"));
        }
        if name.is_empty() {
            return Err(bad("no GPU name"));
        }
        let mem_mib: u64 = mem_mib.parse().map_err(|_| bad("bad memory size"))?;
        gpus.push(Gpu {
            index,
            uuid: uuid.to_string(),
            name: name.to_string(),
            mem_bytes: mem_mib.saturating_mul(1 << 20),
            mig: Vec::new(),
        });
    }
    Ok(gpus)
}

/// A GPU as `nvidia-smi -L` lists it.
#[derive(Debug, PartialEq, Eq)]
struct Listed {
    uuid: String,
    mig: Vec<Mig>,
}

/// Parses `nvidia-smi -L`: `GPU <n>: <name> (UUID: <uuid>)` lines, each followed by its MIG
/// instances, `MIG <profile> Device <n>: (UUID: <uuid>)`. Errors name the line.
fn parse_list(text: &str) -> Result<Vec<Listed>, String> {
    let mut gpus: Vec<Listed> = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        let bad = |what: &str| format!("line {}: {what}: {line:?}", n + 1);
        if let Some(rest) = line.strip_prefix("GPU ") {
            let uuid =
                uuid_at_end(rest).ok_or_else(|| bad("expected GPU <n>: <name> (UUID: <uuid>)"))?;
            gpus.push(Listed {
                uuid,
                mig: Vec::new(),
            });
        } else if let Some(rest) = line.strip_prefix("MIG ") {
            let expected = "expected MIG <profile> Device <n>: (UUID: <uuid>)";
            let (profile, rest) = rest
                .trim_start()
                .split_once(char::is_whitespace)
                .ok_or_else(|| bad(expected))?;
            let (index, rest) = rest
                .trim_start()
                .strip_prefix("Device")
                .and_then(|r| r.split_once(':'))
                .ok_or_else(|| bad(expected))?;
            let index = index.trim();
            if index.is_empty() || !index.bytes().all(|b| b.is_ascii_digit()) {
                return Err(bad(expected));
            }
            let uuid = uuid_at_end(rest).ok_or_else(|| bad(expected))?;
            let gpu = gpus
                .last_mut()
                .ok_or_else(|| bad("a MIG instance before any GPU"))?;
            gpu.mig.push(Mig {
                uuid,
                profile: profile.to_string(),
            });
        } else {
            return Err(bad("neither a GPU nor a MIG instance"));
        }
    }
    Ok(gpus)
}

/// The id in `(UUID: <id>)` ending a line; any id text is accepted (drivers spell MIG ids in
/// two ways).
fn uuid_at_end(text: &str) -> Option<String> {
    let (_, after) = text.rsplit_once("(UUID:")?;
    let uuid = after.strip_suffix(')')?.trim();
    valid_id(uuid).then(|| uuid.to_string())
}

/// The GPUs of the query with the MIG instances `-L` lists, matched by UUID; both answers must
/// name the same GPUs, and no id twice.
fn with_mig(gpus: &[Gpu], listed: Vec<Listed>) -> Result<Vec<Gpu>, String> {
    let mut out = gpus.to_vec();
    if listed.len() != gpus.len() {
        return Err(format!(
            "-L lists {} GPUs, the query {}",
            listed.len(),
            gpus.len()
        ));
    }
    let mut ids: std::collections::BTreeSet<String> = gpus.iter().map(|g| g.uuid.clone()).collect();
    for l in listed {
        let gpu = out
            .iter_mut()
            .find(|g| g.uuid == l.uuid)
            .ok_or_else(|| format!("-L lists GPU {} which the query does not", l.uuid))?;
        for m in &l.mig {
            if !ids.insert(m.uuid.clone()) {
                return Err(format!("-L lists the id {} twice", m.uuid));
            }
        }
        gpu.mig = l.mig;
    }
    Ok(out)
}

/// Why `nvidia-smi` gave no answer.
enum RunError {
    /// There is no such program.
    Missing,
    /// It could not be run, failed or did not answer in time; the text says which.
    Failed(String),
}

/// Runs `program` with `args` and returns what it wrote to stdout, if it succeeded within
/// [`NVIDIA_SMI_TIMEOUT`].
fn run(program: &Path, args: &[&str]) -> Result<String, RunError> {
    let child = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn();
    let mut child = match child {
        Ok(child) => child,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(RunError::Missing),
        Err(e) => return Err(RunError::Failed(format!("could not run it: {e}"))),
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
    let Ok(out) = rx.recv_timeout(NVIDIA_SMI_TIMEOUT) else {
        let _ = child.kill();
        let _ = child.wait();
        return Err(RunError::Failed(format!(
            "no answer within {} s",
            NVIDIA_SMI_TIMEOUT.as_secs()
        )));
    };
    let status = child.wait();
    let err_text = err_reader.join().unwrap_or_default();
    match status {
        Ok(status) if status.success() => Ok(String::from_utf8_lossy(&out).into_owned()),
        Ok(status) => Err(RunError::Failed(format!("{status}: {}", err_text.trim()))),
        Err(e) => Err(RunError::Failed(format!("waiting for it: {e}"))),
    }
}

fn detect_gpus(nvidia_smi: &Path) -> Vec<Gpu> {
    let program = nvidia_smi.display().to_string();
    let text = match run(nvidia_smi, &QUERY_ARGS) {
        Ok(text) => text,
        Err(RunError::Missing) => {
            tracing::debug!(program, "no nvidia-smi: no GPUs");
            return Vec::new();
        }
        Err(RunError::Failed(why)) => {
            tracing::warn!(program, why, "nvidia-smi --query-gpu failed: no GPUs");
            return Vec::new();
        }
    };
    let gpus = match parse_query(&text) {
        Ok(gpus) => gpus,
        Err(why) => {
            tracing::warn!(
                program,
                why,
                "unexpected answer from nvidia-smi --query-gpu: no GPUs"
            );
            return Vec::new();
        }
    };
    if gpus.is_empty() {
        return gpus;
    }
    let listed = match run(nvidia_smi, &LIST_ARGS) {
        Ok(text) => parse_list(&text).and_then(|listed| with_mig(&gpus, listed)),
        Err(RunError::Missing) => Err("the program is gone".to_string()),
        Err(RunError::Failed(why)) => Err(why),
    };
    match listed {
        Ok(gpus) => gpus,
        Err(why) => {
            tracing::warn!(
                program,
                why,
                "nvidia-smi -L gave no MIG instances: each GPU counted whole"
            );
            gpus
        }
    }
}

#[cfg(test)]
mod tests;
