//! What-if simulation: replay a recorded workload against a group's configuration to see what
//! a policy or a template change would have done, before it runs on real machines.
//!
//! - `trace`: the workload, from the Standard Workload Format of the Parallel Workloads Archive
//!   or a plain CSV;
//! - `config`: the simulated group (policy, scheduler, templates with prices, agents,
//!   provisioning delay and failure rate), as TOML;
//! - `engine`: the replay, on a discrete-event `clock`, of passes of `corral_core::cycle` itself
//!   over a simulated `world` (nothing here decides what to admit, launch or place);
//! - `report`: waits, slowdown, utilisation, node-hours, cost and its lower bound; `plot`: the
//!   time series as an SVG chart.
//! - `synthetic`: a seeded machine-learning workload, for the speed benchmarks.

mod clock;
pub mod config;
mod engine;
pub mod plot;
pub mod report;
pub mod synthetic;
pub mod trace;
mod world;

pub use config::{AgentSpec, ConfigError, Provisioning, Settings, SimConfig};
pub use engine::{simulate, Outcome, Progress, Sample};
pub use plot::PlotError;
pub use report::{side_by_side, Report, Stats};
pub use trace::{
    parse_csv, parse_swf, read, Format, Malformed, Skipped, SwfHeader, Trace, TraceError, TraceJob,
};
pub use world::{NodeRecord, SessionRecord};

/// Why a replay could not finish.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    /// The world contradicts a decision of the cycle: a bug, reported rather than applied.
    #[error("the engine's decisions contradict the simulated group: {0}")]
    Engine(String),
    #[error(
        "the replay made no progress for {MAX} passes (no session arrived, started, ended or was \
         refused) at {at_secs} s, with {pending} session(s) pending and {running} running: the \
         group can never run its queue, or its scaling goes round in circles",
        MAX = engine::MAX_PASSES_WITHOUT_PROGRESS
    )]
    Stalled {
        at_secs: i64,
        pending: usize,
        running: usize,
    },
}
