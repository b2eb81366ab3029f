//! The manager's two background watches over agents and their sessions, the adapter around
//! [`super::due`]: liveness (agents that miss their heartbeats are lost, and their sessions
//! leave them as the group's policy says) and termination (sessions past the group's idle
//! timeout or maximum lifetime, and placed sessions whose inputs never came).

use std::time::Duration;

use corral_core::SessionState;
use corral_store::SessionFilter;

use super::due;
use crate::files::session_scope;
use crate::{now, App};

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
    let deadlines = due::deadlines(now, app.lost_after);
    // Each group's agents are watched by the manager that runs the group (the one manager of a
    // SQLite database runs them all).
    for (agent, group) in app.store.silent_agents(deadlines.silent_before).await? {
        if !app.control.owns(&group) {
            continue;
        }
        let policy = app.policies.policy(&app.store, &group).await?;
        let fate = due::fate(policy.as_deref(), app.lost_after);
        if let Some(held) = app.store.mark_agent_lost(&agent, now, &fate).await? {
            tracing::warn!(agent, group, sessions = held, "agent lost; {fate}");
            app.control.wake(&group);
        }
    }
    let before = deadlines.release_before;
    for (agent, group) in app.store.lost_agents_holding(before).await? {
        if !app.control.owns(&group) {
            continue;
        }
        let policy = app.policies.policy(&app.store, &group).await?;
        let Some(requeue) = due::release(policy.as_deref()) else {
            continue;
        };
        let released = app
            .store
            .release_lost_agent(&agent, before, requeue, now)
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
        if !due::ends_any(&t) {
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
            for ending in due::due(&t, &page, now) {
                let (r, reason) = (ending.record, ending.reason);
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
    let scheduled = app.store.list_sessions(&filter).await?;
    for r in due::overdue(&t, &scheduled, now) {
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
        let Some(reason) = due::inputs_failure(&t, &missing) else {
            continue;
        };
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
