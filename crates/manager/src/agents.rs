//! The agents' side of the API: joining, syncing (heartbeat, reports, assignments), log and
//! output uploads; and what users read of them: logs and outputs.

use std::path::{Component, Path as FsPath, PathBuf};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, Path, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::{get, post, put};
use axum::{Json, Router};
use corral_core::protocol::*;
use corral_core::{Agent, AgentId, AgentState, SessionState, Slots};
use corral_store::{NewEvent, Role, SessionFilter, SessionRecord};
use serde::Deserialize;
use serde_json::json;

use crate::auth::{create_token, Caller, Joiner};
use crate::error::ApiError;
use crate::extract::{Body, Query};
use crate::{now, App};

type Result<T, E = ApiError> = std::result::Result<T, E>;

/// Largest output file an agent uploads in one request.
const MAX_OUTPUT: usize = 256 << 20;
/// Longest an agent's sync is held while there is nothing to do.
const MAX_WAIT: Duration = Duration::from_secs(30);
/// Most log bytes one read returns.
const MAX_LOG_READ: u64 = 1 << 20;

pub fn routes() -> Router<App> {
    Router::new()
        .route("/api/v1/agents/join", post(join))
        .route("/api/v1/agents/{id}/sync", post(sync))
        .route(
            "/api/v1/agents/{id}/sessions/{session}/logs/{stream}",
            post(append_log),
        )
        .route(
            "/api/v1/agents/{id}/sessions/{session}/outputs/{*path}",
            put(put_output).layer(DefaultBodyLimit::max(MAX_OUTPUT)),
        )
        .route(
            "/api/v1/sessions/{id}/inputs/{*path}",
            put(put_input).layer(DefaultBodyLimit::max(MAX_OUTPUT)),
        )
        .route(
            "/api/v1/agents/{id}/sessions/{session}/inputs/{*path}",
            get(get_input),
        )
        .route("/api/v1/sessions/{id}/logs/{stream}", get(read_log))
        .route("/api/v1/sessions/{id}/outputs", get(list_outputs))
        .route("/api/v1/sessions/{id}/outputs/{*path}", get(get_output))
}

/// The caller may act as agent `id`: an admin, or that agent's own token.
fn acts_as(caller: &Caller, id: &str) -> Result<()> {
    if caller.is_admin() || (caller.role == Role::Agent && caller.user == id) {
        Ok(())
    } else {
        Err(ApiError::forbidden(format!(
            "this token cannot act as agent {id:?}"
        )))
    }
}

async fn join(
    State(app): State<App>,
    joiner: Joiner,
    Body(req): Body<JoinRequest>,
) -> Result<impl IntoResponse> {
    crate::api::check_name("id", &req.id)?;
    if req.capacity.is_empty() {
        return Err(ApiError::invalid(
            "capacity",
            "an agent offers at least one slot",
        ));
    }
    let group = app
        .store
        .get_group(&req.group)
        .await?
        .ok_or_else(|| ApiError::invalid("group", format!("no group {:?}", req.group)))?;
    let now = now();
    let existing = app.store.get_agent(&req.id).await?;
    if let Some(a) = existing
        .as_ref()
        .filter(|a| a.group != group.name && a.state != AgentState::Terminated)
    {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            "conflict",
            format!("agent {:?} belongs to group {:?}", a.id, a.group),
        ));
    }
    // A live agent that joins again keeps what it holds; any other starts empty.
    let keep = existing.filter(|a| {
        matches!(a.state, AgentState::Alive | AgentState::Marked) && a.group == group.name
    });
    // An instance a provider launched for this group joins as its agent, of its template.
    let instance = app
        .store
        .get_instance(&req.id)
        .await?
        .filter(|i| i.group == group.name);
    let agent = Agent {
        id: AgentId(req.id.clone()),
        group: group.name.clone(),
        template: instance
            .as_ref()
            .map(|i| i.template.clone())
            .or_else(|| keep.as_ref().and_then(|a| a.template.clone())),
        capacity: req.capacity,
        allocated: keep
            .as_ref()
            .map(|a| a.allocated.clone())
            .unwrap_or_default(),
        state: keep.as_ref().map_or(AgentState::Alive, |a| a.state),
        labels: req.labels,
        external: false,
        drained_by_hand: keep.as_ref().is_some_and(|a| a.drained_by_hand),
        idle_since: keep.as_ref().map_or(Some(now), |a| a.idle_since),
    };
    // Last, after every check: a bootstrap token is used up here.
    joiner.admit(&app, &req.id, &group.name).await?;
    let joined = NewEvent {
        at: now,
        group: Some(group.name.clone()),
        session: None,
        agent: Some(req.id.clone()),
        kind: "joined".into(),
        message: format!("agent {} joined with {}", req.id, agent.capacity),
    };
    app.store
        .upsert_agent_with_event(&agent, Some(&joined), now)
        .await?;
    if instance.is_some() {
        app.store
            .move_instance(
                &req.id,
                &corral_store::InstancePhase::IN_FLIGHT,
                corral_store::InstancePhase::Joined,
                None,
                "its agent joined",
                now,
            )
            .await?;
    }
    let (_, token) = create_token(&app.store, Role::Agent, &req.id, now).await?;
    app.control.wake(&group.name);
    Ok((
        StatusCode::CREATED,
        Json(JoinResponse {
            token,
            heartbeat_secs: app.heartbeat.as_secs().max(1),
            lost_after_secs: app.lost_after.as_secs(),
        }),
    ))
}

async fn sync(
    State(app): State<App>,
    caller: Caller,
    Path(id): Path<String>,
    Body(req): Body<SyncRequest>,
) -> Result<Json<SyncResponse>> {
    acts_as(&caller, &id)?;
    let now = now();
    let state = app
        .store
        .touch_agent(&id, now)
        .await?
        .ok_or_else(|| ApiError::not_found("agent", &id))?;
    match state {
        AgentState::Terminated => {
            // It was let go: it should run nothing.
            return Ok(Json(SyncResponse {
                start: Vec::new(),
                stop: req.sessions.iter().map(|s| s.id.clone()).collect(),
            }));
        }
        AgentState::Lost => {
            let agent = app
                .store
                .get_agent(&id)
                .await?
                .ok_or_else(|| ApiError::not_found("agent", &id))?;
            app.store
                .set_agent_state(&id, AgentState::Alive, false, now)
                .await?;
            let message = format!("agent {id} is back");
            app.store
                .record_event(&NewEvent {
                    at: now,
                    group: Some(agent.group.clone()),
                    session: None,
                    agent: Some(id.clone()),
                    kind: "back".into(),
                    message,
                })
                .await?;
            app.control.wake(&agent.group);
        }
        AgentState::Alive | AgentState::Marked => {}
    }

    let mut stop = Vec::new();
    let mut running = Vec::new();
    for report in &req.sessions {
        let record = app.store.get_session(&report.id).await?;
        let ours = record.as_ref().filter(|r| {
            r.session.agent.as_ref().is_some_and(|a| a.0 == id) && r.session.state.holds_capacity()
        });
        let Some(record) = ours else {
            // Ended, cancelled, requeued elsewhere, or never ours: stop it (if it still runs).
            if report.state == ReportedState::Running {
                stop.push(report.id.clone());
            }
            continue;
        };
        match report.state {
            ReportedState::Running => {
                running.push(report.id.clone());
                if record.session.state == SessionState::Scheduled {
                    app.store.start_session(&report.id, now).await?;
                }
            }
            ReportedState::Succeeded | ReportedState::Failed => {
                let state = if report.state == ReportedState::Succeeded {
                    SessionState::Succeeded
                } else {
                    SessionState::Failed
                };
                let reason = report
                    .reason
                    .clone()
                    .unwrap_or_else(|| match report.exit_code {
                        Some(code) => format!("exited with code {code}"),
                        None => "ended".into(),
                    });
                app.store
                    .finish_session(&report.id, state, report.exit_code, now, &reason)
                    .await?;
                app.control.wake(&record.session.group);
            }
        }
    }
    // Running sessions the agent no longer reports are gone (it restarted without them).
    let filter = SessionFilter {
        agent: Some(id.clone()),
        state: Some(SessionState::Running),
        limit: Some(1000),
        ..Default::default()
    };
    for gone in app.store.list_sessions(&filter).await? {
        let sid = gone.session.id.0.as_str();
        if !running.iter().any(|r| r == sid) && !req.sessions.iter().any(|r| r.id == sid) {
            app.store
                .finish_session(
                    sid,
                    SessionState::Failed,
                    None,
                    now,
                    &format!("agent {id} no longer runs it"),
                )
                .await?;
            app.control.wake(&gone.session.group);
        }
    }

    let waker = app.control.agent_waker(&id);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(req.wait_secs).min(MAX_WAIT);
    loop {
        let notified = waker.notified();
        let start = assignments(&app, &id, &running).await?;
        if !start.is_empty() || !stop.is_empty() || tokio::time::Instant::now() >= deadline {
            return Ok(Json(SyncResponse { start, stop }));
        }
        if tokio::time::timeout_at(deadline, notified).await.is_err() {
            return Ok(Json(SyncResponse { start, stop }));
        }
    }
}

/// Sessions placed on the agent that it does not run yet.
async fn assignments(app: &App, agent: &str, running: &[String]) -> Result<Vec<Assignment>> {
    let filter = SessionFilter {
        agent: Some(agent.to_string()),
        state: Some(SessionState::Scheduled),
        limit: Some(1000),
        ..Default::default()
    };
    Ok(app
        .store
        .list_sessions(&filter)
        .await?
        .into_iter()
        .filter(|r| !running.contains(&r.session.id.0))
        .map(|r| {
            let spec: crate::api::Spec = serde_json::from_value(r.spec.clone()).unwrap_or_default();
            (r, spec)
        })
        // A session starts once every input it names has been uploaded.
        .filter(|(r, spec)| {
            spec.inputs.iter().all(|i| {
                session_dir(app, &r.session.id.0)
                    .join("inputs")
                    .join(i)
                    .is_file()
            })
        })
        .map(|(r, spec)| Assignment {
            id: r.session.id.0,
            kind: r.session.kind,
            image: r.session.image,
            command: spec.command,
            environment: spec.environment,
            inputs: spec.inputs,
            outputs: spec.outputs,
            allocation: r.allocation.unwrap_or_else(Slots::new),
        })
        .collect())
}

/// Where the manager keeps what agents upload for a session.
fn session_dir(app: &App, session: &str) -> PathBuf {
    app.data_dir.join("sessions").join(session)
}

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

/// A relative path that stays inside its directory.
fn check_relative(path: &str) -> Result<PathBuf> {
    let p = FsPath::new(path);
    if path.is_empty() || !p.components().all(|c| matches!(c, Component::Normal(_))) {
        return Err(ApiError::invalid(
            "path",
            format!("{path:?} must be a relative path inside the session's outputs"),
        ));
    }
    Ok(p.to_path_buf())
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

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Offset {
    #[serde(default)]
    offset: u64,
}

/// Appends a chunk to a session's log; `offset` must be the log's current size, so a chunk
/// sent twice (a retry) is refused rather than written twice.
async fn append_log(
    State(app): State<App>,
    caller: Caller,
    Path((id, session, stream)): Path<(String, String, String)>,
    Query(q): Query<Offset>,
    body: Bytes,
) -> Result<StatusCode> {
    acts_as(&caller, &id)?;
    let file = check_stream(&stream)?;
    let record = session_on(&app, &id, &session).await?;
    let dir = session_dir(&app, &record.session.id.0);
    tokio::fs::create_dir_all(&dir).await.map_err(io_error)?;
    let path = dir.join(file);
    let size = tokio::fs::metadata(&path)
        .await
        .map(|m| m.len())
        .unwrap_or(0);
    if size != q.offset {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            "offset",
            format!("the log has {size} bytes, not {}", q.offset),
        )
        .with_details(json!({"size": size})));
    }
    use tokio::io::AsyncWriteExt;
    let mut f = tokio::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .await
        .map_err(io_error)?;
    f.write_all(&body).await.map_err(io_error)?;
    f.flush().await.map_err(io_error)?;
    Ok(StatusCode::NO_CONTENT)
}

/// A user uploads one of the inputs their session names; it starts once all are there.
async fn put_input(
    State(app): State<App>,
    caller: Caller,
    Path((id, path)): Path<(String, String)>,
    body: Bytes,
) -> Result<StatusCode> {
    let rel = check_relative(&path)?;
    let record = crate::api::own_session(&app, &caller, &id).await?;
    let spec: crate::api::Spec = serde_json::from_value(record.spec).unwrap_or_default();
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
    write_atomically(
        &session_dir(&app, &record.session.id.0)
            .join("inputs")
            .join(rel),
        &body,
    )
    .await?;
    if let Some(agent) = &record.session.agent {
        app.control.wake_agent(&agent.0);
    }
    Ok(StatusCode::NO_CONTENT)
}

/// An agent fetches an input of a session placed on it.
async fn get_input(
    State(app): State<App>,
    caller: Caller,
    Path((id, session, path)): Path<(String, String, String)>,
) -> Result<impl IntoResponse> {
    acts_as(&caller, &id)?;
    let rel = check_relative(&path)?;
    let record = session_on(&app, &id, &session).await?;
    match tokio::fs::read(
        session_dir(&app, &record.session.id.0)
            .join("inputs")
            .join(rel),
    )
    .await
    {
        Ok(data) => Ok(([("content-type", "application/octet-stream")], data)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            Err(ApiError::not_found("input", &path))
        }
        Err(e) => Err(io_error(e)),
    }
}

/// Writes beside, then renames: a reader never sees half a file.
async fn write_atomically(target: &FsPath, data: &[u8]) -> Result<()> {
    if let Some(parent) = target.parent() {
        tokio::fs::create_dir_all(parent).await.map_err(io_error)?;
    }
    let partial = target.with_extension("corral-partial");
    tokio::fs::write(&partial, data).await.map_err(io_error)?;
    tokio::fs::rename(&partial, target).await.map_err(io_error)
}

async fn put_output(
    State(app): State<App>,
    caller: Caller,
    Path((id, session, path)): Path<(String, String, String)>,
    body: Bytes,
) -> Result<StatusCode> {
    acts_as(&caller, &id)?;
    let rel = check_relative(&path)?;
    let record = session_on(&app, &id, &session).await?;
    let target = session_dir(&app, &record.session.id.0)
        .join("outputs")
        .join(rel);
    write_atomically(&target, &body).await?;
    Ok(StatusCode::NO_CONTENT)
}

fn io_error(e: std::io::Error) -> ApiError {
    tracing::error!(error = %e, "session files");
    ApiError::new(
        StatusCode::INTERNAL_SERVER_ERROR,
        "internal",
        "the manager could not read or write session files; see its log",
    )
}

/// A session's log from `offset` (at most 1 MiB): the bytes as they were written.
async fn read_log(
    State(app): State<App>,
    caller: Caller,
    Path((id, stream)): Path<(String, String)>,
    Query(q): Query<Offset>,
) -> Result<impl IntoResponse> {
    let file = check_stream(&stream)?;
    let record = crate::api::own_session(&app, &caller, &id).await?;
    let path = session_dir(&app, &record.session.id.0).join(file);
    let data = match tokio::fs::File::open(&path).await {
        Ok(mut f) => {
            use tokio::io::{AsyncReadExt, AsyncSeekExt};
            f.seek(std::io::SeekFrom::Start(q.offset))
                .await
                .map_err(io_error)?;
            let mut buf = Vec::new();
            f.take(MAX_LOG_READ)
                .read_to_end(&mut buf)
                .await
                .map_err(io_error)?;
            buf
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(e) => return Err(io_error(e)),
    };
    Ok(([("content-type", "application/octet-stream")], data))
}

async fn list_outputs(
    State(app): State<App>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Json<Vec<serde_json::Value>>> {
    let record = crate::api::own_session(&app, &caller, &id).await?;
    let root = session_dir(&app, &record.session.id.0).join("outputs");
    let mut files = Vec::new();
    let mut dirs = vec![root.clone()];
    while let Some(dir) = dirs.pop() {
        let Ok(mut entries) = tokio::fs::read_dir(&dir).await else {
            continue;
        };
        while let Some(e) = entries.next_entry().await.map_err(io_error)? {
            let meta = e.metadata().await.map_err(io_error)?;
            if meta.is_dir() {
                dirs.push(e.path());
            } else if e.path().extension().is_none_or(|x| x != "corral-partial") {
                let rel = e
                    .path()
                    .strip_prefix(&root)
                    .map(|p| p.to_string_lossy().into_owned())
                    .unwrap_or_default();
                files.push(json!({"path": rel, "size": meta.len()}));
            }
        }
    }
    files.sort_by(|a, b| a["path"].as_str().cmp(&b["path"].as_str()));
    Ok(Json(files))
}

async fn get_output(
    State(app): State<App>,
    caller: Caller,
    Path((id, path)): Path<(String, String)>,
) -> Result<impl IntoResponse> {
    let rel = check_relative(&path)?;
    let record = crate::api::own_session(&app, &caller, &id).await?;
    let file = session_dir(&app, &record.session.id.0)
        .join("outputs")
        .join(rel);
    match tokio::fs::read(&file).await {
        Ok(data) => Ok(([("content-type", "application/octet-stream")], data)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            Err(ApiError::not_found("output", &path))
        }
        Err(e) => Err(io_error(e)),
    }
}

/// Marks agents lost when they miss their heartbeats, and handles their sessions as their
/// group's policy says.
pub async fn watch_liveness(app: App) {
    let period = (app.lost_after / 4).max(Duration::from_millis(100));
    loop {
        tokio::time::sleep(period).await;
        let now = now();
        let cutoff = corral_core::Timestamp(
            now.0 - i64::try_from(app.lost_after.as_millis()).unwrap_or(i64::MAX),
        );
        let silent = match app.store.silent_agents(cutoff).await {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(error = %e, "liveness check failed");
                continue;
            }
        };
        for (agent, group) in silent {
            let requeue = match app.store.get_group(&group).await {
                Ok(Some(g)) => g.policy.on_agent_lost == corral_core::OnAgentLost::Requeue,
                _ => true,
            };
            match app.store.lose_agent(&agent, requeue, now).await {
                Ok(sessions) => {
                    tracing::warn!(
                        agent,
                        group,
                        sessions = sessions.len(),
                        requeue,
                        "agent lost"
                    );
                    app.control.wake(&group);
                }
                Err(e) => tracing::warn!(agent, error = %e, "could not mark the agent lost"),
            }
        }
    }
}

/// Ends running sessions as their group's termination policy says: interactive sessions idle
/// past the timeout, any session past its maximum lifetime.
pub async fn watch_termination(app: App) {
    loop {
        tokio::time::sleep(Duration::from_secs(1)).await;
        if let Err(e) = terminate_due(&app).await {
            tracing::warn!(error = %e, "termination check failed");
        }
    }
}

async fn terminate_due(app: &App) -> Result<(), corral_store::StoreError> {
    let now = now();
    for group in app.store.list_groups().await? {
        let t = group.policy.termination;
        if t.mode == corral_core::TerminationMode::Persistent && t.max_lifetime_secs.is_none() {
            continue;
        }
        let mut after = None;
        loop {
            let filter = SessionFilter {
                group: Some(group.name.clone()),
                state: Some(SessionState::Running),
                limit: Some(1000),
                after_id: after.clone(),
                ..Default::default()
            };
            let page = app.store.list_sessions(&filter).await?;
            for r in &page {
                let started = r.started_at.unwrap_or(r.updated_at);
                let active = r.last_activity.unwrap_or(started);
                if let Some(why) = t.ends(r.session.kind, started, active, now) {
                    let reason = format!("ended by the group's policy: {why}");
                    match app
                        .store
                        .end_session(&r.session.id.0, SessionState::Cancelled, now, &reason)
                        .await
                    {
                        Ok(_) | Err(corral_store::StoreError::Conflict { .. }) => {}
                        Err(e) => return Err(e),
                    }
                    tracing::info!(session = r.session.id.0, reason, "terminated");
                    if let Some(agent) = &r.session.agent {
                        app.control.wake_agent(&agent.0);
                    }
                    app.control.wake(&group.name);
                }
            }
            match page.last() {
                Some(last) if page.len() == 1000 => after = Some(last.session.id.0.clone()),
                _ => break,
            }
        }
    }
    Ok(())
}
