//! What a user of a batch-bound group cannot make the manager do (issue 43), against the real
//! Slurm of `.ci/slurm.sh`: hold a whole output in memory or list a tree without end, break a
//! script's header with a name derived from the executable, or name a job like a pilot; and a
//! job named like a pilot by the jobs' account is neither adopted nor cancelled by the manager.
//! Without Slurm the tests are skipped (and fail under `CI=true`).

use crate::common;

use std::io::Read;
use std::os::unix::fs::PermissionsExt;
use std::process::{Command, Stdio};

use common::{ok, text, Cluster};
use serde_json::{json, Value};

/// Group `g` bound to the test Slurm, its jobs run as `corral-batch` and staged under `stage`;
/// `None` (skipped) when Slurm does not answer here.
fn bind(c: &Cluster, stage: &std::path::Path) -> Option<()> {
    ok(c.cli(&["group", "create", "g"]));
    ok(c.cli(&[
        "batch",
        "bind",
        "-g",
        "g",
        "slurm",
        "--run-as",
        "corral-batch",
        "--work-dir",
        stage.to_str().unwrap(),
    ]));
    let nodes = c.cli(&["batch", "nodes", "-g", "g", "-o", "json"]);
    let answered = if nodes.status.success() {
        Ok(())
    } else {
        Err(text(&nodes.stderr))
    };
    corral_testkit::require_ok("Slurm (.ci/slurm.sh)", answered)
}

/// `curl` of `path` on the manager as `token`'s user; `extra` are more of curl's arguments.
fn curl(c: &Cluster, token: &str, extra: &[&str], path: &str) -> Command {
    let mut command = Command::new("curl");
    command
        .args(["-sS", "-H", &format!("Authorization: Bearer {token}")])
        .args(extra)
        .arg(format!("{}/api/v1{path}", c.url()));
    command
}

/// The status and JSON body of a request.
fn call(c: &Cluster, token: &str, extra: &[&str], path: &str) -> (u16, Value) {
    let out = curl(c, token, &[&["-w", "\n%{http_code}"], extra].concat(), path)
        .output()
        .unwrap();
    let body = text(&out.stdout);
    let (body, status) = body.rsplit_once('\n').unwrap();
    (
        status.parse().unwrap(),
        serde_json::from_str(body).unwrap_or(Value::Null),
    )
}

fn submit(c: &Cluster, token: &str, spec: &Value) -> (u16, Value) {
    call(
        c,
        token,
        &[
            "-X",
            "POST",
            "-H",
            "content-type: application/json",
            "-d",
            &spec.to_string(),
        ],
        "/groups/g/batch/jobs",
    )
}

/// The manager's peak resident memory so far, in bytes.
fn manager_peak(c: &Cluster) -> u64 {
    let pid = c.server.as_ref().unwrap().0.id();
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with("VmHWM:")).unwrap();
    let kib: u64 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
    kib << 10
}

#[test]
fn a_jobs_outputs_are_streamed_under_a_cap_and_listed_to_a_bound() {
    let c = Cluster::start(60);
    let stage = tempfile::tempdir().unwrap();
    std::fs::set_permissions(stage.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    if bind(&c, stage.path()).is_none() {
        return;
    }
    let alice = c.user_token("alice");
    // Sparse files: 300 MiB over the 256 MiB served, 200 MiB under; and 10,001 files.
    let script = "truncate -s 300M big.bin && truncate -s 200M ok.bin && mkdir many && \
                  cd many && seq 10001 | xargs touch";
    let (status, body) = submit(
        &c,
        &alice,
        &json!({"script": script, "walltime": "5m",
                "outputs": ["big.bin", "ok.bin", "many"]}),
    );
    assert_eq!(status, 201, "{body}");
    let id = body["id"].as_str().unwrap().to_string();
    c.until_for(120, &format!("job {id} to be done"), || {
        let (_, job) = call(&c, &alice, &[], &format!("/groups/g/batch/jobs/{id}"));
        (job["state"] == "done").then_some(())
    });
    let outputs = format!("/groups/g/batch/jobs/{id}/outputs");

    // The listing: refused past 10,000 files, saying so.
    let (status, body) = call(&c, &alice, &[], &outputs);
    let listed = body.as_array().map(Vec::len);
    assert_eq!(status, 422, "{listed:?} files listed");
    assert_eq!(body["error"]["code"], "too_many_outputs", "{body}");
    assert!(
        body["error"]["message"].as_str().unwrap().contains("10000"),
        "{body}"
    );
    // One file of the tree is still there by its path.
    let (status, _) = call(
        &c,
        &alice,
        &["-o", "/dev/null"],
        &format!("{outputs}/many/7"),
    );
    assert_eq!(status, 200);

    // Over the cap: refused with its size and the cap, nothing of it read.
    let before = manager_peak(&c);
    let (status, body) = call(&c, &alice, &[], &format!("{outputs}/big.bin"));
    assert_eq!(status, 422, "{body}");
    assert_eq!(body["error"]["code"], "output_too_large", "{body}");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains(&(300u64 << 20).to_string()) && message.contains("256 MiB"),
        "{message}"
    );

    // Under it: every byte, streamed, the manager holding little of it at any time.
    let mut download = curl(
        &c,
        &alice,
        &["-D", "/dev/stderr"],
        &format!("{outputs}/ok.bin"),
    )
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    let mut stdout = download.stdout.take().unwrap();
    let (mut total, mut nonzero) = (0u64, 0u64);
    let mut chunk = vec![0; 1 << 20];
    loop {
        let n = stdout.read(&mut chunk).unwrap();
        if n == 0 {
            break;
        }
        total += n as u64;
        nonzero += chunk[..n].iter().filter(|b| **b != 0).count() as u64;
    }
    let out = download.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let headers = text(&out.stderr).to_ascii_lowercase();
    assert!(
        headers.contains(&format!("content-length: {}", 200u64 << 20)),
        "{headers}"
    );
    assert_eq!((total, nonzero), (200 << 20, 0));
    let grew = manager_peak(&c).saturating_sub(before);
    assert!(
        grew < 64 << 20,
        "the manager's peak memory grew by {} MiB serving a 200 MiB file",
        grew >> 20
    );
}

#[test]
fn a_user_cannot_name_a_job_like_a_pilot_nor_break_its_header() {
    let c = Cluster::start(60);
    let stage = tempfile::tempdir().unwrap();
    std::fs::set_permissions(stage.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    if bind(&c, stage.path()).is_none() {
        return;
    }
    let alice = c.user_token("alice");
    // A pilot's name: refused, naming the field.
    let (status, body) = submit(
        &c,
        &alice,
        &json!({"name": "corral.pilots.pil-0123456789", "executable": "/bin/true"}),
    );
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error"]["details"]["field"], "name", "{body}");
    // The reported executable: its name broke out of the header, dropping the hold and the
    // directory of a job with inputs.
    let (status, body) = submit(
        &c,
        &alice,
        &json!({"executable": "true\nid > injected.out\n#", "inputs": ["in.txt"]}),
    );
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error"]["details"]["field"], "executable", "{body}");
    // A file name that is no job name does not name the job (a dry run shows the script).
    let (status, body) = call(
        &c,
        &alice,
        &[
            "-X",
            "POST",
            "-H",
            "content-type: application/json",
            "-d",
            &json!({"executable": "/opt/corral.pilots.pil-0123456789", "inputs": ["in.txt"]})
                .to_string(),
        ],
        "/groups/g/batch/jobs?dry_run=true",
    );
    assert_eq!(status, 200, "{body}");
    let script = body["script"].as_str().unwrap();
    assert!(script.contains("#SBATCH --job-name=corral\n"), "{script}");
    assert!(script.contains("#SBATCH --hold\n"), "{script}");
}

#[test]
fn a_job_named_like_a_pilot_is_neither_adopted_nor_cancelled() {
    let c = Cluster::start(60);
    let stage = tempfile::tempdir().unwrap();
    std::fs::set_permissions(stage.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    if bind(&c, stage.path()).is_none() {
        return;
    }
    // Group `pilots`: pilots of the same scheduler and account, none needed; its
    // reconciliation every second, with a grace of one second for unknown instances.
    let group = json!({
        "name": "pilots",
        "policy": {"kind": "demand", "min_nodes": 0, "max_nodes": 1},
        "templates": [{"name": "pilot", "slots": "cpu=1,mem=1GiB", "max": 1}],
        "provider": {"name": "batch",
            "options": {"batch": {"system": "slurm", "options": {
                "run_as": "corral-batch", "work_dir": stage.path()}}},
            "launch": {"reconcile_secs": 1, "orphan_grace_secs": 1}},
    });
    let file = c.dir.path().join("group.json");
    std::fs::write(&file, group.to_string()).unwrap();
    ok(c.cli(&[
        "group",
        "create",
        "pilots",
        "--file",
        file.to_str().unwrap(),
    ]));
    // A job of the jobs' account named like a pilot of the group (as one of its jobs could
    // submit), held so it stays.
    let out = Command::new("runuser")
        .args(["-u", "corral-batch", "--", "sbatch", "--parsable", "--hold"])
        .args(["--job-name=corral.pilots.pil-0123456789", "--chdir=/tmp"])
        .args(["--output=/dev/null", "--wrap=sleep 600"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let forged = text(&out.stdout).trim().to_string();
    let _cancel = Cancel(forged.clone());
    // The manager tells of it, and leaves it alone.
    let event = c.until_for(60, "an event about the job", || {
        let events = c.json(&["events", "--group", "pilots", "-o", "json"]);
        events
            .as_array()?
            .iter()
            .find(|e| {
                e["kind"] == "orphan" && e["message"].as_str().is_some_and(|m| m.contains(&forged))
            })
            .cloned()
    });
    let message = event["message"].as_str().unwrap();
    assert!(message.contains("left alone"), "{message}");
    let job = c.json(&["batch", "job", "-g", "g", &forged, "-o", "json"]);
    assert_eq!(job["state"], "held", "{job}");
    let instances = c.json(&["group", "instances", "pilots", "--all", "-o", "json"]);
    assert_eq!(instances["instances"], json!([]), "{instances}");
}

/// Cancels the job when the test ends, however it ends.
struct Cancel(String);

impl Drop for Cancel {
    fn drop(&mut self) {
        let _ = Command::new("scancel").arg(&self.0).status();
    }
}
