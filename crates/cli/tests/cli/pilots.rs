//! Pilot jobs: a group whose provider is `batch` grows with jobs of the real Slurm and Grid Engine
//! that `.ci/slurm.sh` and `.ci/gridengine.sh` start, each running `corral agent` as the
//! scheduler's account `corral-batch`. Sessions waiting make it launch two pilots, the pilots join
//! and run the sessions, and once idle the group goes back to zero: no agent alive, no pilot job
//! left in the scheduler. Without the schedulers the tests are skipped (and fail under `CI=true`).

use crate::common;

use std::collections::BTreeSet;
use std::os::unix::fs::PermissionsExt;

use common::{ok, text, Cluster, CORRAL};
use serde_json::{json, Value};

/// Group `probe` bound to the scheduler, to read its jobs; `None` (skipped) when it does not
/// answer here.
fn probe(c: &Cluster, batch: &Value, scheduler: &str) -> Option<()> {
    assert!(c.cli(&["group", "create", "probe"]).status.success());
    let mut args = vec![
        "batch".to_string(),
        "bind".into(),
        "-g".into(),
        "probe".into(),
    ];
    args.push(batch["system"].as_str().unwrap().into());
    // Jobs never run as the manager's account (root here).
    args.extend(["--run-as".into(), "corral-batch".into()]);
    for (name, value) in batch["options"]["env"].as_object().into_iter().flatten() {
        args.extend([
            "--env".into(),
            format!("{name}={}", value.as_str().unwrap()),
        ]);
    }
    let out = c.cli(&args.iter().map(String::as_str).collect::<Vec<_>>());
    assert!(out.status.success(), "{}", text(&out.stderr));
    let nodes = c.cli(&["batch", "nodes", "-g", "probe", "-o", "json"]);
    let answered = if nodes.status.success() {
        Ok(())
    } else {
        Err(text(&nodes.stderr))
    };
    corral_testkit::require_ok(scheduler, answered)
}

/// The jobs of every pilot the group launched, as the scheduler reports them.
fn pilot_jobs(c: &Cluster) -> Vec<Value> {
    let instances = c.json(&["group", "instances", "pilots", "--all", "-o", "json"]);
    instances["instances"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|i| i["provider_id"].as_str())
        .map(|id| c.json(&["batch", "job", "-g", "probe", id, "-o", "json"]))
        .collect()
}

/// The group's pilots the scheduler has not ended.
fn pilots_in_scheduler(c: &Cluster) -> Vec<Value> {
    pilot_jobs(c)
        .into_iter()
        .filter(|j| {
            !["done", "failed", "cancelled", "timeout"].contains(&j["state"].as_str().unwrap())
        })
        .collect()
}

fn live_instances(c: &Cluster) -> usize {
    c.json(&["group", "instances", "pilots", "-o", "json"])["instances"]
        .as_array()
        .map_or(usize::MAX, Vec::len)
}

/// Creates group `pilots` (demand, max 2 pilots of one CPU) whose pilots run as `corral-batch`
/// in a fresh work directory (returned); `extra` adds provider options, `launch` launch settings.
fn create_group(
    c: &Cluster,
    mut batch: Value,
    extra: Value,
    launch: Value,
    idle_wait_secs: u64,
) -> tempfile::TempDir {
    // Where the pilots' account makes their directories.
    let work = tempfile::tempdir().unwrap();
    std::fs::set_permissions(work.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    batch["options"]["run_as"] = json!("corral-batch");
    batch["options"]["work_dir"] = json!(work.path());
    // The nodes' corral, where the pilots' account can run it (the build's directory may be
    // closed to other accounts, as a fresh clone made by mktemp is).
    let binary = work.path().join("corral");
    std::fs::copy(CORRAL, &binary).unwrap();
    std::fs::set_permissions(&binary, std::fs::Permissions::from_mode(0o755)).unwrap();
    let mut options = json!({"batch": batch, "walltime_secs": 900, "binary": binary});
    options
        .as_object_mut()
        .unwrap()
        .extend(extra.as_object().unwrap().clone());
    let group = json!({
        "name": "pilots",
        "policy": {"kind": "demand", "min_nodes": 0, "max_nodes": 2, "idle_wait_secs": idle_wait_secs,
                   "cooldown_secs": 0, "max_launches_per_pass": 2},
        "templates": [{"name": "pilot", "slots": "cpu=1,mem=1GiB", "max": 2}],
        "provider": {"name": "batch", "options": options, "launch": launch},
    });
    let file = c.dir.path().join("group.json");
    std::fs::write(&file, group.to_string()).unwrap();
    let out = c.cli(&[
        "group",
        "create",
        "pilots",
        "--file",
        file.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    work
}

fn scale_out_by_two_and_back_to_zero(batch: Value, scheduler: &str) {
    let c = Cluster::start(5);
    if probe(&c, &batch, scheduler).is_none() {
        return;
    }
    let work = create_group(&c, batch, json!({}), json!({}), 2);
    // Each session also looks into the pilots' directories (their tokens while queued, the
    // agents' own files), which its sandbox hides but for the path to its own working
    // directory (issue 43, items 1 and 4).
    let peek = format!(
        "ls {}/pilots/*/agent.err >/dev/null 2>&1 && echo sees-pilots; ",
        work.path().display()
    );
    let ids: Vec<String> = (0..4)
        .map(|i| {
            c.submit(&[
                "--group",
                "pilots",
                "--request",
                "cpu=1",
                "--type",
                "batch",
                "--",
                "sh",
                "-c",
                &format!("{peek}sleep 2; echo session {i} as $(id -un)"),
            ])
        })
        .collect();

    // Two pilots join and run the four sessions.
    let mut most = 0;
    let sessions = c.until_for(240, "the 4 sessions to succeed", || {
        most = most.max(live_instances(&c));
        let list = c.json(&["session", "ls", "--group", "pilots", "-o", "json"]);
        let done: Vec<Value> = list
            .as_array()?
            .iter()
            .filter(|s| ids.iter().any(|id| s["id"] == id.as_str()) && s["state"] == "succeeded")
            .cloned()
            .collect();
        (done.len() == 4).then_some(done)
    });
    assert!(most <= 2, "{most} pilots at once; max is 2");
    let agents: BTreeSet<&str> = sessions
        .iter()
        .filter_map(|s| s["agent"].as_str())
        .collect();
    assert_eq!(agents.len(), 2, "the sessions ran on {agents:?}");
    for id in &ids {
        let out = c.cli(&["session", "logs", id]);
        let log = text(&out.stdout);
        // Run by the pilot, as the scheduler's account: never as the manager's; and blind to
        // the pilots' directory.
        assert!(
            log.starts_with("session ") && log.trim_end().ends_with("as corral-batch"),
            "{id}: {log}"
        );
    }

    // Idle: the agents are let go, their jobs cancelled; nothing is left.
    c.until_for(
        120,
        "the group to be back to 0 with no pilot job left",
        || {
            let agents = c.json(&["agent", "ls", "-o", "json"]);
            let standing = agents
                .as_array()?
                .iter()
                .filter(|a| a["state"] != "terminated")
                .count();
            (standing == 0 && live_instances(&c) == 0 && pilots_in_scheduler(&c).is_empty())
                .then_some(())
        },
    );
    let events = c.json(&[
        "events", "--group", "pilots", "--limit", "1000", "-o", "json",
    ]);
    let launched = events
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["kind"] == "joined")
        .count();
    assert_eq!(launched, 2, "{events:#}");
}

#[test]
fn slurm_pilots_scale_out_by_two_and_back_to_zero() {
    scale_out_by_two_and_back_to_zero(json!({"system": "slurm"}), "Slurm (.ci/slurm.sh)");
}

#[test]
fn grid_engine_pilots_scale_out_by_two_and_back_to_zero() {
    let batch = json!({"system": "gridengine", "options": {
        "env": {"SGE_ROOT": "/var/lib/gridengine", "SGE_CELL": "default"}}});
    scale_out_by_two_and_back_to_zero(batch, "Grid Engine (.ci/gridengine.sh)");
}

/// A manager whose group `probe` is bound to the test Slurm, and Slurm's binding; `None` when
/// Slurm does not answer (skipped).
fn on_slurm() -> Option<(Cluster, Value)> {
    let c = Cluster::start(5);
    let batch = json!({"system": "slurm"});
    probe(&c, &batch, "Slurm (.ci/slurm.sh)")?;
    Some((c, batch))
}

#[test]
fn a_pilot_still_queued_after_max_provisioning_is_cancelled_and_counts_as_failed() {
    let Some((c, batch)) = on_slurm() else { return };
    // Pilots that the scheduler will not start for an hour.
    let _work = create_group(
        &c,
        batch,
        json!({"native": {"slurm": ["--begin=now+3600"]}}),
        json!({"max_provisioning_secs": 3, "backoff_initial_secs": 600}),
        2,
    );
    c.submit(&["--group", "pilots", "--request", "cpu=1", "--", "true"]);
    let failed = c.until_for(60, "a failed launch", || {
        let events = c.json(&["events", "--group", "pilots", "-o", "json"]);
        events
            .as_array()?
            .iter()
            .find(|e| e["kind"] == "launch_failed")
            .cloned()
    });
    let message = failed["message"].as_str().unwrap();
    assert!(message.contains("did not join within 3 s"), "{message}");
    // Its job was cancelled in the scheduler, and no other was launched: the template backs
    // off.
    let jobs = pilot_jobs(&c);
    assert_eq!(jobs.len(), 1, "{jobs:?}");
    assert_eq!(jobs[0]["state"], "cancelled", "{jobs:?}");
    assert!(
        jobs[0]["name"]
            .as_str()
            .unwrap()
            .starts_with("corral.pilots."),
        "{jobs:?}"
    );
}

#[test]
fn a_pilot_drains_before_its_walltime_and_is_let_go_once_empty() {
    let Some((c, batch)) = on_slurm() else { return };
    // A walltime of 40 s, draining 20 s before it; idle agents would be kept for an hour.
    let _work = create_group(
        &c,
        batch,
        json!({"walltime_secs": 40, "drain_before_secs": 20}),
        json!({}),
        3600,
    );
    let id = c.submit(&[
        "--group",
        "pilots",
        "--request",
        "cpu=1",
        "--",
        "echo",
        "ran",
    ]);
    let session = c.until_for(60, "the session to succeed", || {
        let s = c.json(&["session", "get", &id, "-o", "json"]);
        (s["state"] == "succeeded").then_some(s)
    });
    let agent = session["agent"].as_str().unwrap().to_string();
    // It drains itself, and the empty pilot is let go and its job cancelled, before the
    // scheduler's walltime would have ended it.
    c.until_for(60, "the pilot to be let go", || {
        let a = c.json(&["agent", "get", &agent, "-o", "json"]);
        (a["state"] == "terminated" && pilots_in_scheduler(&c).is_empty()).then_some(())
    });
    let events = c.json(&[
        "events", "--group", "pilots", "--limit", "1000", "-o", "json",
    ]);
    let kinds: Vec<&str> = events
        .as_array()
        .unwrap()
        .iter()
        .rev()
        .filter(|e| e["agent"] == agent.as_str())
        .filter_map(|e| e["kind"].as_str())
        .collect();
    let at = |kind: &str| {
        kinds
            .iter()
            .position(|k| *k == kind)
            .unwrap_or_else(|| panic!("no {kind} in {kinds:?}"))
    };
    assert!(at("drain") < at("terminated"), "{kinds:?}");
    let jobs = pilot_jobs(&c);
    assert_eq!(jobs.len(), 1, "{jobs:?}");
    assert_eq!(
        jobs[0]["state"], "cancelled",
        "not ended by its walltime: {jobs:?}"
    );
}

/// Cancels a job of the scheduler group `probe` is bound to when dropped.
struct Cancel<'a>(&'a Cluster, &'a str);

impl Drop for Cancel<'_> {
    fn drop(&mut self) {
        let _ = self.0.cli(&["batch", "cancel", "-g", "probe", self.1]);
    }
}

/// Issue 43: a session on a pilot runs as the jobs' account, which can read a queued pilot's
/// bootstrap token from `WORK_DIR/pilots/<id>/token`; `corral agent --id <that pilot>` with it,
/// from anywhere, joined as that pilot. Now the token joins only from the pilot's own job,
/// while the scheduler says it runs: from outside the job it is refused (whether the join names
/// no job, another job, or the pilot's job while it is held), it stays unused, and the real
/// pilot joins with it once its job is released.
fn a_queued_pilots_token_joins_only_from_its_own_running_job(
    batch: Value,
    hold: Value,
    scheduler: &str,
) {
    let c = Cluster::start(5);
    if probe(&c, &batch, scheduler).is_none() {
        return;
    }
    let work = create_group(
        &c,
        batch,
        json!({"native": hold}),
        json!({"max_provisioning_secs": 600}),
        3600,
    );
    let session = c.submit(&[
        "--group",
        "pilots",
        "--request",
        "cpu=1",
        "--",
        "echo",
        "ran",
    ]);
    let (agent, job) = c.until_for(60, "a pilot submitted", || {
        let instances = c.json(&["group", "instances", "pilots", "-o", "json"]);
        let i = instances["instances"].as_array()?.first()?.clone();
        Some((
            i["id"].as_str()?.to_string(),
            i["provider_id"].as_str()?.to_string(),
        ))
    });
    // The pilot's job ends with the test, whatever its outcome (held, it would wait for good).
    let _cancel = Cancel(&c, &job);
    let state = c.json(&["batch", "job", "-g", "probe", &job, "-o", "json"])["state"].clone();
    assert_eq!(state, "held", "pilot job {job}");
    // What a session of the jobs' account could read while the job waits.
    let token = std::fs::read_to_string(work.path().join("pilots").join(&agent).join("token"))
        .unwrap()
        .trim()
        .to_string();

    let rogue = |batch_job: Option<&str>| {
        let mut command = c.agent_command(&agent, "pilots", "cpu=1");
        command
            .env("CORRAL_TOKEN", &token)
            .env_remove("CORRAL_AGENT_BATCH_JOB")
            .stderr(std::process::Stdio::piped());
        if let Some(id) = batch_job {
            command.args(["--batch-job", id]);
        }
        let mut rogue = common::Proc(command.spawn().unwrap());
        // Refused, it ends; taken, it would stay and the pilot would be alive.
        let status = c.until_for(60, "the join from outside the job to be answered", || {
            if let Some(status) = rogue.0.try_wait().unwrap() {
                return Some(status);
            }
            let agents = c.json(&["agent", "ls", "-o", "json"]);
            let joined = agents.as_array()?.iter().any(|a| a["id"] == agent.as_str());
            assert!(
                !joined,
                "a join from outside its job took pilot {agent}'s token"
            );
            None
        });
        assert!(!status.success());
        let mut stderr = String::new();
        std::io::Read::read_to_string(rogue.0.stderr.as_mut().unwrap(), &mut stderr).unwrap();
        stderr
    };
    let refused = rogue(None);
    assert!(refused.contains("joins only from its job"), "{refused}");
    let refused = rogue(Some("999999"));
    assert!(
        refused.contains(&format!("is job {job}, not job \"999999\"")),
        "{refused}"
    );
    let refused = rogue(Some(&job));
    assert!(
        refused.contains("is held") && refused.contains("not running"),
        "{refused}"
    );

    // The real pilot, released, joins with the token left unused (from its job, which read
    // and removed the file), and is given the waiting session.
    ok(c.cli(&["batch", "release", "-g", "probe", &job]));
    c.until_for(
        120,
        "the released pilot to join and take the session",
        || {
            let s = c.json(&["session", "get", &session, "-o", "json"]);
            (s["agent"] == agent.as_str()).then_some(())
        },
    );
    let agents = c.json(&["agent", "ls", "-o", "json"]);
    let pilot = agents
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["id"] == agent.as_str());
    assert_eq!(pilot.unwrap()["state"], "alive", "{agents:#}");
    assert!(!work
        .path()
        .join("pilots")
        .join(&agent)
        .join("token")
        .exists());
    let events = c.json(&[
        "events", "--group", "pilots", "--limit", "1000", "-o", "json",
    ]);
    let joins = events
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["kind"] == "joined")
        .count();
    assert_eq!(joins, 1, "{events:#}");
}

#[test]
fn slurm_a_queued_pilots_token_joins_only_from_its_own_running_job() {
    a_queued_pilots_token_joins_only_from_its_own_running_job(
        json!({"system": "slurm"}),
        json!({"slurm": ["--hold"]}),
        "Slurm (.ci/slurm.sh)",
    );
}

#[test]
fn grid_engine_a_queued_pilots_token_joins_only_from_its_own_running_job() {
    a_queued_pilots_token_joins_only_from_its_own_running_job(
        json!({"system": "gridengine", "options": {
            "env": {"SGE_ROOT": "/var/lib/gridengine", "SGE_CELL": "default"}}}),
        json!({"gridengine": ["-h"]}),
        "Grid Engine (.ci/gridengine.sh)",
    );
}
