//! `corral bench sim`: the simulator's speed, simulated sessions per second of wall time on a
//! seeded synthetic trace, and the whole HPC2N replay when the log is at hand.

use std::path::Path;
use std::time::Instant;

use anyhow::{Context, Result};
use corral_core::workload::Rng;
use corral_core::{Quantity, SlotName, Slots};
use corral_sim::{simulate, SimConfig, Trace, TraceJob};

/// The group of the synthetic case: examples/simulate/ml-cloud.toml (demand, five templates).
const ML_CLOUD: &str = include_str!("../../../examples/simulate/ml-cloud.toml");

pub fn run(sessions: usize, runs: u32, seed: u64, hpc2n: &Path) -> Result<()> {
    let config = SimConfig::parse(ML_CLOUD, &[]).context("examples/simulate/ml-cloud.toml")?;
    let trace = synthetic(sessions, seed);
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

/// A mix of machine-learning sessions, in bursts (job arrays, sweeps) ten minutes apart on
/// average: notebooks and CPU jobs, single-GPU fine-tuning, multi-GPU training.
fn synthetic(n: usize, seed: u64) -> Trace {
    let mut rng = Rng::new(seed);
    let slot = |name: &str| SlotName::new(name).expect("constant slot name");
    let request = |cpu: u64, mem_gib: u64, gpu: u64| {
        let mut pairs = vec![
            (slot("cpu"), Quantity::from_units(cpu).expect("small")),
            (
                slot("mem"),
                Quantity::from_units(mem_gib << 30).expect("small"),
            ),
        ];
        if gpu > 0 {
            pairs.push((slot("gpu"), Quantity::from_units(gpu).expect("small")));
        }
        Slots::from_pairs(pairs).expect("distinct names")
    };
    let shapes = [
        (request(2, 8, 0), 600, 7200),
        (request(8, 16, 0), 300, 3600),
        (request(16, 64, 0), 600, 5400),
        (request(8, 48, 1), 1800, 14_400),
        (request(32, 200, 4), 3600, 28_800),
    ];
    let mut jobs = Vec::with_capacity(n);
    let mut submit = 0u64;
    while jobs.len() < n {
        submit += 1 + rng.below(1200);
        let (slots, shortest, longest) = rng.pick(&shapes).clone();
        let burst = 1 + rng.below(if slots.get("gpu").milli() > 0 { 4 } else { 20 });
        for _ in 0..burst.min((n - jobs.len()) as u64) {
            jobs.push(TraceJob {
                id: jobs.len() as u64 + 1,
                submit_secs: submit,
                duration_secs: shortest + rng.below(longest - shortest),
                request: slots.clone(),
                owner: format!("u{}", rng.below(20)),
                recorded_wait_secs: None,
            });
        }
    }
    Trace {
        jobs,
        ..Trace::default()
    }
}
