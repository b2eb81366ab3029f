//! Sessions as people see them: submit (checked in full, then admitted against the group at
//! once, so an impossible request is a 422 and stored nowhere), list, get and cancel. What a
//! session runs is its `Spec`, which the agents' side (`crate::agents`) reads too.

#[cfg(feature = "openapi")]
use super::openapi::ErrorResponse;
use axum::extract::{Path, State};
use axum::http::header::{CONTENT_TYPE, ETAG, IF_NONE_MATCH};
use axum::http::HeaderMap;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use corral_api::arrays::NO_ARRAY;
pub(crate) use corral_api::sessions::Spec;
use corral_api::sessions::{NewSession, SessionQuery, SessionView, Submitted};
use corral_core::admission::admit;
use corral_core::{Session, SessionId, SessionState, Snapshot, TimeLimitError};
use corral_store::{ArraySelect, SessionFilter, SessionRecord, StoreError};
use serde_json::json;

use super::{known_image, new_id, Result};
use crate::auth::Caller;
use crate::changes::Wait;
use crate::error::ApiError;
use crate::extract::{Body, Query};
use crate::names::{check_image_name, check_name, check_no_nul, check_relative};
use crate::{now, App};

const PRIORITY_RANGE: std::ops::RangeInclusive<i32> = -1000..=1000;
/// Most inputs (and outputs) one session names.
const MAX_FILES: usize = 1000;

fn check_submit(b: &NewSession) -> Result<()> {
    check_name("group", &b.group)?;
    if b.command.is_empty() && b.image.is_none() {
        return Err(ApiError::invalid(
            "command",
            "give a command, an image, or both",
        ));
    }
    if b.request.is_empty() {
        return Err(ApiError::invalid(
            "request",
            "ask for at least one slot, e.g. cpu=1",
        ));
    }
    if !PRIORITY_RANGE.contains(&b.priority) {
        return Err(ApiError::invalid(
            "priority",
            format!(
                "{} is outside {}..={}",
                b.priority,
                PRIORITY_RANGE.start(),
                PRIORITY_RANGE.end()
            ),
        ));
    }
    if let Some(image) = &b.image {
        check_image_name("image", image)?;
    }
    // The amounts of each device kind are checked by admission, which knows the group's kinds.
    corral_core::devices::check_request(&b.request, &b.constraints, &[])
        .map_err(|e| ApiError::invalid("constraints", e.to_string()))?;
    for (i, arg) in b.command.iter().enumerate() {
        check_no_nul(&format!("command[{i}]"), arg)?;
    }
    for (field, paths) in [("inputs", &b.inputs), ("outputs", &b.outputs)] {
        if paths.len() > MAX_FILES {
            return Err(ApiError::invalid(
                field,
                format!("{} paths given; at most {MAX_FILES}", paths.len()),
            ));
        }
        for (i, p) in paths.iter().enumerate() {
            check_relative(&format!("{field}[{i}]"), p)?;
        }
    }
    for (key, value) in &b.environment {
        let ok = key.len() <= 255
            && key
                .chars()
                .next()
                .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !ok {
            return Err(ApiError::invalid(
                "environment",
                format!("{key:?} is not a variable name"),
            ));
        }
        check_no_nul(&format!("environment.{key}"), value)?;
    }
    corral_api::apps::check_apps(&b.apps).map_err(|e| ApiError::invalid("apps", e.to_string()))?;
    Ok(())
}

#[cfg_attr(
    feature = "openapi",
    utoipa::path(
    post,
    path = "/api/v1/sessions",
    summary = "Submit a session, or with `array` a session per index of its range in one transaction (all or none; the answer's id is the array's); an infeasible request is refused with 422 and stored nowhere, a range that is not one (the last index below the first, step or limit 0, more than 1,000,000 sessions) with 400 naming `array`, an array on a group whose sessions run as batch jobs with 422 (on such a group: 502, 503 or 504 when its scheduler fails)",
    request_body = NewSession,
    responses(
        (status = 201, description = "success", body = Submitted),
        (status = 400, response = ErrorResponse),
        (status = 401, response = ErrorResponse),
        (status = 403, response = ErrorResponse),
        (status = 413, response = ErrorResponse),
        (status = 422, response = ErrorResponse),
        (status = 502, response = ErrorResponse),
        (status = 503, response = ErrorResponse),
        (status = 504, response = ErrorResponse),
    )
)
)]
pub(super) async fn submit(
    State(app): State<App>,
    caller: Caller,
    Body(b): Body<NewSession>,
) -> Result<impl IntoResponse> {
    check_submit(&b)?;
    let array = b.array;
    let kind = b.session_type();
    let session = |group: String| Session {
        id: SessionId(new_id("s")),
        group,
        owner: caller.user.clone(),
        priority: b.priority,
        request: b.request.clone(),
        image: b.image.clone(),
        kind,
        submitted_at: now(),
        state: SessionState::Pending,
        agent: None,
        blocked_passes: 0,
        constraints: b.constraints.clone(),
        devices: Vec::new(),
        array: None,
    };
    let time_limit_secs = time_limit(&app, &b.group, b.time_limit_secs).await?;
    let spec = Spec {
        command: b.command,
        inputs: b.inputs,
        outputs: b.outputs,
        environment: b.environment,
        apps: b.apps,
        time_limit_secs,
    };
    if let Some(range) = &array {
        super::arrays::check_array(range, &spec)?;
    }
    if array.is_some() && app.batches.runs_sessions(&app, &b.group).await? {
        return Err(ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "arrays_unsupported",
            format!(
                "group {:?} runs its sessions as batch jobs, which take no session arrays yet; \
                 submit its sessions one by one",
                b.group
            ),
        )
        .with_details(json!({"field": "array"})));
    }
    // The scheduler places sessions of a group whose sessions run as batch jobs.
    if let Some(bound) = app.batches.for_sessions(&app, &b.group).await? {
        let session = session(b.group.clone());
        crate::batch_sessions::submit(&app, &bound, &session, &spec).await?;
        return Ok(submitted(&session, session.request.clone()));
    }
    let refused = |view: &Snapshot| {
        let required = view.required_for(&b.request, b.image.as_deref());
        admit(view, &required, &b.constraints).is_err()
    };
    // A refusal is never made on a remembered view: the agent that would hold the request may
    // have joined since (its join is visible before it invalidates the view).
    let view = match app.control.views.get(&b.group) {
        Some(view) if !refused(&view) => view,
        _ => admission_view(&app, &b.group).await?,
    };
    known_image(&view, b.image.as_deref())?;
    let required = view.required_for(&b.request, b.image.as_deref());
    if let Err(reason) = admit(&view, &required, &b.constraints) {
        let mut message = reason.to_string();
        if let (Some(image), true) = (&b.image, required != b.request) {
            message.push_str(&format!(
                " (image {image:?}'s minimums raised the request {} to {required})",
                b.request
            ));
        }
        return Err(
            ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, "infeasible", message)
                .with_details(json!({"field": "request", "required": required})),
        );
    }
    let session = session(view.group.name.clone());
    // Admitted once: every session of an array asks for the same.
    if let Some(range) = array {
        return super::arrays::submit_array(&app, range, &session, &spec, required).await;
    }
    let spec = serde_json::to_value(&spec).map_err(|e| ApiError::bad_request(e.to_string()))?;
    app.submitter.submit(session.clone(), spec).await?;
    Ok(submitted(&session, required))
}

/// A session's time limit under its group's termination policy ([`corral_core::Termination::time_limit`]).
/// A group that does not exist is left to admission to say so.
async fn time_limit(app: &App, group: &str, asked: Option<u64>) -> Result<Option<u64>> {
    let termination = (app.policies.policy(&app.store, group).await?)
        .map(|p| p.termination)
        .unwrap_or_default();
    let field = "time_limit_secs";
    match termination.time_limit(asked, corral_api::sessions::MAX_TIME_LIMIT_SECS) {
        Ok(limit) => Ok(limit),
        Err(TimeLimitError::Zero) => Err(ApiError::invalid(field, "a time limit is at least 1 s")),
        Err(TimeLimitError::TooLong { limit, most }) => Err(ApiError::invalid(
            field,
            format!("{limit} s is more than group {group:?} allows ({most} s)"),
        )),
    }
}

/// What admission at submit reads of a group, read now (and remembered for the next submits):
/// its agents, templates and images, not its sessions.
async fn admission_view(app: &App, group: &str) -> Result<std::sync::Arc<Snapshot>> {
    let generation = app.control.views.generation(group);
    let group = app
        .store
        .get_group(group)
        .await?
        .ok_or_else(|| ApiError::invalid("group", format!("no group {group:?}")))?;
    let removed = app.store.removed_agents(&group.name).await?;
    let view = Snapshot {
        now: now(),
        agents: app.store.list_agents(Some(&group.name)).await?,
        group,
        sessions: Vec::new(),
        images: app.store.list_images().await?,
        in_flight: Vec::new(),
        last_scale_out: None,
        launch_limits: Default::default(),
        array_holding: Default::default(),
        removed,
    };
    Ok(app.control.views.remember_view(view, generation))
}

fn submitted(session: &Session, required: corral_core::Slots) -> (StatusCode, Json<Submitted>) {
    (
        StatusCode::CREATED,
        Json(Submitted {
            id: session.id.0.clone(),
            state: session.state,
            required,
            array: None,
        }),
    )
}

/// What `caller` may see of the session: all of it if theirs (or an admin's view), else its
/// place in the queue without what it runs, its environment or its files.
pub(super) fn seen_by(mut view: SessionView, caller: &Caller) -> SessionView {
    if !caller.is_admin() && view.session.owner != caller.user {
        view.spec = Spec::default();
        view.history.clear();
    }
    view
}

/// A stored session as the API shows it.
pub(super) fn view(r: SessionRecord) -> SessionView {
    SessionView {
        spec: serde_json::from_value(r.spec).unwrap_or_default(),
        session: r.session,
        allocation: r.allocation,
        wait_reason: r.wait_reason,
        end_reason: r.end_reason,
        exit_code: r.exit_code,
        started_at: r.started_at,
        updated_at: r.updated_at,
        batch_job: r.batch_job,
        array_index: r.array_index,
        history: r.history,
    }
}

#[cfg_attr(
    feature = "openapi",
    utoipa::path(
    get,
    path = "/api/v1/sessions",
    summary = "List sessions (users see their own), oldest first (newest with order=newest); with array=ID the sessions of that array (by index; another user's array is a 403), with array=none the sessions of no array; 404 if the group, array or after names none",
    params(SessionQuery),
    responses(
        (status = 200, description = "success", body = Vec<SessionView>),
        (status = 400, response = ErrorResponse),
        (status = 401, response = ErrorResponse),
        (status = 403, response = ErrorResponse),
        (status = 404, response = ErrorResponse),
    )
)
)]
pub(super) async fn list_sessions(
    State(app): State<App>,
    caller: Caller,
    Query(q): Query<SessionQuery>,
) -> Result<Json<Vec<SessionView>>> {
    let owner = if caller.is_admin() {
        q.owner
    } else {
        Some(caller.user.clone())
    };
    if let Some(group) = &q.group {
        super::find_group(&app, group).await?;
    }
    let array = match q.array {
        None => None,
        Some(id) if id == NO_ARRAY => Some(ArraySelect::Outside),
        Some(id) => {
            super::arrays::may_see_array(&app, &caller, &id).await?;
            Some(ArraySelect::Of(id))
        }
    };
    let filter = SessionFilter {
        group: q.group,
        owner,
        state: q.state,
        limit: Some(q.limit.unwrap_or(100).clamp(1, 1000)),
        after_id: q.after,
        agent: None,
        newest_first: q.order == Some(corral_api::sessions::Order::Newest),
        active: q.active,
        array,
    };
    Ok(Json(
        app.store
            .list_sessions(&filter)
            .await?
            .into_iter()
            .map(view)
            .collect(),
    ))
}

/// A session the caller may see: admins see all, users their own.
pub(crate) async fn own_session(app: &App, caller: &Caller, id: &str) -> Result<SessionRecord> {
    let record = app
        .store
        .get_session(id)
        .await?
        .ok_or_else(|| ApiError::not_found("session", id))?;
    if !caller.is_admin() && record.session.owner != caller.user {
        return Err(ApiError::forbidden(format!(
            "session {id:?} belongs to another user"
        )));
    }
    app.activity.touch(&app.store, id);
    Ok(record)
}

#[cfg_attr(
    feature = "openapi",
    utoipa::path(
    get,
    path = "/api/v1/sessions/{id}",
    summary = "Get a session with its state history and why it waits; with If-None-Match, 304 while it is as that ETag says, and with wait_ms the answer waits for a change",
    params(
        ("id" = String, Path, description = "the session"),
        ("If-None-Match" = Option<String>, Header, description = "the ETag of the view already seen"),
        Wait,
    ),
    responses(
        (status = 200, description = "success (the ETag header names this view)", body = SessionView),
        (status = 304, description = "unchanged: it is still as If-None-Match says (after waiting up to wait_ms)"),
        (status = 400, response = ErrorResponse),
        (status = 401, response = ErrorResponse),
        (status = 403, response = ErrorResponse),
        (status = 404, response = ErrorResponse),
    )
)
)]
pub(super) async fn get_session(
    State(app): State<App>,
    caller: Caller,
    Path(id): Path<String>,
    Query(wait): Query<Wait>,
    headers: HeaderMap,
) -> Result<Response> {
    let deadline = wait.deadline()?;
    let seen = headers.get(IF_NONE_MATCH).map(|v| v.as_bytes());
    // Before the first read, so a change between the read and the wait still wakes it.
    let mut changes = app.control.sessions.subscribe(&id);
    loop {
        let view = view(own_session(&app, &caller, &id).await?);
        let body = serde_json::to_vec(&view).map_err(|e| {
            ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", e.to_string())
        })?;
        let tag = etag(&body);
        let unchanged = seen.is_some_and(|seen| etag_matches(seen, &tag));
        if !unchanged {
            return Ok((
                [(CONTENT_TYPE, "application/json"), (ETAG, tag.as_str())],
                body,
            )
                .into_response());
        }
        if tokio::time::Instant::now() >= deadline {
            return Ok((StatusCode::NOT_MODIFIED, [(ETAG, tag)]).into_response());
        }
        changes.changed(deadline).await;
    }
}

/// A strong ETag of a JSON answer: the start of its SHA-256.
fn etag(body: &[u8]) -> String {
    use sha2::Digest;
    format!("\"{}\"", hex::encode(&sha2::Sha256::digest(body)[..12]))
}

/// Whether an If-None-Match header names `tag` (a list, weak tags and `*` included).
fn etag_matches(header: &[u8], tag: &str) -> bool {
    let Ok(header) = std::str::from_utf8(header) else {
        return false;
    };
    header.split(',').map(str::trim).any(|candidate| {
        candidate == "*" || candidate.strip_prefix("W/").unwrap_or(candidate) == tag
    })
}

#[cfg_attr(
    feature = "openapi",
    utoipa::path(
    post,
    path = "/api/v1/sessions/{id}/cancel",
    summary = "Cancel a session (a batch job's too); 409 once it has ended",
    params(("id" = String, Path, description = "the session")),
    responses(
        (status = 200, description = "success", body = SessionView),
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
pub(super) async fn cancel(
    State(app): State<App>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Json<SessionView>> {
    let record = own_session(&app, &caller, &id).await?;
    if !matches!(
        record.session.state,
        SessionState::Pending | SessionState::Scheduled | SessionState::Running
    ) {
        let state = serde_json::to_value(record.session.state).unwrap_or_default();
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            "already_ended",
            format!(
                "session {id:?} has already ended ({})",
                state.as_str().unwrap_or("ended")
            ),
        ));
    }
    if record.batch_job.is_some() {
        crate::batch_sessions::cancel_job(&app, &record).await?;
    }
    let record = match app
        .store
        .cancel_session(&id, now(), &format!("cancelled by {}", caller.user))
        .await
    {
        // Its job's end, seen by the follower meanwhile, ended it first.
        Err(StoreError::Conflict { .. }) if record.batch_job.is_some() => {
            own_session(&app, &caller, &id).await?
        }
        ended => ended?,
    };
    app.control.sessions.bump(&id);
    app.control.wake(&record.session.group);
    if let Some(agent) = &record.session.agent {
        app.control.wake_agent(&agent.0);
    }
    Ok(Json(view(record)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn if_none_match_names_a_tag_in_a_list_weakly_or_with_a_star() {
        let tag = etag(b"{}");
        assert!(tag.starts_with('"') && tag.ends_with('"') && tag.len() == 26);
        assert!(etag_matches(tag.as_bytes(), &tag));
        assert!(etag_matches(format!("\"x\", W/{tag}").as_bytes(), &tag));
        assert!(etag_matches(b"*", &tag));
        assert!(!etag_matches(b"\"x\"", &tag));
        assert!(!etag_matches(etag(b"[]").as_bytes(), &tag));
        assert!(!etag_matches(&[0xff, 0xfe], &tag));
    }
}
