//! The agents' side of the API: the routes, joining (the checks of a join, and its record),
//! and who may act as an agent. The rest, one concern a file: `sync.rs` an agent's sync (the
//! adapter), `report.rs` what a sync's reports decide (pure), `files.rs` the logs, inputs and
//! outputs of sessions, `watches.rs` the liveness and termination watches (adapters), `due.rs`
//! what those watches decide (pure).

#[cfg(feature = "openapi")]
use crate::api::openapi::ErrorResponse;

use axum::extract::{DefaultBodyLimit, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::{get, post, put};
use axum::{Json, Router};
use corral_api::protocol::*;
use corral_core::devices::check_devices;
use corral_core::{Agent, AgentId, AgentState};
use corral_store::{NewEvent, Role};

use crate::auth::{create_agent_token, Caller, Joiner};
use crate::error::ApiError;
use crate::extract::Body;
use crate::names::check_name;
use crate::{now, App};

mod due;
pub(crate) mod files;
mod report;
pub(crate) mod sync;
mod watches;

use files::{append_log, get_input, get_output, list_outputs, put_input, put_output, read_log};
// Where the rest of the manager reaches them.
pub(crate) use files::{data_error, log_head, output_file, output_files, read_log_waiting};
use sync::sync;
pub use watches::{watch_liveness, watch_termination};

type Result<T, E = ApiError> = std::result::Result<T, E>;

/// Largest file uploaded in one request: an output of an agent's session, an input of a user's
/// session or batch job.
pub(crate) const MAX_OUTPUT: usize = 256 << 20;

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
