//! The LSF adaptor against stand-in commands: LSF cannot run on the test host, so `bsub`,
//! `bjobs`, `bhosts`, `badmin`... are small scripts that answer with the outputs written from
//! IBM's documentation (`tests/recorded/lsf/`) and record how they were called. The tests check
//! the command lines and scripts the adaptor runs, what it reads from the answers, that a
//! refusal comes back in LSF's words, a missing command as missing, and a hanging one killed at
//! the timeout.

mod common;
mod standin;

use std::time::Duration;

use common::spec;
use corral_batch::lsf::Lsf;
use corral_batch::{
    BatchError, BatchSystem, Commands, ConfigChange, JobFilter, JobState, NodeState, QueueState,
};
use standin::{recorded, StandIns};

const PROGRAMS: [&str; 10] = [
    "bsub", "bjobs", "bkill", "bstop", "bresume", "bhosts", "bqueues", "bparams", "lsid", "badmin",
];

const FIELDS: &str = "jobid jobindex job_name user stat queue exec_host exit_code exit_reason \
                      pend_reason submit_time start_time finish_time";

fn lsf() -> (StandIns, Lsf) {
    let standins = StandIns::new(&PROGRAMS);
    let lsf = Lsf::new(standins.commands());
    (standins, lsf)
}

#[tokio::test]
async fn a_job_is_submitted_with_its_script_on_standard_input() {
    let (standins, lsf) = lsf();
    standins.answer("bsub", "Job <307> is submitted to queue <short>.\n");
    let spec = spec(serde_json::json!({
        "name": "sweep", "script": "echo \"task $LSB_JOBINDEX\"",
        "directory": "/scratch/bob", "stdout": "sweep.%I.out",
        "environment": {"MODE": "fast, careful"},
        "resources": {"nodes": 2, "tasks": 4, "cpus_per_task": 2,
                      "memory_per_node": "8GiB", "gpus_per_node": 1},
        "walltime": "2h", "queue": "short", "account": "proj42",
        "array": {"start": 1, "end": 4, "max_concurrent": 2},
        "hold": true,
        "dependencies": [{"kind": "after_ok", "job": "300"},
                         {"kind": "after_any", "job": "301"}]}));
    let id = lsf.submit(&spec).await.unwrap();
    assert_eq!(id, "307");
    let calls = standins.calls();
    assert_eq!(standins.command_lines(), ["bsub"]);
    assert_eq!(
        calls[0].stdin,
        "#!/bin/sh
#BSUB -J \"sweep[1-4]%2\"
#BSUB -cwd /scratch/bob
#BSUB -o sweep.%I.out
#BSUB -n 8
#BSUB -R \"span[ptile=4] rusage[mem=8192MB]\"
#BSUB -gpu \"num=1\"
#BSUB -W 2:00
#BSUB -q short
#BSUB -P proj42
#BSUB -H
#BSUB -w \"done(300) && ended(301)\"
export MODE='fast, careful'
echo \"task $LSB_JOBINDEX\"
"
    );
    // bsub hands its environment to the job: it runs in the caller's time zone, untouched.
    assert_eq!(calls[0].tz, "");
    assert_eq!(lsf.render(&spec).unwrap().script, calls[0].stdin);
}

#[tokio::test]
async fn a_refusal_comes_back_in_lsf_words() {
    let (standins, lsf) = lsf();
    standins.fail(
        "bsub",
        255,
        "Bad resource requirement syntax. Job not submitted.\n",
    );
    let e = lsf
        .submit(&spec(
            serde_json::json!({"script": "true", "native": {"lsf": ["-R \"x[\""]}}),
        ))
        .await
        .unwrap_err();
    let BatchError::Refused { scheduler, message } = &e else {
        panic!("not a refusal: {e}");
    };
    assert_eq!(
        (*scheduler, message.as_str()),
        ("lsf", "Bad resource requirement syntax. Job not submitted.")
    );
}

#[tokio::test]
async fn jobs_come_from_one_bjobs_call_in_utc() {
    let (standins, lsf) = lsf();
    standins.answer("bjobs", &recorded("lsf/bjobs.json"));
    let jobs = lsf.jobs(&JobFilter::default()).await.unwrap();
    let states: Vec<(&str, JobState, Option<i32>)> = jobs
        .iter()
        .map(|j| (j.id.as_str(), j.state, j.exit_code))
        .collect();
    assert_eq!(
        states,
        [
            ("300", JobState::Done, Some(0)),
            ("301", JobState::Failed, Some(3)),
            ("302", JobState::Cancelled, Some(130)),
            ("303", JobState::Timeout, Some(140)),
            ("304", JobState::Running, None),
            ("305", JobState::Held, None),
            ("306", JobState::Queued, None),
            ("307[1]", JobState::Done, Some(0)),
            ("307[2]", JobState::Running, None),
            ("307[3]", JobState::Queued, None),
            ("307[4]", JobState::Queued, None),
        ]
    );
    let held = &jobs[5];
    assert_eq!(held.native_state, "PSUSP");
    assert_eq!(
        held.reason.as_deref(),
        Some("The job was suspended by the user while pending;")
    );
    let calls = standins.calls();
    assert_eq!(calls[0].program, "bjobs");
    assert_eq!(calls[0].args, ["-a", "-u", "all", "-o", FIELDS, "-json"]);
    assert_eq!(calls[0].tz, "UTC");
}

#[tokio::test]
async fn one_job_and_an_unknown_one() {
    let (standins, lsf) = lsf();
    standins.answer_call("bjobs", 1, &recorded("lsf/bjobs.json"));
    standins.answer_call("bjobs", 2, &recorded("lsf/bjobs-missing.json"));
    let job = lsf.job("307[2]").await.unwrap();
    assert_eq!(
        (job.state, job.array_id.as_deref()),
        (JobState::Running, Some("307"))
    );
    let e = lsf.job("999").await.unwrap_err();
    assert!(matches!(e, BatchError::NoSuchJob { .. }), "{e}");
    let calls = standins.calls();
    assert_eq!(calls[0].args.last().map(String::as_str), Some("307[2]"));
    assert_eq!(calls[1].args.last().map(String::as_str), Some("999"));
    // No job at all: bjobs says so instead of printing JSON.
    standins.fail("bjobs", 255, "No job found\n");
    standins.answer("bjobs", "");
    assert!(lsf.jobs(&JobFilter::default()).await.unwrap().is_empty());
}

#[tokio::test]
async fn cancel_hold_release_and_signal_run_their_commands() {
    let (standins, lsf) = lsf();
    standins.answer("bkill", "Job <304> is being terminated\n");
    standins.answer("bstop", "Job <306> is being stopped\n");
    standins.answer("bresume", "Job <306> is being resumed\n");
    lsf.cancel("304").await.unwrap();
    lsf.hold("306").await.unwrap();
    lsf.release("306").await.unwrap();
    lsf.signal("307[2]", "SIGUSR1").await.unwrap();
    assert_eq!(
        standins.command_lines(),
        [
            "bkill 304",
            "bstop 306",
            "bresume 306",
            "bkill -s USR1 307[2]"
        ]
    );
    standins.fail("bkill", 255, "Job <999>: No matching job found\n");
    let e = lsf.cancel("999").await.unwrap_err();
    assert!(matches!(e, BatchError::NoSuchJob { .. }), "{e}");
}

#[tokio::test]
async fn hosts_configuration_and_changes() {
    let (standins, lsf) = lsf();
    standins.answer("bhosts", &recorded("lsf/bhosts.json"));
    standins.answer("bparams", &recorded("lsf/bparams.txt"));
    standins.answer("lsid", &recorded("lsf/lsid.txt"));
    standins.answer("bqueues", &recorded("lsf/bqueues.json"));
    standins.answer("badmin", "Close <hostA> ...... done\n");
    let nodes = lsf.nodes().await.unwrap();
    let host_c = nodes.iter().find(|n| n.name == "hostC").unwrap();
    assert_eq!(host_c.state, NodeState::Drained);
    assert_eq!(host_c.native_state, "closed_Adm");
    let config = lsf.config().await.unwrap();
    assert_eq!(config.scheduler, "lsf");
    assert_eq!(
        config.version.as_deref(),
        Some("IBM Spectrum LSF Standard 10.1.0.13, Apr 15 2022")
    );
    assert_eq!(config.settings["CLEAN_PERIOD"], "3600");
    let normal = config.queues.iter().find(|q| q.name == "normal").unwrap();
    assert_eq!((normal.state.as_str(), normal.default), ("up", true));

    lsf.apply(&ConfigChange::DrainNode {
        node: "hostA".into(),
        reason: "disk replacement".into(),
    })
    .await
    .unwrap();
    lsf.apply(&ConfigChange::ResumeNode {
        node: "hostA".into(),
    })
    .await
    .unwrap();
    lsf.apply(&ConfigChange::QueueState {
        queue: "short".into(),
        state: QueueState::Down,
    })
    .await
    .unwrap();
    let calls = standins.calls();
    let lines: Vec<Vec<&str>> = calls
        .iter()
        .map(|c| {
            std::iter::once(c.program.as_str())
                .chain(c.args.iter().map(String::as_str))
                .collect()
        })
        .collect();
    assert_eq!(
        lines,
        [
            vec![
                "bhosts",
                "-o",
                "host_name status max njobs run ssusp ususp rsv",
                "-json"
            ],
            vec!["bparams", "-a"],
            vec!["lsid"],
            vec!["bqueues", "-o", "queue_name status", "-json"],
            vec!["badmin", "hclose", "-C", "disk replacement", "hostA"],
            vec!["badmin", "hopen", "hostA"],
            vec!["badmin", "qclose", "short"],
            vec!["badmin", "qinact", "short"],
        ]
    );
    // A host LSF does not know: badmin's words.
    standins.answer(
        "badmin",
        "hostZ: Host name, host group name or cluster name is not used by the batch system.\n",
    );
    let e = lsf
        .apply(&ConfigChange::ResumeNode {
            node: "hostZ".into(),
        })
        .await
        .unwrap_err();
    let BatchError::Refused { message, .. } = &e else {
        panic!("not a refusal: {e}");
    };
    assert!(
        message.contains("not used by the batch system"),
        "{message}"
    );
}

#[tokio::test]
async fn a_missing_command_is_missing() {
    let standins = StandIns::new(&[]);
    let lsf = Lsf::new(standins.commands());
    let e = lsf.jobs(&JobFilter::default()).await.unwrap_err();
    let BatchError::CommandMissing { command } = &e else {
        panic!("not a missing command: {e}");
    };
    assert!(command.ends_with("/bjobs"), "{command}");
}

#[tokio::test]
async fn a_hanging_command_is_killed_at_the_timeout() {
    let standins = StandIns::new(&PROGRAMS);
    standins.hang("bhosts");
    let commands = Commands {
        timeout: Duration::from_secs(1),
        ..standins.commands()
    };
    let lsf = Lsf::new(commands);
    let e = lsf.nodes().await.unwrap_err();
    assert!(
        matches!(&e, BatchError::Timeout { command, secs: 1 } if command == "bhosts"),
        "{e}"
    );
    let child = standins.hung_child("bhosts");
    corral_testkit::eventually_async(
        "the hanging bhosts' child to be killed",
        Duration::from_secs(10),
        || async { corral_runtime::procfs::stat(child).is_none_or(|s| !s.alive()) },
    )
    .await;
}
