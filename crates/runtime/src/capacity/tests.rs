//! `capacity.rs`'s unit tests: `nvidia-smi` answers (recorded in `tests/fixtures/nvidia-smi/`)
//! as GPUs and MIG devices, answers that disagree, and CPU and memory limits from cgroups v1 and
//! v2 under a stand-in root.

use super::*;
use std::fs;

const A100X2_QUERY: &str = include_str!("../../tests/fixtures/nvidia-smi/a100x2.query.csv");
const A100X2_LIST: &str = include_str!("../../tests/fixtures/nvidia-smi/a100x2.list.txt");
const MIG_QUERY: &str = include_str!("../../tests/fixtures/nvidia-smi/mig.query.csv");
const MIG_LIST: &str = include_str!("../../tests/fixtures/nvidia-smi/mig.list.txt");

fn capacity(query: &str, list: &str) -> Capacity {
    let gpus = parse_query(query).unwrap();
    Capacity {
        cpu_milli: 1000,
        mem_bytes: 1 << 30,
        gpus: with_mig(&gpus, parse_list(list).unwrap()).unwrap(),
    }
}

fn gib(n: u64) -> Quantity {
    Quantity::from_units(n << 30).unwrap()
}

#[test]
fn query_lines_are_parsed() {
    let gpus = parse_query(A100X2_QUERY).unwrap();
    assert_eq!(gpus.len(), 2);
    assert_eq!(gpus[1].index, 1);
    assert_eq!(gpus[0].uuid, "GPU-1e8a4c2d-6b3f-4e59-a7c1-3d2b9f0e6a45");
    assert_eq!(gpus[0].name, "NVIDIA A100-SXM4-40GB");
    assert_eq!(gpus[0].mem_bytes, 40960 << 20);
    assert_eq!(parse_query("").unwrap(), vec![]);
    // The answer of drivers before the uuid was asked for.
    let err = parse_query("0, NVIDIA A100-SXM4-40GB, 40960").unwrap_err();
    assert!(err.contains("line 1") && err.contains("40960"), "{err}");
    let err = parse_query("0, GPU-a, Tesla T4, 15360\n1, GPU-b, Tesla T4, [N/A]").unwrap_err();
    assert!(err.contains("line 2") && err.contains("[N/A]"), "{err}");
    let err = parse_query("0, GPU-a, T4, 1\n1, GPU-a, T4, 1").unwrap_err();
    assert!(err.contains("twice"), "{err}");
    assert!(parse_query("0, GPU a, Tesla T4, 15360").is_err());
}

#[test]
fn two_gpus_without_mig_are_two_devices() {
    let c = capacity(A100X2_QUERY, A100X2_LIST);
    let devices = c.devices();
    let ids: Vec<&str> = devices.iter().map(|d| d.id.as_str()).collect();
    assert_eq!(
        ids,
        [
            "GPU-1e8a4c2d-6b3f-4e59-a7c1-3d2b9f0e6a45",
            "GPU-7c3f9a1e-2d4b-4f86-b5e0-8a6c1d9e3f27"
        ]
    );
    for d in &devices {
        assert_eq!(d.kind.as_str(), "gpu");
        assert_eq!(d.model, "NVIDIA A100-SXM4-40GB");
        assert_eq!(d.memory, gib(40));
        assert_eq!(d.share, Quantity::from_milli(1000));
        assert!(d.allocated.is_zero());
    }
    corral_core::devices::check_devices(&devices).unwrap();
}

#[test]
fn mig_instances_are_devices_and_their_gpu_is_not() {
    let c = capacity(MIG_QUERY, MIG_LIST);
    assert_eq!(c.gpus.len(), 2);
    assert_eq!(c.gpus[0].mig.len(), 3);
    assert!(c.gpus[1].mig.is_empty());
    let devices = c.devices();
    let got: Vec<(&str, &str, Quantity)> = devices
        .iter()
        .map(|d| (d.id.as_str(), d.model.as_str(), d.memory))
        .collect();
    assert_eq!(
        got,
        [
            (
                "MIG-c7384736-a75d-5afc-978f-d2f1294409fd",
                "NVIDIA A100-SXM4-40GB MIG 1g.5gb",
                gib(5)
            ),
            (
                "MIG-a28ad590-3fd2-5b2c-9b3b-5c3d6a2b1d01",
                "NVIDIA A100-SXM4-40GB MIG 1g.5gb",
                gib(5)
            ),
            (
                "MIG-3e9d4b1c-7f2a-5c8e-a1d6-0b4f8e2c9d17",
                "NVIDIA A100-SXM4-40GB MIG 2g.10gb",
                gib(10)
            ),
            (
                "GPU-0b2e6f2a-41c7-4c4e-8c6d-2f1f3f5e7a90",
                "NVIDIA A100-SXM4-40GB",
                gib(40)
            ),
        ]
    );
    assert!(devices.iter().all(|d| d.share.milli() == 1000));
    corral_core::devices::check_devices(&devices).unwrap();
}

#[test]
fn older_mig_ids_and_profiles() {
    let list = "GPU 0: NVIDIA A100-PCIE-40GB (UUID: GPU-aaa)\n  \
                MIG 3g.20gb Device 0: (UUID: MIG-GPU-aaa/1/0)\n  \
                MIG 1c.3g.20gb Device 1: (UUID: MIG-GPU-aaa/1/1)\n";
    let listed = parse_list(list).unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(
        listed[0].mig,
        [
            Mig {
                uuid: "MIG-GPU-aaa/1/0".into(),
                profile: "3g.20gb".into()
            },
            Mig {
                uuid: "MIG-GPU-aaa/1/1".into(),
                profile: "1c.3g.20gb".into()
            },
        ]
    );
    let mem = |profile: &str| {
        Mig {
            uuid: "MIG-x".into(),
            profile: profile.into(),
        }
        .mem_bytes()
    };
    assert_eq!(mem("1g.5gb"), 5 << 30);
    assert_eq!(mem("1g.10gb+me"), 10 << 30);
    assert_eq!(mem("1c.3g.20gb"), 20 << 30);
    assert_eq!(mem("7g.80gb"), 80 << 30);
    assert_eq!(mem("odd"), 0);
}

#[test]
fn garbage_in_the_list_names_the_line() {
    for (text, line, what) in [
        (
            "GPU 0: T4 (UUID: GPU-a)\nNVIDIA-SMI has failed\n",
            2,
            "neither",
        ),
        (
            "  MIG 1g.5gb Device 0: (UUID: MIG-a)\n",
            1,
            "a MIG instance before any GPU",
        ),
        (
            "GPU 0: T4 (UUID: GPU-a)\n  MIG 1g.5gb Device 0: (UUID: )\n",
            2,
            "expected MIG",
        ),
        (
            "GPU 0: T4 (UUID: GPU-a)\n  MIG 1g.5gb Device x: (UUID: MIG-b)\n",
            2,
            "expected MIG",
        ),
        ("GPU 0: T4\n", 1, "expected GPU"),
    ] {
        let err = parse_list(text).unwrap_err();
        assert!(
            err.starts_with(&format!("line {line}: {what}")),
            "{text:?}: {err}"
        );
    }
}

#[test]
fn answers_that_disagree_are_refused() {
    let gpus = parse_query(MIG_QUERY).unwrap();
    let err = with_mig(&gpus, parse_list(A100X2_LIST).unwrap()).unwrap_err();
    assert_eq!(
        err,
        "-L lists GPU GPU-1e8a4c2d-6b3f-4e59-a7c1-3d2b9f0e6a45 which the query does not"
    );
    let one = parse_list("GPU 0: T4 (UUID: GPU-0b2e6f2a-41c7-4c4e-8c6d-2f1f3f5e7a90)").unwrap();
    assert!(with_mig(&gpus, one)
        .unwrap_err()
        .contains("-L lists 1 GPUs, the query 2"));
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
