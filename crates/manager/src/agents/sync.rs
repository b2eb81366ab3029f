//! An agent's sync, the adapter around [`super::report`]: the heartbeat, the agent as the
//! sync finds it, its reports read in, decided and recorded in the store, and the long poll
//! for what to start (held while there is nothing to say).

#[cfg(feature = "openapi")]
use crate::api::openapi::{ErrorResponse, Name};
use std::collections::HashMap;
use std::pin::Pin;
use std::time::Duration;

use axum::extract::{Path, State};
use axum::Json;
use corral_api::apps::{app_path, prefix_variable, AppProtocol};
use corral_api::protocol::*;
use corral_core::{AgentState, OnAgentLost, SessionState, Slots, Timestamp};
use corral_store::{Heard, NewEvent, SessionFilter};
use tokio::sync::futures::Notified;
use tokio::sync::Notify;

use super::report::{self, Reports, Step, Transition};
use super::{acts_as, Result};
use crate::auth::AgentCaller;
use crate::error::ApiError;
use crate::extract::Body;
use crate::files::session_scope;
use crate::{now, App};

/// Longest an agent's sync is held while there is nothing to do.
const MAX_WAIT: Duration = Duration::from_secs(30);

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
pub(super) async fn sync(
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
    let (dismissed, Reports { stop, running, .. }) = recorded(app, id, heard, req, now).await?;
    if let Some(reason) = dismissed {
        return Ok(leaving(stop, running, reason));
    }
    // An idle agent due for an update (marked now) is told at once.
    if let Some(order) = crate::agent_update::order(app, id, heard, req, now).await? {
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
        if again && heard.external {
            if let Some(reason) = crate::external::dismissal(app, id, heard.state, now).await? {
                return Ok(leaving(stop, running, reason));
            }
        }
        again = true;
        let start = match may_have_work {
            true => assignments(app, id, &running).await?,
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

/// The answer to an agent told to leave (`reason`): stop what it runs too.
fn leaving(mut stop: Vec<String>, running: Vec<String>, reason: String) -> SyncResponse {
    stop.extend(running);
    SyncResponse {
        start: Vec::new(),
        stop,
        leave: Some(reason),
        ..SyncResponse::default()
    }
}

/// Records what the sync of agent `id` says: the agent back or draining, each report's
/// transition, the running sessions it no longer reports failed. Returns the reason it is
/// dismissed, if it is, and what its reports decided to run and stop.
async fn recorded(
    app: &App,
    id: &str,
    heard: &Heard,
    req: &SyncRequest,
    now: Timestamp,
) -> Result<(Option<String>, Reports)> {
    // An external agent whose key was revoked (or whose group no longer takes external
    // agents) has what ended recorded, then is told to stop the rest and leave.
    let dismissed = match heard.external {
        true => crate::external::dismissal(app, id, heard.state, now).await?,
        false => None,
    };
    let arrival = report::arrival(id, heard.state, req.draining, dismissed.is_some());
    arrive(app, id, &arrival, now).await?;

    // Every record read before any is written: the decision sees them all at once (a session
    // reported twice is decided as the first report leaves it).
    let mut records = Vec::with_capacity(req.sessions.len());
    for r in &req.sessions {
        records.push(app.store.get_session(&r.id).await?);
    }
    let mut requeue_on_lost = HashMap::new();
    for group in report::policies_needed(id, &req.sessions, &records) {
        let policy = app.policies.policy(&app.store, group).await?;
        let requeue = policy.is_none_or(|p| p.on_agent_lost == OnAgentLost::Requeue);
        requeue_on_lost.insert(group.to_string(), requeue);
    }
    let decided = report::reports(id, &req.sessions, &records, &requeue_on_lost);
    for step in &decided.steps {
        record(app, id, step, now).await?;
    }

    // Running sessions the agent no longer reports are gone (it restarted without them).
    // An agent that holds nothing has none: most idle syncs read no more.
    let filter = SessionFilter {
        agent: Some(id.to_string()),
        state: Some(SessionState::Running),
        limit: Some(1000),
        ..Default::default()
    };
    let holding = match heard.holds {
        true => app.store.list_sessions(&filter).await?,
        false => Vec::new(),
    };
    for gone in report::gone(id, &holding, &decided.running, &req.sessions) {
        app.store
            .finish_session(&gone.session, SessionState::Failed, None, now, &gone.reason)
            .await?;
        app.control.sessions.bump(&gone.session);
        app.control.wake(&gone.group);
    }
    Ok((dismissed, decided))
}

/// Carries out what a sync decided of agent `id` itself: back from lost, draining.
async fn arrive(app: &App, id: &str, arrival: &report::Arrival, now: Timestamp) -> Result<()> {
    if let Some(message) = &arrival.back {
        let agent = app
            .store
            .get_agent(id)
            .await?
            .ok_or_else(|| ApiError::not_found("agent", id))?;
        if arrival.alive {
            app.store
                .set_agent_state(id, AgentState::Alive, false, now)
                .await?;
        }
        app.store
            .record_event(&NewEvent {
                at: now,
                group: Some(agent.group.clone()),
                session: None,
                agent: Some(id.to_string()),
                kind: "back".into(),
                message: message.clone(),
            })
            .await?;
        app.control.wake(&agent.group);
    }
    if arrival.drain {
        // Only a change records an event, so every later draining sync is a no-op.
        if let Some(group) = app.store.drain_agent(id, now).await? {
            tracing::info!(agent = id, group, "the agent drains itself");
            app.control.wake(&group);
        }
    }
    Ok(())
}

/// Records one report's transition of a session of agent `id`, and tells who waits on it.
async fn record(app: &App, id: &str, step: &Step, now: Timestamp) -> Result<()> {
    let sid = step.session.as_str();
    let done = match &step.transition {
        Transition::Start => {
            app.store.start_session(sid, now).await?;
            // A start frees nothing: the group's pass has nothing new to do.
            app.control.sessions.bump(sid);
            return Ok(());
        }
        Transition::Requeue { why, reason } => {
            tracing::warn!(session = sid, agent = id, why, "placement refused");
            app.store.requeue_session(sid, id, now, reason).await
        }
        Transition::RequeueHeld { reason } => {
            app.store.requeue_held_session(sid, id, now, reason).await
        }
        Transition::FailHeld { reason } => app
            .store
            .finish_session(sid, SessionState::Failed, None, now, reason)
            .await
            .map(drop),
        Transition::Finish {
            state,
            exit_code,
            reason,
        } => {
            app.store
                .finish_session(sid, *state, *exit_code, now, reason)
                .await?;
            Ok(())
        }
    };
    match done {
        // Ended or moved meanwhile (a cancel between the read and now): nothing to do.
        Ok(()) | Err(corral_store::StoreError::Conflict { .. }) => {}
        Err(e) => return Err(e.into()),
    }
    app.control.sessions.bump(sid);
    app.control.wake(&step.group);
    Ok(())
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
        // Each HTTP app is told where the manager serves it, to take as its base URL.
        let mut environment = spec.environment;
        for (name, _) in spec
            .apps
            .iter()
            .filter(|(_, a)| a.protocol == AppProtocol::Http)
        {
            environment.insert(prefix_variable(name), app_path(&r.session.id.0, name));
        }
        assignments.push(Assignment {
            id: r.session.id.0,
            kind: r.session.kind,
            image: r.session.image,
            command: spec.command,
            environment,
            inputs: spec.inputs,
            outputs: spec.outputs,
            allocation: r.allocation.unwrap_or_else(Slots::new),
            devices: r.session.devices,
            time_limit_secs: spec.time_limit_secs,
        });
    }
    Ok(assignments)
}
