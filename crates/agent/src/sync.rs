//! The sync loop, one join's worth: each sync is the agent's heartbeat and carries what it
//! runs, what waits to start and what ended (a bell cuts the long poll when something ends, or
//! when it is time to drain); a sync not answered within its long poll plus [`SYNC_SLACK`] is
//! given up. An answer is carried out: the fence heard from, sessions stopped, the agent
//! dismissed, sessions taken, an update tried. A manager that no longer knows the agent ends
//! the loop, to join again.

use std::sync::Arc;
use std::time::Duration;

use corral_api::agent_builds::{UpdateFailure, UpdateOrder};
use corral_api::protocol::{JoinResponse, ReportedState, SessionReport, SyncRequest, SyncResponse};
use corral_api::{Client, ClientError};
use tokio::sync::futures::Notified;
use tokio::time::Instant;

use crate::backoff::{backoff, Waits, FIRST_REJOIN_WAIT, FIRST_RETRY_WAIT, MAX_REJOIN_WAIT};
use crate::fencing::{arm_guard, keep_fence_rules};
use crate::sessions::{start_waiting, take};
use crate::{fence, lock, update, Agent, AgentError};

/// A sync answers within its long poll (`wait_secs`, at most a heartbeat); one that has not
/// this long after it is given up (a connection a partition left hanging) and tried again.
const SYNC_SLACK: Duration = Duration::from_secs(5);

/// Syncs until the manager no longer knows the agent (`Ok`: join again, after the next of
/// `rejoin`'s waits) or dismisses it. `rejoin` starts again after each sync that went through;
/// `update_failed` is told at the next sync.
pub(crate) async fn until_forgotten(
    agent: &Arc<Agent>,
    joined: &JoinResponse,
    drain_at: Option<Instant>,
    rejoin: &mut Waits,
    update_failed: &mut Option<UpdateFailure>,
) -> Result<(), AgentError> {
    let heartbeat = Duration::from_secs(joined.heartbeat_secs.max(1));
    let mut sync_retry = backoff(FIRST_RETRY_WAIT, heartbeat);
    let as_agent = agent.client.with_token(&joined.token);
    loop {
        // Made before the reports are read, so an end between the read and the sync still
        // rings it (a Notified future counts from its creation).
        let bell = agent.ended.bell.notified();
        start_waiting(agent);
        let mut sessions = held(agent);
        let finished: Vec<SessionReport> = lock(&agent.ended.reports).clone();
        sessions.extend(finished.iter().cloned());
        let draining = drain_at.is_some_and(|at| Instant::now() >= at);
        let images = agent.images.report();
        let request = SyncRequest {
            sessions,
            wait_secs: if finished.is_empty() {
                heartbeat.as_secs()
            } else {
                0
            },
            draining,
            update_failed: update_failed.clone(),
            images: images.images.clone(),
            image_problems: images.problems.clone(),
        };
        let started = fence::boottime_ms();
        let answer = send(agent, &as_agent, &request, bell, drain_at, draining).await;
        let Some(answer) = answer else {
            agent.images.reported(images, false);
            continue;
        };
        agent.images.reported(images, answer.is_ok());
        match answer {
            Ok(resp) => {
                sync_retry = backoff(FIRST_RETRY_WAIT, heartbeat);
                *rejoin = backoff(FIRST_REJOIN_WAIT, MAX_REJOIN_WAIT);
                let sent_failure = request.update_failed.is_some();
                answered(
                    agent,
                    &as_agent,
                    resp,
                    started,
                    &finished,
                    sent_failure,
                    update_failed,
                )
                .await?;
            }
            Err(ClientError::Refused {
                status: 401 | 403 | 404,
                message,
                ..
            }) => {
                // Waited for, so that a manager that keeps refusing (an id it cannot
                // route, a revoked token) is not asked again at full speed.
                let wait = rejoin.next().unwrap_or(MAX_REJOIN_WAIT);
                tracing::warn!(
                    message,
                    wait_ms = wait.as_millis() as u64,
                    "the manager no longer knows this agent; joining again"
                );
                tokio::time::sleep(wait).await;
                return Ok(());
            }
            Err(e) => {
                tracing::warn!(error = %e, "sync failed; retrying");
                tokio::time::sleep(sync_retry.next().unwrap_or(heartbeat)).await;
            }
        }
    }
}

/// What the agent holds, as reported: its running sessions, then those waiting for devices
/// and those being started (`starting`).
fn held(agent: &Agent) -> Vec<SessionReport> {
    let report = |id: &String, state| SessionReport {
        id: id.clone(),
        state,
        exit_code: None,
        reason: None,
    };
    let mut sessions: Vec<SessionReport> = lock(&agent.running)
        .keys()
        .map(|id| report(id, ReportedState::Running))
        .collect();
    sessions.extend(
        lock(&agent.waiting)
            .iter()
            .map(|a| report(&a.id, ReportedState::Starting)),
    );
    sessions.extend(
        lock(&agent.staging)
            .keys()
            .filter(|id| !sessions.iter().any(|s| &s.id == *id))
            .map(|id| report(id, ReportedState::Starting))
            .collect::<Vec<_>>(),
    );
    sessions
}

/// Sends the sync, bounded by its long poll plus [`SYNC_SLACK`]. `None`: given up for one sent
/// at once, as something ended (`bell`) or it became time to drain while it waited.
async fn send(
    agent: &Agent,
    as_agent: &Client,
    request: &SyncRequest,
    bell: Notified<'_>,
    drain_at: Option<Instant>,
    draining: bool,
) -> Option<Result<SyncResponse, ClientError>> {
    let config = &agent.config;
    let drain_due = async {
        match drain_at {
            Some(at) if !draining => tokio::time::sleep_until(at).await,
            _ => std::future::pending().await,
        }
    };
    let bounded = tokio::time::timeout(
        Duration::from_secs(request.wait_secs) + SYNC_SLACK,
        as_agent.sync(&config.id, request),
    );
    tokio::select! {
        a = bounded => Some(a.unwrap_or_else(|_| Err(ClientError::Transport {
            server: config.manager.clone(),
            kind: corral_api::error::Transport::Timeout,
            cause: "the sync did not answer within its long poll".into(),
            ca_file: None,
        }))),
        // Something ended while the sync waited: report it now.
        () = bell => None,
        // Time to drain while the sync waited: say so now, not a heartbeat later.
        () = drain_due => None,
    }
}

/// Carries out a sync's answer: the fence heard from (`started`: when the sync began), the
/// image policy, the ends it carried (`finished`) and a failed update it told (`sent_failure`)
/// forgotten, sessions stopped, the agent dismissed, sessions taken, an update tried.
async fn answered(
    agent: &Arc<Agent>,
    as_agent: &Client,
    resp: SyncResponse,
    started: u64,
    finished: &[SessionReport],
    sent_failure: bool,
    update_failed: &mut Option<UpdateFailure>,
) -> Result<(), AgentError> {
    let rules = lock(&agent.fence).synced(resp.on_disconnect, started);
    keep_fence_rules(&agent.config, rules);
    arm_guard(agent);
    agent.images.set_policy(resp.images.clone());
    lock(&agent.ended.reports).retain(|r| !finished.contains(r));
    forget_ended(agent, finished);
    if sent_failure {
        *update_failed = None;
    }
    stop(agent, &resp.stop).await;
    if let Some(reason) = resp.leave {
        // Its sessions were stopped above; the manager lets it go.
        return Err(AgentError::Dismissed(reason));
    }
    for assignment in resp.start {
        take(agent, assignment);
    }
    if let Some(order) = resp.update {
        // Returns only when it could not: it runs on as it was.
        let reason = self_update(agent, as_agent, &order).await;
        tracing::warn!(version = order.version, reason, "update failed");
        *update_failed = Some(UpdateFailure {
            version: order.version,
            reason,
            runs: Some(corral_api::agent_builds::version().to_string()),
        });
    }
    Ok(())
}

/// Stops the sessions the manager named: one waiting never starts, one being started is not
/// started, one running is stopped within the stop grace.
async fn stop(agent: &Agent, ids: &[String]) {
    for id in ids {
        let waited = {
            let mut waiting = lock(&agent.waiting);
            let before = waiting.len();
            waiting.retain(|a| &a.id != id);
            waiting.len() < before
        };
        if waited {
            continue; // Never started: nothing to stop.
        }
        if lock(&agent.staging).contains_key(id) {
            // Its start sees this and does not start it.
            lock(&agent.stopping).insert(id.clone());
            continue;
        }
        lock(&agent.stopping).insert(id.clone());
        if let Err(e) = agent.runtime.stop(id, agent.config.stop_grace).await {
            tracing::warn!(session = id, error = %e, "stop failed");
        }
    }
}

/// Replaces the agent with the build of `order` and executes it; returns only if that
/// failed, with the reason.
async fn self_update(agent: &Agent, client: &Client, order: &UpdateOrder) -> String {
    let Some(me) = &agent.config.self_update else {
        return "this agent does not update itself (it was not started as a program)".into();
    };
    let busy = !lock(&agent.running).is_empty()
        || !lock(&agent.waiting).is_empty()
        || !lock(&agent.staging).is_empty();
    if busy {
        return "it runs sessions".into();
    }
    tracing::info!(version = order.version, "updating");
    match update::apply(me, client, order).await {
        Ok(never) => match never {},
        Err(reason) => reason,
    }
}

/// Ended sessions the manager now knows of are forgotten by the runtime: a container is
/// removed (its logs and outputs were collected before the report; nothing runs in it), so
/// that none piles up or pins its image. Before the manager knew, a restarted agent still finds
/// them, to report.
fn forget_ended(agent: &Arc<Agent>, finished: &[SessionReport]) {
    if finished.is_empty() {
        return;
    }
    let (agent, ids) = (
        agent.clone(),
        finished.iter().map(|r| r.id.clone()).collect::<Vec<_>>(),
    );
    tokio::spawn(async move {
        for id in ids {
            match agent.runtime.remove(&id).await {
                // Never started here: nothing to forget.
                Ok(()) | Err(corral_runtime::RuntimeError::UnknownSession(_)) => {}
                Err(e) => {
                    tracing::warn!(session = id, error = %e, "could not remove an ended session")
                }
            }
        }
    });
}
