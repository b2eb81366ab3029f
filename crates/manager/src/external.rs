//! External agents: agents no provider of the group launched, which join by proving they hold
//! a key an admin registered for the group (docs/external-agents.md). An agent asks for a
//! challenge, signs the nonce with its group, id and time, and joins with the signature; the
//! group's policy says whether it may and how many may at once. Revoking a key, or turning the
//! policy off, tells its agents at their next sync to stop their sessions and leave.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::{delete, post};
use axum::{Json, Router};
use corral_api::agent_keys::{
    join_message, AgentKeyInfo, Challenge, ChallengeRequest, KeyJoinRequest, NewAgentKey,
};
use corral_core::{AgentState, ExternalAgents, ScalingGroup, Timestamp};
use corral_store::NewEvent;

use crate::agents::{check_group_of, checked_join, register, ExternalJoin};
#[cfg(feature = "openapi")]
use crate::api::openapi::{ErrorResponse, Name};
use crate::auth::{random_hex, Caller};
use crate::error::ApiError;
use crate::extract::Body;
use crate::names::check_name;
use crate::{now, App};

type Result<T, E = ApiError> = std::result::Result<T, E>;

/// How long a challenge's nonce may be answered.
const CHALLENGE_TTL_SECS: u64 = 60;
/// How far the time an agent signed at may be from the manager's clock.
const MAX_CLOCK_SKEW_MS: i64 = 60_000;
/// Random bytes in a nonce: two challenges of one agent in the same millisecond differ.
const NONCE_RANDOM_BYTES: usize = 16;

/// A challenge's nonce: `<random hex>.<expiry, ms>.<MAC hex>`, the MAC (the managers' shared
/// challenge key, [`crate::secrets::SecretKey::challenge_mac`]) over the group, the agent id,
/// the random part and the expiry. Asking costs the manager nothing to keep: nothing is stored
/// until a join uses the nonce, so no flood of questions can fill the database or crowd out
/// the agents' own.
fn new_nonce(app: &App, group: &str, agent: &str, expires: Timestamp) -> String {
    let random = random_hex(NONCE_RANDOM_BYTES);
    let mac = app
        .secrets
        .challenge_mac(&nonce_message(group, agent, &random, expires));
    format!("{random}.{}.{}", expires.0, hex::encode(mac.as_ref()))
}

/// What a nonce's MAC is over (names hold no line break: they are checked first).
fn nonce_message(group: &str, agent: &str, random: &str, expires: Timestamp) -> Vec<u8> {
    format!(
        "corral external agent challenge v1\ngroup {group}\nagent {agent}\nrandom {random}\n\
         expires_at {}\n",
        expires.0
    )
    .into_bytes()
}

/// The expiry of `nonce` if the managers' key made it for `agent` of `group` and it has not
/// expired at `now`; `None` for anything else, however malformed.
fn nonce_expiry(
    app: &App,
    nonce: &str,
    group: &str,
    agent: &str,
    now: Timestamp,
) -> Option<Timestamp> {
    let mut parts = nonce.split('.');
    let (random, expires, mac) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() || random.len() != 2 * NONCE_RANDOM_BYTES {
        return None;
    }
    let expires = Timestamp(expires.parse().ok()?);
    let mac = hex::decode(mac).ok()?;
    let message = nonce_message(group, agent, random, expires);
    (app.secrets.challenge_mac_holds(&message, &mac) && expires > now).then_some(expires)
}

pub fn routes() -> Router<App> {
    Router::new()
        .route("/api/v1/agents/external/challenge", post(challenge))
        .route("/api/v1/agents/external/join", post(join))
        .route(
            "/api/v1/groups/{name}/agent-keys",
            post(add_key).get(list_keys),
        )
        .route("/api/v1/groups/{name}/agent-keys/{key}", delete(revoke_key))
}

/// A refused join, logged (the caller has no credential yet, so it is not an event anyone
/// could flood the event list with).
fn refused(status: StatusCode, code: &'static str, req: &KeyJoinRequest, why: String) -> ApiError {
    tracing::warn!(
        agent = req.agent.id,
        group = req.agent.group,
        key = req.proof.public_key.fingerprint(),
        reason = why,
        "external agent refused"
    );
    ApiError::new(status, code, why)
}

fn policy_off(group: &str) -> String {
    format!("group {group:?} does not take external agents (its policy's external.enabled is off)")
}

#[cfg_attr(
    feature = "openapi",
    utoipa::path(
    post,
    path = "/api/v1/agents/external/challenge",
    summary = "An external agent asks for a nonce to sign (no token): good for one join of that id to that group for 60 s",
    request_body = ChallengeRequest,
    security(()),
    responses(
        (status = 201, description = "success", body = Challenge),
        (status = 400, response = ErrorResponse),
        (status = 403, response = ErrorResponse),
        (status = 413, response = ErrorResponse),
    )
)
)]
async fn challenge(
    State(app): State<App>,
    Body(req): Body<ChallengeRequest>,
) -> Result<impl IntoResponse> {
    check_name("id", &req.id)?;
    check_name("group", &req.group)?;
    let group = app
        .store
        .get_group(&req.group)
        .await?
        .ok_or_else(|| ApiError::invalid("group", format!("no group {:?}", req.group)))?;
    if !group.policy.external.enabled {
        return Err(ApiError::forbidden(policy_off(&group.name)));
    }
    let expires_at = now().plus_secs(CHALLENGE_TTL_SECS);
    let nonce = new_nonce(&app, &group.name, &req.id, expires_at);
    Ok((StatusCode::CREATED, Json(Challenge { nonce, expires_at })))
}

#[cfg_attr(
    feature = "openapi",
    utoipa::path(
    post,
    path = "/api/v1/agents/external/join",
    summary = "An external agent joins (no token) with its signature of a challenge's nonce, by a key registered for the group; its agent token comes back",
    request_body = KeyJoinRequest,
    security(()),
    responses(
        (status = 201, description = "success", body = corral_api::protocol::JoinResponse),
        (status = 400, response = ErrorResponse),
        (status = 401, response = ErrorResponse),
        (status = 403, response = ErrorResponse),
        (status = 409, response = ErrorResponse),
        (status = 413, response = ErrorResponse),
    )
)
)]
async fn join(
    State(app): State<App>,
    Body(req): Body<KeyJoinRequest>,
) -> Result<impl IntoResponse> {
    let (group, existing) = checked_join(&app, &req.agent).await?;
    let unauthorized = StatusCode::UNAUTHORIZED;
    if !group.policy.external.enabled {
        return Err(refused(
            StatusCode::FORBIDDEN,
            "forbidden",
            &req,
            policy_off(&group.name),
        ));
    }
    let proof = &req.proof;
    let fingerprint = proof.public_key.fingerprint();
    let Some(key) = app
        .store
        .find_agent_key(&group.name, &proof.public_key)
        .await?
    else {
        let why = format!(
            "key {fingerprint} is not registered for group {:?}",
            group.name
        );
        return Err(refused(unauthorized, "unauthorized", &req, why));
    };
    if key.revoked_at.is_some() {
        let why = format!("key {} ({fingerprint}) was revoked", key.name);
        return Err(refused(unauthorized, "unauthorized", &req, why));
    }
    let now = now();
    let skew = proof.signed_at.0.saturating_sub(now.0);
    if skew.abs() > MAX_CLOCK_SKEW_MS {
        let why = format!(
            "the proof was signed {} s {} the manager's clock (at most {} s apart): check the \
             agent's clock",
            skew.abs() / 1000,
            if skew < 0 { "behind" } else { "ahead of" },
            MAX_CLOCK_SKEW_MS / 1000
        );
        return Err(refused(unauthorized, "unauthorized", &req, why));
    }
    let message = join_message(&group.name, &req.agent.id, &proof.nonce, proof.signed_at);
    if !proof.public_key.verifies(&message, &proof.signature) {
        let why = format!(
            "the signature does not verify with key {} ({fingerprint})",
            key.name
        );
        return Err(refused(unauthorized, "unauthorized", &req, why));
    }
    // Checked by its MAC, then recorded as used: each nonce joins once.
    let fresh = match nonce_expiry(&app, &proof.nonce, &group.name, &req.agent.id, now) {
        Some(expires) => app.store.use_nonce(&proof.nonce, expires, now).await?,
        None => false,
    };
    if !fresh {
        let why = "the nonce is unknown, used already, issued for another agent or group, or \
                   expired: ask for a new challenge"
            .to_string();
        return Err(refused(unauthorized, "unauthorized", &req, why));
    }
    // The proof holds: the id may now be checked against what the manager knows (not before,
    // so that nobody learns without a key which ids exist).
    if let Err(e) = check_group_of(existing.as_ref(), &group) {
        return Err(refused(e.status, e.code, &req, e.message));
    }
    let taken = existing
        .as_ref()
        .filter(|a| a.state != AgentState::Terminated);
    if let Some(a) = taken {
        let same_key =
            a.external && app.store.agent_key_of(&a.id.0).await? == Some(key.name.clone());
        if !same_key {
            let why = format!(
                "agent {:?} exists already and did not join with key {}",
                a.id.0, key.name
            );
            return Err(refused(StatusCode::CONFLICT, "conflict", &req, why));
        }
    }
    if app
        .store
        .get_instance(&req.agent.id)
        .await?
        .is_some_and(|i| i.group == group.name)
    {
        let why = format!(
            "agent id {:?} is an instance the group's provider launched",
            req.agent.id
        );
        return Err(refused(StatusCode::CONFLICT, "conflict", &req, why));
    }
    let external = ExternalJoin {
        key: &key.name,
        limit: group.policy.external.limit,
    };
    let joined = match register(&app, req.agent.clone(), &group, existing, Some(external)).await {
        Ok(j) => j,
        Err(e) => return Err(refused(e.status, e.code, &req, e.message)),
    };
    tracing::info!(
        agent = req.agent.id,
        group = group.name,
        key = key.name,
        "external agent joined"
    );
    Ok((StatusCode::CREATED, Json(joined)))
}

/// Why external agent `id` must leave, if it must: its key was revoked, its group no longer
/// takes external agents, or (one lost that comes back) the group's limit is full. An agent
/// still taking part is marked by hand first, so nothing new lands on it.
pub(crate) async fn dismissal(
    app: &App,
    id: &str,
    state: AgentState,
    now: Timestamp,
) -> Result<Option<String>> {
    let Some(standing) = app.store.external_standing(id).await? else {
        return Ok(None);
    };
    let reason = if let (Some(key), Some(_)) = (&standing.key, standing.key_revoked) {
        format!("its key {key} was revoked")
    } else if !standing.policy.enabled {
        policy_off(&standing.group)
    } else if state != AgentState::Lost {
        return Ok(None);
    } else {
        // Only a lost agent coming back takes a place again; the count waits for that case.
        let others = app
            .store
            .external_agents_besides(&standing.group, id)
            .await?;
        if others < standing.policy.limit {
            return Ok(None);
        }
        format!(
            "group {:?} has {others} external agents taking part, its limit",
            standing.group
        )
    };
    if state == AgentState::Alive {
        app.store
            .set_agent_state(id, AgentState::Marked, true, now)
            .await?;
        app.control.wake(&standing.group);
    }
    Ok(Some(reason))
}

/// A change of a group's external-agents policy: recorded as an event and, when it turns
/// off, the group's external agents are marked and told to leave at their next sync.
pub(crate) async fn policy_changed(
    app: &App,
    group: &str,
    before: ExternalAgents,
    after: ExternalAgents,
) -> Result<()> {
    if before == after {
        return Ok(());
    }
    let now = now();
    let message = match after.enabled {
        true => format!("external agents may join, {} at most", after.limit),
        false => "external agents may not join; those in the group are told to leave".into(),
    };
    app.store
        .record_event(&NewEvent::of_group(now, group, "policy", message))
        .await?;
    if before.enabled && !after.enabled {
        let dismissed = app
            .store
            .dismiss_external_agents(group, &policy_off(group), now)
            .await?;
        for id in &dismissed {
            app.control.wake_agent(id);
        }
    }
    Ok(())
}

async fn key_group(app: &App, caller: &Caller, name: &str) -> Result<ScalingGroup> {
    caller.require_admin()?;
    crate::api::find_group(app, name).await
}

#[cfg_attr(
    feature = "openapi",
    utoipa::path(
    post,
    path = "/api/v1/groups/{name}/agent-keys",
    summary = "Register a public key external agents of the group may join with (admin)",
    params(("name" = Name, Path, description = "the group")),
    request_body = NewAgentKey,
    responses(
        (status = 201, description = "success", body = AgentKeyInfo),
        (status = 400, response = ErrorResponse),
        (status = 401, response = ErrorResponse),
        (status = 403, response = ErrorResponse),
        (status = 404, response = ErrorResponse),
        (status = 409, response = ErrorResponse),
        (status = 413, response = ErrorResponse),
    )
)
)]
async fn add_key(
    State(app): State<App>,
    caller: Caller,
    Path(name): Path<String>,
    Body(req): Body<NewAgentKey>,
) -> Result<impl IntoResponse> {
    check_name("name", &req.name)?;
    let group = key_group(&app, &caller, &name).await?;
    let key = app
        .store
        .add_agent_key(&group.name, &req.name, &req.public_key, now())
        .await?;
    Ok((StatusCode::CREATED, Json(key)))
}

#[cfg_attr(
    feature = "openapi",
    utoipa::path(
    get,
    path = "/api/v1/groups/{name}/agent-keys",
    summary = "The group's registered keys, revoked ones too, with the agents that joined with each (admin)",
    params(("name" = Name, Path, description = "the group")),
    responses(
        (status = 200, description = "success", body = Vec<AgentKeyInfo>),
        (status = 401, response = ErrorResponse),
        (status = 403, response = ErrorResponse),
        (status = 404, response = ErrorResponse),
    )
)
)]
async fn list_keys(
    State(app): State<App>,
    caller: Caller,
    Path(name): Path<String>,
) -> Result<Json<Vec<AgentKeyInfo>>> {
    let group = key_group(&app, &caller, &name).await?;
    Ok(Json(app.store.list_agent_keys(&group.name).await?))
}

#[cfg_attr(
    feature = "openapi",
    utoipa::path(
    delete,
    path = "/api/v1/groups/{name}/agent-keys/{key}",
    summary = "Revoke a key (admin): it joins nothing more, and its agents are told at their next sync to stop their sessions and leave",
    params(
        ("name" = Name, Path, description = "the group"),
        ("key" = Name, Path, description = "the key's name"),
    ),
    responses(
        (status = 200, description = "success", body = AgentKeyInfo),
        (status = 401, response = ErrorResponse),
        (status = 403, response = ErrorResponse),
        (status = 404, response = ErrorResponse),
    )
)
)]
async fn revoke_key(
    State(app): State<App>,
    caller: Caller,
    Path((name, key)): Path<(String, String)>,
) -> Result<Json<AgentKeyInfo>> {
    let group = key_group(&app, &caller, &name).await?;
    let revoked = app.store.revoke_agent_key(&group.name, &key, now()).await?;
    tracing::info!(group = group.name, key, "agent key revoked");
    for id in &revoked.agents {
        app.control.wake_agent(id);
    }
    app.control.wake(&group.name);
    Ok(Json(revoked))
}
