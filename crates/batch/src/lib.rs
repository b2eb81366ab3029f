//! Batch systems: one contract ([`BatchSystem`]) over the schedulers sites already run, and a
//! generic job description ([`JobSpec`]) that each adaptor renders into its scheduler's script
//! and command line. What the adaptors report comes in one state set ([`JobState`]) with the
//! native state and reason kept verbatim. Adaptors run the schedulers' own commands (with a
//! timeout, [`Commands`]) and read their machine-readable output where there is one.
//!
//! - `spec`: the job description and its checks.
//! - `job`: jobs, nodes, the scheduler's configuration and the changes it allows.
//! - `system`: the contract.
//! - `command`: running a scheduler's command.
//! - `gridengine`: Grid Engine through `qsub`, `qstat -xml`, `qacct`, `qhost -xml`, `qconf`,
//!   `qmod`.
//! - `slurm`: Slurm through its command-line tools (`sbatch`, `squeue --json`, `scontrol`,
//!   `sinfo --json`, `scancel`, `sacct`).

mod command;
mod error;
pub mod gridengine;
mod job;
pub mod slurm;
mod spec;
mod system;

pub use command::{args, Answer, Commands};
pub use error::BatchError;
pub use job::{
    ConfigChange, Job, JobFilter, JobState, Node, NodeState, Queue, QueueState, Rendered,
    SchedulerConfig, ALL_STATES,
};
pub use spec::{
    is_job_id, parse_walltime, ArraySpec, Dependency, DependencyKind, JobSpec, Resources, MAX_NAME,
};
pub use system::{check_signal, BatchSystem};

/// `text` quoted for `/bin/sh`.
pub fn shell_quote(text: &str) -> String {
    shlex::try_quote(text).map_or_else(|_| "''".to_string(), |q| q.into_owned())
}
