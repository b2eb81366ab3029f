//! Joining the group: the request (the capacity declared or detected, devices, version,
//! platform, a pilot's batch job), then tries until one goes through: with the agent's own
//! token first (a one-time bootstrap token is spent), the bootstrap token the fallback, or by
//! key for an external agent; a 503 and unreachable managers retried with backoff. Once joined,
//! the fence's rules are taken and kept and the guard armed.

use corral_api::protocol::{JoinRequest, JoinResponse};
use corral_api::ClientError;

use crate::backoff::{Waits, MAX_JOIN_RETRY_WAIT};
use crate::fencing::{arm_guard, keep_fence_rules};
use crate::{detected_capacity, fence, lock, Agent, AgentError, Config};

/// What the agent joins with.
pub(crate) async fn request(config: &Config) -> Result<JoinRequest, AgentError> {
    let (capacity, devices) = match config.capacity.clone() {
        // Declared by hand: a device kind given as a number stands for that many devices.
        Some(c) => (c, Vec::new()),
        // Detection reads /proc and may run nvidia-smi: off the async threads.
        None => {
            let nvidia_smi = config.nvidia_smi.clone();
            tokio::task::spawn_blocking(move || detected_capacity(&nvidia_smi))
                .await
                .map_err(|e| AgentError::Io(std::io::Error::other(e)))?
        }
    };
    Ok(JoinRequest {
        id: config.id.clone(),
        group: config.group.clone(),
        capacity,
        labels: config.labels.clone(),
        devices,
        version: Some(corral_api::agent_builds::version().to_string()),
        platform: Some(corral_api::agent_builds::platform()),
        batch_job: config.batch_job.clone(),
    })
}

/// Joins, trying again after `retry`'s waits until the manager answers; a refusal other than
/// 503 is returned (a wrong token or group will not fix itself).
pub(crate) async fn join(
    agent: &Agent,
    join: &JoinRequest,
    retry: &mut Waits,
) -> Result<JoinResponse, AgentError> {
    let config = &agent.config;
    let (joined, started) = loop {
        // Joining again (the manager forgot this agent) uses the agent's own token: a one-time
        // bootstrap token is spent; the bootstrap token is the fallback.
        let own = lock(&agent.token).clone();
        let started = fence::boottime_ms();
        match attempt(agent, join, &own).await {
            Ok(j) => break (j, started),
            // 503: not yet (a pilot whose job the manager has not recorded yet): try again.
            Err(e @ ClientError::Refused { status: 503, .. }) => {
                tracing::warn!(error = %e, "join deferred; retrying");
                tokio::time::sleep(retry.next().unwrap_or(MAX_JOIN_RETRY_WAIT)).await;
            }
            Err(e @ ClientError::Refused { .. }) => return Err(e.into()),
            Err(e) => {
                tracing::warn!(error = %e, "join failed; retrying");
                tokio::time::sleep(retry.next().unwrap_or(MAX_JOIN_RETRY_WAIT)).await;
            }
        }
    };
    tracing::info!(agent = config.id, group = config.group, "joined");
    *lock(&agent.token) = joined.token.clone();
    agent.images.joined();
    let rules = {
        let mut fence = lock(&agent.fence);
        let rules = fence::Rules {
            lost_after_secs: joined.lost_after_secs,
            grace_secs: joined
                .fence_grace_secs
                .unwrap_or(config.stop_grace.as_secs()),
            on_disconnect: fence.rules().map(|r| r.on_disconnect).unwrap_or_default(),
        };
        fence.heard(rules, started).then_some(rules)
    };
    keep_fence_rules(config, rules);
    arm_guard(agent);
    Ok(joined)
}

/// One try: by key for an external agent; else with `own`, the agent's own token, then the
/// bootstrap token if that one is refused.
async fn attempt(
    agent: &Agent,
    join: &JoinRequest,
    own: &str,
) -> Result<JoinResponse, ClientError> {
    let config = &agent.config;
    match &config.key {
        // The manager takes an external agent's joins by its key only.
        Some(key) => agent.client.join_with_key(key, join).await,
        None => {
            let attempt = agent.client.with_token(own).join(join).await;
            if own != config.token
                && matches!(attempt, Err(ref e) if matches!(e.status(), Some(401 | 403)))
            {
                agent.client.join(join).await
            } else {
                attempt
            }
        }
    }
}
