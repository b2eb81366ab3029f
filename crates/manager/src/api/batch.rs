//! A group's batch system: the binding (admins), its jobs (admins see and act on every job;
//! users on those Corral submitted for them, and others' are "not found"), its nodes and its
//! configuration, read by everyone and changed by admins. On a group bound to no batch system
//! these answer 409. A job that names inputs or outputs runs in a directory Corral makes under
//! the binding's `work_dir`, held until its inputs are uploaded; its outputs are read from there
//! once it ended (`corral_batch::staging`, as the binding's account).

use std::collections::HashMap;
use std::sync::Arc;

#[cfg(feature = "openapi")]
use super::openapi::{Binary, ErrorResponse, Name, SessionPath};
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use corral_api::batch::{
    BatchConfig, BatchJob, ConfigChange, JobSpec, JobsQuery, Node, SchedulerConfig, SignalBody,
    SubmitQuery, SubmittedJob,
};
use corral_api::sessions::OutputFile;
use corral_batch::{check_job_id, check_signal, staging, JobFilter};
use corral_store::BatchJobRecord;
use serde_json::json;

use super::{find_group, new_id, Result};
use crate::auth::Caller;
use crate::batch::{job_key, Bound};
use crate::error::ApiError;
use crate::extract::{Body, Query};
use crate::names::check_relative;
use crate::{now, App};

#[cfg_attr(
    feature = "openapi",
    utoipa::path(
    get,
    path = "/api/v1/groups/{name}/batch",
    summary = "The batch system the group is bound to",
    params(("name" = Name, Path, description = "the group")),
    responses(
        (status = 200, description = "success", body = BatchConfig),
        (status = 401, response = ErrorResponse),
        (status = 403, response = ErrorResponse),
        (status = 404, response = ErrorResponse),
    )
)
)]
pub(super) async fn get_binding(
    State(app): State<App>,
    _: Caller,
    Path(name): Path<String>,
) -> Result<Json<BatchConfig>> {
    find_group(&app, &name).await?;
    let stored = app
        .store
        .get_group_batch(&name)
        .await?
        .ok_or_else(|| ApiError::not_found("batch system of group", &name))?;
    let config = serde_json::from_str(&stored).map_err(|e| {
        tracing::error!(group = name, error = %e, "stored batch configuration does not parse");
        ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            "the stored batch configuration does not parse; bind it again",
        )
    })?;
    Ok(Json(config))
}

#[cfg_attr(
    feature = "openapi",
    utoipa::path(
    put,
    path = "/api/v1/groups/{name}/batch",
    summary = "Bind the group to a batch system, or change how its commands run (admin)",
    params(("name" = Name, Path, description = "the group")),
    request_body = BatchConfig,
    responses(
        (status = 200, description = "success", body = BatchConfig),
        (status = 400, response = ErrorResponse),
        (status = 401, response = ErrorResponse),
        (status = 403, response = ErrorResponse),
        (status = 404, response = ErrorResponse),
        (status = 413, response = ErrorResponse),
    )
)
)]
pub(super) async fn put_binding(
    State(app): State<App>,
    caller: Caller,
    Path(name): Path<String>,
    Body(config): Body<BatchConfig>,
) -> Result<Json<BatchConfig>> {
    caller.require_admin()?;
    find_group(&app, &name).await?;
    config.check()?;
    let json = serde_json::to_string(&config).expect("a configuration prints");
    app.store.set_group_batch(&name, Some(&json), now()).await?;
    app.batches.forget(&name);
    Ok(Json(config))
}

#[cfg_attr(
    feature = "openapi",
    utoipa::path(
    delete,
    path = "/api/v1/groups/{name}/batch",
    summary = "Unbind the group from its batch system; its jobs stay in the scheduler (admin)",
    params(("name" = Name, Path, description = "the group")),
    responses(
        (status = 204, description = "unbound (or bound to none)"),
        (status = 401, response = ErrorResponse),
        (status = 403, response = ErrorResponse),
        (status = 404, response = ErrorResponse),
    )
)
)]
pub(super) async fn delete_binding(
    State(app): State<App>,
    caller: Caller,
    Path(name): Path<String>,
) -> Result<StatusCode> {
    caller.require_admin()?;
    find_group(&app, &name).await?;
    app.store.set_group_batch(&name, None, now()).await?;
    app.batches.forget(&name);
    Ok(StatusCode::NO_CONTENT)
}

#[cfg_attr(
    feature = "openapi",
    utoipa::path(
    get,
    path = "/api/v1/groups/{name}/batch/jobs",
    summary = "The jobs of the group's batch system that the caller may see (an admin: every job; a user: those Corral submitted for them), in one call to the scheduler",
    params(("name" = Name, Path, description = "the group"), JobsQuery),
    responses(
        (status = 200, description = "success", body = Vec<BatchJob>),
        (status = 400, response = ErrorResponse),
        (status = 401, response = ErrorResponse),
        (status = 403, response = ErrorResponse),
        (status = 404, response = ErrorResponse),
        (status = 409, response = ErrorResponse),
        (status = 502, response = ErrorResponse),
        (status = 503, response = ErrorResponse),
        (status = 504, response = ErrorResponse),
    )
)
)]
pub(super) async fn list_jobs(
    State(app): State<App>,
    caller: Caller,
    Path(name): Path<String>,
    Query(q): Query<JobsQuery>,
) -> Result<Json<Vec<BatchJob>>> {
    find_group(&app, &name).await?;
    let owner = match (&q.owner, caller.is_admin()) {
        (Some(owner), false) if *owner != caller.user => {
            return Err(ApiError::forbidden("users list their own jobs only"))
        }
        (owner, true) => owner.clone(),
        (_, false) => Some(caller.user.clone()),
    };
    let bound = app.batches.of(&app, &name).await?;
    let filter = JobFilter {
        user: q.user,
        state: q.state,
        name: q.name,
    };
    let jobs = bound.system.jobs(&filter).await?;
    let mut keys: Vec<String> = jobs.iter().map(|j| job_key(&j.id).to_string()).collect();
    keys.sort();
    keys.dedup();
    let owners: HashMap<String, String> = app
        .store
        .batch_owners(&name, &keys, owner.as_deref())
        .await?
        .into_iter()
        .collect();
    let jobs = jobs
        .into_iter()
        .filter_map(|job| {
            let owner = owners.get(job_key(&job.id)).cloned();
            (owner.is_some() || (caller.is_admin() && q.owner.is_none())).then_some(BatchJob {
                job,
                owner,
                missing_outputs: None,
            })
        })
        .collect();
    Ok(Json(jobs))
}

#[cfg_attr(
    feature = "openapi",
    utoipa::path(
    post,
    path = "/api/v1/groups/{name}/batch/jobs",
    summary = "Submit a job to the group's batch system for the caller; with dry_run, the script and command line that would run",
    params(("name" = Name, Path, description = "the group"), SubmitQuery),
    request_body = JobSpec,
    responses(
        (status = 200, description = "dry run: what would be submitted", body = corral_api::batch::Rendered),
        (status = 201, description = "submitted", body = SubmittedJob),
        (status = 400, response = ErrorResponse),
        (status = 401, response = ErrorResponse),
        (status = 403, response = ErrorResponse),
        (status = 404, response = ErrorResponse),
        (status = 409, response = ErrorResponse),
        (status = 413, response = ErrorResponse),
        (status = 422, response = ErrorResponse),
        (status = 502, response = ErrorResponse),
        (status = 503, response = ErrorResponse),
        (status = 504, response = ErrorResponse),
    )
)
)]
pub(super) async fn submit_job(
    State(app): State<App>,
    caller: Caller,
    Path(name): Path<String>,
    Query(q): Query<SubmitQuery>,
    Body(spec): Body<JobSpec>,
) -> Result<Response> {
    find_group(&app, &name).await?;
    let mut spec = spec;
    // A user's job: not in the names of Corral's own (its pilots are found by theirs).
    spec.check_submitted()?;
    let bound = app.batches.of(&app, &name).await?;
    let files = !spec.inputs.is_empty() || !spec.outputs.is_empty();
    // A job with files gets a directory of Corral's making, under the binding's work_dir.
    let directory = if files {
        let Some(work_dir) = &bound.config.options.work_dir else {
            let field = if spec.inputs.is_empty() {
                "outputs"
            } else {
                "inputs"
            };
            return Err(ApiError::invalid(
                field,
                format!("group {name:?} stages no files: its batch binding has no work_dir"),
            ));
        };
        if spec.directory.is_some() {
            return Err(ApiError::invalid(
                "directory",
                "a job with inputs or outputs runs in a directory Corral makes; leave it out",
            ));
        }
        let dir = format!(
            "{}/{}/{}",
            work_dir.trim_end_matches('/'),
            caller.user,
            new_id("job-")
        );
        spec.directory = Some(dir.clone());
        Some(dir)
    } else {
        None
    };
    // Held until its inputs are uploaded; released by the last one unless its submitter held it.
    let release_after_inputs = !spec.inputs.is_empty() && !spec.hold;
    spec.hold |= !spec.inputs.is_empty();
    if q.dry_run {
        return Ok(Json(bound.system.render(&spec)?).into_response());
    }
    if let Some(dir) = &directory {
        staging::make_dir(&bound.config.commands(), dir).await?;
    }
    let id = bound.system.submit(&spec).await?;
    let record = BatchJobRecord {
        job_id: job_key(&id).to_string(),
        owner: caller.user.clone(),
        directory,
        awaiting: spec.inputs.clone(),
        outputs: spec.outputs.clone(),
        release_after_inputs,
        session: None,
    };
    app.store.record_batch_job(&name, &record, now()).await?;
    Ok((StatusCode::CREATED, Json(SubmittedJob { id })).into_response())
}

/// The group's batch system, once the caller may act on job `id`: an admin on any; a user on
/// those Corral submitted for them (others' are "not found", as they would be to a stranger).
async fn own_job(
    app: &App,
    caller: &Caller,
    group: &str,
    id: &str,
) -> Result<(Arc<Bound>, Option<BatchJobRecord>)> {
    find_group(app, group).await?;
    check_job_id(id)?;
    let record = app.store.batch_job(group, job_key(id)).await?;
    let owner = record.as_ref().map(|r| r.owner.as_str());
    if !caller.is_admin() && owner != Some(caller.user.as_str()) {
        return Err(ApiError::not_found("job", id));
    }
    Ok((app.batches.of(app, group).await?, record))
}

#[cfg_attr(
    feature = "openapi",
    utoipa::path(
    get,
    path = "/api/v1/groups/{name}/batch/jobs/{id}",
    summary = "One job, also after the scheduler forgot it (from its accounting)",
    params(("name" = Name, Path, description = "the group"), ("id" = corral_batch::openapi::JobId, Path, description = "the scheduler's job id")),
    responses(
        (status = 200, description = "success", body = BatchJob),
        (status = 400, response = ErrorResponse),
        (status = 401, response = ErrorResponse),
        (status = 403, response = ErrorResponse),
        (status = 404, response = ErrorResponse),
        (status = 409, response = ErrorResponse),
        (status = 502, response = ErrorResponse),
        (status = 503, response = ErrorResponse),
        (status = 504, response = ErrorResponse),
    )
)
)]
pub(super) async fn get_job(
    State(app): State<App>,
    caller: Caller,
    Path((name, id)): Path<(String, String)>,
) -> Result<Json<BatchJob>> {
    let (bound, record) = own_job(&app, &caller, &name, &id).await?;
    let job = bound.system.job(&id).await?;
    let missing_outputs = match &record {
        Some(BatchJobRecord {
            directory: Some(dir),
            outputs,
            ..
        }) if job.state.is_final() && !outputs.is_empty() => {
            Some(staging::missing(&bound.config.commands(), dir, outputs).await?)
        }
        _ => None,
    };
    Ok(Json(BatchJob {
        job,
        owner: record.map(|r| r.owner),
        missing_outputs,
    }))
}

#[cfg_attr(
    feature = "openapi",
    utoipa::path(
    delete,
    path = "/api/v1/groups/{name}/batch/jobs/{id}",
    summary = "Cancel a job",
    params(("name" = Name, Path, description = "the group"), ("id" = corral_batch::openapi::JobId, Path, description = "the scheduler's job id")),
    responses(
        (status = 204, description = "cancelled"),
        (status = 400, response = ErrorResponse),
        (status = 401, response = ErrorResponse),
        (status = 403, response = ErrorResponse),
        (status = 404, response = ErrorResponse),
        (status = 409, response = ErrorResponse),
        (status = 422, response = ErrorResponse),
        (status = 502, response = ErrorResponse),
        (status = 503, response = ErrorResponse),
        (status = 504, response = ErrorResponse),
    )
)
)]
pub(super) async fn cancel_job(
    State(app): State<App>,
    caller: Caller,
    Path((name, id)): Path<(String, String)>,
) -> Result<StatusCode> {
    let (bound, _) = own_job(&app, &caller, &name, &id).await?;
    bound.system.cancel(&id).await?;
    Ok(StatusCode::NO_CONTENT)
}

#[cfg_attr(
    feature = "openapi",
    utoipa::path(
    post,
    path = "/api/v1/groups/{name}/batch/jobs/{id}/hold",
    summary = "Hold a waiting job: it does not start until released",
    params(("name" = Name, Path, description = "the group"), ("id" = corral_batch::openapi::JobId, Path, description = "the scheduler's job id")),
    responses(
        (status = 204, description = "held"),
        (status = 400, response = ErrorResponse),
        (status = 401, response = ErrorResponse),
        (status = 403, response = ErrorResponse),
        (status = 404, response = ErrorResponse),
        (status = 409, response = ErrorResponse),
        (status = 422, response = ErrorResponse),
        (status = 502, response = ErrorResponse),
        (status = 503, response = ErrorResponse),
        (status = 504, response = ErrorResponse),
    )
)
)]
pub(super) async fn hold_job(
    State(app): State<App>,
    caller: Caller,
    Path((name, id)): Path<(String, String)>,
) -> Result<StatusCode> {
    let (bound, _) = own_job(&app, &caller, &name, &id).await?;
    bound.system.hold(&id).await?;
    Ok(StatusCode::NO_CONTENT)
}

#[cfg_attr(
    feature = "openapi",
    utoipa::path(
    post,
    path = "/api/v1/groups/{name}/batch/jobs/{id}/release",
    summary = "Release a held job",
    params(("name" = Name, Path, description = "the group"), ("id" = corral_batch::openapi::JobId, Path, description = "the scheduler's job id")),
    responses(
        (status = 204, description = "released"),
        (status = 400, response = ErrorResponse),
        (status = 401, response = ErrorResponse),
        (status = 403, response = ErrorResponse),
        (status = 404, response = ErrorResponse),
        (status = 409, response = ErrorResponse),
        (status = 422, response = ErrorResponse),
        (status = 502, response = ErrorResponse),
        (status = 503, response = ErrorResponse),
        (status = 504, response = ErrorResponse),
    )
)
)]
pub(super) async fn release_job(
    State(app): State<App>,
    caller: Caller,
    Path((name, id)): Path<(String, String)>,
) -> Result<StatusCode> {
    let (bound, _) = own_job(&app, &caller, &name, &id).await?;
    bound.system.release(&id).await?;
    Ok(StatusCode::NO_CONTENT)
}

#[cfg_attr(
    feature = "openapi",
    utoipa::path(
    post,
    path = "/api/v1/groups/{name}/batch/jobs/{id}/signal",
    summary = "Send a signal to a running job's processes",
    params(("name" = Name, Path, description = "the group"), ("id" = corral_batch::openapi::JobId, Path, description = "the scheduler's job id")),
    request_body = SignalBody,
    responses(
        (status = 204, description = "sent"),
        (status = 400, response = ErrorResponse),
        (status = 401, response = ErrorResponse),
        (status = 403, response = ErrorResponse),
        (status = 404, response = ErrorResponse),
        (status = 409, response = ErrorResponse),
        (status = 413, response = ErrorResponse),
        (status = 422, response = ErrorResponse),
        (status = 502, response = ErrorResponse),
        (status = 503, response = ErrorResponse),
        (status = 504, response = ErrorResponse),
    )
)
)]
pub(super) async fn signal_job(
    State(app): State<App>,
    caller: Caller,
    Path((name, id)): Path<(String, String)>,
    Body(body): Body<SignalBody>,
) -> Result<StatusCode> {
    check_signal(&body.signal)?;
    let (bound, _) = own_job(&app, &caller, &name, &id).await?;
    bound.system.signal(&id, &body.signal).await?;
    Ok(StatusCode::NO_CONTENT)
}

#[cfg_attr(
    feature = "openapi",
    utoipa::path(
    get,
    path = "/api/v1/groups/{name}/batch/nodes",
    summary = "The nodes of the group's batch system, with their state and resources",
    params(("name" = Name, Path, description = "the group")),
    responses(
        (status = 200, description = "success", body = Vec<Node>),
        (status = 401, response = ErrorResponse),
        (status = 403, response = ErrorResponse),
        (status = 404, response = ErrorResponse),
        (status = 409, response = ErrorResponse),
        (status = 502, response = ErrorResponse),
        (status = 503, response = ErrorResponse),
        (status = 504, response = ErrorResponse),
    )
)
)]
pub(super) async fn list_nodes(
    State(app): State<App>,
    _: Caller,
    Path(name): Path<String>,
) -> Result<Json<Vec<Node>>> {
    find_group(&app, &name).await?;
    let bound = app.batches.of(&app, &name).await?;
    Ok(Json(bound.system.nodes().await?))
}

#[cfg_attr(
    feature = "openapi",
    utoipa::path(
    get,
    path = "/api/v1/groups/{name}/batch/config",
    summary = "The scheduler's configuration: its settings and queues",
    params(("name" = Name, Path, description = "the group")),
    responses(
        (status = 200, description = "success", body = SchedulerConfig),
        (status = 401, response = ErrorResponse),
        (status = 403, response = ErrorResponse),
        (status = 404, response = ErrorResponse),
        (status = 409, response = ErrorResponse),
        (status = 502, response = ErrorResponse),
        (status = 503, response = ErrorResponse),
        (status = 504, response = ErrorResponse),
    )
)
)]
pub(super) async fn get_config(
    State(app): State<App>,
    _: Caller,
    Path(name): Path<String>,
) -> Result<Json<SchedulerConfig>> {
    find_group(&app, &name).await?;
    let bound = app.batches.of(&app, &name).await?;
    Ok(Json(bound.system.config().await?))
}

#[cfg_attr(
    feature = "openapi",
    utoipa::path(
    patch,
    path = "/api/v1/groups/{name}/batch/config",
    summary = "Change what the scheduler allows at run time: drain or resume a node, open or close a queue (admin); answers the configuration after",
    params(("name" = Name, Path, description = "the group")),
    request_body = ConfigChange,
    responses(
        (status = 200, description = "changed", body = SchedulerConfig),
        (status = 400, response = ErrorResponse),
        (status = 401, response = ErrorResponse),
        (status = 403, response = ErrorResponse),
        (status = 404, response = ErrorResponse),
        (status = 409, response = ErrorResponse),
        (status = 413, response = ErrorResponse),
        (status = 422, response = ErrorResponse),
        (status = 502, response = ErrorResponse),
        (status = 503, response = ErrorResponse),
        (status = 504, response = ErrorResponse),
    )
)
)]
pub(super) async fn patch_config(
    State(app): State<App>,
    caller: Caller,
    Path(name): Path<String>,
    Body(change): Body<ConfigChange>,
) -> Result<Json<SchedulerConfig>> {
    caller.require_admin()?;
    find_group(&app, &name).await?;
    let bound = app.batches.of(&app, &name).await?;
    bound.system.apply(&change).await?;
    Ok(Json(bound.system.config().await?))
}

/// The job's directory, where Corral stages its files; 409 for a job that names none.
fn directory_of<'a>(record: &'a Option<BatchJobRecord>, id: &str) -> Result<&'a BatchJobRecord> {
    match record {
        Some(r) if r.directory.is_some() => Ok(r),
        _ => Err(ApiError::new(
            StatusCode::CONFLICT,
            "refused",
            format!("job {id:?} was not submitted with inputs or outputs through Corral"),
        )),
    }
}

/// A user uploads an input their job names; the job is released once all are there.
#[cfg_attr(
    feature = "openapi",
    utoipa::path(
    put,
    path = "/api/v1/groups/{name}/batch/jobs/{id}/inputs/{path}",
    summary = "Upload an input the job names (up to 256 MiB) into its directory; once all are there it is released, unless its submitter held it",
    params(("name" = Name, Path, description = "the group"), ("id" = corral_batch::openapi::JobId, Path, description = "the scheduler's job id"), ("path" = inline(SessionPath), Path, description = "a relative path of normal parts (no '.', '..' or empty part)")),
    request_body(content = inline(Binary), content_type = "application/octet-stream"),
    responses(
        (status = 204, description = "done"),
        (status = 400, response = ErrorResponse),
        (status = 401, response = ErrorResponse),
        (status = 403, response = ErrorResponse),
        (status = 404, response = ErrorResponse),
        (status = 409, response = ErrorResponse),
        (status = 413, response = ErrorResponse),
        (status = 422, response = ErrorResponse),
        (status = 502, response = ErrorResponse),
        (status = 503, response = ErrorResponse),
        (status = 504, response = ErrorResponse),
    )
)
)]
pub(super) async fn put_input(
    State(app): State<App>,
    caller: Caller,
    Path((name, id, path)): Path<(String, String, String)>,
    body: Bytes,
) -> Result<StatusCode> {
    check_relative("path", &path)?;
    let (bound, record) = own_job(&app, &caller, &name, &id).await?;
    let record = directory_of(&record, &id)?;
    if !record.awaiting.contains(&path) {
        return Err(ApiError::invalid(
            "path",
            format!(
                "job {id:?} awaits no input {path:?} (it awaits {:?})",
                record.awaiting
            ),
        ));
    }
    let dir = record.directory.as_deref().unwrap_or_default();
    staging::write(&bound.config.commands(), dir, &path, &body).await?;
    let left = app
        .store
        .batch_input_received(&name, &record.job_id, &path)
        .await?;
    if left.is_some_and(|left| left.is_empty()) && record.release_after_inputs {
        bound.system.release(&id).await?;
    }
    Ok(StatusCode::NO_CONTENT)
}

/// The job's output files, once it has ended.
async fn ended_job(
    app: &App,
    caller: &Caller,
    group: &str,
    id: &str,
) -> Result<(Arc<Bound>, BatchJobRecord)> {
    let (bound, record) = own_job(app, caller, group, id).await?;
    let record = directory_of(&record, id)?.clone();
    let job = bound.system.job(id).await?;
    if !job.state.is_final() {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            "refused",
            format!(
                "job {id:?} is {}: its outputs are collected when it ends",
                job.state.as_str()
            ),
        ));
    }
    Ok((bound, record))
}

#[cfg_attr(
    feature = "openapi",
    utoipa::path(
    get,
    path = "/api/v1/groups/{name}/batch/jobs/{id}/outputs",
    summary = "The files of the outputs a job names, once it has ended (paths relative to its directory; links left out); a job with more than 10,000 files there is answered 422 `too_many_outputs`",
    params(("name" = Name, Path, description = "the group"), ("id" = corral_batch::openapi::JobId, Path, description = "the scheduler's job id")),
    responses(
        (status = 200, description = "success", body = Vec<OutputFile>),
        (status = 400, response = ErrorResponse),
        (status = 401, response = ErrorResponse),
        (status = 403, response = ErrorResponse),
        (status = 404, response = ErrorResponse),
        (status = 409, response = ErrorResponse),
        (status = 422, response = ErrorResponse),
        (status = 502, response = ErrorResponse),
        (status = 503, response = ErrorResponse),
        (status = 504, response = ErrorResponse),
    )
)
)]
pub(super) async fn list_outputs(
    State(app): State<App>,
    caller: Caller,
    Path((name, id)): Path<(String, String)>,
) -> Result<Json<Vec<OutputFile>>> {
    let (bound, record) = ended_job(&app, &caller, &name, &id).await?;
    let dir = record.directory.as_deref().unwrap_or_default();
    let max = staging::MAX_LISTED;
    let listing = staging::list(&bound.config.commands(), dir, &record.outputs, max).await?;
    if listing.more {
        // Some of them would read as all of them: refused, naming the bound.
        return Err(ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "too_many_outputs",
            format!(
                "job {id:?} has more than {max} files under its outputs; fetch them one by one \
                 by path, or have the job pack them into fewer files"
            ),
        )
        .with_details(json!({"limit": max})));
    }
    Ok(Json(
        listing
            .files
            .into_iter()
            .map(|(path, size)| OutputFile { path, size })
            .collect(),
    ))
}

/// The largest output file served: as large as a session's output may be. Larger ones are
/// refused before any of them is read.
const MAX_OUTPUT_BYTES: u64 = crate::agents::MAX_OUTPUT as u64;

/// How much of an output is read at a time: what the manager holds of it at once.
const OUTPUT_CHUNK: usize = 64 << 10;

#[cfg_attr(
    feature = "openapi",
    utoipa::path(
    get,
    path = "/api/v1/groups/{name}/batch/jobs/{id}/outputs/{path}",
    summary = "One output file of a job that has ended: an output it names, or a file under one; streamed, up to 256 MiB (a larger file is answered 422 `output_too_large` with its size, and nothing of it is read)",
    params(("name" = Name, Path, description = "the group"), ("id" = corral_batch::openapi::JobId, Path, description = "the scheduler's job id"), ("path" = inline(SessionPath), Path, description = "a relative path of normal parts (no '.', '..' or empty part)")),
    responses(
        (status = 200, description = "the bytes", body = inline(Binary), content_type = "application/octet-stream"),
        (status = 400, response = ErrorResponse),
        (status = 401, response = ErrorResponse),
        (status = 403, response = ErrorResponse),
        (status = 404, response = ErrorResponse),
        (status = 409, response = ErrorResponse),
        (status = 422, response = ErrorResponse),
        (status = 502, response = ErrorResponse),
        (status = 503, response = ErrorResponse),
        (status = 504, response = ErrorResponse),
    )
)
)]
pub(super) async fn get_output(
    State(app): State<App>,
    caller: Caller,
    Path((name, id, path)): Path<(String, String, String)>,
) -> Result<Response> {
    check_relative("path", &path)?;
    let (bound, record) = ended_job(&app, &caller, &name, &id).await?;
    let named = record
        .outputs
        .iter()
        .any(|o| path == *o || path.starts_with(&format!("{o}/")));
    if !named {
        return Err(ApiError::not_found("output", &path));
    }
    let dir = record.directory.as_deref().unwrap_or_default();
    let commands = bound.config.commands();
    let file = match staging::open(&commands, dir, &path, MAX_OUTPUT_BYTES).await? {
        staging::Output::File(file) => file,
        staging::Output::Missing => return Err(ApiError::not_found("output", &path)),
        staging::Output::TooLarge { size } => {
            return Err(ApiError::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                "output_too_large",
                format!(
                    "output {path:?} is {size} bytes, more than the {} MiB served; have the job \
                     split or compress it",
                    MAX_OUTPUT_BYTES >> 20
                ),
            )
            .with_details(json!({"size": size, "limit": MAX_OUTPUT_BYTES})))
        }
    };
    let size = file.size;
    // Piece by piece as the client takes them; a read that fails ends the body early, which
    // the client sees against the length.
    let pieces = futures_util::stream::unfold(Some(file), |file| async move {
        let mut file = file?;
        match file.next_chunk(OUTPUT_CHUNK).await {
            Ok(Some(chunk)) => Some((Ok(Bytes::from(chunk)), Some(file))),
            Ok(None) => None,
            Err(e) => {
                tracing::warn!(error = %e, "reading a batch job's output failed");
                Some((Err(e), None))
            }
        }
    });
    Ok((
        [
            ("content-type", "application/octet-stream".to_string()),
            ("content-length", size.to_string()),
        ],
        axum::body::Body::from_stream(pieces),
    )
        .into_response())
}
