//! Sessions of a group bound with `--sessions` to a real Slurm and Grid Engine (`.ci/slurm.sh`,
//! `.ci/gridengine.sh`) run as jobs of the scheduler, as the binding's account: through
//! `corral session run` with an input staged and an output brought back, a failure with its
//! exit code, a log read while the job runs, a cancel that cancels the job, and a request the
//! scheduler can never satisfy refused at submit with its reason. Without the schedulers the
//! tests are skipped (and fail under `CI=true`).

use crate::common;

use std::os::unix::fs::PermissionsExt;

use common::{ok, text, Cluster};
use serde_json::Value;

/// Binds group g with `bind` and `--sessions`, staging in a fresh directory the jobs' account
/// may write; `None` (skipped) when the scheduler does not answer here.
fn bind(c: &Cluster, bind: &[&str], scheduler: &str) -> Option<tempfile::TempDir> {
    let stage = tempfile::tempdir().unwrap();
    std::fs::set_permissions(stage.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    ok(c.cli(&["group", "create", "g"]));
    let work_dir = stage.path().to_str().unwrap();
    let args = [
        &["batch", "bind", "-g", "g"],
        bind,
        &[
            "--run-as",
            "corral-batch",
            "--work-dir",
            work_dir,
            "--sessions",
        ],
    ]
    .concat();
    ok(c.cli(&args));
    let shown = ok(c.cli(&["batch", "system", "-g", "g"]));
    assert!(
        shown.contains("sessions") && shown.contains("true"),
        "{shown}"
    );
    let nodes = c.cli(&["batch", "nodes", "-g", "g", "-o", "json"]);
    let nodes = if nodes.status.success() {
        Ok(())
    } else {
        Err(text(&nodes.stderr))
    };
    corral_testkit::require_ok(scheduler, nodes)?;
    Some(stage)
}

/// The sessions `token`'s user sees.
fn sessions(c: &Cluster, token: &str, dir: &std::path::Path) -> Vec<Value> {
    serde_json::from_str(&ok(c.as_user_in(
        token,
        dir,
        &["session", "ls", "-o", "json"],
    )))
    .unwrap()
}

fn session(c: &Cluster, token: &str, dir: &std::path::Path, id: &str) -> Value {
    serde_json::from_str(&ok(c.as_user_in(
        token,
        dir,
        &["session", "get", id, "-o", "json"],
    )))
    .unwrap()
}

/// What a user sees of sessions on a group whose sessions are batch jobs; `impossible` is a
/// request the scheduler refuses, `refusal` part of its words.
fn sessions_run_as_jobs(c: &Cluster, impossible: &str, refusal: &[&str]) {
    let alice = {
        let created: Value =
            serde_json::from_str(&ok(c.cli(&["token", "create", "alice", "-o", "json"]))).unwrap();
        created["token"].as_str().unwrap().to_string()
    };
    let work = tempfile::tempdir().unwrap();
    let here = work.path();
    std::fs::write(here.join("numbers.txt"), "1\n2\n3\n").unwrap();
    let run = |args: &[&str]| {
        c.as_user_in(
            &alice,
            here,
            &[
                &["session", "run", "--group", "g", "--request", "cpu=1"],
                args,
            ]
            .concat(),
        )
    };

    // An input staged into the job's directory, its output printed, an output file back.
    let out = run(&[
        "--input",
        "numbers.txt",
        "--output",
        "result.txt",
        "--",
        "sh",
        "-c",
        "wc -l < numbers.txt; id -un; echo 42 > result.txt",
    ]);
    assert_eq!(
        (text(&out.stdout).as_str(), out.status.code()),
        ("3\ncorral-batch\n", Some(0)),
        "{}",
        text(&out.stderr)
    );
    let listed = sessions(c, &alice, here);
    let first = listed.iter().find(|s| s["state"] != "failed").unwrap();
    assert_eq!(
        (&first["state"], &first["exit_code"]),
        (&Value::from("succeeded"), &Value::from(0)),
        "{first}"
    );
    let job = first["batch_job"].as_str().expect("the job's id is shown");
    let id = first["id"].as_str().unwrap();
    let got = here.join("got");
    ok(c.as_user_in(
        &alice,
        here,
        &["session", "outputs", id, "--dir", got.to_str().unwrap()],
    ));
    assert_eq!(
        std::fs::read_to_string(got.join("result.txt")).unwrap(),
        "42\n"
    );
    // The scheduler's job is alice's in the job API too.
    let shown: Value = serde_json::from_str(&ok(c.as_user_in(
        &alice,
        here,
        &["batch", "job", "-g", "g", job, "-o", "json"],
    )))
    .unwrap();
    assert_eq!(
        (&shown["state"], &shown["owner"]),
        (&Value::from("done"), &Value::from("alice")),
        "{shown}"
    );

    // A failure keeps its exit code, and its standard error.
    let out = run(&["--", "sh", "-c", "echo oops >&2; exit 3"]);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("oops"), "{}", text(&out.stderr));
    let listed = sessions(c, &alice, here);
    let failed = listed.iter().find(|s| s["exit_code"] == 3).unwrap();
    assert_eq!(failed["state"], "failed", "{failed}");

    // A log is read while the job runs; cancelling the session cancels the job.
    let submitted = ok(c.as_user_in(
        &alice,
        here,
        &[
            "session",
            "submit",
            "--group",
            "g",
            "--request",
            "cpu=1",
            "--",
            "sh",
            "-c",
            "echo started; sleep 300",
        ],
    ));
    let id = submitted.trim();
    let running = c.until_for(90, "the job to run and write its log", || {
        let running = session(c, &alice, here, id);
        let log = c.as_user_in(&alice, here, &["session", "logs", id]);
        (running["state"] == "running" && text(&log.stdout) == "started\n").then_some(running)
    });
    let job = running["batch_job"].as_str().unwrap().to_string();
    ok(c.as_user_in(&alice, here, &["session", "cancel", id]));
    assert_eq!(session(c, &alice, here, id)["state"], "cancelled");
    c.until_for(90, "the job to be cancelled", || {
        let out = c.as_user_in(
            &alice,
            here,
            &["batch", "job", "-g", "g", &job, "-o", "json"],
        );
        let job: Value = serde_json::from_slice(&out.stdout).ok()?;
        (job["state"] == "cancelled").then_some(())
    });
    assert_eq!(
        text(&c.as_user_in(&alice, here, &["session", "logs", id]).stdout),
        "started\n",
        "the log is kept"
    );

    // A request the scheduler can never satisfy is refused at once, in its words.
    let before = listed.len();
    let out = c.as_user_in(
        &alice,
        here,
        &[
            "session",
            "submit",
            "--group",
            "g",
            "--request",
            impossible,
            "--",
            "true",
        ],
    );
    let refused = text(&out.stderr);
    assert!(!out.status.success(), "{}", text(&out.stdout));
    assert!(refusal.iter().any(|r| refused.contains(r)), "{refused}");
    let listed = sessions(c, &alice, here);
    assert_eq!(
        listed.len(),
        before + 1,
        "stored nothing but the cancelled one"
    );
}

#[test]
fn slurm_sessions_run_as_jobs() {
    let c = Cluster::start(60);
    let Some(_stage) = bind(&c, &["slurm"], "Slurm (.ci/slurm.sh)") else {
        return;
    };
    sessions_run_as_jobs(
        &c,
        "cpu=64",
        &[
            "More processors requested than permitted",
            "Requested node configuration is not available",
        ],
    );
}

#[test]
fn grid_engine_sessions_run_as_jobs() {
    let c = Cluster::start(60);
    let bound = bind(
        &c,
        &[
            "gridengine",
            "--env",
            "SGE_ROOT=/var/lib/gridengine",
            "--env",
            "SGE_CELL=default",
        ],
        "Grid Engine (.ci/gridengine.sh)",
    );
    let Some(_stage) = bound else { return };
    sessions_run_as_jobs(&c, "gpu=1", &["unknown resource \"gpu\""]);
}
