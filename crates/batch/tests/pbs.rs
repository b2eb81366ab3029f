//! The PBS adaptor (PBS Pro and Torque) against stand-in commands: PBS cannot run on the test
//! host, so `qsub`, `qstat`, `pbsnodes`, `qmgr`... are small scripts that answer with the
//! outputs written from the vendors' documentation (`tests/recorded/pbs/`) and record how they
//! were called. The tests check the command lines and scripts the adaptor runs, what it reads
//! from the answers, that a refusal comes back in PBS's words, a missing command as missing,
//! and a hanging one killed at the timeout.

mod common;
mod standin;

use std::time::Duration;

use common::spec;
use corral_batch::pbs::{Flavor, Pbs};
use corral_batch::{
    BatchError, BatchSystem, Commands, ConfigChange, JobFilter, JobState, NodeState, QueueState,
};
use standin::{recorded, StandIns};

const PROGRAMS: [&str; 8] = [
    "qsub", "qstat", "qdel", "qhold", "qrls", "qsig", "pbsnodes", "qmgr",
];

fn pbs(flavor: Flavor) -> (StandIns, Pbs) {
    let standins = StandIns::new(&PROGRAMS);
    let pbs = Pbs::new(standins.commands(), flavor);
    (standins, pbs)
}

/// An array of four, two at once, after two jobs, held, on two nodes.
fn array_spec() -> corral_batch::JobSpec {
    spec(serde_json::json!({
        "name": "sweep", "script": "echo \"task $PBS_ARRAY_INDEX\"",
        "directory": "/scratch/bob", "stdout": "sweep.out",
        "environment": {"MODE": "fast, careful"},
        "resources": {"nodes": 2, "tasks": 4, "cpus_per_task": 2,
                      "memory_per_node": "8GiB", "gpus_per_node": 1},
        "walltime": "2h", "queue": "workq", "account": "proj42",
        "array": {"start": 1, "end": 4, "max_concurrent": 2},
        "hold": true,
        "dependencies": [{"kind": "after_ok", "job": "100.pbs1"},
                         {"kind": "after_any", "job": "101.pbs1"}]}))
}

#[tokio::test]
async fn pbs_pro_submits_the_script_on_standard_input_and_returns_the_array_id() {
    let (standins, pbs) = pbs(Flavor::PbsPro);
    standins.answer("qsub", "107[].pbs1\n");
    let id = pbs.submit(&array_spec()).await.unwrap();
    assert_eq!(id, "107[].pbs1");
    let calls = standins.calls();
    assert_eq!(standins.command_lines(), ["qsub"]);
    assert_eq!(
        calls[0].stdin,
        "#!/bin/sh
#PBS -S /bin/sh
#PBS -N sweep
#PBS -o /scratch/bob/sweep.out
#PBS -l select=2:ncpus=4:mpiprocs=2:mem=8192mb:ngpus=1
#PBS -l place=scatter
#PBS -l walltime=2:00:00
#PBS -q workq
#PBS -A proj42
#PBS -J 1-4:1%2
#PBS -h
#PBS -W depend=afterok:100.pbs1,afterany:101.pbs1
cd /scratch/bob || exit 1
export MODE='fast, careful'
echo \"task $PBS_ARRAY_INDEX\"
"
    );
    // What submit runs is what render shows.
    assert_eq!(pbs.render(&array_spec()).unwrap().script, calls[0].stdin);
}

#[tokio::test]
async fn torque_submits_its_own_options() {
    let (standins, pbs) = pbs(Flavor::Torque);
    standins.answer("qsub", "203[].torque1\n");
    let id = pbs.submit(&array_spec()).await.unwrap();
    assert_eq!(id, "203[].torque1");
    assert_eq!(
        standins.calls()[0].stdin,
        "#!/bin/sh
#PBS -S /bin/sh
#PBS -N sweep
#PBS -d /scratch/bob
#PBS -o /scratch/bob/sweep.out
#PBS -l nodes=2:ppn=4:gpus=1
#PBS -l mem=16384mb
#PBS -l walltime=2:00:00
#PBS -q workq
#PBS -A proj42
#PBS -t 1-4%2
#PBS -h
#PBS -W depend=afterok:100.pbs1,afterany:101.pbs1
export MODE='fast, careful'
echo \"task $PBS_ARRAY_INDEX\"
"
    );
}

#[tokio::test]
async fn a_refusal_comes_back_in_pbs_words() {
    let (standins, pbs) = pbs(Flavor::PbsPro);
    standins.fail("qsub", 168, "qsub: Unknown queue\n");
    let e = pbs
        .submit(&spec(
            serde_json::json!({"script": "true", "queue": "nope"}),
        ))
        .await
        .unwrap_err();
    let BatchError::Refused { scheduler, message } = &e else {
        panic!("not a refusal: {e}");
    };
    assert_eq!(
        (*scheduler, message.as_str()),
        ("pbs", "qsub: Unknown queue")
    );
    assert_eq!(standins.command_lines(), ["qsub"]);
}

#[tokio::test]
async fn with_history_jobs_are_listed_finished_ones_too_in_one_call() {
    let standins = StandIns::new(&PROGRAMS);
    standins.answer("qmgr", &recorded("pbs/qmgr-print-server.txt"));
    standins.answer("qstat", &recorded("pbs/qstat-pbspro.json"));
    // The server keeps finished jobs (`job_history_enable = True`): qstat is asked for them.
    let pbs = Pbs::connect(standins.commands(), Flavor::PbsPro)
        .await
        .unwrap();
    let jobs = pbs.jobs(&JobFilter::default()).await.unwrap();
    assert_eq!(jobs.len(), 12);
    let failed = jobs.iter().find(|j| j.id == "101.pbs1").unwrap();
    assert_eq!(
        (failed.state, failed.exit_code),
        (JobState::Failed, Some(3))
    );
    assert_eq!(failed.native_state, "F");
    assert_eq!(
        failed.reason.as_deref(),
        Some("Job run at Thu Dec 03 at 07:16 on (n1:ncpus=1) and finished")
    );
    let bobs = JobFilter {
        user: Some("bob".into()),
        ..JobFilter::default()
    };
    let array = pbs.jobs(&bobs).await.unwrap();
    assert_eq!(array.len(), 5, "{array:?}");
    // One job by its short id.
    let job = pbs.job("102").await.unwrap();
    assert_eq!((job.state, job.exit_code), (JobState::Cancelled, Some(143)));
    assert_eq!(
        standins.command_lines(),
        [
            "qmgr -c print server",
            "qstat -f -F json -t -x",
            "qstat -f -F json -t -x",
            "qstat -f -F json -t -x 102",
        ]
    );
    // PBS Pro writes its times in local time: it is asked for UTC.
    assert!(standins.calls()[1..].iter().all(|c| c.tz == "UTC"));
}

#[tokio::test]
async fn a_finished_job_is_asked_for_again_in_the_history() {
    let (standins, pbs) = pbs(Flavor::PbsPro);
    standins.answer("qstat", &recorded("pbs/qstat-pbspro.json"));
    standins.fail_call(
        "qstat",
        1,
        35,
        "qstat: 100.pbs1 Job has finished, use -x or -H to obtain historical job information\n",
    );
    let job = pbs.job("100.pbs1").await.unwrap();
    assert_eq!((job.state, job.exit_code), (JobState::Done, Some(0)));
    assert_eq!(
        standins.command_lines(),
        [
            "qstat -f -F json -t 100.pbs1",
            "qstat -f -F json -t -x 100.pbs1"
        ]
    );
}

#[tokio::test]
async fn an_unknown_job_is_no_such_job() {
    let (standins, pbs) = pbs(Flavor::PbsPro);
    standins.fail("qstat", 153, "qstat: Unknown Job Id 999.pbs1\n");
    standins.fail("qdel", 153, "qdel: Unknown Job Id 999.pbs1\n");
    let e = pbs.job("999").await.unwrap_err();
    assert!(matches!(e, BatchError::NoSuchJob { .. }), "{e}");
    let e = pbs.cancel("999").await.unwrap_err();
    assert!(matches!(e, BatchError::NoSuchJob { .. }), "{e}");
    let e = pbs.cancel("9; rm -rf /").await.unwrap_err();
    assert!(matches!(e, BatchError::InvalidSpec { .. }), "{e}");
    assert_eq!(
        standins.command_lines(),
        ["qstat -f -F json -t 999", "qdel 999"]
    );
}

#[tokio::test]
async fn cancel_hold_release_and_signal_run_their_commands() {
    let (standins, pbs) = pbs(Flavor::PbsPro);
    pbs.cancel("104.pbs1").await.unwrap();
    pbs.hold("105.pbs1").await.unwrap();
    pbs.release("105.pbs1").await.unwrap();
    pbs.signal("107[2].pbs1", "USR1").await.unwrap();
    let e = pbs.signal("104.pbs1", "BOGUS").await.unwrap_err();
    assert!(matches!(e, BatchError::InvalidSpec { .. }), "{e}");
    assert_eq!(
        standins.command_lines(),
        [
            "qdel 104.pbs1",
            "qhold 105.pbs1",
            "qrls 105.pbs1",
            "qsig -s SIGUSR1 107[2].pbs1"
        ]
    );
}

#[tokio::test]
async fn pbs_pro_nodes_configuration_and_changes() {
    let (standins, pbs) = pbs(Flavor::PbsPro);
    standins.answer("pbsnodes", &recorded("pbs/pbsnodes-pbspro.json"));
    standins.answer("qmgr", &recorded("pbs/qmgr-print-server.txt"));
    standins.answer("qstat", "pbs_version = 23.06.06\n");
    let nodes = pbs.nodes().await.unwrap();
    let n2 = nodes.iter().find(|n| n.name == "n2").unwrap();
    assert_eq!(n2.state, NodeState::Draining);
    assert_eq!(n2.native_state, "job-busy,offline");
    assert_eq!(n2.reason.as_deref(), Some("disk replacement"));
    let config = pbs.config().await.unwrap();
    assert_eq!(config.scheduler, "pbs");
    assert_eq!(config.version.as_deref(), Some("23.06.06"));
    assert_eq!(config.settings["default_queue"], "workq");
    let gpu = config.queues.iter().find(|q| q.name == "gpu").unwrap();
    assert_eq!(gpu.state, "drain");

    pbs.apply(&ConfigChange::DrainNode {
        node: "n1".into(),
        reason: "disk replacement".into(),
    })
    .await
    .unwrap();
    pbs.apply(&ConfigChange::ResumeNode { node: "n1".into() })
        .await
        .unwrap();
    pbs.apply(&ConfigChange::QueueState {
        queue: "gpu".into(),
        state: QueueState::Down,
    })
    .await
    .unwrap();
    let e = pbs
        .apply(&ConfigChange::ResumeNode {
            node: "n1 n2".into(),
        })
        .await
        .unwrap_err();
    assert!(matches!(e, BatchError::InvalidSpec { .. }), "{e}");
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
            vec!["pbsnodes", "-a", "-F", "json"],
            vec!["qmgr", "-c", "print server"],
            vec!["qstat", "--version"],
            vec!["pbsnodes", "-o", "-C", "disk replacement", "n1"],
            vec!["pbsnodes", "-r", "n1"],
            vec![
                "qmgr",
                "-c",
                "set queue gpu enabled = False, started = False"
            ],
        ]
    );
}

#[tokio::test]
async fn torque_jobs_nodes_and_changes_read_its_xml() {
    let (standins, pbs) = pbs(Flavor::Torque);
    standins.answer("qstat", &recorded("pbs/qstat-torque.xml"));
    standins.answer("pbsnodes", &recorded("pbs/pbsnodes-torque.xml"));
    let jobs = pbs.jobs(&JobFilter::default()).await.unwrap();
    let states: Vec<(&str, JobState)> = jobs.iter().map(|j| (j.id.as_str(), j.state)).collect();
    assert_eq!(
        states,
        [
            ("200.torque1", JobState::Done),
            ("201.torque1", JobState::Failed),
            ("202.torque1", JobState::Running),
            ("203[1].torque1", JobState::Held)
        ]
    );
    let nodes = pbs.nodes().await.unwrap();
    assert_eq!(nodes[1].state, NodeState::Drained);
    assert_eq!(nodes[1].reason.as_deref(), Some("bad dimm"));
    pbs.apply(&ConfigChange::DrainNode {
        node: "n1".into(),
        reason: "bad dimm".into(),
    })
    .await
    .unwrap();
    pbs.apply(&ConfigChange::ResumeNode { node: "n1".into() })
        .await
        .unwrap();
    assert_eq!(
        standins.command_lines(),
        [
            "qstat -f -x -t",
            "pbsnodes -x",
            "pbsnodes -o -N bad dimm n1",
            "pbsnodes -c n1"
        ]
    );
    // Torque prints nothing when there is no job.
    standins.answer("qstat", "");
    assert!(pbs.jobs(&JobFilter::default()).await.unwrap().is_empty());
}

#[tokio::test]
async fn a_missing_command_is_missing() {
    let standins = StandIns::new(&[]);
    let pbs = Pbs::new(standins.commands(), Flavor::PbsPro);
    let e = pbs.nodes().await.unwrap_err();
    let BatchError::CommandMissing { command } = &e else {
        panic!("not a missing command: {e}");
    };
    assert!(command.ends_with("/pbsnodes"), "{command}");
}

#[tokio::test]
async fn a_hanging_command_is_killed_at_the_timeout() {
    let standins = StandIns::new(&PROGRAMS);
    standins.hang("qstat");
    let commands = Commands {
        timeout: Duration::from_secs(1),
        ..standins.commands()
    };
    let pbs = Pbs::new(commands, Flavor::PbsPro);
    let e = pbs.jobs(&JobFilter::default()).await.unwrap_err();
    assert!(
        matches!(&e, BatchError::Timeout { command, secs: 1 } if command == "qstat"),
        "{e}"
    );
    let child = standins.hung_child("qstat");
    corral_testkit::eventually_async(
        "the hanging qstat's child to be killed",
        Duration::from_secs(10),
        || async { corral_runtime::procfs::stat(child).is_none_or(|s| !s.alive()) },
    )
    .await;
}
