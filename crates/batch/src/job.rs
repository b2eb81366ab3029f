//! What a batch system reports: jobs in one state set common to every scheduler (the native
//! state and reason kept verbatim beside it), nodes, and the scheduler's configuration with the
//! changes it allows at run time.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// The signals a job may be sent, by name without `SIG`.
pub const SIGNALS: [&str; 12] = [
    "HUP", "INT", "QUIT", "KILL", "USR1", "USR2", "TERM", "CONT", "STOP", "TSTP", "ALRM", "XCPU",
];

/// A job's state, the same for every scheduler (after DRMAA2's).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum JobState {
    /// Waiting to start.
    Queued,
    /// Waiting until released (by its user, an admin or the system).
    Held,
    Running,
    Suspended,
    /// Ended; the scheduler is cleaning up.
    Completing,
    /// Ended with exit code 0.
    Done,
    /// Ended otherwise (exit code, node failure, out of memory).
    Failed,
    Cancelled,
    /// Killed at its walltime.
    Timeout,
    /// A state this adaptor does not know (kept verbatim in `native_state`).
    Unknown,
}

impl JobState {
    /// The job will not change any more.
    pub fn is_final(self) -> bool {
        matches!(
            self,
            JobState::Done | JobState::Failed | JobState::Cancelled | JobState::Timeout
        )
    }

    pub fn as_str(self) -> &'static str {
        match self {
            JobState::Queued => "queued",
            JobState::Held => "held",
            JobState::Running => "running",
            JobState::Suspended => "suspended",
            JobState::Completing => "completing",
            JobState::Done => "done",
            JobState::Failed => "failed",
            JobState::Cancelled => "cancelled",
            JobState::Timeout => "timeout",
            JobState::Unknown => "unknown",
        }
    }

    pub fn parse(text: &str) -> Option<JobState> {
        ALL_STATES.into_iter().find(|s| s.as_str() == text)
    }
}

pub const ALL_STATES: [JobState; 10] = [
    JobState::Queued,
    JobState::Held,
    JobState::Running,
    JobState::Suspended,
    JobState::Completing,
    JobState::Done,
    JobState::Failed,
    JobState::Cancelled,
    JobState::Timeout,
    JobState::Unknown,
];

/// A job as its scheduler reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Job {
    /// The scheduler's id: `123`, an array's task `123_4` (Slurm) or `123.4` (Grid Engine).
    pub id: String,
    pub name: String,
    pub user: String,
    pub state: JobState,
    /// The scheduler's own state (`PENDING`, `qw`, `R`), verbatim.
    pub native_state: String,
    /// Why it waits or ended, as the scheduler says (`JobHeldUser`, `Resources`).
    #[serde(default)]
    pub reason: Option<String>,
    /// The exit code once it ended (128 + n when killed by signal n).
    #[serde(default)]
    pub exit_code: Option<i32>,
    #[serde(default)]
    pub queue: Option<String>,
    /// The nodes it runs or ran on, as the scheduler writes them.
    #[serde(default)]
    pub nodes: Option<String>,
    /// Unix seconds.
    #[serde(default)]
    pub submitted_at: Option<i64>,
    #[serde(default)]
    pub started_at: Option<i64>,
    #[serde(default)]
    pub ended_at: Option<i64>,
    /// For a task of an array: the array's id.
    #[serde(default)]
    pub array_id: Option<String>,
    /// For an array's entry of tasks still waiting: which (`3-4`, `5,7`, `1-9:2`; Slurm adds
    /// the concurrency limit, `%2`).
    #[serde(default)]
    pub tasks: Option<String>,
}

impl Job {
    /// Task `id` (`ARRAY<sep>TASK`) as this entry of the array's waiting tasks shows it, if it
    /// is one of them.
    pub fn waiting_task(&self, id: &str, separator: char) -> Option<Job> {
        let (array, task) = id.split_once(separator)?;
        let task: u64 = task.parse().ok()?;
        let listed = self.array_id.as_deref() == Some(array)
            && self.tasks.as_deref().is_some_and(|t| lists_task(t, task));
        listed.then(|| Job {
            id: id.to_string(),
            tasks: None,
            ..self.clone()
        })
    }
}

/// Whether a task list (`3-4`, `5,7`, `1-9:2`, `3-4%2`) names `task`.
pub fn lists_task(list: &str, task: u64) -> bool {
    let list = list.split('%').next().unwrap_or_default();
    list.split(',').any(|item| {
        let (range, step) = item.split_once(':').unwrap_or((item, "1"));
        let (first, last) = range.split_once('-').unwrap_or((range, range));
        match (
            first.parse::<u64>(),
            last.parse::<u64>(),
            step.parse::<u64>(),
        ) {
            (Ok(first), Ok(last), Ok(step)) if step > 0 => {
                (first..=last).contains(&task) && (task - first).is_multiple_of(step)
            }
            _ => false,
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn task_lists_as_schedulers_write_them() {
        assert!(lists_task("3-4%2", 3));
        assert!(lists_task("3,4", 4));
        assert!(lists_task("1-9:2", 5));
        assert!(!lists_task("1-9:2", 4));
        assert!(!lists_task("3-4", 5));
        assert!(!lists_task("garbage", 1));
        assert!(!lists_task("1-4:0", 1));
    }
}

/// Which jobs to list; unset fields match every job.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct JobFilter {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<JobState>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

impl JobFilter {
    pub fn matches(&self, job: &Job) -> bool {
        self.user.as_ref().is_none_or(|u| *u == job.user)
            && self.state.is_none_or(|s| s == job.state)
            && self.name.as_ref().is_none_or(|n| *n == job.name)
    }
}

/// A node's state, the same for every scheduler.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum NodeState {
    Idle,
    /// Some of it is in use.
    Mixed,
    /// All of it is in use.
    Allocated,
    /// Taking no new jobs; some still run.
    Draining,
    /// Taking no new jobs; none runs.
    Drained,
    Down,
    Unknown,
}

/// A node of the cluster.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Node {
    pub name: String,
    pub state: NodeState,
    pub native_state: String,
    pub cpus: u32,
    pub cpus_allocated: u32,
    /// Bytes.
    pub memory: u64,
    pub memory_allocated: u64,
    pub gpus: u32,
    pub queues: Vec<String>,
    #[serde(default)]
    pub reason: Option<String>,
}

/// The scheduler's configuration: its settings as it names them, and its queues.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
// Named apart from the core's `SchedulerConfig` (a group's scheduling) in the API document.
#[cfg_attr(feature = "openapi", schema(as = BatchSchedulerConfig))]
pub struct SchedulerConfig {
    pub scheduler: String,
    #[serde(default)]
    pub version: Option<String>,
    pub settings: BTreeMap<String, String>,
    pub queues: Vec<Queue>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Queue {
    pub name: String,
    /// `up`, `down`, `drain`, `inactive` (the scheduler's, lower-cased).
    pub state: String,
    pub default: bool,
    /// Seconds; none when unlimited.
    #[serde(default)]
    pub max_walltime: Option<u64>,
    pub nodes: String,
}

/// A change the scheduler allows at run time.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum ConfigChange {
    /// Take no new jobs on the node; running ones finish.
    DrainNode { node: String, reason: String },
    /// Take jobs on the node again.
    ResumeNode { node: String },
    /// Open (`up`) or close (`down`: refuse submits and starts; `drain`: refuse submits, start
    /// those queued) a queue.
    QueueState { queue: String, state: QueueState },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum QueueState {
    Up,
    Down,
    Drain,
}

/// What `submit` would run: the script and the command line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Rendered {
    pub script: String,
    pub command: Vec<String>,
}
