//! The replay's speed on the synthetic trace of `corral bench sim` (seed 42, ml-cloud.toml),
//! without building the whole command, for quick measurements while changing the core:
//!
//!     cargo run --release -p corral-sim --example replay_speed [SESSIONS] [RUNS]
//!
//! It also prints a digest of the outcome: a change meant to make the replay faster, and not
//! to change a decision, leaves it as it was.

use std::hash::{DefaultHasher, Hash, Hasher};
use std::time::Instant;

use corral_sim::{simulate, synthetic, SimConfig};

// As the `corral` binary, whose `bench sim` this stands for.
#[global_allocator]
static ALLOCATOR: corral_alloc::Mimalloc = corral_alloc::Mimalloc;

fn main() {
    let mut args = std::env::args().skip(1);
    let sessions: usize = args
        .next()
        .map_or(100_000, |a| a.parse().expect("SESSIONS"));
    let runs: u32 = args.next().map_or(3, |a| a.parse().expect("RUNS"));
    let config = SimConfig::parse(
        include_str!("../../../examples/simulate/ml-cloud.toml"),
        &[],
    )
    .expect("examples/simulate/ml-cloud.toml");
    let trace = synthetic::ml_sessions(sessions, 42);
    let mut best = f64::INFINITY;
    for _ in 0..runs {
        let started = Instant::now();
        let outcome = simulate(&trace, &config, &mut |_| {}).expect("the replay");
        let secs = started.elapsed().as_secs_f64();
        best = best.min(secs);
        let mut digest = DefaultHasher::new();
        format!(
            "{:?}{:?}{:?}",
            outcome.sessions, outcome.nodes, outcome.samples
        )
        .hash(&mut digest);
        println!(
            "{sessions} sessions, {} passes in {:.0} ms: {:.0} sessions/s (outcome digest {:016x})",
            outcome.passes,
            secs * 1e3,
            sessions as f64 / secs,
            digest.finish()
        );
    }
    println!("best: {:.0} sessions/s", sessions as f64 / best);
}
