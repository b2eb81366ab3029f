//! Capacity detection on this host, with stand-in `nvidia-smi` programs.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use corral_runtime::{detect_capacity, Gpu, DEFAULT_NVIDIA_SMI};

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

#[test]
fn gpus_come_from_nvidia_smi() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let one = script(
        dir.path(),
        "one-gpu",
        r#"[ "$1" = "--query-gpu=index,name,memory.total" ] || exit 2
[ "$2" = "--format=csv,noheader,nounits" ] || exit 2
echo "0, NVIDIA A100-SXM4-40GB, 40960""#,
    );
    let two = script(
        dir.path(),
        "two-gpus",
        "echo '0, Tesla T4, 15360'; echo '1, Tesla T4, 15360'",
    );
    let garbage = script(dir.path(), "garbage", "echo 'NVIDIA-SMI has failed'");
    let failing = script(
        dir.path(),
        "failing",
        "echo '0, NVIDIA A100-SXM4-40GB, 40960'; exit 1",
    );

    assert_eq!(
        detect_capacity(&one).gpus,
        vec![Gpu {
            index: 0,
            name: "NVIDIA A100-SXM4-40GB".into(),
            mem_bytes: 40960 << 20,
        }]
    );
    let gpus = detect_capacity(&two).gpus;
    assert_eq!(gpus.len(), 2);
    assert_eq!(gpus[1].index, 1);
    assert_eq!(gpus[1].mem_bytes, 15360 << 20);
    assert!(detect_capacity(&garbage).gpus.is_empty());
    assert!(detect_capacity(&failing).gpus.is_empty());
}
