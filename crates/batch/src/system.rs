//! The contract every batch system meets: list and read jobs, submit a `JobSpec`, act on a job,
//! list nodes, read the configuration and change what may change at run time.

use async_trait::async_trait;

use crate::{BatchError, ConfigChange, Job, JobFilter, JobSpec, Node, Rendered, SchedulerConfig};

#[async_trait]
pub trait BatchSystem: Send + Sync {
    /// `slurm`, `gridengine`, `pbs`, `lsf`, `exec`.
    fn name(&self) -> &'static str;

    /// The script and command line [`BatchSystem::submit`] would run, without running them.
    fn render(&self, spec: &JobSpec) -> Result<Rendered, BatchError>;

    /// Submits the job; returns its id (an array's id for an array).
    async fn submit(&self, spec: &JobSpec) -> Result<String, BatchError>;

    /// The jobs the scheduler knows that match, in one call to it, whatever their number.
    async fn jobs(&self, filter: &JobFilter) -> Result<Vec<Job>, BatchError>;

    /// One job, also after the scheduler forgot it (from its accounting).
    async fn job(&self, id: &str) -> Result<Job, BatchError>;

    async fn cancel(&self, id: &str) -> Result<(), BatchError>;
    async fn hold(&self, id: &str) -> Result<(), BatchError>;
    async fn release(&self, id: &str) -> Result<(), BatchError>;
    /// Sends a signal (`TERM`, `USR1`) to the job's processes.
    async fn signal(&self, id: &str, signal: &str) -> Result<(), BatchError>;

    async fn nodes(&self) -> Result<Vec<Node>, BatchError>;
    async fn config(&self) -> Result<SchedulerConfig, BatchError>;
    /// Applies a change the scheduler allows at run time.
    async fn apply(&self, change: &ConfigChange) -> Result<(), BatchError>;

    /// Whether [`BatchSystem::submit`] refuses a job no node or queue could ever run (rather
    /// than leave it queued for good); where it does not, the caller compares the job with
    /// [`BatchSystem::nodes`] first.
    fn refuses_impossible(&self) -> bool {
        false
    }
}

/// A signal's name without `SIG` (`TERM`, `USR1`, `KILL`), or why it is not one.
pub fn check_signal(signal: &str) -> Result<&str, BatchError> {
    let name = signal.strip_prefix("SIG").unwrap_or(signal);
    if crate::SIGNALS.contains(&name) {
        Ok(name)
    } else {
        Err(BatchError::invalid(
            "signal",
            format!("{signal:?} is not one of {}", crate::SIGNALS.join(", ")),
        ))
    }
}

/// A job id as the API takes it, or an error naming it.
pub fn check_job_id(id: &str) -> Result<(), BatchError> {
    if crate::is_job_id(id) {
        Ok(())
    } else {
        Err(BatchError::invalid("id", format!("{id:?} is not a job id")))
    }
}

/// A node's or a queue's name as it goes into a scheduler's command: letters, digits and
/// `._-` (Slurm's host lists add `[],`, which `extra` allows).
pub fn check_name(field: &str, name: &str, extra: &str) -> Result<(), BatchError> {
    let allowed = |c: char| c.is_ascii_alphanumeric() || "._-".contains(c) || extra.contains(c);
    if !name.is_empty() && name.chars().all(allowed) {
        Ok(())
    } else {
        Err(BatchError::invalid(
            field,
            format!("{name:?} is not a name"),
        ))
    }
}
