//! The agent's guard (`corral agent` starts it beside itself, as `corral agent-guard`): a
//! process of its own that stops the agent's sessions once the fence's deadline has passed
//! ([`crate::fence`]), also when the agent itself cannot (frozen, hung, or dead while its
//! sessions run on). It does nothing while the agent syncs, as each sync moves the deadline on.
//! Several guards of one work directory (an agent restarted) do the same thing; an older one
//! steps aside once a newer one has started (`<work_root>/guard.pid`).

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use corral_runtime::Runtime;

use crate::fence;

/// How often the guard looks at the deadline.
const WATCH: Duration = Duration::from_millis(200);
const PID_FILE: &str = "guard.pid";

/// Runs until the agent `agent_pid` is gone and nothing is left to stop, or a newer guard took
/// over.
pub async fn run(work_root: &Path, runtime: Runtime, agent_pid: u32) -> std::io::Result<()> {
    let runtime = Arc::new(runtime);
    std::fs::create_dir_all(work_root)?;
    let me = std::process::id().to_string();
    corral_runtime::write_atomic(&work_root.join(PID_FILE), me.as_bytes())?;
    // The deadline whose sessions were stopped: each deadline once.
    let mut stopped_for: Option<u64> = None;
    loop {
        tokio::time::sleep(WATCH).await;
        let newest = std::fs::read_to_string(work_root.join(PID_FILE)).unwrap_or_default();
        if newest.trim() != me {
            return Ok(());
        }
        // A zombie is gone: its parent (a supervisor, a test) may wait for this guard's end.
        let agent_here = i32::try_from(agent_pid)
            .ok()
            .and_then(corral_runtime::procfs::stat)
            .is_some_and(|s| s.alive());
        let deadline = fence::deadline(work_root);
        match deadline {
            Some(d) if fence::boottime_ms() >= d.at_ms && stopped_for != Some(d.at_ms) => {
                stop_all(work_root, &runtime, d).await;
                stopped_for = Some(d.at_ms);
            }
            // Its agent gone with nothing (more) to stop: no deadline, or the last one's
            // sessions stopped. Whoever starts the agent again starts a guard too.
            _ if !agent_here && deadline.is_none_or(|d| stopped_for == Some(d.at_ms)) => {
                return Ok(())
            }
            _ => {}
        }
    }
}

/// Stops every session of the work directory within the deadline's grace, marking each.
async fn stop_all(work_root: &Path, runtime: &Arc<Runtime>, deadline: fence::Deadline) {
    let running = match runtime.running(work_root).await {
        Ok(r) => r,
        Err(e) => {
            tracing::error!(error = %e, "the guard cannot list the sessions it is to stop");
            return;
        }
    };
    let late = fence::boottime_ms().saturating_sub(deadline.at_ms) / 1000;
    let why = format!(
        "no contact with the manager past the agent's deadline ({late} s ago); stopped by the agent's guard"
    );
    let grace = Duration::from_secs(deadline.grace_secs);
    // At once, not one after another: each stop waits for its session's end.
    let mut stops = tokio::task::JoinSet::new();
    for id in running {
        if let Err(e) = fence::mark(work_root, &id, &why) {
            tracing::warn!(session = id, error = %e, "could not mark the session stopped");
        }
        tracing::warn!(session = id, "{why}: stopping the session");
        let runtime = runtime.clone();
        stops.spawn(async move {
            if let Err(e) = runtime.stop(&id, grace).await {
                tracing::warn!(session = id, error = %e, "stop failed");
            }
        });
    }
    stops.join_all().await;
}
