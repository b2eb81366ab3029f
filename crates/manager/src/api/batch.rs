//! A group's batch system: the binding (admins), its jobs (admins see and act on every job;
//! users on those Corral submitted for them, and others' are "not found"), its nodes and its
//! configuration, read by everyone and changed by admins. On a group bound to no batch system
//! these answer 409.

use std::collections::HashMap;

use super::openapi::{ErrorResponse, Name};
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use corral_api::batch::{
    BatchConfig, BatchJob, ConfigChange, JobSpec, JobsQuery, Node, Rendered, SchedulerConfig,
    SignalBody, SubmitQuery, SubmittedJob,
};
use corral_batch::{check_job_id, check_signal, JobFilter};

use super::{find_group, Result};
use crate::auth::Caller;
use crate::batch::job_key;
use crate::error::ApiError;
use crate::extract::{Body, Query};
use crate::{now, App};

#[utoipa::path(
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

#[utoipa::path(
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

#[utoipa::path(
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

#[utoipa::path(
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
    let system = app.batches.of(&app, &name).await?;
    let owners: HashMap<String, String> = app
        .store
        .batch_jobs(&name, owner.as_deref())
        .await?
        .into_iter()
        .collect();
    let filter = JobFilter {
        user: q.user,
        state: q.state,
        name: q.name,
    };
    let jobs = system.jobs(&filter).await?;
    let jobs = jobs
        .into_iter()
        .filter_map(|job| {
            let owner = owners.get(job_key(&job.id)).cloned();
            (owner.is_some() || (caller.is_admin() && q.owner.is_none()))
                .then_some(BatchJob { job, owner })
        })
        .collect();
    Ok(Json(jobs))
}

#[utoipa::path(
    post,
    path = "/api/v1/groups/{name}/batch/jobs",
    summary = "Submit a job to the group's batch system for the caller; with dry_run, the script and command line that would run",
    params(("name" = Name, Path, description = "the group"), SubmitQuery),
    request_body = JobSpec,
    responses(
        (status = 200, description = "dry run: what would be submitted", body = Rendered),
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
)]
pub(super) async fn submit_job(
    State(app): State<App>,
    caller: Caller,
    Path(name): Path<String>,
    Query(q): Query<SubmitQuery>,
    Body(spec): Body<JobSpec>,
) -> Result<Response> {
    find_group(&app, &name).await?;
    spec.check()?;
    if let Some(field) = [("inputs", &spec.inputs), ("outputs", &spec.outputs)]
        .into_iter()
        .find_map(|(field, paths)| (!paths.is_empty()).then_some(field))
    {
        return Err(ApiError::invalid(
            field,
            "files staged and collected through the API are not available yet for batch jobs; give the job's paths in its directory",
        ));
    }
    let system = app.batches.of(&app, &name).await?;
    if q.dry_run {
        return Ok(Json(system.render(&spec)?).into_response());
    }
    let id = system.submit(&spec).await?;
    app.store
        .record_batch_job(&name, job_key(&id), &caller.user, now())
        .await?;
    Ok((StatusCode::CREATED, Json(SubmittedJob { id })).into_response())
}

/// The group's batch system, once the caller may act on job `id`: an admin on any; a user on
/// those Corral submitted for them (others' are "not found", as they would be to a stranger).
async fn own_job(
    app: &App,
    caller: &Caller,
    group: &str,
    id: &str,
) -> Result<(
    std::sync::Arc<dyn corral_batch::BatchSystem>,
    Option<String>,
)> {
    find_group(app, group).await?;
    check_job_id(id)?;
    let owner = app.store.batch_job_owner(group, job_key(id)).await?;
    if !caller.is_admin() && owner.as_deref() != Some(caller.user.as_str()) {
        return Err(ApiError::not_found("job", id));
    }
    Ok((app.batches.of(app, group).await?, owner))
}

#[utoipa::path(
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
)]
pub(super) async fn get_job(
    State(app): State<App>,
    caller: Caller,
    Path((name, id)): Path<(String, String)>,
) -> Result<Json<BatchJob>> {
    let (system, owner) = own_job(&app, &caller, &name, &id).await?;
    let job = system.job(&id).await?;
    Ok(Json(BatchJob { job, owner }))
}

#[utoipa::path(
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
)]
pub(super) async fn cancel_job(
    State(app): State<App>,
    caller: Caller,
    Path((name, id)): Path<(String, String)>,
) -> Result<StatusCode> {
    let (system, _) = own_job(&app, &caller, &name, &id).await?;
    system.cancel(&id).await?;
    Ok(StatusCode::NO_CONTENT)
}

#[utoipa::path(
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
)]
pub(super) async fn hold_job(
    State(app): State<App>,
    caller: Caller,
    Path((name, id)): Path<(String, String)>,
) -> Result<StatusCode> {
    let (system, _) = own_job(&app, &caller, &name, &id).await?;
    system.hold(&id).await?;
    Ok(StatusCode::NO_CONTENT)
}

#[utoipa::path(
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
)]
pub(super) async fn release_job(
    State(app): State<App>,
    caller: Caller,
    Path((name, id)): Path<(String, String)>,
) -> Result<StatusCode> {
    let (system, _) = own_job(&app, &caller, &name, &id).await?;
    system.release(&id).await?;
    Ok(StatusCode::NO_CONTENT)
}

#[utoipa::path(
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
)]
pub(super) async fn signal_job(
    State(app): State<App>,
    caller: Caller,
    Path((name, id)): Path<(String, String)>,
    Body(body): Body<SignalBody>,
) -> Result<StatusCode> {
    check_signal(&body.signal)?;
    let (system, _) = own_job(&app, &caller, &name, &id).await?;
    system.signal(&id, &body.signal).await?;
    Ok(StatusCode::NO_CONTENT)
}

#[utoipa::path(
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
)]
pub(super) async fn list_nodes(
    State(app): State<App>,
    _: Caller,
    Path(name): Path<String>,
) -> Result<Json<Vec<Node>>> {
    find_group(&app, &name).await?;
    let system = app.batches.of(&app, &name).await?;
    Ok(Json(system.nodes().await?))
}

#[utoipa::path(
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
)]
pub(super) async fn get_config(
    State(app): State<App>,
    _: Caller,
    Path(name): Path<String>,
) -> Result<Json<SchedulerConfig>> {
    find_group(&app, &name).await?;
    let system = app.batches.of(&app, &name).await?;
    Ok(Json(system.config().await?))
}

#[utoipa::path(
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
)]
pub(super) async fn patch_config(
    State(app): State<App>,
    caller: Caller,
    Path(name): Path<String>,
    Body(change): Body<ConfigChange>,
) -> Result<Json<SchedulerConfig>> {
    caller.require_admin()?;
    find_group(&app, &name).await?;
    let system = app.batches.of(&app, &name).await?;
    system.apply(&change).await?;
    Ok(Json(system.config().await?))
}
