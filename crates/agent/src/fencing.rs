//! The agent's side of its fence ([`crate::fence`]): the rules kept for a restart, the guard's
//! deadline written after each join or sync that went through, and the watch that stops every
//! session once the agent is cut off long enough.

use std::sync::Arc;
use std::time::Duration;

use corral_api::protocol::{Assignment, ReportedState, SessionReport};

use crate::{fence, lock, Agent, Config};

/// How often the agent looks whether it is cut off long enough to stop its sessions.
const FENCE_WATCH: Duration = Duration::from_millis(250);

/// Keeps changed fence rules for a restart.
pub(crate) fn keep_fence_rules(config: &Config, rules: Option<fence::Rules>) {
    if let Some(rules) = rules {
        if let Err(e) = fence::save(&config.work_root, &rules) {
            tracing::warn!(error = %e, "could not keep the fence rules for a restart");
        }
    }
}

/// Tells the guard the deadline as it is after a join or sync that went through.
pub(crate) fn arm_guard(agent: &Agent) {
    let deadline = lock(&agent.fence).deadline();
    if let Err(e) = fence::arm(&agent.config.work_root, deadline) {
        tracing::warn!(error = %e, "could not write the guard's deadline");
    }
}

/// Stops every session the agent holds once it is cut off from the manager long enough (its
/// group's `on_disconnect` is `stop`): sessions waiting to start are dropped, running ones are
/// stopped within the manager's grace; each is reported `disconnected` once it gets through.
pub(crate) async fn watch_fence(agent: Arc<Agent>) {
    let mut tick = tokio::time::interval(FENCE_WATCH);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let due = lock(&agent.fence).due(fence::boottime_ms());
        let Some((silence, grace)) = due else {
            continue;
        };
        let why = format!("no contact with the manager for {} s", silence.as_secs());
        let dropped: Vec<Assignment> = std::mem::take(&mut *lock(&agent.waiting));
        if !dropped.is_empty() {
            let mut reports = lock(&agent.ended.reports);
            for a in &dropped {
                reports.push(SessionReport {
                    id: a.id.clone(),
                    state: ReportedState::Disconnected,
                    exit_code: None,
                    reason: Some(why.clone()),
                });
            }
        }
        let running: Vec<String> = lock(&agent.running).keys().cloned().collect();
        for id in running {
            if lock(&agent.fenced)
                .insert(id.clone(), why.clone())
                .is_some()
            {
                continue; // Being stopped already.
            }
            tracing::warn!(session = id, "{why}: stopping the session");
            let agent = agent.clone();
            tokio::spawn(async move {
                if let Err(e) = agent.runtime.stop(&id, grace).await {
                    tracing::warn!(session = id, error = %e, "stop failed");
                }
            });
        }
    }
}
