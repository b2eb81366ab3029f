//! Pilot jobs' joins. The batch provider writes a pilot's one-time bootstrap token to a file
//! the job reads when it starts; while the job is queued, the batch account's other processes
//! (sessions on other pilots) could read it. So a bootstrap token is taken for a pilot only
//! from its own job: the join names its job (`JoinRequest::batch_job`, from the variable the
//! scheduler set), the job is the one the provider's submit returned (the instance's vendor
//! id), and the scheduler says that job runs, as the binding's account. Checked before the
//! token is spent: a refused join leaves it to the real job.

use axum::http::StatusCode;
use corral_api::protocol::JoinRequest;
use corral_batch::{BatchError, Job, JobState};

use crate::error::ApiError;
use crate::App;

/// Checks a join with a bootstrap token: if `req.id` is a pilot that the group's `batch`
/// provider launched, the join must come from its job while it runs. Joins of any other
/// agent pass untouched.
pub(crate) async fn check_join(app: &App, req: &JoinRequest, group: &str) -> Result<(), ApiError> {
    let Some(instance) = app
        .store
        .get_instance(&req.id)
        .await?
        .filter(|i| i.group == group)
    else {
        return Ok(());
    };
    let stored = app.store.get_group_provider(group).await?;
    let config = crate::secrets::parse_stored(group, stored.as_deref())?;
    if config.name != "batch" {
        return Ok(());
    }
    let options: corral_provider::batch::Options = corral_provider::options::parse(&config.options)
        .map_err(|e| {
            tracing::error!(group, error = %e, "stored pilot options do not parse");
            unavailable(format!(
                "group {group:?}: its batch provider's options do not parse: {e}"
            ))
        })?;
    let job_id = claimed_job(
        &req.id,
        req.batch_job.as_deref(),
        instance.provider_id.as_deref(),
    )?;
    let system = options
        .batch
        .connect()
        .await
        .map_err(|e| scheduler(&req.id, e))?;
    let job = system.job(job_id).await.map_err(|e| match e {
        BatchError::NoSuchJob { .. } => ApiError::forbidden(format!(
            "pilot {:?}: its job {job_id} is not in the scheduler: it joins only while its job runs",
            req.id
        )),
        e => scheduler(&req.id, e),
    })?;
    runs_for(&req.id, &job, options.batch.options.run_as.as_deref())
}

/// The job a pilot's join names, if it is the job the provider submitted for that pilot.
/// Pure: the claim and the instance's recorded vendor id.
fn claimed_job<'a>(
    agent: &str,
    claimed: Option<&str>,
    recorded: Option<&'a str>,
) -> Result<&'a str, ApiError> {
    let Some(claimed) = claimed else {
        return Err(ApiError::forbidden(format!(
            "agent {agent:?} is a pilot job: its bootstrap token joins only from its job, which \
             names itself (corral agent --batch-job, from the scheduler's job id)"
        )));
    };
    // The submit has not returned yet (its id is recorded once it does): the job may run
    // already. Not yet, rather than no: the agent tries again.
    let Some(recorded) = recorded else {
        return Err(unavailable(format!(
            "pilot {agent:?}: its job's submission is not recorded yet; try again"
        )));
    };
    if claimed != recorded {
        return Err(ApiError::forbidden(format!(
            "pilot {agent:?} is job {recorded}, not job {claimed:?}: its bootstrap token joins \
             only from its own job"
        )));
    }
    Ok(recorded)
}

/// Whether the scheduler's report says the pilot's job runs (as `run_as`, when it is given
/// and the scheduler says whose the job is). Pure.
fn runs_for(agent: &str, job: &Job, run_as: Option<&str>) -> Result<(), ApiError> {
    if job.state != JobState::Running {
        return Err(ApiError::forbidden(format!(
            "pilot {agent:?}: its job {} is {} ({}), not running: its bootstrap token joins \
             only from the job, once it runs",
            job.id,
            job.state.as_str(),
            job.native_state
        )));
    }
    if let Some(account) = run_as.filter(|_| !job.user.is_empty()) {
        if job.user != account {
            return Err(ApiError::forbidden(format!(
                "pilot {agent:?}: its job {} runs as {:?}, not as the binding's account {account:?}",
                job.id, job.user
            )));
        }
    }
    Ok(())
}

/// 503: the join may succeed later; the agent tries again.
fn unavailable(message: String) -> ApiError {
    ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "not_ready", message)
}

/// The scheduler could not say whether the pilot's job runs: not yet, rather than no.
fn scheduler(agent: &str, e: BatchError) -> ApiError {
    tracing::warn!(agent, error = %e, "could not read a pilot's job to admit its join");
    unavailable(format!(
        "pilot {agent:?}: the scheduler could not say whether its job runs: {e}"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(state: JobState, user: &str) -> Job {
        Job {
            id: "812".into(),
            name: "corral.hpc.hpc-0123456789".into(),
            user: user.into(),
            state,
            native_state: state.as_str().to_uppercase(),
            reason: None,
            exit_code: None,
            queue: None,
            nodes: None,
            submitted_at: None,
            started_at: None,
            ended_at: None,
            array_id: None,
            tasks: None,
        }
    }

    fn refusal(e: ApiError) -> (u16, String) {
        (e.status.as_u16(), e.message)
    }

    /// Issue 43: a queued pilot's token, read from its file, joined from elsewhere. The join
    /// must name the pilot's own job, the one its submit returned.
    #[test]
    fn a_pilots_join_names_the_job_its_submit_returned() {
        let id = "hpc-0123456789";
        assert_eq!(claimed_job(id, Some("812"), Some("812")).unwrap(), "812");
        let (status, message) = refusal(claimed_job(id, None, Some("812")).unwrap_err());
        assert_eq!(status, 403);
        assert!(message.contains("--batch-job"), "{message}");
        let (status, message) = refusal(claimed_job(id, Some("813"), Some("812")).unwrap_err());
        assert_eq!(status, 403);
        assert!(message.contains("is job 812, not job \"813\""), "{message}");
        // Submitted, its id not recorded yet: the real job tries again.
        let (status, message) = refusal(claimed_job(id, Some("812"), None).unwrap_err());
        assert_eq!(status, 503);
        assert!(message.contains("try again"), "{message}");
    }

    #[test]
    fn a_pilots_join_is_taken_only_while_its_job_runs_as_the_bindings_account() {
        let id = "hpc-0123456789";
        assert!(runs_for(
            id,
            &job(JobState::Running, "corral-batch"),
            Some("corral-batch")
        )
        .is_ok());
        // Without run_as (the manager's own account), or a scheduler that does not say whose.
        assert!(runs_for(id, &job(JobState::Running, "corral"), None).is_ok());
        assert!(runs_for(id, &job(JobState::Running, ""), Some("corral-batch")).is_ok());
        for state in [
            JobState::Queued,
            JobState::Held,
            JobState::Suspended,
            JobState::Completing,
            JobState::Done,
            JobState::Cancelled,
            JobState::Unknown,
        ] {
            let (status, message) = refusal(
                runs_for(id, &job(state, "corral-batch"), Some("corral-batch")).unwrap_err(),
            );
            assert_eq!(status, 403, "{state:?}");
            assert!(
                message.contains(&format!("job 812 is {}", state.as_str())),
                "{message}"
            );
        }
        let (status, message) = refusal(
            runs_for(id, &job(JobState::Running, "mallory"), Some("corral-batch")).unwrap_err(),
        );
        assert_eq!(status, 403);
        assert!(message.contains("runs as \"mallory\""), "{message}");
    }
}
