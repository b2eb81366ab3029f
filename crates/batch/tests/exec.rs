//! The exec adaptor against plugins: the example, examples/batch-plugin/local_batch.py (jobs as
//! processes of this host), run for real through submit, hold, release, cancel, signal, nodes,
//! the configuration and its changes; and small `/bin/sh` plugins that answer what a test tells
//! them, to check the requests sent and every way an answer can be wrong: not JSON, a field too
//! many, an id that is not one, an error object, a refusal on standard error, a hang, no plugin
//! at all.

mod common;

use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Duration;

use common::{dir_of, finished, spec, until};
use corral_batch::exec::Exec;
use corral_batch::{
    BatchConfig, BatchError, BatchSystem, Commands, ConfigChange, JobFilter, JobState, NodeState,
    QueueState,
};

fn example() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/batch-plugin/local_batch.py")
}

/// The example plugin over a state directory of the test's own.
fn local() -> (tempfile::TempDir, Exec) {
    answering_plugin(); // written before any test starts a plugin
    let dir = tempfile::tempdir().unwrap();
    let commands = Commands {
        env: vec![("LOCAL_BATCH_DIR".into(), dir_of(&dir.path().join("state")))],
        ..Commands::default()
    };
    (dir, Exec::new(commands, example()))
}

/// One `/bin/sh` plugin for every scripted test: it records its arguments and request in
/// `$PLUGIN_DIR` and answers `$PLUGIN_DIR/out` (standard output), `err` (standard error) and
/// `code` (exit status), or hangs while `hang` exists.
const ANSWER: &str = r#"#!/bin/sh
printf '%s\n' "$@" > "$PLUGIN_DIR/args"
cat > "$PLUGIN_DIR/request"
while [ -e "$PLUGIN_DIR/hang" ]; do sleep 1; done
cat "$PLUGIN_DIR/out" 2>/dev/null
cat "$PLUGIN_DIR/err" >&2 2>/dev/null
exit "$(cat "$PLUGIN_DIR/code" 2>/dev/null || echo 0)"
"#;

/// The scripted plugin, written once per test binary before any plugin runs (every test asks
/// for it first): a file open for writing cannot be run ("text file busy"), and a process
/// another test forks meanwhile would hold it open.
fn answering_plugin() -> &'static Path {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| {
        let path = Path::new(env!("CARGO_TARGET_TMPDIR")).join("exec-answer-plugin.sh");
        if std::fs::read_to_string(&path).ok().as_deref() != Some(ANSWER) {
            let temporary = path.with_extension(format!("{}", std::process::id()));
            std::fs::write(&temporary, ANSWER).unwrap();
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&temporary, std::fs::Permissions::from_mode(0o755)).unwrap();
            std::fs::rename(&temporary, &path).unwrap();
        }
        path
    })
}

struct Scripted {
    dir: tempfile::TempDir,
    exec: Exec,
}

impl Scripted {
    fn new() -> Scripted {
        Scripted::with_timeout(Duration::from_secs(30))
    }

    fn with_timeout(timeout: Duration) -> Scripted {
        let program = answering_plugin().to_path_buf();
        let dir = tempfile::tempdir().unwrap();
        let commands = Commands {
            env: vec![("PLUGIN_DIR".into(), dir_of(dir.path()))],
            timeout,
            ..Commands::default()
        };
        Scripted {
            exec: Exec::new(commands, program),
            dir,
        }
    }

    /// Answers `out` on standard output, `err` on standard error, with exit status `code`.
    fn answer(&self, out: &str, err: &str, code: i32) {
        std::fs::write(self.dir.path().join("out"), out).unwrap();
        std::fs::write(self.dir.path().join("err"), err).unwrap();
        std::fs::write(self.dir.path().join("code"), code.to_string()).unwrap();
    }

    fn request(&self) -> serde_json::Value {
        let text = std::fs::read_to_string(self.dir.path().join("request")).unwrap();
        serde_json::from_str(&text).unwrap()
    }

    fn args(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("args")).unwrap()
    }
}

fn file_of(dir: &Path, name: &str) -> Option<String> {
    std::fs::read_to_string(dir.join(name)).ok()
}

#[tokio::test]
async fn a_script_runs_to_done_and_a_failing_one_reports_its_exit_code() {
    let (dir, exec) = local();
    let work = dir_of(dir.path());
    let good = spec(serde_json::json!({
        "name": "greet", "script": "echo \"hello $WHO\"; echo oops >&2",
        "directory": work, "stdout": "greet.out", "environment": {"WHO": "you, all"}}));
    let id = exec.submit(&good).await.unwrap();
    let job = finished(&exec, &id).await;
    assert_eq!(job.state, JobState::Done, "{job:?}");
    assert_eq!(job.exit_code, Some(0));
    assert_eq!(
        (job.name.as_str(), job.queue.as_deref()),
        ("greet", Some("local"))
    );
    assert!(
        job.started_at.is_some() && job.ended_at.is_some(),
        "{job:?}"
    );
    // Standard error goes where standard output does when the job names no file for it.
    assert_eq!(
        file_of(dir.path(), "greet.out").as_deref(),
        Some("hello you, all\noops\n")
    );

    let bad = spec(serde_json::json!({"script": "exit 3", "directory": work}));
    let id = exec.submit(&bad).await.unwrap();
    let job = finished(&exec, &id).await;
    assert_eq!(
        (job.state, job.exit_code),
        (JobState::Failed, Some(3)),
        "{job:?}"
    );
    assert_eq!(job.name, "corral");

    let rendered = exec.render(&good).unwrap();
    assert_eq!(
        rendered.command,
        [example().display().to_string(), "submit".to_string()]
    );
    assert_eq!(
        rendered.script,
        "#!/bin/sh\nexport WHO='you, all'\necho \"hello $WHO\"; echo oops >&2\n"
    );
    let e = exec.job("999").await.unwrap_err();
    assert!(
        matches!(e, BatchError::NoSuchJob { ref id } if id == "999"),
        "{e}"
    );
}

#[tokio::test]
async fn a_held_job_waits_until_released_and_an_ended_one_cannot_be_held() {
    let (dir, exec) = local();
    let held = spec(serde_json::json!({
        "script": "echo ran > ran", "directory": dir_of(dir.path()), "hold": true}));
    let id = exec.submit(&held).await.unwrap();
    let job = exec.job(&id).await.unwrap();
    assert_eq!(job.state, JobState::Held, "{job:?}");
    // Held it stays, whatever the calls meanwhile.
    exec.hold(&id).await.unwrap();
    assert_eq!(exec.job(&id).await.unwrap().state, JobState::Held);
    assert!(file_of(dir.path(), "ran").is_none());
    exec.release(&id).await.unwrap();
    let job = finished(&exec, &id).await;
    assert_eq!(job.state, JobState::Done, "{job:?}");
    assert_eq!(file_of(dir.path(), "ran").as_deref(), Some("ran\n"));
    let e = exec.hold(&id).await.unwrap_err();
    assert_eq!(
        e.to_string(),
        format!("exec refused: job {id} has started: only a waiting job can be held")
    );
    let e = exec.release(&id).await.unwrap_err();
    assert_eq!(e.to_string(), format!("exec refused: job {id} is not held"));
}

#[tokio::test]
async fn a_running_job_is_cancelled_with_what_it_started_and_signalled() {
    let (dir, exec) = local();
    let work = dir.path().to_path_buf();
    let sleeper = spec(serde_json::json!({
        "script": "sleep 60 & echo $! > sleep.pid; wait", "directory": dir_of(&work)}));
    let id = exec.submit(&sleeper).await.unwrap();
    until(&exec, &id, "running", |j| j.state == JobState::Running).await;
    let pid: i32 = corral_testkit::eventually_async(
        "the job to start its sleep",
        Duration::from_secs(30),
        || async { file_of(&work, "sleep.pid").and_then(|p| p.trim().parse().ok()) },
    )
    .await;
    exec.cancel(&id).await.unwrap();
    let job = finished(&exec, &id).await;
    assert_eq!(job.state, JobState::Cancelled, "{job:?}");
    corral_testkit::eventually_async(
        "the cancelled job's sleep to be killed",
        Duration::from_secs(10),
        || async { corral_runtime::procfs::stat(pid).is_none_or(|s| !s.alive()) },
    )
    .await;
    let e = exec.cancel(&id).await.unwrap_err();
    assert_eq!(e.to_string(), format!("exec refused: job {id} has ended"));

    // A signal reaches the script, which may handle it.
    let trapping = spec(serde_json::json!({
        "script": "trap 'exit 5' USR1; touch ready; while :; do sleep 0.1; done",
        "directory": dir_of(&work)}));
    let id = exec.submit(&trapping).await.unwrap();
    corral_testkit::eventually_async(
        "the job to set its trap",
        Duration::from_secs(30),
        || async { work.join("ready").exists() },
    )
    .await;
    exec.signal(&id, "SIGUSR1").await.unwrap();
    let job = finished(&exec, &id).await;
    assert_eq!(
        (job.state, job.exit_code),
        (JobState::Failed, Some(5)),
        "{job:?}"
    );
    let e = exec.signal(&id, "TERM").await.unwrap_err();
    assert_eq!(
        e.to_string(),
        format!("exec refused: job {id} is not running")
    );
}

#[tokio::test]
async fn jobs_are_listed_by_the_filter() {
    let (dir, exec) = local();
    let work = dir_of(dir.path());
    let alpha = exec
        .submit(&spec(
            serde_json::json!({"name": "alpha", "script": "true", "directory": work}),
        ))
        .await
        .unwrap();
    let beta = exec
        .submit(&spec(serde_json::json!({
            "name": "beta", "script": "true", "directory": work, "hold": true})))
        .await
        .unwrap();
    finished(&exec, &alpha).await;
    let ids = |jobs: Vec<corral_batch::Job>| jobs.into_iter().map(|j| j.id).collect::<Vec<_>>();
    let all = exec.jobs(&JobFilter::default()).await.unwrap();
    assert_eq!(ids(all.clone()), [alpha.as_str(), beta.as_str()]);
    let by_name = JobFilter {
        name: Some("alpha".into()),
        ..JobFilter::default()
    };
    assert_eq!(ids(exec.jobs(&by_name).await.unwrap()), [alpha.as_str()]);
    let held = JobFilter {
        state: Some(JobState::Held),
        ..JobFilter::default()
    };
    assert_eq!(ids(exec.jobs(&held).await.unwrap()), [beta.as_str()]);
    let mine = JobFilter {
        user: Some(all[0].user.clone()),
        ..JobFilter::default()
    };
    assert_eq!(exec.jobs(&mine).await.unwrap().len(), 2);
    let strangers = JobFilter {
        user: Some("nobody-here".into()),
        ..JobFilter::default()
    };
    assert!(exec.jobs(&strangers).await.unwrap().is_empty());
    exec.cancel(&beta).await.unwrap();
}

#[tokio::test]
async fn the_node_and_configuration_are_read_and_changed() {
    let (dir, exec) = local();
    let nodes = exec.nodes().await.unwrap();
    assert_eq!(nodes.len(), 1, "{nodes:?}");
    let node = &nodes[0];
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
    assert_eq!(node.name, host.trim());
    assert_eq!(node.state, NodeState::Idle);
    assert!(node.cpus >= 1 && node.memory > 0, "{node:?}");
    assert_eq!(node.queues, ["local"]);

    let config = exec.config().await.unwrap();
    assert_eq!(config.scheduler, "local_batch");
    assert_eq!(
        config.settings.get("SchedulerType").map(String::as_str),
        Some("fifo")
    );
    assert_eq!(config.queues.len(), 1);
    assert!(config.queues[0].default && config.queues[0].state == "up");

    // A drained node starts nothing until it is resumed.
    let drain = ConfigChange::DrainNode {
        node: node.name.clone(),
        reason: "disk".into(),
    };
    exec.apply(&drain).await.unwrap();
    let node = exec.nodes().await.unwrap().remove(0);
    assert_eq!(
        (node.state, node.reason.as_deref()),
        (NodeState::Drained, Some("disk"))
    );
    let job = spec(serde_json::json!({"script": "true", "directory": dir_of(dir.path())}));
    let id = exec.submit(&job).await.unwrap();
    let waiting = exec.job(&id).await.unwrap();
    assert_eq!(waiting.state, JobState::Queued, "{waiting:?}");
    assert_eq!(waiting.reason.as_deref(), Some("node drained"));
    exec.apply(&ConfigChange::ResumeNode {
        node: node.name.clone(),
    })
    .await
    .unwrap();
    assert_eq!(finished(&exec, &id).await.state, JobState::Done);

    // A queue that is down takes no job.
    let down = ConfigChange::QueueState {
        queue: "local".into(),
        state: QueueState::Down,
    };
    exec.apply(&down).await.unwrap();
    assert_eq!(exec.config().await.unwrap().queues[0].state, "down");
    let e = exec.submit(&job).await.unwrap_err();
    assert_eq!(
        e.to_string(),
        "exec refused: queue local is down: it takes no new jobs"
    );
    let e = exec
        .apply(&ConfigChange::ResumeNode {
            node: "elsewhere".into(),
        })
        .await
        .unwrap_err();
    assert!(matches!(e, BatchError::Refused { .. }), "{e}");
    assert!(e.to_string().contains("no node 'elsewhere'"), "{e}");
}

#[tokio::test]
async fn what_the_plugin_cannot_do_is_unsupported() {
    let (dir, exec) = local();
    let array = spec(serde_json::json!({
        "script": "true", "directory": dir_of(dir.path()), "array": {"start": 1, "end": 2}}));
    let e = exec.submit(&array).await.unwrap_err();
    assert!(matches!(e, BatchError::Unsupported { .. }), "{e}");
    assert_eq!(e.to_string(), "exec cannot run job arrays");
}

#[tokio::test]
async fn a_binding_connects_to_the_plugin() {
    answering_plugin();
    let dir = tempfile::tempdir().unwrap();
    let mut binding = serde_json::json!({"system": "exec", "options": {
        "command": example(), "timeout_secs": 20,
        "env": {"LOCAL_BATCH_DIR": dir.path()}}});
    // The jobs run as this test's account: root must name it (a binding may not run jobs as a
    // root manager's own account), any other may say so.
    // SAFETY: geteuid has no preconditions and cannot fail.
    let account = match unsafe { libc::geteuid() } {
        0 => ("run_as", serde_json::json!("root")),
        _ => ("run_as_manager", serde_json::json!(true)),
    };
    binding["options"][account.0] = account.1;
    let config = BatchConfig::parse_json(&binding.to_string()).unwrap();
    let exec = config.connect().await.unwrap();
    assert_eq!(exec.name(), "exec");
    assert!(exec.jobs(&JobFilter::default()).await.unwrap().is_empty());
    assert!(dir.path().join("state.json").exists());
}

#[tokio::test]
async fn requests_carry_the_operation_and_its_arguments() {
    let plugin = Scripted::new();
    plugin.answer(r#"{"id": "42"}"#, "", 0);
    let job = spec(serde_json::json!({
        "executable": "/bin/echo", "arguments": ["a b"], "walltime": "1h",
        "environment": {"X": "1"}}));
    assert_eq!(plugin.exec.submit(&job).await.unwrap(), "42");
    assert_eq!(plugin.args(), "submit\n");
    assert_eq!(
        plugin.request(),
        serde_json::json!({
            "version": 1, "op": "submit", "name": "echo",
            "script": "#!/bin/sh\nexport X=1\nexec /bin/echo 'a b'\n",
            "spec": {"executable": "/bin/echo", "arguments": ["a b"], "walltime": 3600,
                     "environment": {"X": "1"}, "resources": {}}})
    );

    plugin.answer("{}\n", "", 0);
    plugin.exec.signal("42", "SIGUSR1").await.unwrap();
    assert_eq!(plugin.args(), "signal\n");
    assert_eq!(
        plugin.request(),
        serde_json::json!({"version": 1, "op": "signal", "id": "42", "signal": "USR1"})
    );
    plugin
        .exec
        .apply(&ConfigChange::QueueState {
            queue: "debug".into(),
            state: QueueState::Drain,
        })
        .await
        .unwrap();
    assert_eq!(
        plugin.request(),
        serde_json::json!({"version": 1, "op": "apply",
                           "change": {"kind": "queue_state", "queue": "debug", "state": "drain"}})
    );

    plugin.answer(r#"{"jobs": []}"#, "", 0);
    let filter = JobFilter {
        state: Some(JobState::Running),
        ..JobFilter::default()
    };
    assert!(plugin.exec.jobs(&filter).await.unwrap().is_empty());
    assert_eq!(
        plugin.request(),
        serde_json::json!({"version": 1, "op": "jobs", "filter": {"state": "running"}})
    );
    // An id that is not one is refused before the plugin runs.
    let e = plugin.exec.cancel("x; rm").await.unwrap_err();
    assert!(matches!(e, BatchError::InvalidSpec { .. }), "{e}");
}

/// The parse error of an answer, with its problem and its quote.
fn parse_error(e: BatchError) -> (String, String) {
    match e {
        BatchError::Parse {
            problem, excerpt, ..
        } => (problem, excerpt),
        e => panic!("not a parse error: {e}"),
    }
}

#[tokio::test]
async fn an_answer_that_is_not_the_protocols_is_quoted() {
    let plugin = Scripted::new();
    plugin.answer("this is not json\n", "", 0);
    let (problem, excerpt) = parse_error(plugin.exec.nodes().await.unwrap_err());
    assert!(problem.starts_with("not JSON"), "{problem}");
    assert_eq!(excerpt, "this is not json\n");

    plugin.answer("", "", 0);
    let (problem, _) = parse_error(plugin.exec.cancel("1").await.unwrap_err());
    assert_eq!(problem, "no answer on standard output");

    plugin.answer("{} {}", "", 0);
    let (problem, _) = parse_error(plugin.exec.hold("1").await.unwrap_err());
    assert_eq!(problem, "more output after the JSON answer");

    let job = r#"{"id": "7", "name": "a", "user": "u", "state": "running", "native_state": "R""#;
    plugin.answer(&format!(r#"{{"jobs": [{job}, "colour": "red"}}]}}"#), "", 0);
    let (problem, excerpt) =
        parse_error(plugin.exec.jobs(&JobFilter::default()).await.unwrap_err());
    assert_eq!(problem, "unknown field jobs[0].colour");
    assert!(excerpt.contains("\"colour\""), "{excerpt}");

    plugin.answer(
        &format!(r#"{{"jobs": [{job}, "state": "sleeping"}}]}}"#),
        "",
        0,
    );
    let (problem, _) = parse_error(plugin.exec.jobs(&JobFilter::default()).await.unwrap_err());
    assert!(
        problem.starts_with("jobs[0].state: unknown variant `sleeping`"),
        "{problem}"
    );

    plugin.answer(&format!(r#"{{"jobs": [{job}}}, {job}}}]}}"#), "", 0);
    let (problem, _) = parse_error(plugin.exec.jobs(&JobFilter::default()).await.unwrap_err());
    assert_eq!(problem, "job 7 is listed twice");

    plugin.answer(&format!(r#"{{"job": {job}}}}}"#), "", 0);
    let (problem, _) = parse_error(plugin.exec.job("8").await.unwrap_err());
    assert_eq!(problem, "asked for job 8, answered job 7");
    assert_eq!(plugin.exec.job("7").await.unwrap().state, JobState::Running);

    plugin.answer(r#"{"id": "abc"}"#, "", 0);
    let job = spec(serde_json::json!({"script": "true"}));
    let (problem, excerpt) = parse_error(plugin.exec.submit(&job).await.unwrap_err());
    assert_eq!(problem, "\"abc\" is not a job id");
    assert_eq!(excerpt, r#"{"id": "abc"}"#);

    plugin.answer(r#"{"config": {"scheduler": "x", "settings": {}}}"#, "", 0);
    let (problem, _) = parse_error(plugin.exec.config().await.unwrap_err());
    assert_eq!(problem, "config: missing field `queues`");

    plugin.answer(r#"{"error": {"class": "sorry", "message": "m"}}"#, "", 1);
    let (problem, _) = parse_error(plugin.exec.nodes().await.unwrap_err());
    assert!(
        problem.starts_with("invalid error object at error.class"),
        "{problem}"
    );
}

#[tokio::test]
async fn errors_come_back_in_the_plugins_words() {
    let plugin = Scripted::new();
    let refusal = r#"{"error": {"message": "queue \"gpu\": no such queue (code 17)"}}"#;
    plugin.answer(refusal, "", 1);
    let job = spec(serde_json::json!({"script": "true"}));
    let e = plugin.exec.submit(&job).await.unwrap_err();
    assert!(matches!(e, BatchError::Refused { .. }), "{e}");
    assert_eq!(
        e.to_string(),
        "exec refused: queue \"gpu\": no such queue (code 17)"
    );

    // Without an error object, standard error says why.
    plugin.answer("", "license server down\n", 2);
    let e = plugin.exec.nodes().await.unwrap_err();
    assert_eq!(e.to_string(), "exec refused: license server down");
    plugin.answer("", "", 2);
    let e = plugin.exec.nodes().await.unwrap_err();
    assert_eq!(
        e.to_string(),
        "exec refused: exited with status 2 without a message"
    );

    plugin.answer(r#"{"error": {"class": "no_such_job"}}"#, "", 1);
    let e = plugin.exec.release("12").await.unwrap_err();
    assert!(
        matches!(e, BatchError::NoSuchJob { ref id } if id == "12"),
        "{e}"
    );

    plugin.answer(r#"{"error": {"class": "unsupported"}}"#, "", 1);
    let e = plugin.exec.hold("12").await.unwrap_err();
    assert_eq!(e.to_string(), "exec cannot hold jobs");
    plugin.answer(
        r#"{"error": {"class": "unsupported", "message": "send STOP"}}"#,
        "",
        1,
    );
    let e = plugin.exec.signal("12", "STOP").await.unwrap_err();
    assert!(matches!(e, BatchError::Unsupported { .. }), "{e}");
    assert_eq!(e.to_string(), "exec cannot send STOP");
}

#[tokio::test]
async fn a_hanging_plugin_is_killed_at_the_timeout_and_a_missing_one_is_missing() {
    let plugin = Scripted::with_timeout(Duration::from_secs(1));
    std::fs::write(plugin.dir.path().join("hang"), "").unwrap();
    let e = plugin.exec.nodes().await.unwrap_err();
    assert!(matches!(e, BatchError::Timeout { .. }), "{e}");

    let missing = Exec::new(Commands::default(), "/nonexistent/corral-plugin".into());
    let e = missing.nodes().await.unwrap_err();
    assert!(matches!(e, BatchError::CommandMissing { .. }), "{e}");
}
