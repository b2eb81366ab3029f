//! Reading what Slurm's tools print: `squeue --json` and `sinfo --json` (the OpenAPI data
//! format, v0.0.38 in Slurm 22.05, whose field names later versions keep or extend), `sacct
//! --parsable2` for jobs slurmctld has forgotten, and the `Key=Value` lines of `scontrol show`.
//! Every reader is total: output it cannot read is a [`BatchError::Parse`] quoting it.

use std::collections::BTreeMap;

use serde::Deserialize;

use crate::times::iso as timestamp;
use crate::{BatchError, Job, JobState, Node, NodeState, Queue};

#[derive(Deserialize)]
struct JobList {
    jobs: Vec<SlurmJob>,
}

/// The fields of `squeue --json`'s jobs this adaptor reads; the others are left alone.
#[derive(Deserialize)]
struct SlurmJob {
    job_id: u64,
    #[serde(default)]
    name: String,
    #[serde(default)]
    user_name: String,
    job_state: String,
    #[serde(default)]
    state_reason: Option<String>,
    /// The raw wait status (768 is exit code 3).
    #[serde(default)]
    exit_code: Option<i64>,
    #[serde(default)]
    partition: Option<String>,
    #[serde(default)]
    nodes: Option<String>,
    #[serde(default)]
    submit_time: Option<i64>,
    #[serde(default)]
    start_time: Option<i64>,
    #[serde(default)]
    end_time: Option<i64>,
    #[serde(default)]
    array_job_id: Option<u64>,
    #[serde(default)]
    array_task_id: Option<u64>,
    #[serde(default)]
    array_task_string: Option<String>,
}

/// The jobs of `squeue --json`.
pub fn jobs(text: &str) -> Result<Vec<Job>, BatchError> {
    let list: JobList = serde_json::from_str(text)
        .map_err(|e| BatchError::parse("squeue --json", e.to_string(), text))?;
    Ok(list.jobs.into_iter().map(job).collect())
}

fn job(j: SlurmJob) -> Job {
    let reason = j.state_reason.filter(|r| !r.is_empty() && r != "None");
    let state = state(&j.job_state, reason.as_deref());
    let array = j.array_job_id.filter(|a| *a != 0);
    let id = match (array, j.array_task_id) {
        (Some(a), Some(task)) => format!("{a}_{task}"),
        (Some(a), None) => match j.array_task_string.as_deref().filter(|t| !t.is_empty()) {
            Some(tasks) => format!("{a}_[{tasks}]"),
            None => a.to_string(),
        },
        (None, _) => j.job_id.to_string(),
    };
    let time = |t: Option<i64>| t.filter(|t| *t > 0);
    Job {
        id,
        name: j.name,
        user: j.user_name,
        state,
        native_state: j.job_state,
        reason,
        exit_code: state
            .is_final()
            .then(|| j.exit_code.map(exit_code))
            .flatten(),
        queue: j.partition.filter(|p| !p.is_empty()),
        nodes: j.nodes.filter(|n| !n.is_empty()),
        submitted_at: time(j.submit_time),
        started_at: time(j.start_time),
        ended_at: time(j.end_time),
        array_id: array.map(|a| a.to_string()),
        tasks: j
            .array_task_string
            .filter(|t| !t.is_empty() && j.array_task_id.is_none()),
    }
}

/// A wait status as an exit code: the code, or 128 + the signal that killed it.
fn exit_code(status: i64) -> i32 {
    let signal = status & 0x7f;
    let code = if signal != 0 {
        128 + signal
    } else {
        (status >> 8) & 0xff
    };
    i32::try_from(code).unwrap_or(i32::MAX)
}

/// Slurm's job state (with its reason) in the common set.
pub fn state(native: &str, reason: Option<&str>) -> JobState {
    // A state may carry flags after it (`CANCELLED by 0`, `PENDING+...`).
    let base = native.split([' ', '+']).next().unwrap_or_default();
    match base {
        "PENDING" if reason.is_some_and(|r| r.starts_with("JobHeld")) => JobState::Held,
        "PENDING" | "REQUEUED" | "REQUEUE_HOLD" | "REQUEUE_FED" | "CONFIGURING" => JobState::Queued,
        "RUNNING" | "RESIZING" | "SIGNALING" | "STAGE_OUT" => JobState::Running,
        "SUSPENDED" | "STOPPED" => JobState::Suspended,
        "COMPLETING" => JobState::Completing,
        "COMPLETED" => JobState::Done,
        "FAILED" | "NODE_FAIL" | "OUT_OF_MEMORY" | "BOOT_FAIL" | "DEADLINE" | "PREEMPTED" => {
            JobState::Failed
        }
        "CANCELLED" | "REVOKED" => JobState::Cancelled,
        "TIMEOUT" => JobState::Timeout,
        _ => JobState::Unknown,
    }
}

/// The fields `sacct` is asked for, in order.
pub const SACCT_FIELDS: &str =
    "JobID,JobName,User,State,ExitCode,Partition,NodeList,Submit,Start,End";

/// The jobs of `sacct --parsable2 --noheader --format=SACCT_FIELDS` (its job lines; step
/// lines such as `12.batch` are left out).
pub fn sacct(text: &str) -> Result<Vec<Job>, BatchError> {
    let mut jobs = Vec::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let fields: Vec<&str> = line.split('|').collect();
        let [id, name, user, native, exit, partition, nodes, submit, start, end] = fields[..]
        else {
            return Err(BatchError::parse(
                "sacct",
                format!("expected 10 fields, got {}", fields.len()),
                line,
            ));
        };
        if id.contains('.') {
            continue;
        }
        let state = state(native, None);
        // `3:0`: the exit code, then the signal that ended it.
        let exit_code = match exit.split_once(':') {
            Some((code, signal)) => {
                let number = |s: &str| {
                    s.parse::<i32>()
                        .map_err(|_| BatchError::parse("sacct", "exit code", line))
                };
                let (code, signal) = (number(code)?, number(signal)?);
                Some(if signal != 0 { 128 + signal } else { code })
            }
            None => None,
        };
        // `root(0)` in jobcomp records.
        let user = user.split('(').next().unwrap_or_default();
        jobs.push(Job {
            id: id.to_string(),
            name: name.to_string(),
            user: user.to_string(),
            state,
            native_state: native.to_string(),
            reason: None,
            exit_code: exit_code.filter(|_| state.is_final()),
            queue: Some(partition.to_string()).filter(|p| !p.is_empty()),
            nodes: Some(nodes.to_string()).filter(|n| !n.is_empty() && *n != "None assigned"),
            submitted_at: timestamp(submit),
            started_at: timestamp(start),
            ended_at: timestamp(end),
            array_id: id.split_once('_').map(|(a, _)| a.to_string()),
            tasks: None,
        });
    }
    Ok(jobs)
}

#[derive(Deserialize)]
struct NodeList {
    nodes: Vec<SlurmNode>,
}

#[derive(Deserialize)]
struct SlurmNode {
    name: String,
    state: String,
    #[serde(default)]
    state_flags: Vec<String>,
    #[serde(default)]
    cpus: u32,
    #[serde(default)]
    alloc_cpus: u32,
    /// MiB.
    #[serde(default)]
    real_memory: u64,
    #[serde(default)]
    alloc_memory: u64,
    #[serde(default)]
    gres: String,
    #[serde(default)]
    partitions: Vec<String>,
    #[serde(default)]
    reason: String,
}

/// The nodes of `sinfo --json`.
pub fn nodes(text: &str) -> Result<Vec<Node>, BatchError> {
    let list: NodeList = serde_json::from_str(text)
        .map_err(|e| BatchError::parse("sinfo --json", e.to_string(), text))?;
    Ok(list.nodes.into_iter().map(node).collect())
}

fn node(n: SlurmNode) -> Node {
    let flags = |f: &str| n.state_flags.iter().any(|s| s.eq_ignore_ascii_case(f));
    let base = n.state.to_ascii_lowercase();
    let state = if flags("DRAIN") || base.starts_with("drain") {
        if n.alloc_cpus > 0 || base == "draining" {
            NodeState::Draining
        } else {
            NodeState::Drained
        }
    } else {
        match base.as_str() {
            "idle" => NodeState::Idle,
            "mixed" => NodeState::Mixed,
            "allocated" => NodeState::Allocated,
            "down" | "fail" | "failing" | "future" => NodeState::Down,
            _ => NodeState::Unknown,
        }
    };
    let mut native = n.state.to_ascii_uppercase();
    for flag in &n.state_flags {
        native.push('+');
        native.push_str(flag);
    }
    Node {
        gpus: gpus(&n.gres),
        name: n.name,
        state,
        native_state: native,
        cpus: n.cpus,
        cpus_allocated: n.alloc_cpus,
        memory: n.real_memory.saturating_mul(1 << 20),
        memory_allocated: n.alloc_memory.saturating_mul(1 << 20),
        queues: n.partitions,
        reason: Some(n.reason).filter(|r| !r.is_empty()),
    }
}

/// GPUs in a `Gres` string: `gpu:2`, `gpu:a100:4(S:0-1)`, `gpu:a100:2,gpu:v100:1`.
fn gpus(gres: &str) -> u32 {
    gres.split(',')
        .filter(|g| g.starts_with("gpu"))
        .filter_map(|g| {
            let g = g.split('(').next().unwrap_or(g);
            g.rsplit(':').next()?.parse::<u32>().ok()
        })
        .sum()
}

/// `scontrol show config`: `Key = Value` lines after a title line.
pub fn config(text: &str) -> BTreeMap<String, String> {
    text.lines()
        .filter_map(|l| l.split_once(" = "))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .filter(|(k, _)| !k.is_empty() && !k.contains(' '))
        .collect()
}

/// `scontrol show partition --oneliner`: one partition a line, `Key=Value` words.
pub fn partitions(text: &str) -> Result<Vec<Queue>, BatchError> {
    let mut queues = Vec::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let fields: BTreeMap<&str, &str> = line
            .split_whitespace()
            .filter_map(|w| w.split_once('='))
            .collect();
        let Some(name) = fields.get("PartitionName") else {
            return Err(BatchError::parse(
                "scontrol show partition",
                "no PartitionName",
                line,
            ));
        };
        let max_time = fields.get("MaxTime").copied().unwrap_or("UNLIMITED");
        queues.push(Queue {
            name: (*name).to_string(),
            state: fields
                .get("State")
                .map_or_else(|| "unknown".into(), |s| s.to_ascii_lowercase()),
            default: fields.get("Default") == Some(&"YES"),
            max_walltime: slurm_duration(max_time),
            nodes: fields.get("Nodes").copied().unwrap_or_default().to_string(),
        });
    }
    Ok(queues)
}

/// `[D-]HH:MM:SS`, `MM:SS` or minutes, as Slurm writes limits; none for `UNLIMITED`.
fn slurm_duration(text: &str) -> Option<u64> {
    if text.chars().all(|c| c.is_ascii_digit()) && !text.is_empty() {
        return text.parse::<u64>().ok().map(|m| m * 60);
    }
    crate::parse_walltime(text).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_codes_come_from_wait_statuses() {
        assert_eq!(exit_code(0), 0);
        assert_eq!(exit_code(768), 3);
        assert_eq!(exit_code(9), 137);
        assert_eq!(exit_code(15), 143);
    }

    #[test]
    fn sacct_lines_from_jobcomp_are_jobs() {
        let text = "2|fail3|root(0)|FAILED|3:0|debug|localhost|2026-12-03T07:17:22|2026-12-03T07:17:22|2026-12-03T07:17:23\n\
                    2.batch|batch||FAILED|3:0|||2026-12-03T07:17:22|2026-12-03T07:17:22|2026-12-03T07:17:23\n\
                    9|killed|u|CANCELLED by 0|0:15|debug|localhost|2026-12-03T07:17:22|2026-12-03T07:17:22|2026-12-03T07:17:23\n";
        let jobs = sacct(text).unwrap();
        assert_eq!(jobs.len(), 2);
        assert_eq!(jobs[0].id, "2");
        assert_eq!(jobs[0].user, "root");
        assert_eq!(jobs[0].state, JobState::Failed);
        assert_eq!(jobs[0].exit_code, Some(3));
        assert_eq!(jobs[0].ended_at, Some(1_796_282_243));
        assert_eq!(jobs[1].state, JobState::Cancelled);
        assert_eq!(jobs[1].exit_code, Some(143));
        assert!(sacct("1|2|3\n").is_err());
    }

    #[test]
    fn states_map_to_the_common_set_with_their_reason() {
        assert_eq!(state("PENDING", Some("JobHeldUser")), JobState::Held);
        assert_eq!(state("PENDING", Some("Resources")), JobState::Queued);
        assert_eq!(state("CANCELLED by 0", None), JobState::Cancelled);
        assert_eq!(state("TIMEOUT", None), JobState::Timeout);
        assert_eq!(state("OUT_OF_MEMORY", None), JobState::Failed);
        assert_eq!(state("SOMETHING_NEW", None), JobState::Unknown);
    }

    #[test]
    fn gres_strings_count_gpus() {
        assert_eq!(gpus(""), 0);
        assert_eq!(gpus("gpu:2"), 2);
        assert_eq!(gpus("gpu:a100:4(S:0-1)"), 4);
        assert_eq!(gpus("gpu:a100:2,gpu:v100:1,mps:100"), 3);
    }

    #[test]
    fn partitions_and_config_read_as_scontrol_prints_them() {
        let text = "PartitionName=debug AllowGroups=ALL Default=YES MaxTime=UNLIMITED Nodes=localhost State=UP\n\
                    PartitionName=long Default=NO MaxTime=2-00:00:00 Nodes=n[1-4] State=DRAIN\n";
        let queues = partitions(text).unwrap();
        assert_eq!(queues[0].name, "debug");
        assert!(queues[0].default);
        assert_eq!(queues[0].max_walltime, None);
        assert_eq!(queues[1].max_walltime, Some(172_800));
        assert_eq!(queues[1].state, "drain");
        let settings = config(
            "Configuration data as of 2026-12-03T07:17:31\nMinJobAge               = 3600 sec\nSLURM_VERSION           = 22.05.8\n",
        );
        assert_eq!(settings["SLURM_VERSION"], "22.05.8");
        assert_eq!(settings["MinJobAge"], "3600 sec");
        assert_eq!(settings.len(), 2);
    }

    const SQUEUE: &str = include_str!("../../tests/recorded/slurm/squeue.json");
    const SINFO: &str = include_str!("../../tests/recorded/slurm/sinfo.json");
    const PARTITIONS: &str = include_str!("../../tests/recorded/slurm/partitions.txt");
    const SACCT: &str = include_str!("../../tests/recorded/slurm/sacct-completion.txt");

    #[test]
    fn recorded_outputs_read_whole() {
        let jobs = jobs(SQUEUE).unwrap();
        let states: Vec<JobState> = jobs.iter().map(|j| j.state).collect();
        assert_eq!(
            states,
            [
                JobState::Done,
                JobState::Failed,
                JobState::Held,
                JobState::Done,
                JobState::Cancelled
            ]
        );
        assert_eq!(jobs[1].exit_code, Some(3));
        assert_eq!(jobs[3].id, "4_1");
        assert_eq!(nodes(SINFO).unwrap()[0].cpus, 8);
        assert_eq!(partitions(PARTITIONS).unwrap()[0].name, "debug");
        assert!(!sacct(SACCT).unwrap().is_empty());
    }

    /// Every reader, on any text: a value or a typed error, never a panic.
    fn read_all(text: &str) {
        let _ = jobs(text);
        let _ = nodes(text);
        let _ = sacct(text);
        let _ = partitions(text);
        let _ = config(text);
    }

    proptest::proptest! {
        #[test]
        fn cut_outputs_never_panic(cut in 0.0f64..1.0) {
            for text in [SQUEUE, SINFO, PARTITIONS, SACCT] {
                let cut_text = crate::garble::cut(text, cut);
                read_all(cut_text);
            }
        }

        #[test]
        fn garbled_outputs_never_panic(at in 0usize..20_000, junk in ".{0,40}") {
            for text in [SQUEUE, SINFO, PARTITIONS, SACCT] {
                read_all(&crate::garble::insert(text, at, &junk));
            }
        }

        #[test]
        fn any_text_never_panics(text in "\\PC{0,300}") {
            read_all(&text);
        }
    }
}
