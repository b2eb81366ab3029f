//! Agents as people see and manage them: register one by hand (the static provider's way to
//! join), list, get, drain (mark by hand) and unmark. The agents' own side of the API (join,
//! sync, uploads) is `crate::agents`.

#[cfg(feature = "openapi")]
use super::openapi::{ErrorResponse, Name};
use corral_api::agents::{AgentQuery, RegisterAgent, RemoveAgent};

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::Json;
use corral_core::{Agent, AgentId, AgentState, Slots};

use super::Result;
use crate::auth::Caller;
use crate::error::ApiError;
use crate::extract::{Body, Query};
use crate::names::check_name;
use crate::{now, App};

#[cfg_attr(
    feature = "openapi",
    utoipa::path(
    post,
    path = "/api/v1/agents",
    summary = "Register an agent by hand (admin); 409 if one with this id exists",
    request_body = RegisterAgent,
    responses(
        (status = 201, description = "success", body = Agent),
        (status = 400, response = ErrorResponse),
        (status = 401, response = ErrorResponse),
        (status = 403, response = ErrorResponse),
        (status = 409, response = ErrorResponse),
        (status = 413, response = ErrorResponse),
    )
)
)]
pub(super) async fn register_agent(
    State(app): State<App>,
    caller: Caller,
    Body(b): Body<RegisterAgent>,
) -> Result<impl IntoResponse> {
    caller.require_admin()?;
    check_name("id", &b.id)?;
    let group = app
        .store
        .get_group(&b.group)
        .await?
        .ok_or_else(|| ApiError::invalid("group", format!("no group {:?}", b.group)))?;
    if let Some(t) = b
        .template
        .as_deref()
        .filter(|t| !group.templates.iter().any(|x| x.name == *t))
    {
        return Err(ApiError::invalid(
            "template",
            format!("group {:?} has no template {t:?}", group.name),
        ));
    }
    if b.capacity.is_empty() {
        return Err(ApiError::invalid(
            "capacity",
            "an agent offers at least one slot",
        ));
    }
    crate::agents::check_agent_devices(&b.capacity, &b.devices)?;
    if let Some(existing) = app.store.get_agent(&b.id).await? {
        if existing.group != group.name || existing.state != AgentState::Terminated {
            return Err(ApiError::new(
                StatusCode::CONFLICT,
                "conflict",
                format!("agent {:?} already exists", b.id),
            ));
        }
    }
    let now = now();
    let agent = Agent {
        id: AgentId(b.id),
        group: group.name,
        template: b.template,
        capacity: b.capacity,
        allocated: Slots::new(),
        state: AgentState::Alive,
        labels: b.labels,
        external: false,
        drained_by_hand: false,
        version: None,
        platform: None,
        updating: None,
        idle_since: Some(now),
        devices: b.devices,
    };
    let registered = corral_store::NewEvent {
        at: now,
        group: Some(agent.group.clone()),
        session: None,
        agent: Some(agent.id.0.clone()),
        kind: "registered".into(),
        message: format!(
            "agent {} registered by hand with {}",
            agent.id, agent.capacity
        ),
    };
    app.store
        .upsert_agent_with_event(&agent, Some(&registered), now)
        .await?;
    app.control.wake(&agent.group);
    Ok((StatusCode::CREATED, Json(agent)))
}

#[cfg_attr(
    feature = "openapi",
    utoipa::path(
    get,
    path = "/api/v1/agents",
    summary = "List agents",
    params(AgentQuery),
    responses(
        (status = 200, description = "success", body = Vec<Agent>),
        (status = 400, response = ErrorResponse),
        (status = 401, response = ErrorResponse),
        (status = 403, response = ErrorResponse),
        (status = 404, response = ErrorResponse),
    )
)
)]
pub(super) async fn list_agents(
    State(app): State<App>,
    _: Caller,
    Query(q): Query<AgentQuery>,
) -> Result<Json<Vec<Agent>>> {
    if let Some(group) = &q.group {
        super::find_group(&app, group).await?;
    }
    let mut agents = app.store.list_agents(q.group.as_deref()).await?;
    if let Some(state) = q.state {
        agents.retain(|a| a.state == state);
    }
    Ok(Json(agents))
}

async fn find_agent(app: &App, id: &str) -> Result<Agent> {
    app.store
        .get_agent(id)
        .await?
        .ok_or_else(|| ApiError::not_found("agent", id))
}

#[cfg_attr(
    feature = "openapi",
    utoipa::path(
    get,
    path = "/api/v1/agents/{id}",
    summary = "Get an agent",
    params(("id" = Name, Path, description = "the agent")),
    responses(
        (status = 200, description = "success", body = Agent),
        (status = 401, response = ErrorResponse),
        (status = 403, response = ErrorResponse),
        (status = 404, response = ErrorResponse),
    )
)
)]
pub(super) async fn get_agent(
    State(app): State<App>,
    _: Caller,
    Path(id): Path<String>,
) -> Result<Json<Agent>> {
    Ok(Json(find_agent(&app, &id).await?))
}

/// Drain by hand: the agent takes nothing new, and the policy never unmarks it.
#[cfg_attr(
    feature = "openapi",
    utoipa::path(
    post,
    path = "/api/v1/agents/{id}/drain",
    summary = "Drain by hand: the agent takes nothing new and the policy never unmarks it (admin); 409 unless it is alive or marked",
    params(("id" = Name, Path, description = "the agent")),
    responses(
        (status = 200, description = "success", body = Agent),
        (status = 401, response = ErrorResponse),
        (status = 403, response = ErrorResponse),
        (status = 404, response = ErrorResponse),
        (status = 409, response = ErrorResponse),
    )
)
)]
pub(super) async fn drain(
    State(app): State<App>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Json<Agent>> {
    set_mark(app, caller, id, true).await
}

#[cfg_attr(
    feature = "openapi",
    utoipa::path(
    post,
    path = "/api/v1/agents/{id}/unmark",
    summary = "Unmark a marked agent (admin); 409 unless it is alive or marked",
    params(("id" = Name, Path, description = "the agent")),
    responses(
        (status = 200, description = "success", body = Agent),
        (status = 401, response = ErrorResponse),
        (status = 403, response = ErrorResponse),
        (status = 404, response = ErrorResponse),
        (status = 409, response = ErrorResponse),
    )
)
)]
pub(super) async fn unmark(
    State(app): State<App>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Json<Agent>> {
    set_mark(app, caller, id, false).await
}

async fn set_mark(app: App, caller: Caller, id: String, marked: bool) -> Result<Json<Agent>> {
    caller.require_admin()?;
    let agent = find_agent(&app, &id).await?;
    if !matches!(agent.state, AgentState::Alive | AgentState::Marked) {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            "refused",
            format!("agent {id:?} is {}, not alive or marked", agent.state),
        ));
    }
    let (state, by_hand) = if marked {
        (AgentState::Marked, true)
    } else {
        (AgentState::Alive, false)
    };
    app.store
        .set_agent_state(&id, state, by_hand, now())
        .await?;
    app.control.wake(&agent.group);
    Ok(Json(find_agent(&app, &id).await?))
}

#[cfg_attr(
    feature = "openapi",
    utoipa::path(
    delete,
    path = "/api/v1/agents/{id}",
    summary = "Remove an agent with its tokens (a lost or terminated one, whose sessions are requeued or failed as its group's on_agent_lost says, or any that runs no session); 409 naming the sessions it runs; its shape is remembered for the retention unless forget=true (admin)",
    params(("id" = Name, Path, description = "the agent"), RemoveAgent),
    responses(
        (status = 204, description = "removed"),
        (status = 400, response = ErrorResponse),
        (status = 401, response = ErrorResponse),
        (status = 403, response = ErrorResponse),
        (status = 404, response = ErrorResponse),
        (status = 409, response = ErrorResponse),
    )
)
)]
pub(super) async fn remove_agent(
    State(app): State<App>,
    caller: Caller,
    Path(id): Path<String>,
    Query(q): Query<RemoveAgent>,
) -> Result<StatusCode> {
    caller.require_admin()?;
    check_name("id", &id)?;
    // A lost agent removed is gone for good: what it still held follows its group's policy.
    let group = app.store.get_agent(&id).await?.map(|a| a.group);
    let policy = match &group {
        Some(group) => app.policies.policy(&app.store, group).await?,
        None => None,
    };
    let requeue = policy.is_none_or(|p| p.on_agent_lost == corral_core::OnAgentLost::Requeue);
    let removed = app
        .store
        .remove_agent(&id, requeue, !q.forget, now())
        .await?;
    crate::auth::revoked(&app, removed.revoked.clone());
    app.control
        .sessions
        .bump_each(removed.released.iter().map(String::as_str));
    let group = removed.group;
    app.control.wake(&group);
    app.control.wake_agent(&id);
    Ok(StatusCode::NO_CONTENT)
}
