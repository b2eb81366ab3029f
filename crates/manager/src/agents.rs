//! The agents' side of the API: joining, syncing (heartbeat, reports, assignments), log and
//! output uploads; and what users read of them: logs and outputs.

#[cfg(feature = "openapi")]
use crate::api::openapi::{Binary, ErrorResponse, LogStream, Name, SessionPath};
use std::pin::Pin;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, Path, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::{get, post, put};
use axum::{Json, Router};
use corral_api::protocol::*;
use corral_api::sessions::OutputFile;
use corral_core::devices::check_devices;
use corral_core::{
    Agent, AgentId, AgentState, OnAgentLost, OnDisconnect, SessionState, Slots, Timestamp,
};
use corral_store::{Heard, NewEvent, Role, SessionFilter, SessionRecord};
use serde::Deserialize;
use tokio::sync::futures::Notified;
use tokio::sync::Notify;

use crate::auth::{create_agent_token, AgentCaller, Caller, Joiner};
use crate::error::ApiError;
use crate::extract::{Body, Query};
use crate::files::session_scope;
use crate::names::{check_name, check_relative};
use crate::{now, App};

type Result<T, E = ApiError> = std::result::Result<T, E>;

/// Largest file uploaded in one request: an output of an agent's session, an input of a user's
/// session or batch job.
pub(crate) const MAX_OUTPUT: usize = 256 << 20;
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

#[cfg_attr(
    feature = "openapi",
    utoipa::path(
    post,
    path = "/api/v1/agents/join",
    summary = "An agent joins with an admin token, its own agent token, or a one-time bootstrap token (used up by the join; 401 once used or expired); its agent token comes back",
    request_body = JoinRequest,
    responses(
        (status = 201, description = "success", body = JoinResponse),
        (status = 400, response = ErrorResponse),
        (status = 401, response = ErrorResponse),
        (status = 403, response = ErrorResponse),
        (status = 409, response = ErrorResponse),
        (status = 413, response = ErrorResponse),
        (status = 503, response = ErrorResponse),
    )
)
)]
async fn join(
    State(app): State<App>,
    joiner: Joiner,
    Body(req): Body<JoinRequest>,
) -> Result<impl IntoResponse> {
    let (group, existing) = checked_join(&app, &req).await?;
    check_group_of(existing.as_ref(), &group)?;
    if let Some(a) = existing
        .as_ref()
        .filter(|a| a.external && a.state != AgentState::Terminated)
    {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            "conflict",
            format!(
                "agent {:?} is external: it joins again with its key (corral agent --key)",
                a.id.0
            ),
        ));
    }
    // A pilot's bootstrap token joins only from its running job (its file could be read while
    // the job was queued); checked before the token is used up.
    if joiner.caller.role == Role::Bootstrap {
        crate::pilots::check_join(&app, &req, &group.name).await?;
    }
    // Before anything is read from the request's claims: may this token join as this id?
    // (A bootstrap token is used up here, so every check that can fail comes first.)
    joiner
        .admit(&app, &req.id, &group.name, existing.as_ref())
        .await?;
    let joined = register(&app, req, &group, existing, None).await?;
    Ok((StatusCode::CREATED, Json(joined)))
}

/// Checks a join's fields and finds its group and the agent of its id, if any: 400 naming a
/// bad field or an unknown group.
pub(crate) async fn checked_join(
    app: &App,
    req: &JoinRequest,
) -> Result<(corral_core::ScalingGroup, Option<Agent>)> {
    check_name("id", &req.id)?;
    if req.capacity.is_empty() {
        return Err(ApiError::invalid(
            "capacity",
            "an agent offers at least one slot",
        ));
    }
    check_agent_devices(&req.capacity, &req.devices)?;
    if let Some(version) = &req.version {
        crate::names::check_version("version", version)?;
    }
    if let Some(platform) = &req.platform {
        crate::agent_builds::check_platform(platform)?;
    }
    if let Some(job) = req
        .batch_job
        .as_deref()
        .filter(|j| !corral_batch::is_job_id(j))
    {
        return Err(ApiError::invalid(
            "batch_job",
            format!("{job:?} is not a job id"),
        ));
    }
    let group = app
        .store
        .get_group(&req.group)
        .await?
        .ok_or_else(|| ApiError::invalid("group", format!("no group {:?}", req.group)))?;
    let existing = app.store.get_agent(&req.id).await?;
    Ok((group, existing))
}

/// 409 when the id is a live agent of another group.
pub(crate) fn check_group_of(
    existing: Option<&Agent>,
    group: &corral_core::ScalingGroup,
) -> Result<()> {
    match existing.filter(|a| a.group != group.name && a.state != AgentState::Terminated) {
        Some(a) => Err(ApiError::new(
            StatusCode::CONFLICT,
            "conflict",
            format!("agent {:?} belongs to group {:?}", a.id.0, a.group),
        )),
        None => Ok(()),
    }
}

/// An external agent's key and its group's limit of external agents.
pub(crate) struct ExternalJoin<'a> {
    pub key: &'a str,
    pub limit: u32,
}

/// Writes the join of an admitted agent (external when `external` says with which key) and
/// gives it its token. `existing` is the agent of its id the manager knew.
pub(crate) async fn register(
    app: &App,
    req: JoinRequest,
    group: &corral_core::ScalingGroup,
    existing: Option<Agent>,
    external: Option<ExternalJoin<'_>>,
) -> Result<JoinResponse> {
    let now = now();
    // A live agent that joins again keeps what it holds; any other starts empty.
    let keep = existing.clone().filter(|a| {
        matches!(a.state, AgentState::Alive | AgentState::Marked) && a.group == group.name
    });
    // An instance a provider launched for this group joins as its agent, of its template.
    let instance = match external {
        Some(_) => None,
        None => app
            .store
            .get_instance(&req.id)
            .await?
            .filter(|i| i.group == group.name),
    };
    let agent = Agent {
        id: AgentId(req.id.clone()),
        group: group.name.clone(),
        template: instance
            .as_ref()
            .map(|i| i.template.clone())
            .or_else(|| keep.as_ref().and_then(|a| a.template.clone())),
        capacity: req.capacity.clone(),
        allocated: keep
            .as_ref()
            .map(|a| a.allocated.clone())
            .unwrap_or_default(),
        state: keep.as_ref().map_or(AgentState::Alive, |a| a.state),
        labels: req.labels.clone(),
        external: external.is_some(),
        drained_by_hand: keep.as_ref().is_some_and(|a| a.drained_by_hand),
        idle_since: keep.as_ref().map_or(Some(now), |a| a.idle_since),
        devices: req.devices.clone(),
        version: req.version.clone(),
        platform: req.platform.clone(),
        // Ended below, once the join is written.
        updating: existing.as_ref().and_then(|a| a.updating.clone()),
    };
    let joined = NewEvent {
        at: now,
        group: Some(group.name.clone()),
        session: None,
        agent: Some(req.id.clone()),
        kind: "joined".into(),
        message: match &external {
            Some(e) => format!(
                "external agent {} joined with {} (key {})",
                req.id, agent.capacity, e.key
            ),
            None => format!("agent {} joined with {}", req.id, agent.capacity),
        },
    };
    match &external {
        Some(e) => {
            if let Err(others) = app
                .store
                .join_external_agent(&agent, e.key, e.limit, &joined, now)
                .await?
            {
                return Err(ApiError::new(
                    StatusCode::CONFLICT,
                    "limit_reached",
                    format!(
                        "group {:?} has {others} external agents taking part, its limit ({}); \
                         one must leave first",
                        group.name, e.limit
                    ),
                ));
            }
        }
        None => {
            app.store
                .upsert_agent_with_event(&agent, Some(&joined), now)
                .await?
        }
    }
    if let Some(instance) = &instance {
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
        // A launch succeeds when its agent joins, not when the vendor accepts it: instances
        // that boot without a working agent keep their template backing off, longer each time.
        if let Some(driver) = app.control.driver(&group.name) {
            driver.succeeded(&instance.template);
        }
    }
    crate::agent_update::joined(app, existing.as_ref(), &req, now).await?;
    let token = create_agent_token(&app.store, &req.id, now).await?;
    app.control.wake(&group.name);
    Ok(JoinResponse {
        token,
        heartbeat_secs: app.heartbeat.as_secs().max(1),
        lost_after_secs: app.lost_after.as_secs(),
        fence_grace_secs: Some(corral_core::disconnect::fence_grace(app.lost_after).as_secs()),
    })
}

#[cfg_attr(
    feature = "openapi",
    utoipa::path(
    post,
    path = "/api/v1/agents/{id}/sync",
    summary = "Heartbeat and reports; answers what to start and stop (a long poll of up to wait_secs, at most 30 s); admin or the agent's own token",
    params(("id" = Name, Path, description = "the agent")),
    request_body = SyncRequest,
    responses(
        (status = 200, description = "success", body = SyncResponse),
        (status = 400, response = ErrorResponse),
        (status = 401, response = ErrorResponse),
        (status = 403, response = ErrorResponse),
        (status = 404, response = ErrorResponse),
        (status = 413, response = ErrorResponse),
    )
)
)]
async fn sync(
    State(app): State<App>,
    AgentCaller(caller): AgentCaller,
    Path(id): Path<String>,
    Body(req): Body<SyncRequest>,
) -> Result<Json<SyncResponse>> {
    acts_as(&caller, &id)?;
    let now = now();
    let heartbeat = app.heartbeats.heard(&id, now);
    // Listening before anything is read: a placement made from here on wakes this sync.
    let waker = app.control.agents.waker(&id);
    let mut woken = std::pin::pin!(waker.notified());
    woken.as_mut().enable();
    let heard = heard(&app, &id, &req).await?;
    if heard.state == AgentState::Terminated {
        // It was let go: it should run nothing.
        return Ok(Json(SyncResponse {
            stop: req.sessions.iter().map(|s| s.id.clone()).collect(),
            ..SyncResponse::default()
        }));
    }
    if heard.state == AgentState::Lost {
        // Back: its heartbeat is written before it counts as alive again, or the liveness
        // watch would find it silent still.
        app.heartbeats.written(heartbeat, &app.store).await?;
    }
    crate::image_update::reported(&app, &id, &heard, &req, now).await?;
    let mut answer = answer(&app, &id, &heard, &req, now, &waker, woken).await?;
    answer.images = crate::image_update::order(&app, &heard).await?;
    let policy = app.policies.policy(&app.store, &heard.group).await?;
    answer.on_disconnect = policy.map(|p| p.on_disconnect).unwrap_or_default();
    // Answered only once the database knows it heard the agent: the agent counts its fence
    // from this sync.
    app.heartbeats.written(heartbeat, &app.store).await?;
    Ok(Json(answer))
}

/// The agent as its sync finds it. An idle sync (nothing to report, nothing asked) goes by what
/// an earlier idle sync read, until the agent is woken or half of `lost_after` has passed
/// ([`crate::agent_slots`]); other syncs read the database.
async fn heard(app: &App, id: &str, req: &SyncRequest) -> Result<Heard> {
    let idle = req.sessions.is_empty()
        && !req.draining
        && req.images.is_none()
        && req.image_problems.is_empty()
        && req.update_failed.is_none();
    let seen = match app.control.agents.remembered(id, app.lost_after / 2) {
        Ok(heard) if idle => return Ok(heard),
        Ok(_) => None,
        Err(seen) => Some(seen),
    };
    let heard = app
        .store
        .heard_agent(id)
        .await?
        .ok_or_else(|| ApiError::not_found("agent", id))?;
    // A lost or terminated agent's sync changes it, or is answered apart: never kept.
    if let Some(seen) = seen.filter(|_| idle) {
        if matches!(heard.state, AgentState::Alive | AgentState::Marked) {
            app.control.agents.remember(id, heard.clone(), seen);
        }
    }
    Ok(heard)
}

/// What the sync of agent `id` (not terminated) answers, once it is heard: its reports
/// recorded, what to start, stop, and whether to leave or update.
async fn answer<'w>(
    app: &App,
    id: &str,
    heard: &Heard,
    req: &SyncRequest,
    now: Timestamp,
    waker: &'w Notify,
    mut woken: Pin<&mut Notified<'w>>,
) -> Result<SyncResponse> {
    let id = id.to_string();
    let (state, external) = (heard.state, heard.external);
    // An external agent whose key was revoked (or whose group no longer takes external
    // agents) has what ended recorded, then is told to stop the rest and leave.
    let dismissed = match external {
        true => crate::external::dismissal(app, &id, state, now).await?,
        false => None,
    };
    match state {
        AgentState::Lost if dismissed.is_none() => {
            let agent = app
                .store
                .get_agent(&id)
                .await?
                .ok_or_else(|| ApiError::not_found("agent", &id))?;
            // One back and draining goes straight to marked (below), never alive meanwhile.
            if !req.draining {
                app.store
                    .set_agent_state(&id, AgentState::Alive, false, now)
                    .await?;
            }
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
        _ => {}
    }
    if req.draining {
        // Marked by hand, so the policy never unmarks it; once empty it is let go. Only a
        // change records an event, so every later draining sync is a no-op.
        if let Some(group) = app.store.drain_agent(&id, now).await? {
            tracing::info!(agent = id, group, "the agent drains itself");
            app.control.wake(&group);
        }
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
            if matches!(
                report.state,
                ReportedState::Running | ReportedState::Starting
            ) {
                stop.push(report.id.clone());
            }
            continue;
        };
        match report.state {
            ReportedState::Running => {
                running.push(report.id.clone());
                if record.session.state == SessionState::Scheduled {
                    app.store.start_session(&report.id, now).await?;
                    app.control.sessions.bump(&report.id);
                }
            }
            // Taken, waiting for devices a stopping session frees: not sent again.
            ReportedState::Starting => running.push(report.id.clone()),
            ReportedState::Refused if record.session.state == SessionState::Scheduled => {
                let why = report.reason.as_deref().unwrap_or("no reason given");
                let reason = format!("requeued: agent {id} refused it: {why}");
                tracing::warn!(session = report.id, agent = id, why, "placement refused");
                // Ended or moved meanwhile (a cancel between the read and now): nothing to do.
                match app
                    .store
                    .requeue_session(&report.id, &id, now, &reason)
                    .await
                {
                    Ok(()) | Err(corral_store::StoreError::Conflict { .. }) => {}
                    Err(e) => return Err(e.into()),
                }
                app.control.sessions.bump(&report.id);
                app.control.wake(&record.session.group);
            }
            // Refusing what it already runs says nothing new: the running report stands.
            ReportedState::Refused => {}
            // It stopped the session itself, cut off from the manager: as for a lost agent.
            ReportedState::Disconnected => {
                let why = report.reason.as_deref().unwrap_or("it lost contact");
                let policy = app
                    .policies
                    .policy(&app.store, &record.session.group)
                    .await?;
                let done = match policy.is_none_or(|p| p.on_agent_lost == OnAgentLost::Requeue) {
                    true => {
                        let reason = format!("requeued: agent {id} stopped it: {why}");
                        app.store
                            .requeue_held_session(&report.id, &id, now, &reason)
                            .await
                    }
                    false => {
                        let reason = format!("agent {id} stopped it: {why}");
                        app.store
                            .finish_session(&report.id, SessionState::Failed, None, now, &reason)
                            .await
                            .map(drop)
                    }
                };
                match done {
                    Ok(()) | Err(corral_store::StoreError::Conflict { .. }) => {}
                    Err(e) => return Err(e.into()),
                }
                app.control.sessions.bump(&report.id);
                app.control.wake(&record.session.group);
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
                app.control.sessions.bump(&report.id);
                app.control.wake(&record.session.group);
            }
        }
    }
    // Running sessions the agent no longer reports are gone (it restarted without them).
    // An agent that holds nothing has none: most idle syncs read no more.
    let filter = SessionFilter {
        agent: Some(id.clone()),
        state: Some(SessionState::Running),
        limit: Some(1000),
        ..Default::default()
    };
    let holding = match heard.holds {
        true => app.store.list_sessions(&filter).await?,
        false => Vec::new(),
    };
    for gone in holding {
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
            app.control.sessions.bump(sid);
            app.control.wake(&gone.session.group);
        }
    }

    if let Some(reason) = dismissed {
        stop.extend(running);
        return Ok(SyncResponse {
            start: Vec::new(),
            stop,
            leave: Some(reason),
            ..SyncResponse::default()
        });
    }
    // An idle agent due for an update (marked now) is told at once.
    if let Some(order) = crate::agent_update::order(app, &id, heard, req, now).await? {
        return Ok(SyncResponse {
            start: Vec::new(),
            stop,
            leave: None,
            update: Some(order),
            ..SyncResponse::default()
        });
    }

    let deadline = tokio::time::Instant::now() + Duration::from_secs(req.wait_secs).min(MAX_WAIT);
    // Nothing was placed on an agent that held nothing when it was read; what is placed later
    // wakes this sync.
    let mut may_have_work = heard.holds;
    let mut again = false;
    loop {
        // Dismissed while the sync waited: told now, not a heartbeat later.
        if again && external {
            if let Some(reason) = crate::external::dismissal(app, &id, state, now).await? {
                stop.extend(running);
                return Ok(SyncResponse {
                    start: Vec::new(),
                    stop,
                    leave: Some(reason),
                    ..SyncResponse::default()
                });
            }
        }
        again = true;
        let start = match may_have_work {
            true => assignments(app, &id, &running).await?,
            false => Vec::new(),
        };
        if !start.is_empty() || !stop.is_empty() || tokio::time::Instant::now() >= deadline {
            return Ok(SyncResponse {
                start,
                stop,
                leave: None,
                ..SyncResponse::default()
            });
        }
        if tokio::time::timeout_at(deadline, woken.as_mut())
            .await
            .is_err()
        {
            return Ok(SyncResponse {
                start,
                stop,
                leave: None,
                ..SyncResponse::default()
            });
        }
        // Listening again before the next read, as at the start.
        woken.set(waker.notified());
        woken.as_mut().enable();
        may_have_work = true;
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
    let mut assignments = Vec::new();
    for r in app.store.list_sessions(&filter).await? {
        if running.contains(&r.session.id.0) {
            continue;
        }
        let spec: crate::api::Spec = serde_json::from_value(r.spec.clone()).unwrap_or_default();
        // A session starts once every input it names has been uploaded.
        let missing = app
            .files
            .missing(&session_scope(&r.session.id.0), "inputs", &spec.inputs)
            .await?;
        if !missing.is_empty() {
            continue;
        }
        assignments.push(Assignment {
            id: r.session.id.0,
            kind: r.session.kind,
            image: r.session.image,
            command: spec.command,
            environment: spec.environment,
            inputs: spec.inputs,
            outputs: spec.outputs,
            allocation: r.allocation.unwrap_or_else(Slots::new),
            devices: r.session.devices,
        });
    }
    Ok(assignments)
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
struct Offset {
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
struct LogRead {
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
async fn append_log(
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
async fn put_input(
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
async fn get_input(
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
async fn put_output(
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
async fn read_log(
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
async fn list_outputs(
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
async fn get_output(
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

/// Marks agents lost when they miss their heartbeats (nothing new lands on them), and gives
/// their sessions to the queue (or fails them) as their group's policy says: once the agent
/// has surely stopped them itself (`on_disconnect: stop`, after
/// [`corral_core::disconnect::release_after`]), or never while it may come back (`keep`).
pub async fn watch_liveness(app: App) {
    let period = (app.lost_after / 4).max(Duration::from_millis(100));
    loop {
        tokio::time::sleep(period).await;
        if let Err(e) = check_liveness(&app).await {
            tracing::warn!(error = %e, "liveness check failed");
        }
    }
}

async fn check_liveness(app: &App) -> Result<(), corral_store::StoreError> {
    // Judged on every heartbeat this manager heard; another manager's are at most a write
    // interval late, far below `lost_after`.
    app.heartbeats.write(&app.store).await?;
    let now = now();
    let ago = |d: Duration| Timestamp(now.0 - i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
    let release_after = corral_core::disconnect::release_after(app.lost_after);
    // Each group's agents are watched by the manager that runs the group (the one manager of a
    // SQLite database runs them all).
    for (agent, group) in app.store.silent_agents(ago(app.lost_after)).await? {
        if !app.control.owns(&group) {
            continue;
        }
        let policy = app.policies.policy(&app.store, &group).await?;
        let on_disconnect = policy.as_ref().map(|p| p.on_disconnect).unwrap_or_default();
        let requeue = policy.is_none_or(|p| p.on_agent_lost == OnAgentLost::Requeue);
        let fate = match (on_disconnect, requeue) {
            (OnDisconnect::Keep, _) => {
                "stay with it: it keeps running them, and they are requeued only if it is gone for good".to_string()
            }
            (OnDisconnect::Stop, requeue) => format!(
                "stay with it while it stops them itself; {} in {} s unless it is back",
                if requeue { "requeued" } else { "failed" },
                (release_after - app.lost_after).as_secs_f64().ceil()
            ),
        };
        if let Some(held) = app.store.mark_agent_lost(&agent, now, &fate).await? {
            tracing::warn!(agent, group, sessions = held, "agent lost; {fate}");
            app.control.wake(&group);
        }
    }
    for (agent, group) in app.store.lost_agents_holding(ago(release_after)).await? {
        if !app.control.owns(&group) {
            continue;
        }
        let Some(policy) = app.policies.policy(&app.store, &group).await? else {
            continue;
        };
        if policy.on_disconnect == OnDisconnect::Keep {
            continue;
        }
        let requeue = policy.on_agent_lost == OnAgentLost::Requeue;
        let released = app
            .store
            .release_lost_agent(&agent, ago(release_after), requeue, now)
            .await?;
        app.control
            .sessions
            .bump_each(released.iter().map(String::as_str));
        tracing::warn!(
            agent,
            group,
            sessions = released.len(),
            requeue,
            "a lost agent's sessions leave it"
        );
        app.control.wake(&group);
    }
    Ok(())
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
    // The groups this manager runs: each is ended by one manager.
    for group in app.store.list_groups().await? {
        if !app.control.owns(&group.name) {
            continue;
        }
        let t = group.policy.termination;
        fail_overdue_inputs(app, &group.name, t, now).await?;
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
                    if r.batch_job.is_some() {
                        // Its job first: the session ends once the job is gone (or next time).
                        if let Err(e) = crate::batch_sessions::cancel_job(app, r).await {
                            tracing::warn!(session = r.session.id.0, error = %e, "could not cancel the session's job");
                            continue;
                        }
                    }
                    match app
                        .store
                        .end_session(&r.session.id.0, SessionState::Cancelled, now, &reason)
                        .await
                    {
                        Ok(_) | Err(corral_store::StoreError::Conflict { .. }) => {}
                        Err(e) => return Err(e),
                    }
                    app.control.sessions.bump(&r.session.id.0);
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

/// Fails the group's placed sessions whose inputs have not all arrived within the group's
/// `input_wait_secs` of their placement, so capacity is never held for uploads that never come.
async fn fail_overdue_inputs(
    app: &App,
    group: &str,
    t: corral_core::Termination,
    now: corral_core::Timestamp,
) -> Result<(), corral_store::StoreError> {
    let filter = SessionFilter {
        group: Some(group.to_string()),
        state: Some(SessionState::Scheduled),
        limit: Some(1000),
        ..Default::default()
    };
    for r in app.store.list_sessions(&filter).await? {
        if !t.inputs_overdue(r.updated_at, now) {
            continue;
        }
        let spec: crate::api::Spec = serde_json::from_value(r.spec.clone()).unwrap_or_default();
        let missing = match app
            .files
            .missing(&session_scope(&r.session.id.0), "inputs", &spec.inputs)
            .await
        {
            Ok(missing) => missing,
            Err(e) => {
                tracing::warn!(
                    session = r.session.id.0,
                    error = e.message,
                    "inputs not read"
                );
                continue;
            }
        };
        if missing.is_empty() {
            continue;
        }
        let reason = format!(
            "its inputs did not arrive within {} s of its placement (missing: {})",
            t.input_wait_secs,
            missing.join(", ")
        );
        match app
            .store
            .end_session(&r.session.id.0, SessionState::Failed, now, &reason)
            .await
        {
            Ok(_) => {}
            // It started or ended meanwhile.
            Err(
                corral_store::StoreError::Conflict { .. } | corral_store::StoreError::Refused(_),
            ) => continue,
            Err(e) => return Err(e),
        }
        app.control.sessions.bump(&r.session.id.0);
        tracing::info!(session = r.session.id.0, reason, "failed");
        if let Some(agent) = &r.session.agent {
            app.control.wake_agent(&agent.0);
        }
        app.control.wake(group);
    }
    Ok(())
}

/// An agent's device list: each device valid and once, and each listed kind's shares adding up
/// to what its capacity says of that kind (`gpu=8` with 8 devices), so that the sums the
/// scheduler reads and the devices it hands out agree.
pub(crate) fn check_agent_devices(
    capacity: &corral_core::Slots,
    devices: &[corral_core::Device],
) -> Result<()> {
    check_devices(devices).map_err(|e| ApiError::invalid("devices", e.to_string()))?;
    let mut kinds: Vec<&corral_core::SlotName> = devices.iter().map(|d| &d.kind).collect();
    kinds.sort_unstable();
    kinds.dedup();
    for kind in kinds {
        let listed: u64 = devices
            .iter()
            .filter(|d| &d.kind == kind)
            .map(|d| d.share.milli())
            .sum();
        let declared = capacity.get(kind.as_str());
        if declared.milli() != listed {
            return Err(ApiError::invalid(
                "devices",
                format!(
                    "the devices of kind {kind} add up to {kind}={}, but the capacity says {kind}={declared}",
                    corral_core::Quantity::from_milli(listed)
                ),
            ));
        }
    }
    Ok(())
}
