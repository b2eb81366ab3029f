//! `corral bench sim`: the simulator's speed, simulated sessions per second of wall time on a
//! seeded synthetic trace, and the whole HPC2N replay when the log is at hand.

use std::path::Path;
use std::time::Instant;

use anyhow::{Context, Result};
use corral_sim::{simulate, SimConfig};

/// The group of the synthetic case: examples/simulate/ml-cloud.toml (demand, five templates).
const ML_CLOUD: &str = include_str!("../../../examples/simulate/ml-cloud.toml");

pub fn run(sessions: usize, runs: u32, seed: u64, hpc2n: &Path) -> Result<()> {
    let config = SimConfig::parse(ML_CLOUD, &[]).context("examples/simulate/ml-cloud.toml")?;
    let trace = corral_sim::synthetic::ml_sessions(sessions, seed);
    let mut best = f64::INFINITY;
    let mut passes = 0;
    for _ in 0..runs {
        let started = Instant::now();
        let outcome = simulate(&trace, &config, &mut |_| {})?;
        best = best.min(started.elapsed().as_secs_f64());
        passes = outcome.passes;
    }
    println!("sim_sessions_per_s {:.0}", sessions as f64 / best);
    eprintln!(
        "  ({sessions} sessions, {passes} passes of the cycle, best of {runs}: {:.0} ms)",
        best * 1e3
    );
    if hpc2n.exists() {
        let trace = corral_sim::read(hpc2n, corral_sim::Format::Swf, false)?;
        let config = SimConfig::parse(
            include_str!("../../../examples/simulate/hpc2n-demand.toml"),
            &[],
        )?;
        let mut best = f64::INFINITY;
        for _ in 0..runs {
            let started = Instant::now();
            simulate(&trace, &config, &mut |_| {})?;
            best = best.min(started.elapsed().as_secs_f64());
        }
        println!("sim_hpc2n_ms {:.1}", best * 1e3);
        eprintln!(
            "  ({} jobs of {} on examples/simulate/hpc2n-demand.toml, best of {runs})",
            trace.jobs.len(),
            hpc2n.display()
        );
    } else {
        eprintln!("sim_hpc2n_ms: {} is absent, skipped", hpc2n.display());
    }
    Ok(())
}
