//! Agent auto-update (docs/agent-update.md): an idle agent whose group's policy names another
//! version is marked, so nothing new lands on it, and its sync answers with the build to run
//! instead of itself. It joins again on the new version and the mark is lifted; a failed
//! update leaves it on its version, unmarked, with an event, and is not tried again until the
//! target changes.

use corral_api::agent_builds::{UpdateFailure, UpdateOrder};
use corral_api::protocol::{JoinRequest, ReportedState, SyncRequest};
use corral_core::agent_update::update_due;
use corral_core::{Agent, AgentState, AgentUpdate, Timestamp};
use corral_store::{Heard, NewEvent};

use crate::error::ApiError;
use crate::names::check_version;
use crate::App;

type Result<T, E = ApiError> = std::result::Result<T, E>;

fn runs(agent: &Agent) -> &str {
    agent.version.as_deref().unwrap_or("an unknown version")
}

/// What agent `id`'s sync answers about updating: a failure it reports is recorded and its
/// mark lifted; an agent that holds nothing and is due (or marked already) gets its order.
pub(crate) async fn order(
    app: &App,
    id: &str,
    heard: &Heard,
    req: &SyncRequest,
    now: Timestamp,
) -> Result<Option<UpdateOrder>> {
    if let Some(failure) = &req.update_failed {
        failed(app, id, heard, failure, now).await?;
    }
    let runs_sessions = req
        .sessions
        .iter()
        .any(|s| matches!(s.state, ReportedState::Running | ReportedState::Starting));
    if runs_sessions || req.draining {
        return Ok(None);
    }
    // Most syncs stop here, having read nothing: the group's policy is kept in memory.
    if !heard.updating {
        let policy = app.policies.policy(&app.store, &heard.group).await?;
        if !policy.is_some_and(|p| p.agent_update.enabled && p.agent_update.target.is_some()) {
            return Ok(None);
        }
    }
    let Some(standing) = app.store.update_standing(id).await? else {
        return Ok(None);
    };
    let agent = &standing.agent;
    let target = match (&agent.updating, agent.state) {
        // Told already; the answer may have been lost.
        (Some(target), AgentState::Marked) => target.clone(),
        _ => match update_due(&standing.policy, agent, standing.failed.as_deref(), now) {
            Some(target) => target.to_string(),
            None => return Ok(None),
        },
    };
    let Some(platform) = agent.platform.as_deref() else {
        return Ok(None);
    };
    let Some(build) = app.store.get_agent_build(&target, platform).await? else {
        // Nothing to update to on its platform: it runs on, and is asked again once a build
        // is uploaded.
        return Ok(None);
    };
    if agent.updating.is_none() {
        let message = format!(
            "agent {id} is idle and updates from {} to {target}: nothing new lands on it meanwhile",
            runs(agent)
        );
        let marked = app
            .store
            .mark_for_update(
                id,
                &target,
                &NewEvent::of_agent(now, &agent.group, id, "updating", message),
            )
            .await?;
        if !marked {
            return Ok(None); // Something landed on it meanwhile.
        }
        tracing::info!(agent = id, from = runs(agent), to = target, "agent updates");
        app.control.wake(&agent.group);
    }
    Ok(Some(UpdateOrder {
        version: build.version,
        platform: build.platform,
        sha256: build.sha256,
        size: build.size,
    }))
}

/// The agent could not update: it stays on its version, unmarked, and is not asked again
/// for this target.
async fn failed(
    app: &App,
    id: &str,
    heard: &Heard,
    failure: &UpdateFailure,
    now: Timestamp,
) -> Result<()> {
    let message = format!(
        "agent {id} could not update to {}, and runs on {}: {}",
        failure.version,
        failure.runs.as_deref().unwrap_or("an unknown version"),
        failure.reason
    );
    tracing::warn!(
        agent = id,
        to = failure.version,
        reason = failure.reason,
        "agent update failed"
    );
    let e = NewEvent::of_agent(now, &heard.group, id, "update_failed", message);
    if app.store.end_update(id, &failure.version, true, &e).await? {
        app.control.wake(&heard.group);
    }
    Ok(())
}

/// An agent that was updating joined again: on its target, the update is done; on anything
/// else (the new build did not come up, the old one was started again), it failed.
pub(crate) async fn joined(
    app: &App,
    before: Option<&Agent>,
    req: &JoinRequest,
    now: Timestamp,
) -> Result<()> {
    let Some((agent, target)) = before.and_then(|a| a.updating.as_ref().map(|t| (a, t))) else {
        return Ok(());
    };
    let version = req.version.as_deref().unwrap_or("an unknown version");
    let (kind, message) = if version == target {
        let message = format!("agent {} updated from {} to {target}", req.id, runs(agent));
        ("updated", message)
    } else {
        let message = format!(
            "agent {} could not update to {target}: it joined again on {version}",
            req.id
        );
        ("update_failed", message)
    };
    let e = NewEvent::of_agent(now, &agent.group, &req.id, kind, message);
    app.store
        .end_update(&req.id, target, kind == "update_failed", &e)
        .await?;
    Ok(())
}

/// Checks a group's agent update policy: its target is a version, of a build the manager
/// holds (400 naming `policy.agent_update.target`).
pub(crate) async fn check_policy(app: &App, policy: &AgentUpdate) -> Result<()> {
    let Some(target) = &policy.target else {
        return Ok(());
    };
    let field = "policy.agent_update.target";
    check_version(field, target)?;
    let builds = app.store.list_agent_builds().await?;
    if !builds.iter().any(|b| &b.version == target) {
        return Err(ApiError::invalid(
            field,
            format!("no agent build of version {target:?}: upload one first (corral agent-build put FILE)"),
        ));
    }
    Ok(())
}

/// A change of a group's agent update policy, recorded as an event.
pub(crate) async fn policy_changed(
    app: &App,
    group: &str,
    before: &AgentUpdate,
    after: &AgentUpdate,
    now: Timestamp,
) -> Result<()> {
    if before == after {
        return Ok(());
    }
    let message = match (after.enabled, &after.target) {
        (true, Some(target)) => format!(
            "agent update on: idle agents update to {target} after {} s idle",
            after.idle_wait_secs
        ),
        (true, None) => "agent update on, with no target yet".to_string(),
        (false, _) => "agent update off".to_string(),
    };
    app.store
        .record_event(&NewEvent::of_group(now, group, "policy", message))
        .await?;
    Ok(())
}
