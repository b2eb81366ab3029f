//! Capacity detection on this host, with stand-in `nvidia-smi` programs.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use corral_runtime::{detect_capacity, Capacity, Gpu, DEFAULT_NVIDIA_SMI};

/// Executing a script while another thread of this process forks can fail with "text file
/// busy"; the tests here run one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

fn script(dir: &Path, name: &str, body: &str) -> PathBuf {
    let path = dir.join(name);
    fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
    fs::set_permissions(&path, fs::Permissions::from_mode(0o755)).unwrap();
    path
}

#[test]
fn real_values_are_positive() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let capacity = detect_capacity(&dir.path().join("no-nvidia-smi-here"));
    eprintln!("detected: {capacity:?}");
    assert!(capacity.cpu_milli > 0, "{capacity:?}");
    assert!(capacity.mem_bytes > 0, "{capacity:?}");
    assert!(capacity.gpus.is_empty());
    let cpus = std::thread::available_parallelism().unwrap().get() as u64;
    assert!(capacity.cpu_milli <= cpus * 1000 + 1000, "{capacity:?}");
    // Whatever the default finds, it does not panic.
    let _ = detect_capacity(Path::new(DEFAULT_NVIDIA_SMI));
}

/// The stand-in `nvidia-smi` of this crate's tests (its default scenario: `mig`).
fn standin_script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/standin/nvidia-smi")
}

/// The stand-in answering with the fixtures of `scenario` (see the script): a symbolic link by
/// that name in `dir`.
fn standin(dir: &Path, scenario: &str) -> PathBuf {
    let link = dir.join(scenario);
    std::os::unix::fs::symlink(standin_script(), &link).unwrap();
    link
}

fn ids(capacity: &Capacity) -> Vec<String> {
    capacity.devices().into_iter().map(|d| d.id).collect()
}

#[test]
fn mig_instances_are_devices_and_their_gpu_is_not() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let capacity = detect_capacity(&standin_script());
    assert_eq!(capacity.gpus.len(), 2, "{capacity:?}");
    let devices = capacity.devices();
    let got: Vec<(&str, &str, u64)> = devices
        .iter()
        .map(|d| (d.id.as_str(), d.model.as_str(), d.memory.milli() / 1000))
        .collect();
    let a100 = "NVIDIA A100-SXM4-40GB";
    assert_eq!(
        got,
        [
            (
                "MIG-c7384736-a75d-5afc-978f-d2f1294409fd",
                "NVIDIA A100-SXM4-40GB MIG 1g.5gb",
                5 << 30
            ),
            (
                "MIG-a28ad590-3fd2-5b2c-9b3b-5c3d6a2b1d01",
                "NVIDIA A100-SXM4-40GB MIG 1g.5gb",
                5 << 30
            ),
            (
                "MIG-3e9d4b1c-7f2a-5c8e-a1d6-0b4f8e2c9d17",
                "NVIDIA A100-SXM4-40GB MIG 2g.10gb",
                10 << 30
            ),
            (
                "GPU-0b2e6f2a-41c7-4c4e-8c6d-2f1f3f5e7a90",
                a100,
                40960 << 20
            ),
        ]
    );
    // The GPU split into MIG instances is no device.
    assert!(!ids(&capacity).contains(&"GPU-5fd4ee3c-2d3f-9a3b-3bd9-9ae4e6c9e1b3".to_string()));
    assert!(devices
        .iter()
        .all(|d| d.kind.as_str() == "gpu" && d.share.milli() == 1000));
}

#[test]
fn gpus_without_mig_and_a_failing_list() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let plain = [
        "GPU-1e8a4c2d-6b3f-4e59-a7c1-3d2b9f0e6a45".to_string(),
        "GPU-7c3f9a1e-2d4b-4f86-b5e0-8a6c1d9e3f27".to_string(),
    ];
    let capacity = detect_capacity(&standin(dir.path(), "a100x2"));
    assert_eq!(ids(&capacity), plain);
    assert_eq!(
        capacity.gpus[0],
        Gpu {
            index: 0,
            uuid: plain[0].clone(),
            name: "NVIDIA A100-SXM4-40GB".into(),
            mem_bytes: 40960 << 20,
            mig: Vec::new(),
        }
    );
    // `-L` fails: the GPUs of the query stay, each whole (MIG instances unknown).
    let capacity = detect_capacity(&standin(dir.path(), "mig-nolist"));
    assert_eq!(
        ids(&capacity),
        [
            "GPU-5fd4ee3c-2d3f-9a3b-3bd9-9ae4e6c9e1b3",
            "GPU-0b2e6f2a-41c7-4c4e-8c6d-2f1f3f5e7a90"
        ]
    );
}

#[test]
fn a_query_that_fails_or_answers_garbage_gives_no_gpus() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let garbage = script(dir.path(), "garbage", "echo 'NVIDIA-SMI has failed'");
    let failing = script(
        dir.path(),
        "failing",
        "echo '0, GPU-a, NVIDIA A100-SXM4-40GB, 40960'; exit 1",
    );
    // The answer of the query before it asked for the uuid.
    let old = script(dir.path(), "old", "echo '0, NVIDIA A100-SXM4-40GB, 40960'");
    for program in [garbage, failing, old] {
        let capacity = detect_capacity(&program);
        assert!(
            capacity.gpus.is_empty(),
            "{}: {capacity:?}",
            program.display()
        );
        assert!(capacity.devices().is_empty());
    }
}
