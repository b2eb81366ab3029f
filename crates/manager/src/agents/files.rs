//! A session's files on the agents' side and the users': the logs agents append and users
//! read (waiting for bytes), the inputs users upload and agents fetch, the outputs agents
//! upload and users list and read; and the data directory's errors said as people read them.

#[cfg(feature = "openapi")]
use crate::api::openapi::{Binary, ErrorResponse, LogStream, Name, SessionPath};

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::Json;
use corral_api::sessions::OutputFile;
use corral_core::SessionState;
use corral_store::SessionRecord;
use serde::Deserialize;

use super::{acts_as, Result};
use crate::auth::{AgentCaller, Caller};
use crate::error::ApiError;
use crate::extract::Query;
use crate::files::session_scope;
use crate::names::check_relative;
use crate::App;

/// Most log bytes one read returns.
const MAX_LOG_READ: u64 = 1 << 20;

/// The file a log stream is kept in; 400 for a stream that is neither.
fn check_stream(stream: &str) -> Result<&'static str> {
    match stream {
        "stdout" => Ok("stdout.log"),
        "stderr" => Ok("stderr.log"),
        _ => Err(ApiError::invalid(
            "stream",
            format!("{stream:?} is neither stdout nor stderr"),
        )),
    }
}

/// A session placed on agent `id`.
async fn session_on(app: &App, id: &str, session: &str) -> Result<SessionRecord> {
    let record = app
        .store
        .get_session(session)
        .await?
        .ok_or_else(|| ApiError::not_found("session", session))?;
    if record.session.agent.as_ref().is_none_or(|a| a.0 != id) {
        return Err(ApiError::forbidden(format!(
            "session {session:?} is not on agent {id:?}"
        )));
    }
    Ok(record)
}

/// A session on agent `id` that may still receive logs and outputs: once it has ended, what
/// it left is final.
async fn writable_session_on(app: &App, id: &str, session: &str) -> Result<SessionRecord> {
    let record = session_on(app, id, session).await?;
    if !record.session.state.holds_capacity() {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            "already_ended",
            format!("session {session:?} has ended; its logs and outputs are final"),
        ));
    }
    Ok(record)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
#[cfg_attr(feature = "openapi", derive(utoipa::IntoParams))]
#[cfg_attr(feature = "openapi", into_params(parameter_in = Query))]
pub(super) struct Offset {
    #[serde(default)]
    #[cfg_attr(feature = "openapi", param(maximum = 9_223_372_036_854_775_807_u64))]
    offset: u64,
}

impl Offset {
    /// The offset as a file position (files end before 2^63 bytes).
    fn position(&self) -> Result<u64> {
        position(self.offset)
    }
}

/// An offset as a file position (files end before 2^63 bytes).
fn position(offset: u64) -> Result<u64> {
    if i64::try_from(offset).is_err() {
        return Err(ApiError::invalid(
            "offset",
            format!("{offset} is beyond any file's end"),
        ));
    }
    Ok(offset)
}

/// `?offset=N&wait_ms=M` of a log read: from where, and how long to wait for bytes there.
#[derive(Debug, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::IntoParams))]
#[serde(deny_unknown_fields)]
#[cfg_attr(feature = "openapi", into_params(parameter_in = Query))]
pub(super) struct LogRead {
    #[serde(default)]
    #[cfg_attr(feature = "openapi", param(maximum = 9_223_372_036_854_775_807_u64))]
    offset: u64,
    /// Hold the answer until the log has bytes past `offset` or the session has ended, for at
    /// most this many ms (0 to 30,000; default 0: answer at once).
    #[cfg_attr(feature = "openapi", param(maximum = 30_000))]
    wait_ms: Option<u64>,
}

/// Appends a chunk to a session's log; `offset` must be the log's current size, so a chunk
/// sent twice (a retry) is refused rather than written twice.
#[cfg_attr(
    feature = "openapi",
    utoipa::path(
    post,
    path = "/api/v1/agents/{id}/sessions/{session}/logs/{stream}",
    summary = "Append to a session's log; offset must be the log's current size (409 with details.size otherwise)",
    params(("id" = Name, Path, description = "the agent"), ("session" = String, Path, description = "the session"), ("stream" = inline(LogStream), Path, description = "the log"), Offset),
    request_body(content = inline(Binary), content_type = "application/octet-stream"),
    responses(
        (status = 204, description = "done"),
        (status = 400, response = ErrorResponse),
        (status = 401, response = ErrorResponse),
        (status = 403, response = ErrorResponse),
        (status = 404, response = ErrorResponse),
        (status = 409, response = ErrorResponse),
        (status = 413, response = ErrorResponse),
    )
)
)]
pub(super) async fn append_log(
    State(app): State<App>,
    AgentCaller(caller): AgentCaller,
    Path((id, session, stream)): Path<(String, String, String)>,
    Query(q): Query<Offset>,
    body: Bytes,
) -> Result<StatusCode> {
    acts_as(&caller, &id)?;
    let file = check_stream(&stream)?;
    let offset = q.position()?;
    let record = writable_session_on(&app, &id, &session).await?;
    app.files
        .append(&session_scope(&record.session.id.0), file, offset, &body)
        .await?;
    app.control.sessions.bump(&record.session.id.0);
    Ok(StatusCode::NO_CONTENT)
}

/// A user uploads one of the inputs their session names; it starts once all are there.
#[cfg_attr(
    feature = "openapi",
    utoipa::path(
    put,
    path = "/api/v1/sessions/{id}/inputs/{path}",
    summary = "Upload an input the session names (up to 256 MiB); it starts once all are there; 409 once it has started",
    params(("id" = String, Path, description = "the session"), ("path" = inline(SessionPath), Path, description = "a relative path of normal parts (no '.', '..' or empty part)")),
    request_body(content = inline(Binary), content_type = "application/octet-stream"),
    responses(
        (status = 204, description = "done"),
        (status = 400, response = ErrorResponse),
        (status = 401, response = ErrorResponse),
        (status = 403, response = ErrorResponse),
        (status = 404, response = ErrorResponse),
        (status = 409, response = ErrorResponse),
        (status = 413, response = ErrorResponse),
        (status = 502, response = ErrorResponse),
        (status = 503, response = ErrorResponse),
        (status = 504, response = ErrorResponse),
    )
)
)]
pub(super) async fn put_input(
    State(app): State<App>,
    caller: Caller,
    Path((id, path)): Path<(String, String)>,
    body: Bytes,
) -> Result<StatusCode> {
    check_relative("path", &path)?;
    let record = crate::api::own_session(&app, &caller, &id).await?;
    let spec: crate::api::Spec = serde_json::from_value(record.spec.clone()).unwrap_or_default();
    if !spec.inputs.iter().any(|i| i == &path) {
        return Err(ApiError::invalid(
            "path",
            format!(
                "session {id:?} names no input {path:?} (it names {:?})",
                spec.inputs
            ),
        ));
    }
    if !matches!(
        record.session.state,
        SessionState::Pending | SessionState::Scheduled
    ) {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            "refused",
            format!("session {id:?} has already started or ended"),
        ));
    }
    if record.batch_job.is_some() {
        crate::batch_sessions::put_input(&app, &record, &path, &body).await?;
        return Ok(StatusCode::NO_CONTENT);
    }
    app.files
        .put(
            &session_scope(&record.session.id.0),
            &format!("inputs/{path}"),
            &body,
        )
        .await?;
    if let Some(agent) = &record.session.agent {
        app.control.wake_agent(&agent.0);
    }
    Ok(StatusCode::NO_CONTENT)
}

/// An agent fetches an input of a session placed on it.
#[cfg_attr(
    feature = "openapi",
    utoipa::path(
    get,
    path = "/api/v1/agents/{id}/sessions/{session}/inputs/{path}",
    summary = "An agent fetches an input of a session placed on it",
    params(("id" = Name, Path, description = "the agent"), ("session" = String, Path, description = "the session"), ("path" = inline(SessionPath), Path, description = "a relative path of normal parts (no '.', '..' or empty part)")),
    responses(
        (status = 200, description = "the bytes", body = inline(Binary), content_type = "application/octet-stream"),
        (status = 400, response = ErrorResponse),
        (status = 401, response = ErrorResponse),
        (status = 403, response = ErrorResponse),
        (status = 404, response = ErrorResponse),
    )
)
)]
pub(super) async fn get_input(
    State(app): State<App>,
    AgentCaller(caller): AgentCaller,
    Path((id, session, path)): Path<(String, String, String)>,
) -> Result<impl IntoResponse> {
    acts_as(&caller, &id)?;
    check_relative("path", &path)?;
    let record = session_on(&app, &id, &session).await?;
    whole_file(&app, &record.session.id.0, "input", &path).await
}

#[cfg_attr(
    feature = "openapi",
    utoipa::path(
    put,
    path = "/api/v1/agents/{id}/sessions/{session}/outputs/{path}",
    summary = "Upload one output file of a session on this agent (up to 256 MiB); 409 once it has ended",
    params(("id" = Name, Path, description = "the agent"), ("session" = String, Path, description = "the session"), ("path" = inline(SessionPath), Path, description = "a relative path of normal parts (no '.', '..' or empty part)")),
    request_body(content = inline(Binary), content_type = "application/octet-stream"),
    responses(
        (status = 204, description = "done"),
        (status = 400, response = ErrorResponse),
        (status = 401, response = ErrorResponse),
        (status = 403, response = ErrorResponse),
        (status = 404, response = ErrorResponse),
        (status = 409, response = ErrorResponse),
        (status = 413, response = ErrorResponse),
    )
)
)]
pub(super) async fn put_output(
    State(app): State<App>,
    AgentCaller(caller): AgentCaller,
    Path((id, session, path)): Path<(String, String, String)>,
    body: Bytes,
) -> Result<StatusCode> {
    acts_as(&caller, &id)?;
    check_relative("path", &path)?;
    let record = writable_session_on(&app, &id, &session).await?;
    app.files
        .put(
            &session_scope(&record.session.id.0),
            &format!("outputs/{path}"),
            &body,
        )
        .await?;
    Ok(StatusCode::NO_CONTENT)
}

/// A failure to read or write `what` in the data directory: a full disk said as it is (507),
/// so the caller retries later and the operator knows what to free; anything else is ours.
pub(crate) fn data_error(e: std::io::Error, what: &str) -> ApiError {
    tracing::error!(error = %e, what, "the data directory");
    if e.kind() == std::io::ErrorKind::StorageFull {
        return ApiError::new(
            StatusCode::INSUFFICIENT_STORAGE,
            "insufficient_storage",
            "the manager's data directory is full; nothing was written",
        );
    }
    ApiError::new(
        StatusCode::INTERNAL_SERVER_ERROR,
        "internal",
        format!("the manager could not read or write {what}; see its log"),
    )
}

/// A session's log from `offset` (at most 1 MiB): the bytes as they were written.
#[cfg_attr(
    feature = "openapi",
    utoipa::path(
    get,
    path = "/api/v1/sessions/{id}/logs/{stream}",
    summary = "A session's log from offset, at most 1 MiB per read (a running batch job's from where the job writes it); with wait_ms, an answer that would be empty waits for bytes or the session's end",
    params(("id" = String, Path, description = "the session"), ("stream" = inline(LogStream), Path, description = "the log"), LogRead),
    responses(
        (status = 200, description = "the bytes", body = inline(Binary), content_type = "application/octet-stream"),
        (status = 400, response = ErrorResponse),
        (status = 401, response = ErrorResponse),
        (status = 403, response = ErrorResponse),
        (status = 404, response = ErrorResponse),
        (status = 502, response = ErrorResponse),
        (status = 503, response = ErrorResponse),
        (status = 504, response = ErrorResponse),
    )
)
)]
pub(super) async fn read_log(
    State(app): State<App>,
    caller: Caller,
    Path((id, stream)): Path<(String, String)>,
    Query(q): Query<LogRead>,
) -> Result<impl IntoResponse> {
    let (data, _) = read_log_waiting(&app, &caller, &id, &stream, q.offset, q.wait_ms).await?;
    Ok(([("content-type", "application/octet-stream")], data))
}

/// A session's log from `offset` as the caller may read it, waiting up to `wait_ms` for bytes
/// when there are none yet; the bytes, and whether the session had ended (no more will come).
pub(crate) async fn read_log_waiting(
    app: &App,
    caller: &Caller,
    id: &str,
    stream: &str,
    offset: u64,
    wait_ms: Option<u64>,
) -> Result<(Vec<u8>, bool)> {
    let file = check_stream(stream)?;
    let offset = position(offset)?;
    let deadline = crate::changes::Wait { wait_ms }.deadline()?;
    // Before the first read, so bytes appended between the read and the wait still wake it.
    let mut changes = app.control.sessions.subscribe(id);
    loop {
        let record = crate::api::own_session(app, caller, id).await?;
        let data = log_bytes(app, &record, stream, file, offset).await?;
        let ended = record.session.state.is_terminal();
        if !data.is_empty() || ended || tokio::time::Instant::now() >= deadline {
            return Ok((data, ended));
        }
        changes.changed(deadline).await;
    }
}

/// The start of a session's log (at most [`MAX_LOG_READ`] bytes), for a caller who holds its
/// record (and so may read it).
pub(crate) async fn log_head(app: &App, record: &SessionRecord, stream: &str) -> Result<Vec<u8>> {
    log_bytes(app, record, stream, check_stream(stream)?, 0).await
}

/// At most [`MAX_LOG_READ`] bytes of a session's log from `offset`.
async fn log_bytes(
    app: &App,
    record: &SessionRecord,
    stream: &str,
    file: &str,
    offset: u64,
) -> Result<Vec<u8>> {
    // A batch job's log is where the job writes it until the job has ended and it is kept.
    if record.batch_job.is_some() && !record.session.state.is_terminal() {
        return crate::batch_sessions::read_log(app, record, stream, offset, MAX_LOG_READ).await;
    }
    Ok(app
        .files
        .read(
            &session_scope(&record.session.id.0),
            file,
            offset,
            MAX_LOG_READ,
        )
        .await?
        .unwrap_or_default())
}

#[cfg_attr(
    feature = "openapi",
    utoipa::path(
    get,
    path = "/api/v1/sessions/{id}/outputs",
    summary = "A session's output files with their sizes",
    params(("id" = String, Path, description = "the session")),
    responses(
        (status = 200, description = "success", body = Vec<OutputFile>),
        (status = 401, response = ErrorResponse),
        (status = 403, response = ErrorResponse),
        (status = 404, response = ErrorResponse),
    )
)
)]
pub(super) async fn list_outputs(
    State(app): State<App>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Json<Vec<OutputFile>>> {
    let record = crate::api::own_session(&app, &caller, &id).await?;
    Ok(Json(output_files(&app, &record.session.id.0).await?))
}

/// The output files of session `id` (the caller checked) with their sizes, by path.
pub(crate) async fn output_files(app: &App, id: &str) -> Result<Vec<OutputFile>> {
    app.files.list(&session_scope(id), "outputs").await
}

#[cfg_attr(
    feature = "openapi",
    utoipa::path(
    get,
    path = "/api/v1/sessions/{id}/outputs/{path}",
    summary = "One output file of a session",
    params(("id" = String, Path, description = "the session"), ("path" = inline(SessionPath), Path, description = "a relative path of normal parts (no '.', '..' or empty part)")),
    responses(
        (status = 200, description = "the bytes", body = inline(Binary), content_type = "application/octet-stream"),
        (status = 400, response = ErrorResponse),
        (status = 401, response = ErrorResponse),
        (status = 403, response = ErrorResponse),
        (status = 404, response = ErrorResponse),
    )
)
)]
pub(super) async fn get_output(
    State(app): State<App>,
    caller: Caller,
    Path((id, path)): Path<(String, String)>,
) -> Result<impl IntoResponse> {
    output_file(&app, &caller, &id, &path).await
}

/// One output file of session `id` as the caller may read it.
pub(crate) async fn output_file(
    app: &App,
    caller: &Caller,
    id: &str,
    path: &str,
) -> Result<impl IntoResponse> {
    check_relative("path", path)?;
    let record = crate::api::own_session(app, caller, id).await?;
    whole_file(app, &record.session.id.0, "output", path).await
}

/// A stored input or output (`what`) of `session`, as bytes; a name that is not a file there is
/// not found.
async fn whole_file(app: &App, session: &str, what: &str, name: &str) -> Result<impl IntoResponse> {
    match app
        .files
        .read(
            &session_scope(session),
            &format!("{what}s/{name}"),
            0,
            u64::MAX,
        )
        .await?
    {
        Some(data) => Ok(([("content-type", "application/octet-stream")], data)),
        None => Err(ApiError::not_found(what, name)),
    }
}
