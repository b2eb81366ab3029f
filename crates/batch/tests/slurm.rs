//! The Slurm adaptor against a real Slurm (`.ci/slurm.sh` starts one on this host): jobs
//! through to done and failed with their exit codes, cancel, an array with a concurrency
//! limit, hold and release, a dependency, nodes, configuration, and a request Slurm can never
//! satisfy refused at submit with its reason. Without Slurm the tests are skipped (and fail
//! under `CI=true`).

mod common;

use common::{dir_of, finished, most_at_once, spec, timed_task, until};
use corral_batch::slurm::Slurm;
use corral_batch::{BatchError, BatchSystem, Commands, JobFilter, JobState};

/// The adaptor, or `None` (skipped) when no Slurm answers here.
async fn slurm() -> Option<Slurm> {
    let connected = Slurm::connect(Commands::default()).await;
    corral_testkit::require_ok("Slurm (.ci/slurm.sh)", connected)
}

#[tokio::test]
async fn a_job_runs_to_done_and_a_failing_one_reports_its_exit_code() {
    let Some(slurm) = slurm().await else { return };
    let dir = tempfile::tempdir().unwrap();
    let ok = slurm
        .submit(&spec(serde_json::json!({
            "name": "corral-ok", "script": "echo \"hello $GREETING\" > result.txt",
            "directory": dir_of(dir.path()), "environment": {"GREETING": "from, slurm"},
            "resources": {"cpus_per_task": 1, "memory_per_node": "100MiB"},
            "walltime": "5m"})))
        .await
        .unwrap();
    let job = finished(&slurm, &ok).await;
    assert_eq!(job.state, JobState::Done, "{job:?}");
    assert_eq!(job.exit_code, Some(0));
    assert_eq!(job.name, "corral-ok");
    assert_eq!(
        std::fs::read_to_string(dir.path().join("result.txt")).unwrap(),
        "hello from, slurm\n"
    );

    let failing = slurm
        .submit(&spec(serde_json::json!({
            "executable": "/bin/sh", "arguments": ["-c", "exit 3"],
            "directory": dir_of(dir.path())})))
        .await
        .unwrap();
    let job = finished(&slurm, &failing).await;
    assert_eq!(job.state, JobState::Failed, "{job:?}");
    assert_eq!(job.exit_code, Some(3));
    assert_eq!(job.native_state, "FAILED");
    let mine = JobFilter {
        name: Some("corral-ok".into()),
        ..JobFilter::default()
    };
    let listed = slurm.jobs(&mine).await.unwrap();
    assert!(listed.iter().all(|j| j.name == "corral-ok"), "{listed:?}");
    assert!(
        listed
            .iter()
            .any(|j| j.id == ok && j.state == JobState::Done),
        "{listed:?}"
    );
    // What is read once slurmctld forgets the job: the accounting says the same.
    let accounted = slurm.from_accounting(&failing).await.unwrap();
    assert_eq!(accounted.len(), 1, "{accounted:?}");
    assert_eq!(accounted[0].state, JobState::Failed);
    assert_eq!(accounted[0].exit_code, Some(3));
}

#[tokio::test]
async fn a_cancelled_job_is_cancelled_and_an_unknown_one_is_named() {
    let Some(slurm) = slurm().await else { return };
    let dir = tempfile::tempdir().unwrap();
    let id = slurm
        .submit(&spec(serde_json::json!({
            "script": "sleep 300", "directory": dir_of(dir.path())})))
        .await
        .unwrap();
    until(&slurm, &id, "running", |j| j.state == JobState::Running).await;
    slurm.cancel(&id).await.unwrap();
    let job = finished(&slurm, &id).await;
    assert_eq!(job.state, JobState::Cancelled, "{job:?}");

    let e = slurm.cancel("99999999").await.unwrap_err();
    assert!(matches!(e, BatchError::NoSuchJob { .. }), "{e}");
    let e = slurm.job("99999999").await.unwrap_err();
    assert!(matches!(e, BatchError::NoSuchJob { .. }), "{e}");
    let e = slurm.cancel("1; rm -rf /").await.unwrap_err();
    assert!(matches!(e, BatchError::InvalidSpec { .. }), "{e}");
}

#[tokio::test]
async fn an_array_of_four_runs_at_most_two_at_once() {
    let Some(slurm) = slurm().await else { return };
    let dir = tempfile::tempdir().unwrap();
    // Each task records when it started and ended (ns), to measure the overlap afterwards.
    let id = slurm
        .submit(&spec(serde_json::json!({
            "name": "corral-array",
            "script": timed_task("SLURM_ARRAY_TASK_ID"),
            "directory": dir_of(dir.path()),
            "array": {"start": 1, "end": 4, "max_concurrent": 2}})))
        .await
        .unwrap();
    // The last task waits its turn, listed with the array's other waiting tasks.
    let waiting = slurm.job(&format!("{id}_4")).await.unwrap();
    assert_eq!(waiting.state, JobState::Queued, "{waiting:?}");
    assert_eq!(waiting.id, format!("{id}_4"));
    for task in 1..=4 {
        let job = finished(&slurm, &format!("{id}_{task}")).await;
        assert_eq!(job.state, JobState::Done, "{job:?}");
        assert_eq!(job.array_id.as_deref(), Some(id.as_str()));
    }
    let most = most_at_once(dir.path(), 4);
    assert!(most <= 2, "{most} tasks ran at once");
}

#[tokio::test]
async fn a_held_job_waits_until_released_and_a_dependent_one_until_its_dependency() {
    let Some(slurm) = slurm().await else { return };
    let dir = tempfile::tempdir().unwrap();
    let held = slurm
        .submit(&spec(serde_json::json!({
            "script": "echo released > held.txt", "directory": dir_of(dir.path()),
            "hold": true})))
        .await
        .unwrap();
    let after = slurm
        .submit(&spec(serde_json::json!({
            "script": "cat held.txt > after.txt", "directory": dir_of(dir.path()),
            "dependencies": [{"kind": "after_ok", "job": held}]})))
        .await
        .unwrap();
    let job = slurm.job(&held).await.unwrap();
    assert_eq!(job.state, JobState::Held, "{job:?}");
    assert_eq!(job.reason.as_deref(), Some("JobHeldUser"));
    let job = slurm.job(&after).await.unwrap();
    assert_eq!(job.state, JobState::Queued, "{job:?}");
    assert_eq!(job.reason.as_deref(), Some("Dependency"));

    slurm.release(&held).await.unwrap();
    assert_eq!(finished(&slurm, &held).await.state, JobState::Done);
    assert_eq!(finished(&slurm, &after).await.state, JobState::Done);
    assert_eq!(
        std::fs::read_to_string(dir.path().join("after.txt")).unwrap(),
        "released\n"
    );
}

#[tokio::test]
async fn an_impossible_request_is_refused_at_submit_with_slurms_reason() {
    let Some(slurm) = slurm().await else { return };
    let e = slurm
        .submit(&spec(serde_json::json!({
            "script": "true", "directory": "/tmp",
            "resources": {"cpus_per_task": 64}})))
        .await
        .unwrap_err();
    let BatchError::Refused { message, .. } = &e else {
        panic!("not a refusal: {e}");
    };
    assert!(
        message.contains("More processors requested than permitted")
            || message.contains("Requested node configuration is not available"),
        "{message}"
    );
}

#[tokio::test]
async fn nodes_and_configuration_are_read() {
    let Some(slurm) = slurm().await else { return };
    let nodes = slurm.nodes().await.unwrap();
    let node = nodes.iter().find(|n| n.name == "localhost").unwrap();
    assert_eq!(node.cpus, 8);
    assert_eq!(node.memory, 4000 << 20);
    assert_eq!(node.queues, ["debug"]);
    let config = slurm.config().await.unwrap();
    assert_eq!(config.scheduler, "slurm");
    assert!(
        config.version.as_deref().unwrap().starts_with("22."),
        "{config:?}"
    );
    assert_eq!(config.settings["EnforcePartLimits"], "ALL");
    let debug = config.queues.iter().find(|q| q.name == "debug").unwrap();
    assert!(debug.default);
    assert_eq!(debug.state, "up");
}
