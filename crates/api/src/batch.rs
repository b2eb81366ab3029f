//! A group's batch system as the API carries it: the binding (`BatchConfig`), jobs as users see
//! them (with the Corral user each was submitted for), and the bodies of the job routes. The job
//! description and what schedulers report are corral-batch's types.

use serde::{Deserialize, Serialize};

pub use corral_batch::{
    BatchConfig, BatchOptions, ConfigChange, Job, JobSpec, JobState, Node, NodeState, Queue,
    QueueState, Rendered, SchedulerConfig, SystemName,
};

/// A job of the group's batch system.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct BatchJob {
    #[serde(flatten)]
    pub job: Job,
    /// The Corral user it was submitted for; none for jobs submitted around Corral.
    #[serde(default)]
    pub owner: Option<String>,
    /// For a job that ended, read on its own: the outputs it names that are not in its
    /// directory (it could not write them); null when not looked at.
    #[serde(default)]
    pub missing_outputs: Option<Vec<String>>,
}

/// Which jobs to list; unset fields match every job.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::IntoParams))]
#[cfg_attr(feature = "openapi", into_params(parameter_in = Query))]
#[serde(deny_unknown_fields)]
pub struct JobsQuery {
    /// The scheduler's user (the Unix account that runs the job).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<JobState>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The Corral user a job was submitted for (admins; users see their own only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
}

/// `POST /groups/{g}/batch/jobs`'s query.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::IntoParams))]
#[cfg_attr(feature = "openapi", into_params(parameter_in = Query))]
#[serde(deny_unknown_fields)]
pub struct SubmitQuery {
    /// Answer the script and command line that would be run, and submit nothing.
    #[serde(default)]
    pub dry_run: bool,
}

/// A submitted job.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SubmittedJob {
    /// The scheduler's id (an array's, for an array).
    pub id: String,
}

/// A signal for a job's processes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct SignalBody {
    /// `TERM`, `USR1`, `KILL`... (with or without `SIG`).
    #[cfg_attr(feature = "openapi", schema(value_type = corral_batch::openapi::Signal))]
    pub signal: String,
}
