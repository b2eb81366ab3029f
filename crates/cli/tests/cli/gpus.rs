//! GPUs end to end without a GPU: a stand-in `nvidia-smi` on the agent's PATH answers with an
//! A100 split into three MIG instances and a whole A100 (the fixtures of corral-runtime's
//! tests); the agent reports four devices, and each session sees exactly the devices it was
//! given, in `CUDA_VISIBLE_DEVICES`, `NVIDIA_VISIBLE_DEVICES` and `CORRAL_GPU_SHARES`.

use crate::common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::*;

const MIG_5GB_0: &str = "MIG-c7384736-a75d-5afc-978f-d2f1294409fd";
const MIG_5GB_1: &str = "MIG-a28ad590-3fd2-5b2c-9b3b-5c3d6a2b1d01";
const MIG_10GB: &str = "MIG-3e9d4b1c-7f2a-5c8e-a1d6-0b4f8e2c9d17";
const WHOLE_A100: &str = "GPU-0b2e6f2a-41c7-4c4e-8c6d-2f1f3f5e7a90";
/// Split into MIG instances: not a device of its own.
const SPLIT_A100: &str = "GPU-5fd4ee3c-2d3f-9a3b-3bd9-9ae4e6c9e1b3";

/// `corral dev` with capacity detected, the stand-in first on its PATH.
fn start_dev(dir: &Path) -> Proc {
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let standin = Path::new(env!("CARGO_MANIFEST_DIR")).join("../runtime/tests/standin/nvidia-smi");
    std::os::unix::fs::symlink(standin.canonicalize().unwrap(), bin.join("nvidia-smi")).unwrap();
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap());
    let data = dir.join("data");
    let (dev, _) = start_manager(&data, &[], || {
        let mut command = Command::new(CORRAL);
        command
            .args(["dev", "--data-dir"])
            .arg(&data)
            .env("PATH", &path)
            .env("CORRAL_CONFIG", dir.join("config.toml"))
            // Sessions here leave their pid in the test's directory, which a sandbox hides.
            .env("CORRAL_AGENT_ISOLATION", "off")
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        command
    });
    eventually(
        "corral dev to write its client configuration",
        Duration::from_secs(10),
        || dir.join("config.toml").exists(),
    );
    dev
}

/// `corral session run --request REQUEST -- sh -c SCRIPT`.
fn run_sh(dir: &Path, request: &str, script: &str) -> std::process::Output {
    corral(
        dir,
        &[
            "session",
            "run",
            "--request",
            request,
            "--",
            "sh",
            "-c",
            script,
        ],
    )
}

/// Runs `request` printing its device variables; returns (visible devices, NVIDIA's, shares).
fn devices_seen(dir: &Path, request: &str) -> (Vec<String>, String, String) {
    let out = run_sh(
        dir,
        request,
        r#"echo "$CUDA_VISIBLE_DEVICES|$NVIDIA_VISIBLE_DEVICES|$CORRAL_GPU_SHARES""#,
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let line = text(&out.stdout);
    let parts: Vec<&str> = line.trim_end().split('|').collect();
    assert_eq!(parts.len(), 3, "{line:?}");
    let mut visible: Vec<String> = parts[0]
        .split(',')
        .filter(|s| !s.is_empty())
        .map(String::from)
        .collect();
    assert_eq!(parts[1], parts[0], "NVIDIA_VISIBLE_DEVICES differs");
    visible.sort();
    (visible, parts[1].to_string(), parts[2].to_string())
}

#[test]
fn sessions_see_exactly_the_gpus_they_were_given() {
    let dir = tempfile::tempdir().unwrap();
    let _leftovers = KillLeftovers::new(dir.path());
    let _dev = start_dev(dir.path());

    // The agent reports each MIG instance and the whole GPU, never the split one.
    let out = corral(dir.path(), &["agent", "ls", "-o", "json"]);
    let agents: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let agent = &agents.as_array().unwrap()[0];
    let mut ids: Vec<&str> = agent["devices"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["id"].as_str().unwrap())
        .collect();
    ids.sort();
    let mut expected = vec![MIG_5GB_0, MIG_5GB_1, MIG_10GB, WHOLE_A100];
    expected.sort();
    assert_eq!(ids, expected, "{agent}");
    assert!(!agent.to_string().contains(SPLIT_A100));
    assert_eq!(agent["capacity"]["gpu"], "4", "{agent}");
    assert_eq!(agent["capacity"]["gpu.mem"], "60GiB", "{agent}");
    let out = corral(dir.path(), &["agent", "get", "dev-agent"]);
    assert!(
        text(&out.stdout).contains(&format!("{WHOLE_A100} NVIDIA A100-SXM4-40GB 40GiB")),
        "{}",
        text(&out.stdout)
    );

    // A CPU-only session sees no GPU at all.
    assert_eq!(
        devices_seen(dir.path(), "cpu=1"),
        (vec![], String::new(), String::new())
    );
    // A model pattern picks the whole A100; a fraction of it is shared, and says how much.
    let (seen, _, shares) = devices_seen(dir.path(), "cpu=1,gpu=0.5,gpu.model=A100-SXM4-40GB");
    assert_eq!(seen, [WHOLE_A100]);
    assert_eq!(shares, format!("{WHOLE_A100}=0.5"));
    // A MIG profile by its model name.
    let (seen, _, shares) = devices_seen(dir.path(), "cpu=1,gpu=1,gpu.model=*MIG 2g.10gb");
    assert_eq!(seen, [MIG_10GB]);
    assert_eq!(shares, format!("{MIG_10GB}=1"));
    // Two whole devices of at least 10 GiB: the 10 GiB instance and the A100.
    let (seen, _, _) = devices_seen(dir.path(), "cpu=1,gpu=2,gpu.mem>=10GiB");
    let mut expected = vec![MIG_10GB.to_string(), WHOLE_A100.to_string()];
    expected.sort();
    assert_eq!(seen, expected);

    // More than the agent has of a model is refused at once, with the reason.
    let out = corral(
        dir.path(),
        &[
            "session",
            "submit",
            "--request",
            "gpu=2,gpu.model=H100*",
            "--",
            "true",
        ],
    );
    assert_ne!(out.status.code(), Some(0));
    assert!(
        text(&out.stderr).contains("no device of the group matches its constraints"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn a_device_a_stopping_session_still_holds_is_waited_for() {
    let dir = tempfile::tempdir().unwrap();
    let _leftovers = KillLeftovers::new(dir.path());
    let _dev = start_dev(dir.path());
    let request = "cpu=1,gpu=1,gpu.model=A100-SXM4-40GB";
    let pid_file = dir.path().join("holder.pid");
    // The holder ignores SIGTERM: cancelled, it runs on for the agent's stop grace (10 s).
    let holder = format!(
        "trap '' TERM; echo $$ > {p}.part && mv {p}.part {p} && exec sleep 1000",
        p = pid_file.display()
    );
    let out = corral(
        dir.path(),
        &[
            "session",
            "submit",
            "--request",
            request,
            "--",
            "sh",
            "-c",
            &holder,
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let id = text(&out.stdout).trim().to_string();
    eventually("the holder to start", Duration::from_secs(20), || {
        pid_file.exists()
    });
    let pid = std::fs::read_to_string(&pid_file)
        .unwrap()
        .trim()
        .to_string();
    let out = corral(dir.path(), &["session", "cancel", &id]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));

    // The manager frees the A100 at once and places the next session on it; the agent starts
    // that one only once the holder is gone.
    let check = format!(
        r#"if kill -0 {pid} 2>/dev/null; then echo shared; else echo alone; fi; echo "$CUDA_VISIBLE_DEVICES""#
    );
    let out = run_sh(dir.path(), request, &check);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), format!("alone\n{WHOLE_A100}\n"));
}
