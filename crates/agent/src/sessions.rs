//! Sessions taken, started and seen to their end: an assignment checked against the devices
//! the agent holds (started, left waiting, or refused), its inputs fetched and its record kept
//! in a task of its own, started through the runtime, then waited for, its outputs and the
//! rest of its logs uploaded and its end reported; sessions found running after a restart
//! adopted again.

use std::collections::BTreeMap;
use std::sync::Arc;

use corral_api::protocol::{Assignment, ReportedState, SessionReport};
use corral_core::Slots;
use corral_runtime::{Exit, Limits, SessionSpec};

use crate::admit::Admit;
use crate::files::{fetch_inputs, flush_logs, upload_outputs, Outputs};
use crate::{checkpoint, fence, lock, Agent, AgentError};

/// Re-adopts the sessions found running after a restart, reported from the next sync on; the
/// manager says which to stop.
pub(crate) async fn readopt(agent: &Arc<Agent>) -> Result<(), AgentError> {
    let config = &agent.config;
    for id in agent.runtime.running(&config.work_root).await? {
        tracing::info!(session = id, "re-adopting a session that still runs");
        let kept = checkpoint::load(&config.work_root, &id);
        let adopted = kept.unwrap_or_else(|| Assignment {
            id: id.clone(),
            kind: Default::default(),
            image: None,
            command: Vec::new(),
            environment: BTreeMap::new(),
            inputs: Vec::new(),
            outputs: Vec::new(),
            allocation: Slots::new(),
            devices: Vec::new(),
            time_limit_secs: None,
        });
        lock(&agent.running).insert(id, adopted.clone());
        spawn_waiter(agent, adopted);
    }
    Ok(())
}

/// The runtime's spec of an assignment. The session learns its id, group and allocation from
/// its environment (`CORRAL_SESSION_ID`, `CORRAL_GROUP`, `CORRAL_ALLOCATION` such as
/// `cpu=2,mem=4GiB`), set after its own variables so that what it is told is true.
pub(crate) fn spec_of(a: &Assignment, group: &str) -> SessionSpec {
    let mut environment = a.environment.clone();
    environment.insert("CORRAL_SESSION_ID".into(), a.id.clone());
    environment.insert("CORRAL_GROUP".into(), group.to_string());
    environment.insert("CORRAL_ALLOCATION".into(), a.allocation.to_string());
    SessionSpec {
        id: a.id.clone(),
        command: a.command.clone(),
        image: a.image.clone(),
        environment,
        limits: Limits {
            cpu_milli: a.allocation.get("cpu").milli(),
            mem_bytes: a.allocation.get("mem").milli() / 1000,
        },
        outputs: a.outputs.clone(),
        devices: a.devices.clone(),
    }
}

/// Starts the waiting sessions whose devices are free now; refuses those that can no longer
/// have them.
pub(crate) fn start_waiting(agent: &Arc<Agent>) {
    let waiting = std::mem::take(&mut *lock(&agent.waiting));
    for a in waiting {
        take(agent, a);
    }
}

/// Whether `a`'s devices have room beside those its other sessions hold.
fn admit(agent: &Agent, a: &Assignment) -> Admit {
    let Some(own) = agent.devices.get() else {
        return Admit::Start;
    };
    let running = lock(&agent.running);
    let waiting = lock(&agent.waiting);
    let staging = lock(&agent.staging);
    let held: Vec<(&str, &[corral_core::DeviceGrant])> = running
        .values()
        .chain(waiting.iter())
        .chain(staging.values())
        .filter(|h| h.id != a.id)
        .map(|h| (h.id.as_str(), h.devices.as_slice()))
        .collect();
    own.admit(&a.devices, &held, &lock(&agent.stopping))
}

/// Reports a session it did not run.
fn report_unrun(agent: &Agent, id: String, state: ReportedState, reason: String) {
    lock(&agent.ended.reports).push(SessionReport {
        id,
        state,
        exit_code: None,
        reason: Some(reason),
    });
    agent.ended.bell.notify_waiters();
}

/// Takes an assignment: refused, waiting for devices a stopping session holds, or admitted
/// and started in a task of its own ([`launch`]), as its inputs may take long and must hold up
/// no heartbeat. An assignment sent again meanwhile is left as it is.
pub(crate) fn take(agent: &Arc<Agent>, a: Assignment) {
    // Its id names its directory.
    if let Err(e) = corral_runtime::validate_id(&a.id) {
        report_unrun(agent, a.id, ReportedState::Failed, e.to_string());
        return;
    }
    let taken = lock(&agent.running).contains_key(&a.id)
        || lock(&agent.waiting).iter().any(|w| w.id == a.id)
        || lock(&agent.staging).contains_key(&a.id);
    if taken {
        return; // The manager had not heard yet.
    }
    match admit(agent, &a) {
        Admit::Start => {}
        Admit::Wait => {
            tracing::info!(
                session = a.id,
                "waiting for devices a stopping session holds"
            );
            lock(&agent.waiting).push(a);
            return;
        }
        Admit::Refuse(why) => {
            tracing::warn!(
                session = a.id,
                why,
                "refusing a placement its devices cannot hold"
            );
            report_unrun(agent, a.id, ReportedState::Refused, why);
            return;
        }
    }
    lock(&agent.staging).insert(a.id.clone(), a.clone());
    let agent = agent.clone();
    tokio::spawn(async move {
        let id = a.id.clone();
        launch(&agent, a).await;
        lock(&agent.staging).remove(&id);
        // Its next report (running, or why not) goes at once.
        agent.ended.bell.notify_waiters();
    });
}

/// Fetches an admitted session's inputs and starts it.
async fn launch(agent: &Arc<Agent>, a: Assignment) {
    if let Err(why) = fetch_inputs(agent, &a).await {
        tracing::warn!(session = a.id, why, "inputs not staged");
        let reason = format!("could not stage its inputs: {why}");
        report_unrun(agent, a.id, ReportedState::Failed, reason);
        return;
    }
    // Without its record a restarted agent would still find the session, but not its outputs
    // or devices: worth a warning, not worth refusing the session.
    let (root, kept) = (agent.config.work_root.clone(), a.clone());
    match tokio::task::spawn_blocking(move || checkpoint::save(&root, &kept)).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => tracing::warn!(session = a.id, error = %e, "session record not kept"),
        Err(e) => tracing::warn!(session = a.id, error = %e, "session record not kept"),
    }
    let mut spec = spec_of(&a, &agent.config.group);
    if let (Some(docker), Some(image)) = (agent.runtime.docker(), &a.image) {
        spec.image = Some(agent.images.pinned(docker, image).await);
    }
    // Told to stop meanwhile (cancelled while its inputs came): it never starts.
    if lock(&agent.stopping).remove(&a.id) {
        return;
    }
    // Cut off meanwhile past its fence: the manager may give it to another agent.
    if let Some((silence, _)) = lock(&agent.fence).due(fence::boottime_ms()) {
        let why = format!("no contact with the manager for {} s", silence.as_secs());
        report_unrun(agent, a.id, ReportedState::Disconnected, why);
        return;
    }
    match agent.runtime.start(&spec, &agent.config.work_root).await {
        Ok(()) => {
            tracing::info!(session = a.id, "started");
            lock(&agent.running).insert(a.id.clone(), a.clone());
            spawn_waiter(agent, a);
        }
        Err(e) => {
            tracing::warn!(session = a.id, error = %e, "could not start");
            report_unrun(
                agent,
                a.id,
                ReportedState::Failed,
                format!("could not start: {e}"),
            );
        }
    }
}

/// Waits for the session's end, uploads its outputs and the rest of its logs, then reports it.
pub(crate) fn spawn_waiter(agent: &Arc<Agent>, a: Assignment) {
    let agent = agent.clone();
    tokio::spawn(async move {
        let wait = agent.runtime.wait(&a.id);
        tokio::pin!(wait);
        // Its time limit counts from its start: the record kept just before it (an agent
        // restarted meanwhile does not give it more time).
        let mut timed_out = None;
        let exit = match a.time_limit_secs {
            Some(limit) => {
                let left = checkpoint::time_left(&agent.config.work_root, &a.id, limit);
                tokio::select! {
                    exit = &mut wait => exit,
                    () = tokio::time::sleep(left) => {
                        tracing::info!(session = a.id, limit, "time limit reached: stopping");
                        if let Err(e) = agent.runtime.stop(&a.id, agent.config.stop_grace).await {
                            tracing::warn!(session = a.id, error = %e, "could not stop");
                        }
                        timed_out = Some(limit);
                        (&mut wait).await
                    }
                }
            }
            None => wait.await,
        };
        // Stopped by the agent itself, cut off: it runs again elsewhere (or fails), and the
        // manager cannot be reached; what it left is not its result.
        let fenced = lock(&agent.fenced).remove(&a.id);
        let guarded = fence::take_mark(&agent.config.work_root, &a.id);
        if let Some(why) = fenced.or(guarded) {
            lock(&agent.running).remove(&a.id);
            lock(&agent.ended.reports).push(SessionReport {
                id: a.id.clone(),
                state: ReportedState::Disconnected,
                exit_code: None,
                reason: Some(why),
            });
            agent.ended.bell.notify_waiters();
            return;
        }
        let outputs = upload_outputs(&agent, &a).await;
        flush_logs(&agent, &a.id).await;
        let (mut state, exit_code, mut reason) = match exit {
            Ok(Exit::Code(0)) => (ReportedState::Succeeded, Some(0), None),
            Ok(Exit::Code(c)) => (ReportedState::Failed, Some(c), None),
            // The exit code a shell gives it (128 + n), so `session run` exits as the shell
            // would have.
            Ok(exit @ Exit::Signal(_)) => {
                (ReportedState::Failed, exit.code(), Some(exit.to_string()))
            }
            Ok(Exit::Failed(why)) => (ReportedState::Failed, None, Some(why)),
            Err(e) => (
                ReportedState::Failed,
                None,
                Some(format!("lost track of it: {e}")),
            ),
        };
        if let Some(limit) = timed_out {
            state = ReportedState::Failed;
            let how = reason.take().map(|r| format!(" ({r})")).unwrap_or_default();
            reason = Some(format!("time limit of {limit} s reached: stopped{how}"));
        }
        // Outputs the user asked for and did not get are part of how the session ended.
        let ended = reason.clone().unwrap_or_else(|| match exit_code {
            Some(code) => format!("exited with code {code}"),
            None => "ended".into(),
        });
        match outputs {
            Outputs::Saved => {}
            Outputs::Missing(names) => {
                reason = Some(format!(
                    "{ended}; not saved (missing, or not a file or directory): {}",
                    names.join(", ")
                ));
            }
            Outputs::Failed(why) => {
                state = ReportedState::Failed;
                reason = Some(format!("{ended}, but its outputs were not saved: {why}"));
            }
        }
        lock(&agent.running).remove(&a.id);
        lock(&agent.stopping).remove(&a.id);
        lock(&agent.ended.reports).push(SessionReport {
            id: a.id.clone(),
            state,
            exit_code,
            reason,
        });
        agent.ended.bell.notify_waiters();
    });
}
