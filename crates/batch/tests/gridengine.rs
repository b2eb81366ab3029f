//! The Grid Engine adaptor against a real Grid Engine (`.ci/gridengine.sh` starts one on this
//! host): jobs through to done and failed with their exit codes, cancel, an array with a
//! concurrency limit, hold and release, a dependency, nodes, configuration and a change to it,
//! and a request no queue can satisfy refused at submit with Grid Engine's reason. Without Grid
//! Engine the tests are skipped (and fail under `CI=true`).

mod common;

use common::{dir_of, finished, most_at_once, spec, timed_task, until};
use corral_batch::gridengine::GridEngine;
use corral_batch::{
    BatchError, BatchSystem, Commands, ConfigChange, JobFilter, JobState, NodeState,
};

const SGE_ROOT: &str = "/var/lib/gridengine";

/// The adaptor, or `None` (skipped) when no Grid Engine answers here.
async fn grid_engine() -> Option<GridEngine> {
    let commands = Commands {
        env: vec![
            ("SGE_ROOT".into(), SGE_ROOT.into()),
            ("SGE_CELL".into(), "default".into()),
        ],
        ..Commands::default()
    };
    let ge = GridEngine::new(commands, None);
    let nodes = ge.nodes().await.and_then(|n| {
        if n.is_empty() {
            Err(BatchError::NoSuchJob {
                id: "no host".into(),
            })
        } else {
            Ok(n)
        }
    });
    corral_testkit::require_ok("Grid Engine (.ci/gridengine.sh)", nodes)?;
    Some(ge)
}

#[tokio::test]
async fn jobs_end_done_failed_or_cancelled_with_their_exit_codes() {
    let Some(ge) = grid_engine().await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let ok = ge
        .submit(&spec(serde_json::json!({
            "name": "corral-ok", "script": "echo \"hello $GREETING\" > result.txt",
            "directory": dir_of(dir.path()), "stdout": "/dev/null", "stderr": "/dev/null",
            "environment": {"GREETING": "from grid engine"}, "walltime": "5m"})))
        .await
        .unwrap();
    let failing = ge
        .submit(&spec(serde_json::json!({
            "executable": "/bin/sh", "arguments": ["-c", "exit 3"],
            "directory": dir_of(dir.path()), "stdout": "/dev/null", "stderr": "/dev/null"})))
        .await
        .unwrap();
    let sleeper = ge
        .submit(&spec(serde_json::json!({
            "script": "sleep 300", "directory": dir_of(dir.path()),
            "stdout": "/dev/null", "stderr": "/dev/null"})))
        .await
        .unwrap();

    let job = finished(&ge, &ok).await;
    assert_eq!(job.state, JobState::Done, "{job:?}");
    assert_eq!(job.exit_code, Some(0));
    assert_eq!(job.name, "corral-ok");
    assert_eq!(
        std::fs::read_to_string(dir.path().join("result.txt")).unwrap(),
        "hello from grid engine\n"
    );
    let job = finished(&ge, &failing).await;
    assert_eq!(job.state, JobState::Failed, "{job:?}");
    assert_eq!(job.exit_code, Some(3));
    // The listing (one qstat, one qstat -s z, one qacct) says the same of finished jobs.
    let listed = ge.jobs(&JobFilter::default()).await.unwrap();
    let of = |id: &str| {
        listed
            .iter()
            .find(|j| j.id == id)
            .map(|j| (j.state, j.exit_code))
    };
    assert_eq!(of(&ok), Some((JobState::Done, Some(0))), "{listed:?}");
    assert_eq!(
        of(&failing),
        Some((JobState::Failed, Some(3))),
        "{listed:?}"
    );

    until(&ge, &sleeper, "running", |j| j.state == JobState::Running).await;
    ge.cancel(&sleeper).await.unwrap();
    let job = finished(&ge, &sleeper).await;
    assert_eq!(job.state, JobState::Cancelled, "{job:?}");

    let e = ge.cancel("99999999").await.unwrap_err();
    assert!(matches!(e, BatchError::NoSuchJob { .. }), "{e}");
    let e = ge.job("99999999").await.unwrap_err();
    assert!(matches!(e, BatchError::NoSuchJob { .. }), "{e}");
}

#[tokio::test]
async fn an_array_of_four_runs_at_most_two_at_once() {
    let Some(ge) = grid_engine().await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let id = ge
        .submit(&spec(serde_json::json!({
            "name": "corral-array",
            "script": timed_task("SGE_TASK_ID"),
            "directory": dir_of(dir.path()), "stdout": "/dev/null", "stderr": "/dev/null",
            "array": {"start": 1, "end": 4, "max_concurrent": 2}})))
        .await
        .unwrap();
    // The last task waits its turn, listed with the array's other waiting tasks.
    let waiting = ge.job(&format!("{id}.4")).await.unwrap();
    assert_eq!(waiting.state, JobState::Queued, "{waiting:?}");
    assert_eq!(waiting.id, format!("{id}.4"));
    for task in 1..=4 {
        let job = finished(&ge, &format!("{id}.{task}")).await;
        assert_eq!(job.state, JobState::Done, "{job:?}");
        assert_eq!(job.array_id.as_deref(), Some(id.as_str()));
    }
    let most = most_at_once(dir.path(), 4);
    assert!(most <= 2, "{most} tasks ran at once");
}

#[tokio::test]
async fn a_held_job_waits_until_released_and_a_dependent_one_until_its_dependency() {
    let Some(ge) = grid_engine().await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let held = ge
        .submit(&spec(serde_json::json!({
            "script": "echo released > held.txt", "directory": dir_of(dir.path()),
            "stdout": "/dev/null", "stderr": "/dev/null", "hold": true})))
        .await
        .unwrap();
    let after = ge
        .submit(&spec(serde_json::json!({
            "script": "cat held.txt > after.txt", "directory": dir_of(dir.path()),
            "stdout": "/dev/null", "stderr": "/dev/null",
            "dependencies": [{"kind": "after_any", "job": held}]})))
        .await
        .unwrap();
    let job = ge.job(&held).await.unwrap();
    assert_eq!(job.state, JobState::Held, "{job:?}");
    // Waiting for its dependency, Grid Engine shows the job held (`hqw`).
    let job = ge.job(&after).await.unwrap();
    assert_eq!(job.state, JobState::Held, "{job:?}");

    ge.release(&held).await.unwrap();
    assert_eq!(finished(&ge, &held).await.state, JobState::Done);
    assert_eq!(finished(&ge, &after).await.state, JobState::Done);
    assert_eq!(
        std::fs::read_to_string(dir.path().join("after.txt")).unwrap(),
        "released\n"
    );
}

#[tokio::test]
async fn an_impossible_request_is_refused_at_submit_with_the_reason() {
    let Some(ge) = grid_engine().await else {
        return;
    };
    let e = ge
        .submit(&spec(serde_json::json!({
            "script": "true", "directory": "/tmp", "resources": {"gpus_per_node": 1}})))
        .await
        .unwrap_err();
    let BatchError::Refused { message, .. } = &e else {
        panic!("not a refusal: {e}");
    };
    assert!(message.contains("unknown resource \"gpu\""), "{message}");
}

#[tokio::test]
async fn nodes_and_configuration_are_read() {
    let Some(ge) = grid_engine().await else {
        return;
    };
    let host = ge.nodes().await.unwrap().remove(0);
    assert!(host.cpus >= 1, "{host:?}");
    assert_eq!(host.queues, ["all.q"]);
    let config = ge.config().await.unwrap();
    assert_eq!(config.scheduler, "gridengine");
    assert_eq!(config.version.as_deref(), Some("SGE 8.1.9"));
    assert_eq!(config.settings["min_uid"], "0");
    assert_eq!(config.queues[0].name, "all.q");
    assert_eq!(config.queues[0].state, "up");
}

/// Drains the only host for a moment: jobs of the other tests wait a scheduling interval.
#[tokio::test]
async fn a_host_is_drained_and_resumed() {
    let Some(ge) = grid_engine().await else {
        return;
    };
    let name = ge.nodes().await.unwrap().remove(0).name;
    ge.apply(&ConfigChange::DrainNode {
        node: name.clone(),
        reason: "corral test".into(),
    })
    .await
    .unwrap();
    let host = ge.nodes().await.unwrap().remove(0);
    assert!(
        matches!(host.state, NodeState::Drained | NodeState::Draining),
        "{host:?}"
    );
    ge.apply(&ConfigChange::ResumeNode { node: name })
        .await
        .unwrap();
    let host = ge.nodes().await.unwrap().remove(0);
    assert!(
        !matches!(host.state, NodeState::Drained | NodeState::Draining),
        "{host:?}"
    );
    let e = ge
        .apply(&ConfigChange::ResumeNode {
            node: "no-such-host".into(),
        })
        .await
        .unwrap_err();
    assert!(matches!(e, BatchError::Refused { .. }), "{e}");
}
