//! Events: what happened to sessions, agents and a group's provider, newest first. Admins read
//! them all; users read the events of their own sessions.

#[cfg(feature = "openapi")]
use super::openapi::ErrorResponse;
use axum::extract::State;
use axum::Json;
use corral_api::events::{Event, EventQuery};
use corral_store::EventFilter;

use super::{own_session, Result};
use crate::auth::Caller;
use crate::error::ApiError;
use crate::extract::Query;
use crate::App;

/// How often a following read (`after` with `wait_ms`) looks for new events.
const EVENT_POLL: std::time::Duration = std::time::Duration::from_millis(200);

#[cfg_attr(
    feature = "openapi",
    utoipa::path(
    get,
    path = "/api/v1/events",
    summary = "Events, newest first (users: of their own sessions, with session=ID); with after, the newer ones oldest first, and wait_ms waits for one",
    params(EventQuery),
    responses(
        (status = 200, description = "success", body = Vec<Event>),
        (status = 400, response = ErrorResponse),
        (status = 401, response = ErrorResponse),
        (status = 403, response = ErrorResponse),
        (status = 404, response = ErrorResponse),
    )
)
)]
pub(super) async fn list_events(
    State(app): State<App>,
    caller: Caller,
    Query(q): Query<EventQuery>,
) -> Result<Json<Vec<Event>>> {
    if !caller.is_admin() {
        // Users read the events of their own sessions.
        let Some(session) = q.session.as_deref() else {
            return Err(ApiError::forbidden(
                "users read events of their own sessions: add session=ID",
            ));
        };
        own_session(&app, &caller, session).await?;
    } else if let Some(session) = q.session.as_deref() {
        if app.store.get_session(session).await?.is_none() {
            return Err(ApiError::not_found("session", session));
        }
    }
    if let Some(group) = &q.group {
        super::find_group(&app, group).await?;
    }
    let filter = EventFilter {
        group: q.group,
        session: q.session,
        agent: q.agent,
        before_id: q.before,
        after_id: q.after,
        limit: Some(q.limit.unwrap_or(100).clamp(1, 1000)),
    };
    let deadline = crate::changes::Wait { wait_ms: q.wait_ms }.deadline()?;
    let mut events = app.store.list_events(&filter).await?;
    // Following: events are written in many places, so the wait reads again at a short period.
    while events.is_empty() && filter.after_id.is_some() {
        let now = tokio::time::Instant::now();
        if now >= deadline {
            break;
        }
        tokio::time::sleep_until(deadline.min(now + EVENT_POLL)).await;
        events = app.store.list_events(&filter).await?;
    }
    // A removed agent's events stay readable; an agent never seen is an error.
    if let Some(agent) = filter.agent.as_deref() {
        if events.is_empty()
            && filter.before_id.is_none()
            && filter.after_id.is_none()
            && app.store.get_agent(agent).await?.is_none()
        {
            return Err(ApiError::not_found("agent", agent));
        }
    }
    Ok(Json(events))
}
