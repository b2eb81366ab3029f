//! `corral batch` through a real manager to a real Slurm and Grid Engine (`.ci/slurm.sh`,
//! `.ci/gridengine.sh`): binding a group (admins only; Slurm's jobs run as an account that
//! cannot read the manager's data), nodes, the configuration and a drain,
//! jobs through to done and failed with their exit codes, each user seeing and acting on their
//! own jobs only, hold and release, cancel, a signal, an array, a dependency, a dry run, and a request
//! the scheduler can never satisfy refused at submit with its reason. Without the schedulers
//! the tests are skipped (and fail under `CI=true`).

use crate::common;

use std::path::Path;
use std::process::Output;

use common::{ok, text, Cluster};
use serde_json::Value;

/// `corral batch SUB -g g ARGS` with `token`.
fn batch(c: &Cluster, token: &str, sub: &str, args: &[&str]) -> Output {
    c.as_user(token, &[&["batch", sub, "-g", "g"], args].concat())
}

/// The error a command failed with.
fn fails(out: Output) -> String {
    assert!(!out.status.success(), "succeeded: {}", text(&out.stdout));
    text(&out.stderr)
}

/// The id `corral batch submit` printed.
fn submitted(out: Output) -> String {
    let line = ok(out);
    line.trim()
        .strip_prefix("submitted job ")
        .unwrap_or_else(|| panic!("{line}"))
        .to_string()
}

/// Submits `script` for `/bin/sh` to run in `dir` as `token`'s user; returns the job's id.
fn submit_sh(c: &Cluster, token: &str, dir: &str, script: &str) -> String {
    submitted(batch(
        c,
        token,
        "submit",
        &["--directory", dir, "--", "/bin/sh", "-c", script],
    ))
}

/// Waits (90 s at most) until `token`'s view of job `id` is as `wanted` says; returns it.
fn job_until(
    c: &Cluster,
    token: &str,
    id: &str,
    what: &str,
    wanted: impl Fn(&Value) -> bool,
) -> Value {
    c.until_for(90, &format!("job {id} to be {what}"), || {
        let out = batch(c, token, "job", &[id, "-o", "json"]);
        let job: Value = serde_json::from_slice(&out.stdout).ok()?;
        wanted(&job).then_some(job)
    })
}

fn state_is(state: &'static str) -> impl Fn(&Value) -> bool {
    move |j| j["state"] == state
}

fn jobs(c: &Cluster, token: &str, extra: &[&str]) -> Vec<Value> {
    let out = ok(batch(c, token, "jobs", &[&["-o", "json"], extra].concat()));
    serde_json::from_str::<Vec<Value>>(&out).unwrap()
}

fn write(dir: &Path, name: &str, text: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path.to_str().unwrap().to_string()
}

/// Binds group g and returns its node list, or `None` (skipped) when the scheduler does not
/// answer here.
fn bind(c: &Cluster, bind: &[&str], scheduler: &str) -> Option<Vec<Value>> {
    ok(c.cli(&["group", "create", "g"]));
    let bound = ok(c.cli(&[&["batch", "bind", "-g", "g"], bind].concat()));
    assert!(bound.contains("group g bound to"), "{bound}");
    let nodes = c.cli(&["batch", "nodes", "-g", "g", "-o", "json"]);
    let nodes = if nodes.status.success() {
        Ok(serde_json::from_slice::<Vec<Value>>(&nodes.stdout).unwrap())
    } else {
        Err(text(&nodes.stderr))
    };
    let nodes = corral_testkit::require_ok(scheduler, nodes)?;
    assert!(!nodes.is_empty(), "no node");
    Some(nodes)
}

#[test]
fn slurm_through_the_cli_each_user_sees_and_acts_on_their_own_jobs() {
    let c = Cluster::start(60);
    // Where the jobs' account makes the directories of jobs with files.
    let stage = tempfile::tempdir().unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(stage.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    // Jobs run as corral-batch (made by .ci/slurm.sh), never as the manager's account.
    let bound = bind(
        &c,
        &[
            "slurm",
            "--run-as",
            "corral-batch",
            "--work-dir",
            stage.path().to_str().unwrap(),
        ],
        "Slurm (.ci/slurm.sh)",
    );
    let Some(nodes) = bound else {
        return;
    };
    let alice = c.user_token("alice");
    let bob = c.user_token("bob");
    let work = tempfile::tempdir().unwrap();
    let dir = work.path().to_str().unwrap();
    std::fs::set_permissions(work.path(), std::fs::Permissions::from_mode(0o777)).unwrap();

    // Binding is the admins'; the binding reads back.
    assert!(fails(batch(&c, &alice, "bind", &["slurm"])).contains("admin"));
    let system = ok(batch(&c, &alice, "system", &[]));
    assert!(
        system.contains("system") && system.contains("slurm"),
        "{system}"
    );

    // Nodes and the configuration; a drain and a resume through `config`.
    let node = nodes[0]["name"].as_str().unwrap().to_string();
    let table = ok(batch(&c, &alice, "nodes", &[]));
    assert!(table.contains("NAME") && table.contains(&node), "{table}");
    let config: Value =
        serde_json::from_str(&ok(c.cli(&["batch", "config", "-g", "g", "-o", "json"]))).unwrap();
    assert_eq!(config["scheduler"], "slurm");
    assert!(!config["queues"].as_array().unwrap().is_empty(), "{config}");
    let drain = [
        "batch",
        "config",
        "-g",
        "g",
        "--drain",
        &node,
        "--reason",
        "corral test",
    ];
    assert!(fails(c.as_user(&alice, &drain)).contains("admin"));
    ok(c.cli(&drain));
    let drained = |state: &'static str| {
        c.until(&format!("node {node} {state}"), || {
            let nodes: Vec<Value> =
                serde_json::from_str(&ok(c.cli(&["batch", "nodes", "-g", "g", "-o", "json"])))
                    .ok()?;
            let n = nodes.iter().find(|n| n["name"] == node.as_str())?.clone();
            (n["state"] == state).then_some(n)
        })
    };
    let n = drained("drained");
    assert_eq!(n["reason"], "corral test");
    ok(c.cli(&["batch", "config", "-g", "g", "--resume", &node]));
    drained("idle");

    // A job that fails reports its exit code, to its owner; to another user it does not exist.
    let toml = write(
        work.path(),
        "fail.toml",
        &format!("name = \"corral-fail\"\nscript = \"exit 3\"\ndirectory = \"{dir}\"\nwalltime = \"5m\"\n"),
    );
    let failing = submitted(batch(&c, &alice, "submit", &["-f", &toml]));
    let job = job_until(&c, &alice, &failing, "failed", state_is("failed"));
    assert_eq!(job["exit_code"], 3, "{job}");
    assert_eq!(job["owner"], "alice");
    assert!(fails(batch(&c, &bob, "job", &[&failing])).contains("not found"));
    assert!(fails(batch(&c, &bob, "cancel", &[&failing])).contains("not found"));

    // The job's account cannot read the manager's data.
    let token = c.dir.path().join("data/admin.token");
    let spy = submitted(batch(
        &c,
        &alice,
        "submit",
        &[
            "--directory",
            dir,
            "--",
            "/bin/sh",
            "-c",
            &format!("id -un > who.txt; env > env.txt; cat {}", token.display()),
        ],
    ));
    let job = job_until(&c, &alice, &spy, "failed", state_is("failed"));
    assert_eq!(job["exit_code"], 1, "{job}");
    assert_eq!(
        std::fs::read_to_string(work.path().join("who.txt")).unwrap(),
        "corral-batch\n"
    );
    // Nor anything of the manager's environment (cargo set CARGO_MANIFEST_DIR for it).
    let env = std::fs::read_to_string(work.path().join("env.txt")).unwrap();
    assert!(!env.contains("CARGO_MANIFEST_DIR"), "{env}");

    // A job with files: its input staged before it starts, its output back through the API
    // once it ended, an output it never wrote reported missing; none of it to another user.
    let words = write(work.path(), "words.txt", "hello batch\n");
    let staged = submitted(batch(
        &c,
        &alice,
        "submit",
        &[
            "--input",
            &words,
            "--output",
            "upper.txt",
            "--output",
            "never.txt",
            "--",
            "/bin/sh",
            "-c",
            "tr a-z A-Z < words.txt > upper.txt",
        ],
    ));
    let job = job_until(&c, &alice, &staged, "done", state_is("done"));
    assert_eq!(
        job["missing_outputs"],
        serde_json::json!(["never.txt"]),
        "{job}"
    );
    let into = tempfile::tempdir().unwrap();
    let into_dir = into.path().to_str().unwrap();
    let fetched = ok(batch(&c, &alice, "outputs", &[&staged, "--dir", into_dir]));
    assert!(fetched.contains("upper.txt"), "{fetched}");
    assert_eq!(
        std::fs::read_to_string(into.path().join("upper.txt")).unwrap(),
        "HELLO BATCH\n"
    );
    assert!(fails(batch(&c, &bob, "outputs", &[&staged, "--dir", into_dir])).contains("not found"));
    // Files need a directory of Corral's making.
    let refused = fails(batch(
        &c,
        &alice,
        "submit",
        &["--input", &words, "--directory", dir, "--", "/bin/true"],
    ));
    assert!(refused.contains("directory"), "{refused}");

    // A command runs to done in its directory.
    let done = submitted(batch(
        &c,
        &alice,
        "submit",
        &[
            "--name",
            "corral-echo",
            "--directory",
            dir,
            "--",
            "/bin/sh",
            "-c",
            "echo hello > out.txt",
        ],
    ));
    job_until(&c, &alice, &done, "done", state_is("done"));
    assert_eq!(
        std::fs::read_to_string(work.path().join("out.txt")).unwrap(),
        "hello\n"
    );

    // Bob's job; each user lists their own, the admin everyone's with its owner.
    let bobs = submitted(batch(
        &c,
        &bob,
        "submit",
        &["--hold", "--directory", dir, "--", "/bin/true"],
    ));
    job_until(&c, &bob, &bobs, "held", state_is("held"));
    let ids = |list: Vec<Value>| -> Vec<String> {
        list.iter()
            .map(|j| j["id"].as_str().unwrap().to_string())
            .collect()
    };
    let alices_list = ids(jobs(&c, &alice, &[]));
    assert!(!alices_list.contains(&bobs), "{alices_list:?}");
    let bobs_list = jobs(&c, &bob, &[]);
    assert!(
        bobs_list.iter().all(|j| j["owner"] == "bob") && ids(bobs_list.clone()).contains(&bobs),
        "{bobs_list:?}"
    );
    assert!(fails(batch(&c, &bob, "jobs", &["--owner", "alice"])).contains("own"));
    let all = jobs(&c, &c.token, &["--owner", "bob"]);
    assert!(ids(all).contains(&bobs));

    // Hold, release, cancel.
    ok(batch(&c, &bob, "release", &[&bobs]));
    job_until(&c, &bob, &bobs, "done", state_is("done"));
    let sleeper = submitted(batch(
        &c,
        &alice,
        "submit",
        &["--directory", dir, "--", "/bin/sleep", "300"],
    ));
    job_until(&c, &alice, &sleeper, "running", state_is("running"));
    assert!(ok(batch(&c, &alice, "cancel", &[&sleeper])).contains("cancelled"));
    job_until(&c, &alice, &sleeper, "cancelled", state_is("cancelled"));

    // A signal: the job's trap ends it well; another user cannot signal it.
    let trap = "trap 'echo got USR1 > signalled.txt; exit 0' USR1; touch ready; \
                while :; do sleep 1; done";
    let trapper = submit_sh(&c, &alice, dir, trap);
    c.until_for(90, "the trap to be set", || {
        work.path().join("ready").exists().then_some(())
    });
    assert!(fails(batch(&c, &bob, "signal", &[&trapper, "USR1"])).contains("not found"));
    assert!(fails(batch(&c, &alice, "signal", &[&trapper, "SIGNOPE"])).contains("signal"));
    assert_eq!(
        ok(batch(&c, &alice, "signal", &[&trapper, "SIGUSR1"])).trim(),
        format!("sent SIGUSR1 to job {trapper}")
    );
    job_until(&c, &alice, &trapper, "done", state_is("done"));
    assert_eq!(
        std::fs::read_to_string(work.path().join("signalled.txt")).unwrap(),
        "got USR1\n"
    );

    // A dependency: the second waits for the first to end well, then runs.
    let first = submitted(batch(
        &c,
        &alice,
        "submit",
        &["--hold", "--directory", dir, "--", "/bin/true"],
    ));
    let spec = write(
        work.path(),
        "after.json",
        &format!(
            r#"{{"script": "echo after > after.txt", "directory": "{dir}",
                 "dependencies": [{{"kind": "after_ok", "job": "{first}"}}]}}"#
        ),
    );
    let second = submitted(batch(&c, &alice, "submit", &["-f", &spec]));
    let waiting = job_until(&c, &alice, &second, "queued", state_is("queued"));
    assert_eq!(waiting["reason"], "Dependency", "{waiting}");
    ok(batch(&c, &alice, "release", &[&first]));
    job_until(&c, &alice, &second, "done", state_is("done"));
    assert!(work.path().join("after.txt").exists());

    // An array of 4, at most 2 at once: every task runs.
    let spec = write(
        work.path(),
        "array.json",
        &format!(
            r#"{{"name": "corral-array", "script": "touch task.$SLURM_ARRAY_TASK_ID", "directory": "{dir}",
                 "array": {{"start": 1, "end": 4, "max_concurrent": 2}}}}"#
        ),
    );
    let array = submitted(batch(&c, &alice, "submit", &["-f", &spec]));
    for task in 1..=4 {
        job_until(
            &c,
            &alice,
            &format!("{array}_{task}"),
            "done",
            state_is("done"),
        );
        assert!(work.path().join(format!("task.{task}")).exists());
    }

    // A dry run shows the script and submits nothing; an impossible request is refused at once.
    let dry = ok(batch(
        &c,
        &alice,
        "submit",
        &["--dry-run", "--name", "corral-dry", "--", "/bin/true"],
    ));
    assert!(dry.contains("sbatch") && dry.contains("#SBATCH"), "{dry}");
    assert!(jobs(&c, &c.token, &["--name", "corral-dry"]).is_empty());
    let huge = write(
        work.path(),
        "huge.json",
        &format!(
            r#"{{"script": "true", "directory": "{dir}", "resources": {{"cpus_per_task": 64}}}}"#
        ),
    );
    let refused = fails(batch(&c, &alice, "submit", &["-f", &huge]));
    assert!(
        refused.contains("More processors requested than permitted")
            || refused.contains("Requested node configuration is not available"),
        "{refused}"
    );
    // A bad description is named before anything is sent.
    let bad = write(
        work.path(),
        "bad.json",
        r#"{"script": "true", "walltime": 0}"#,
    );
    assert!(fails(batch(&c, &alice, "submit", &["-f", &bad])).contains("walltime"));
}

#[test]
fn grid_engine_through_the_cli() {
    let c = Cluster::start(60);
    let bound = bind(
        &c,
        &[
            "gridengine",
            "--env",
            "SGE_ROOT=/var/lib/gridengine",
            "--env",
            "SGE_CELL=default",
            "--run-as",
            "corral-batch",
        ],
        "Grid Engine (.ci/gridengine.sh)",
    );
    let Some(_) = bound else { return };
    let alice = c.user_token("alice");
    let bob = c.user_token("bob");
    let work = tempfile::tempdir().unwrap();
    let dir = work.path().to_str().unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(work.path(), std::fs::Permissions::from_mode(0o777)).unwrap();

    // Jobs run as the binding's account, never as the manager's.
    let who = submit_sh(&c, &alice, dir, "id -un > who.txt");
    let job = job_until(&c, &alice, &who, "done", state_is("done"));
    assert_eq!(job["user"], "corral-batch", "{job}");
    assert_eq!(
        std::fs::read_to_string(work.path().join("who.txt")).unwrap(),
        "corral-batch\n"
    );

    let failing = submit_sh(&c, &alice, dir, "exit 3");
    let job = job_until(&c, &alice, &failing, "failed", state_is("failed"));
    assert_eq!(job["exit_code"], 3, "{job}");
    assert!(fails(batch(&c, &bob, "job", &[&failing])).contains("not found"));
    let held = submitted(batch(
        &c,
        &alice,
        "submit",
        &["--hold", "--directory", dir, "--", "/bin/true"],
    ));
    job_until(&c, &alice, &held, "held", state_is("held"));
    ok(batch(&c, &alice, "release", &[&held]));
    job_until(&c, &alice, &held, "done", state_is("done"));
    let config: Value =
        serde_json::from_str(&ok(c.cli(&["batch", "config", "-g", "g", "-o", "json"]))).unwrap();
    assert_eq!(config["scheduler"], "gridengine");
    let refused = fails(batch(
        &c,
        &alice,
        "submit",
        &[
            "-f",
            &write(
                work.path(),
                "gpu.json",
                &format!(
                    r#"{{"script": "true", "directory": "{dir}", "resources": {{"gpus_per_node": 1}}}}"#
                ),
            ),
        ],
    ));
    assert!(refused.contains("unknown resource \"gpu\""), "{refused}");
}

/// Issue 43: `batch bind` without `--run-as` was accepted, and a user's job then ran as the
/// manager's account (root) and read its admin token. Without an account the binding is
/// refused, naming `options.run_as`; `--run-as-manager` says so on purpose (with a warning),
/// and is refused too when the manager runs as root. No scheduler is needed: nothing runs.
#[test]
fn a_binding_runs_jobs_as_the_manager_only_on_purpose_and_never_as_root() {
    let c = Cluster::start(60);
    ok(c.cli(&["group", "create", "g"]));
    let bare = fails(c.cli(&["batch", "bind", "-g", "g", "slurm", "--work-dir", "/tmp"]));
    assert!(
        bare.contains("options.run_as") && bare.contains("run_as_manager"),
        "{bare}"
    );
    // Nothing was bound.
    assert!(fails(c.cli(&["batch", "system", "-g", "g"]))
        .contains("batch system of group \"g\" not found"));

    let on_purpose = c.cli(&["batch", "bind", "-g", "g", "slurm", "--run-as-manager"]);
    let warning = text(&on_purpose.stderr);
    assert!(
        warning.contains("warning: group jobs will run as the manager's own account"),
        "{warning}"
    );
    // The manager (started by this test) runs as this test's account.
    // SAFETY: geteuid has no preconditions and cannot fail.
    if unsafe { libc::geteuid() } == 0 {
        assert!(!on_purpose.status.success(), "bound as root");
        assert!(
            warning.contains("options.run_as") && warning.contains("the manager runs as root"),
            "{warning}"
        );
        assert!(fails(c.cli(&["batch", "system", "-g", "g"]))
            .contains("batch system of group \"g\" not found"));
    } else {
        ok(on_purpose);
        let shown = ok(c.cli(&["batch", "system", "-g", "g"]));
        assert!(shown.contains("(the manager's own account)"), "{shown}");
    }
}
