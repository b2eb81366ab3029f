//! Session arrays as people see them: made by `POST /sessions` with an `array` range (one
//! transaction: all or none), read, listed and cancelled as one. Who may see or cancel an array
//! is who may see or cancel its sessions: its owner and admins.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::Json;
use corral_api::arrays::{
    session_id, ArrayCancelled, ArrayQuery, ArrayView, SubmittedArray, ARRAY_ID_VARIABLE,
    ARRAY_INDEX_VARIABLE,
};
use corral_api::sessions::{Order, Spec, Submitted};
use corral_core::arrays::substitute_index;
use corral_core::{ArrayRange, Session, Slots};
use corral_store::{ArrayFilter, ArrayRecord, NewArray};

#[cfg(feature = "openapi")]
use super::openapi::ErrorResponse;
use super::{new_id, Result};
use crate::auth::Caller;
use crate::error::ApiError;
use crate::extract::Query;
use crate::names::check_relative;
use crate::{now, App};

/// What an array's range and submission must be beyond a single session's checks: a range
/// that is one (`ArrayRange::validate`: a 400 naming `array` with what is wrong), no variable
/// Corral sets itself, and paths that stay paths once `{index}` is replaced.
pub(super) fn check_array(range: &ArrayRange, spec: &Spec) -> Result<()> {
    range
        .validate()
        .map_err(|e| ApiError::invalid("array", e))?;
    for variable in [ARRAY_ID_VARIABLE, ARRAY_INDEX_VARIABLE] {
        if spec.environment.contains_key(variable) {
            return Err(ApiError::invalid(
                "environment",
                format!("{variable} is set by Corral in each session of an array"),
            ));
        }
    }
    // The index with the most digits makes the longest paths.
    let widest = last_index(range);
    for (field, paths) in [("inputs", &spec.inputs), ("outputs", &spec.outputs)] {
        for (i, p) in paths.iter().enumerate() {
            check_relative(&format!("{field}[{i}]"), &substitute_index(p, widest))?;
        }
    }
    Ok(())
}

/// The highest index of a valid range (its last one in steps, which may be below `last`).
fn last_index(range: &ArrayRange) -> u32 {
    range.indices().last().unwrap_or(range.first)
}

/// Stores the array made of `template` (every index's session alike but for its id, its
/// environment's `CORRAL_ARRAY_ID` and `CORRAL_ARRAY_INDEX`, and `{index}` in its command,
/// inputs and outputs) and wakes its group: what `POST /sessions` with `array` does once the
/// request is checked and admitted.
pub(super) async fn submit_array(
    app: &App,
    range: ArrayRange,
    template: &Session,
    spec: &Spec,
    required: Slots,
) -> Result<(StatusCode, Json<Submitted>)> {
    let id = new_id("a");
    let last = last_index(&range);
    let submitted = serde_json::to_value(spec).map_err(|e| ApiError::bad_request(e.to_string()))?;
    let waiting = range.max_running.map(|max| {
        format!(
            "its array {id} runs at most {max} of its sessions at once (%{max}); it waits its turn"
        )
    });
    let array = NewArray {
        id: &id,
        range,
        session: template,
        spec: &submitted,
        waiting_reason: waiting.as_deref(),
    };
    app.store.insert_array(&array).await?;
    app.control.wake_queue(&template.group);
    let sessions = u32::try_from(range.len()).unwrap_or(u32::MAX);
    Ok((
        StatusCode::CREATED,
        Json(Submitted {
            id: id.clone(),
            state: template.state,
            required,
            array: Some(SubmittedArray {
                first_session: session_id(&id, range.first, last),
                id,
                range: range.to_string(),
                sessions,
            }),
        }),
    ))
}

/// A stored array as the API shows it.
fn view(r: ArrayRecord) -> ArrayView {
    ArrayView {
        range: r.range.to_string(),
        max_running: r.range.max_running,
        active: r.counts.active() > 0,
        id: r.id,
        group: r.group,
        owner: r.owner,
        sessions: r.sessions,
        submitted_at: r.submitted_at,
        kind: r.kind,
        priority: r.priority,
        request: r.request,
        image: r.image,
        spec: serde_json::from_value(r.spec).unwrap_or_default(),
        counts: r.counts,
        max_exit_code: r.max_exit_code,
    }
}

/// Whether the caller may see the array's sessions, read without counting them (a listing
/// filtered by array): admins see all, users their own (another's is a 403, as another's
/// session is); 404 if there is no such array.
pub(crate) async fn may_see_array(app: &App, caller: &Caller, id: &str) -> Result<()> {
    let owner = app
        .store
        .array_owner(id)
        .await?
        .ok_or_else(|| ApiError::not_found("array", id))?;
    if !caller.is_admin() && owner != caller.user {
        return Err(ApiError::forbidden(format!(
            "array {id:?} belongs to another user"
        )));
    }
    Ok(())
}

/// An array the caller may see: admins see all, users their own (another's is a 403, as
/// another's session is).
pub(crate) async fn own_array(app: &App, caller: &Caller, id: &str) -> Result<ArrayRecord> {
    let record = app
        .store
        .get_array(id)
        .await?
        .ok_or_else(|| ApiError::not_found("array", id))?;
    if !caller.is_admin() && record.owner != caller.user {
        return Err(ApiError::forbidden(format!(
            "array {id:?} belongs to another user"
        )));
    }
    Ok(record)
}

#[cfg_attr(
    feature = "openapi",
    utoipa::path(
    get,
    path = "/api/v1/arrays",
    summary = "List session arrays (users see their own), each with its sessions counted by state, oldest first (newest with order=newest); 404 if the group or after names none",
    params(ArrayQuery),
    responses(
        (status = 200, description = "success", body = Vec<ArrayView>),
        (status = 400, response = ErrorResponse),
        (status = 401, response = ErrorResponse),
        (status = 403, response = ErrorResponse),
        (status = 404, response = ErrorResponse),
    )
)
)]
pub(super) async fn list_arrays(
    State(app): State<App>,
    caller: Caller,
    Query(q): Query<ArrayQuery>,
) -> Result<Json<Vec<ArrayView>>> {
    let owner = if caller.is_admin() {
        q.owner
    } else {
        Some(caller.user)
    };
    if let Some(group) = &q.group {
        super::find_group(&app, group).await?;
    }
    let filter = ArrayFilter {
        group: q.group,
        owner,
        active: q.active,
        limit: Some(q.limit.unwrap_or(100).clamp(1, 1000)),
        after_id: q.after,
        newest_first: q.order == Some(Order::Newest),
    };
    Ok(Json(
        app.store
            .list_arrays(&filter)
            .await?
            .into_iter()
            .map(view)
            .collect(),
    ))
}

#[cfg_attr(
    feature = "openapi",
    utoipa::path(
    get,
    path = "/api/v1/arrays/{id}",
    summary = "Get a session array: what was submitted, its sessions counted by state, and the highest exit code of those ended",
    params(("id" = String, Path, description = "the array")),
    responses(
        (status = 200, description = "success", body = ArrayView),
        (status = 401, response = ErrorResponse),
        (status = 403, response = ErrorResponse),
        (status = 404, response = ErrorResponse),
    )
)
)]
pub(super) async fn get_array(
    State(app): State<App>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Json<ArrayView>> {
    Ok(Json(view(own_array(&app, &caller, &id).await?)))
}

#[cfg_attr(
    feature = "openapi",
    utoipa::path(
    post,
    path = "/api/v1/arrays/{id}/cancel",
    summary = "Cancel every session of an array that has not ended (pending, scheduled or running), and nothing else, in one transaction; 200 with nothing cancelled once all have ended",
    params(("id" = String, Path, description = "the array")),
    responses(
        (status = 200, description = "success", body = ArrayCancelled),
        (status = 401, response = ErrorResponse),
        (status = 403, response = ErrorResponse),
        (status = 404, response = ErrorResponse),
    )
)
)]
pub(super) async fn cancel_array(
    State(app): State<App>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<impl IntoResponse> {
    own_array(&app, &caller, &id).await?;
    let done = app
        .store
        .cancel_array(&id, now(), &format!("cancelled by {}", caller.user))
        .await?;
    app.control
        .sessions
        .bump_each(done.cancelled.iter().map(String::as_str));
    if !done.cancelled.is_empty() {
        app.control.wake(&done.group);
    }
    for agent in &done.agents {
        app.control.wake_agent(agent);
    }
    Ok(Json(ArrayCancelled {
        id,
        cancelled: u32::try_from(done.cancelled.len()).unwrap_or(u32::MAX),
        counts: done.counts,
    }))
}
