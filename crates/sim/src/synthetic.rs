//! A seeded synthetic workload: the trace `corral bench sim` and the replay benchmark time.

use corral_core::rng::Rng;
use corral_core::{Quantity, SlotName, Slots};

use crate::trace::{Trace, TraceJob};

/// `n` machine-learning sessions in bursts (job arrays, sweeps) ten minutes apart on average:
/// notebooks and CPU jobs, single-GPU fine-tuning, multi-GPU training. The same `seed` gives
/// the same trace.
pub fn ml_sessions(n: usize, seed: u64) -> Trace {
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
