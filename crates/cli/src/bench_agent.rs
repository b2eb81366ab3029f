//! `corral bench agent`: the agent protocol under measurement.
//!
//! 1. Start latency (`bench_agent/start.rs`): a manager and a real agent (process runtime) run in
//!    this process; sessions are submitted one at a time to the warm agent, idle in its long
//!    poll, and each session's process prints its own start time, so submit → start is read on
//!    one clock.
//! 2. Heartbeats (`bench_agent/heartbeats.rs`): a manager runs as a child process (its CPU read
//!    from `/proc`), and thousands of simulated agents in this process join and then long-poll
//!    their syncs, each answer held up to the heartbeat: the manager's CPU per heartbeating agent.
//!
//! This file runs the cases and holds what they share, and the child manager `bench ha` uses.

mod heartbeats;
mod start;

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use corral_api::Client;
use serde_json::{json, Value};
use tokio::task::JoinHandle;

use heartbeats::heartbeats;
use start::start_latency;

/// The group both cases create.
const GROUP: &str = "bench";
/// How often agents sync when nothing happens, in both cases.
const HEARTBEAT: Duration = Duration::from_secs(5);
/// Silence after which the manager marks an agent lost.
const LOST_AFTER: Duration = Duration::from_secs(30);

pub async fn run(sessions: usize, agents: &[usize], window_secs: u64) -> Result<()> {
    if sessions > 0 {
        start_latency(sessions)
            .await
            .context("case agent_start (submit to process start)")?;
    }
    // Agents' syncs may fall in phase; a window shorter than a heartbeat can miss them all.
    let window = window_secs.max(HEARTBEAT.as_secs());
    if window != window_secs && agents.iter().any(|&n| n > 0) {
        eprintln!("# --window-secs raised to {window}: at least one heartbeat");
    }
    for &count in agents.iter().filter(|&&n| n > 0) {
        heartbeats(count, window)
            .await
            .with_context(|| format!("case agent_heartbeat ({count} simulated agents)"))?;
    }
    Ok(())
}

/// A task aborted when dropped, so an early return leaves nothing running.
struct AbortOnDrop<T>(JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Creates the group both cases use: fixed, so that its agents are all there is.
async fn create_group(api: &Client) -> Result<()> {
    api.post::<Value, _>(
        &["groups"],
        Some(&json!({"name": GROUP, "policy": {"kind": "fixed"}})),
    )
    .await?;
    Ok(())
}

/// A manager in a child process, killed when dropped.
pub(crate) struct ChildManager {
    pub(crate) child: std::process::Child,
    pub(crate) log: PathBuf,
}

impl ChildManager {
    /// SIGKILL, and reaped.
    pub(crate) fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// The last lines the manager logged, for errors.
    pub(crate) fn log_tail(&self) -> Vec<String> {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(20)..]
            .iter()
            .map(|l| l.to_string())
            .collect()
    }

    /// User plus system CPU time it used so far.
    fn cpu(&self) -> Result<Duration> {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.child.id()))
            .context("reading the manager's /proc/PID/stat")?;
        // Fields after the command name in parentheses, starting at field 3 (state): utime is
        // field 14 and stime field 15, in clock ticks.
        let rest = &stat[stat.rfind(')').context("malformed /proc/PID/stat")? + 1..];
        let fields: Vec<&str> = rest.split_whitespace().collect();
        let ticks: u64 = fields
            .get(11..13)
            .context("short /proc/PID/stat")?
            .iter()
            .map(|f| f.parse::<u64>())
            .sum::<Result<u64, _>>()?;
        // SAFETY: sysconf only reads a configuration value.
        let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
        if hz <= 0 {
            bail!("sysconf(_SC_CLK_TCK) failed");
        }
        Ok(Duration::from_secs_f64(ticks as f64 / hz as f64))
    }

    /// Its resident memory, from /proc/PID/status.
    fn rss_mib(&self) -> Option<f64> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).ok()?;
        let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
        let kib: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
        Some(kib / 1024.0)
    }
}

impl Drop for ChildManager {
    fn drop(&mut self) {
        self.kill();
    }
}
