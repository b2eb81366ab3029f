//! Sessions of a group whose sessions run as jobs of its batch system (binding option
//! `sessions`): each is submitted as one job (`corral_batch::session`), refused at submit when
//! no node could ever run it, and followed by one listing of the scheduler per group per poll.
//! While its job runs, its logs are read from the job's directory; when it ends, its logs and
//! outputs are copied beside other sessions' files, so the same routes serve them. The cycle
//! leaves these sessions alone (the scheduler places them).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use axum::http::StatusCode;
use corral_batch::session::{fits, progress, Progress, SessionJob, STDERR, STDOUT};
use corral_batch::{staging, BatchError, Job, JobFilter};
use corral_core::{Session, SessionState};
use corral_store::{BatchJobRecord, SessionRecord, StoreError};
use serde_json::json;
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::agents::MAX_OUTPUT;
use crate::api::Spec;
use crate::batch::{job_key, Bound};
use crate::error::ApiError;
use crate::files::session_scope;
use crate::{now, App};

/// A group's jobs are polled this often at first and after a change; each poll that changes
/// nothing doubles the wait, up to [`MAX_POLL`].
const MIN_POLL: Duration = Duration::from_secs(1);
const MAX_POLL: Duration = Duration::from_secs(10);

/// Wakes the follower when a session job is submitted or cancelled.
#[derive(Default)]
pub struct Follower {
    wake: Notify,
}

impl Follower {
    pub fn wake(&self) {
        self.wake.notify_one();
    }
}

/// Submits the session as a job of the group's batch system and stores it with its job. A
/// request no node could ever hold, or one the scheduler refuses, is a 422 with the reason
/// (the scheduler's words when it refused) and leaves nothing behind.
pub(crate) async fn submit(
    app: &App,
    bound: &Bound,
    session: &Session,
    spec: &Spec,
) -> Result<(), ApiError> {
    let system = bound.system.name();
    if session.image.is_some() {
        return Err(ApiError::invalid(
            "image",
            format!(
                "group {:?} runs sessions as {system} jobs: they run a command, not an image",
                session.group
            ),
        ));
    }
    let work_dir = bound.config.options.work_dir.as_deref().unwrap_or("/");
    let directory = format!(
        "{}/{}/{}",
        work_dir.trim_end_matches('/'),
        session.owner,
        session.id.0
    );
    let job = SessionJob {
        id: &session.id.0,
        command: &spec.command,
        environment: &spec.environment,
        request: &session.request,
        directory: &directory,
        inputs: &spec.inputs,
        outputs: &spec.outputs,
    }
    .job_spec()?;
    if !bound.system.refuses_impossible() {
        fits(&job.resources, &bound.system.nodes().await?).map_err(infeasible)?;
    }
    let commands = bound.config.commands();
    staging::make_dir(&commands, &directory).await?;
    let id = bound.system.submit(&job).await.map_err(|e| match e {
        BatchError::Refused { scheduler, message } => {
            infeasible(format!("{scheduler} refused the job: {message}"))
        }
        e => e.into(),
    })?;
    let record = BatchJobRecord {
        job_id: job_key(&id).to_string(),
        owner: session.owner.clone(),
        directory: Some(directory),
        awaiting: spec.inputs.clone(),
        outputs: spec.outputs.clone(),
        release_after_inputs: !spec.inputs.is_empty(),
        session: None,
    };
    let spec = serde_json::to_value(spec).map_err(|e| ApiError::bad_request(e.to_string()))?;
    if let Err(e) = app
        .store
        .insert_batch_session(session, &spec, &record, now())
        .await
    {
        // A job nobody follows would run unseen.
        if let Err(cancel) = bound.system.cancel(&id).await {
            tracing::warn!(job = id, error = %cancel, "could not cancel a job whose session was not stored");
        }
        return Err(e.into());
    }
    app.batch_sessions.wake();
    Ok(())
}

fn infeasible(reason: String) -> ApiError {
    ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, "infeasible", reason)
        .with_details(json!({"field": "request"}))
}

/// The group's batch system and the record of the job that runs `session`.
async fn job_of(
    app: &App,
    session: &SessionRecord,
) -> Result<(Arc<Bound>, BatchJobRecord), ApiError> {
    let group = &session.session.group;
    let key = session.batch_job.as_deref().unwrap_or_default();
    let bound = app.batches.of(app, group).await?;
    let record = app
        .store
        .batch_job(group, key)
        .await?
        .ok_or_else(|| ApiError::not_found("job", key))?;
    Ok((bound, record))
}

/// Cancels the job that runs the session (one that already ended, or that the scheduler has
/// forgotten, needs nothing) and keeps what it left. The caller ends the session; the follower
/// may have ended it first, from the job's state.
pub(crate) async fn cancel_job(app: &App, session: &SessionRecord) -> Result<(), ApiError> {
    let (bound, record) = job_of(app, session).await?;
    cancel_if_there(&bound, &record.job_id).await?;
    if let Err(why) = collect(app, &bound, &record, &session.session.id.0).await {
        tracing::warn!(
            session = session.session.id.0,
            why,
            "files of a cancelled job not kept"
        );
    }
    Ok(())
}

/// Cancels job `id`; one that already ended (the scheduler refuses to cancel it) or that the
/// scheduler has forgotten needs nothing.
async fn cancel_if_there(bound: &Bound, id: &str) -> Result<(), ApiError> {
    match bound.system.cancel(id).await {
        Ok(()) | Err(BatchError::NoSuchJob { .. } | BatchError::Refused { .. }) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Up to `max` bytes of a running session job's log `stream` from `offset`, read where the job
/// writes it.
pub(crate) async fn read_log(
    app: &App,
    session: &SessionRecord,
    stream: &str,
    offset: u64,
    max: u64,
) -> Result<Vec<u8>, ApiError> {
    let (bound, record) = job_of(app, session).await?;
    let dir = record.directory.as_deref().unwrap_or_default();
    let file = if stream == "stdout" { STDOUT } else { STDERR };
    Ok(
        staging::read_from(&bound.config.commands(), dir, file, offset, max)
            .await?
            .unwrap_or_default(),
    )
}

/// Writes an input the session awaits into its job's directory; the last one releases the job.
pub(crate) async fn put_input(
    app: &App,
    session: &SessionRecord,
    path: &str,
    data: &[u8],
) -> Result<(), ApiError> {
    let (bound, record) = job_of(app, session).await?;
    if !record.awaiting.iter().any(|p| p == path) {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            "refused",
            format!(
                "session {:?} has its input {path:?} already: its job may have started",
                session.session.id.0
            ),
        ));
    }
    let dir = record.directory.as_deref().unwrap_or_default();
    staging::write(&bound.config.commands(), dir, path, data).await?;
    let left = app
        .store
        .batch_input_received(&session.session.group, &record.job_id, path)
        .await?;
    if left.is_some_and(|left| left.is_empty()) {
        bound.system.release(&record.job_id).await?;
    }
    Ok(())
}

/// Follows the session jobs of the groups this manager runs, for as long as it runs.
pub async fn follow(app: App) {
    // When each group is due, and its current wait.
    let mut due: HashMap<String, (Instant, Duration)> = HashMap::new();
    loop {
        tokio::select! {
            _ = app.batch_sessions.wake.notified() => due.clear(),
            _ = tokio::time::sleep(MIN_POLL) => {}
        }
        let groups = match app.store.bound_groups().await {
            Ok(groups) => groups,
            Err(e) => {
                tracing::warn!(error = %e, "could not list the groups bound to batch systems");
                continue;
            }
        };
        due.retain(|g, _| groups.iter().any(|(name, _)| name == g));
        for (group, binding) in groups {
            let sessions = serde_json::from_str::<corral_batch::BatchConfig>(&binding)
                .is_ok_and(|c| c.options.sessions);
            let now = Instant::now();
            // One manager follows a group, its lease's holder: the scheduler is listed once a
            // poll however many managers there are.
            if !sessions
                || !app.control.owns(&group)
                || due.get(&group).is_some_and(|(at, _)| *at > now)
            {
                continue;
            }
            let wait = due.get(&group).map_or(MIN_POLL, |(_, wait)| *wait);
            let wait = match poll(&app, &group).await {
                Ok(true) => MIN_POLL,
                Ok(false) => (wait * 2).min(MAX_POLL),
                Err(e) => {
                    tracing::warn!(group, error = %e, "could not follow the group's session jobs");
                    (wait * 2).min(MAX_POLL)
                }
            };
            due.insert(group, (now + wait, wait));
        }
    }
}

/// One poll of a group's session jobs: one listing of the scheduler (jobs it no longer lists
/// are asked for one by one, from its accounting). Whether any session changed.
async fn poll(app: &App, group: &str) -> Result<bool, ApiError> {
    let sessions = app.store.active_batch_sessions(group).await?;
    if sessions.is_empty() {
        return Ok(false);
    }
    let bound = app.batches.of(app, group).await?;
    let termination = app
        .store
        .get_group(group)
        .await?
        .map(|g| g.policy.termination);
    let filter = JobFilter {
        user: bound.config.options.run_as.clone(),
        ..JobFilter::default()
    };
    let listed = bound.system.jobs(&filter).await?;
    let by_key: HashMap<&str, &Job> = listed.iter().map(|j| (job_key(&j.id), j)).collect();
    let mut changed = false;
    for session in &sessions {
        let key = session.batch_job.as_deref().unwrap_or_default();
        let job = match by_key.get(key) {
            Some(job) => (*job).clone(),
            None => match bound.system.job(key).await {
                Ok(job) => job,
                Err(BatchError::NoSuchJob { .. }) => {
                    let reason = format!(
                        "job {key} is known neither to {} nor to its accounting",
                        bound.system.name()
                    );
                    changed |= end(app, session, SessionState::Failed, None, &reason).await?;
                    continue;
                }
                Err(e) => return Err(e.into()),
            },
        };
        let awaits_inputs = session.session.state == SessionState::Pending
            && session.spec["inputs"]
                .as_array()
                .is_some_and(|inputs| !inputs.is_empty());
        let overdue = termination.filter(|t| t.inputs_overdue(session.updated_at, now()));
        if let Some(t) = overdue.filter(|_| awaits_inputs) {
            if inputs_overdue(app, &bound, session, t.input_wait_secs).await? {
                changed = true;
                continue;
            }
        }
        changed |= step(app, &bound, session, &job).await?;
    }
    Ok(changed)
}

/// Fails a pending session whose inputs did not all arrive within the group's `input_wait_secs`
/// of its submission, and cancels its job; whether it did.
async fn inputs_overdue(
    app: &App,
    bound: &Bound,
    session: &SessionRecord,
    wait_secs: u64,
) -> Result<bool, ApiError> {
    let (group, key) = (
        &session.session.group,
        session.batch_job.as_deref().unwrap_or_default(),
    );
    if session.session.state != SessionState::Pending {
        return Ok(false);
    }
    let Some(record) = app.store.batch_job(group, key).await? else {
        return Ok(false);
    };
    if record.awaiting.is_empty() {
        return Ok(false);
    }
    cancel_if_there(bound, key).await?;
    let reason = format!(
        "its inputs did not arrive within {wait_secs} s of its submission (missing: {})",
        record.awaiting.join(", ")
    );
    end(app, session, SessionState::Failed, None, &reason).await
}

/// Brings the session to where its job is; whether it changed.
async fn step(
    app: &App,
    bound: &Bound,
    session: &SessionRecord,
    job: &Job,
) -> Result<bool, ApiError> {
    let id = &session.session.id.0;
    let pending = session.session.state == SessionState::Pending;
    match progress(job) {
        Progress::Waiting(why) if pending => {
            let system = bound.system.name();
            let reason = match why {
                Some(why) => format!("job {} is queued in {system}: {why}", job.id),
                None => format!("job {} is queued in {system}", job.id),
            };
            if session.wait_reason.as_deref() == Some(reason.as_str()) {
                return Ok(false);
            }
            app.store.set_wait_reason(id, Some(&reason)).await?;
            app.control.sessions.bump(id);
            Ok(true)
        }
        Progress::Running if pending => {
            let reason = format!("job {} started", job.id);
            match app.store.start_batch_session(id, now(), &reason).await {
                Ok(()) | Err(StoreError::Conflict { .. }) => {
                    app.control.sessions.bump(id);
                    Ok(true)
                }
                Err(e) => Err(e.into()),
            }
        }
        Progress::Waiting(_) | Progress::Running => Ok(false),
        Progress::Ended {
            state,
            exit_code,
            reason,
        } => {
            let record = app
                .store
                .batch_job(&session.session.group, job_key(&job.id))
                .await?
                .unwrap_or_default();
            let reason = match collect(app, bound, &record, id).await {
                Ok(()) => reason,
                Err(why) => format!("{reason}; its logs and outputs were not all kept: {why}"),
            };
            end(app, session, state, exit_code, &reason).await
        }
    }
}

/// Ends the session (one that ended meanwhile stays as it ended).
async fn end(
    app: &App,
    session: &SessionRecord,
    state: SessionState,
    exit_code: Option<i32>,
    reason: &str,
) -> Result<bool, ApiError> {
    let id = &session.session.id.0;
    match app
        .store
        .finish_session(id, state, exit_code, now(), reason)
        .await
    {
        Ok(_) => {
            app.control.sessions.bump(id);
            tracing::info!(session = id, reason, "session job ended");
            Ok(true)
        }
        Err(StoreError::Conflict { .. }) => Ok(false),
        Err(e) => Err(e.into()),
    }
}

/// Copies the job's logs and outputs from its directory to the session's files, where the
/// sessions' routes read them; a file larger than an upload may be is left where it is, and said so.
async fn collect(
    app: &App,
    bound: &Bound,
    record: &BatchJobRecord,
    session: &str,
) -> Result<(), String> {
    let Some(dir) = record.directory.as_deref() else {
        return Ok(());
    };
    let commands = bound.config.commands();
    let max = MAX_OUTPUT as u64;
    let mut left = Vec::new();
    for (stream, file) in [(STDOUT, "stdout.log"), (STDERR, "stderr.log")] {
        let data = staging::read_from(&commands, dir, stream, 0, max)
            .await
            .map_err(|e| e.to_string())?;
        if let Some(data) = data {
            app.files
                .put(&session_scope(session), file, &data)
                .await
                .map_err(|e| e.message)?;
        }
    }
    let listing = staging::list(&commands, dir, &record.outputs, staging::MAX_LISTED)
        .await
        .map_err(|e| e.to_string())?;
    for (path, size) in listing.files {
        crate::names::check_relative("output", &path).map_err(|e| e.message)?;
        if size > max {
            left.push(path);
            continue;
        }
        // Read no further than the cap, should it have grown since it was listed.
        let data = match staging::open(&commands, dir, &path, max)
            .await
            .map_err(|e| e.to_string())?
        {
            staging::Output::File(file) => file.bytes().await.map_err(|e| e.to_string())?,
            staging::Output::TooLarge { .. } => {
                left.push(path);
                continue;
            }
            staging::Output::Missing => continue,
        };
        app.files
            .put(&session_scope(session), &format!("outputs/{path}"), &data)
            .await
            .map_err(|e| e.message)?;
    }
    if listing.more {
        left.push(format!(
            "and more: only the first {} files are collected",
            staging::MAX_LISTED
        ));
    }
    if !left.is_empty() {
        return Err(format!(
            "larger than {} MiB, left in {dir}: {}",
            MAX_OUTPUT >> 20,
            left.join(", ")
        ));
    }
    Ok(())
}
