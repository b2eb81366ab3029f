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
//! - `exec`: a site's own plugin, speaking JSON on standard input and output.
//! - `gridengine`: Grid Engine through `qsub`, `qstat -xml`, `qacct`, `qhost -xml`, `qconf`,
//!   `qmod`.
//! - `lsf`: IBM Spectrum LSF through `bsub`, `bjobs -o ... -json`, `bkill`, `bstop`, `bresume`,
//!   `bhosts -o ... -json`, `bqueues`, `bparams` and `badmin`.
//! - `pbs`: PBS Pro / OpenPBS (`qstat -F json`) and Torque (`qstat -x`, XML) through `qsub`,
//!   `qstat`, `qdel`, `qhold`, `qrls`, `qsig`, `pbsnodes` and `qmgr`.
//! - `session`: a session of a batch-backed group as a job, and its job's state as the session's.
//! - `staging`: a job's files in its directory, as the binding's account.
//! - `slurm`: Slurm through its command-line tools (`sbatch`, `squeue --json`, `scontrol`,
//!   `sinfo --json`, `scancel`, `sacct`).

#[cfg(feature = "adaptors")]
mod command;
mod config;
mod error;
#[cfg(feature = "adaptors")]
pub mod exec;
#[cfg(feature = "adaptors")]
pub mod gridengine;
mod job;
#[cfg(feature = "adaptors")]
pub mod lsf;
#[cfg(feature = "openapi")]
pub mod openapi;
#[cfg(feature = "adaptors")]
pub mod pbs;
pub mod session;
#[cfg(feature = "adaptors")]
pub mod slurm;
mod spec;
#[cfg(feature = "adaptors")]
pub mod staging;
#[cfg(feature = "adaptors")]
mod system;
#[cfg(feature = "adaptors")]
mod times;

#[cfg(feature = "adaptors")]
pub use command::{args, Answer, Commands, Reading};
pub use config::{
    BatchConfig, BatchOptions, PbsFlavor, SystemName, DEFAULT_TIMEOUT_SECS, MAX_TIMEOUT_SECS,
};
pub use error::BatchError;
pub use job::{
    ConfigChange, Job, JobFilter, JobState, Node, NodeState, Queue, QueueState, Rendered,
    SchedulerConfig, ALL_STATES, SIGNALS,
};
pub use spec::{
    is_job_id, parse_walltime, ArraySpec, Dependency, DependencyKind, JobSpec, Resources, MAX_NAME,
    RESERVED_NAME_PREFIX,
};
#[cfg(feature = "adaptors")]
pub use system::{check_job_id, check_signal, BatchSystem};

/// `text` quoted for `/bin/sh`.
pub fn shell_quote(text: &str) -> String {
    shlex::try_quote(text).map_or_else(|_| "''".to_string(), |q| q.into_owned())
}

/// What the parsers' property tests do to recorded outputs: cut them, or put junk in them, on
/// character boundaries.
#[cfg(test)]
mod garble {
    /// The first `fraction` of `text`.
    pub fn cut(text: &str, fraction: f64) -> &str {
        let mut end = (text.len() as f64 * fraction) as usize;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        &text[..end]
    }

    /// `junk` put into `text` at `at` (or its end).
    pub fn insert(text: &str, at: usize, junk: &str) -> String {
        let mut at = at.min(text.len());
        while !text.is_char_boundary(at) {
            at -= 1;
        }
        format!("{}{junk}{}", &text[..at], &text[at..])
    }
}
