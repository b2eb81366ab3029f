//! Criterion benchmarks of the cycle on the synthetic workload (`corral bench core` prints the
//! same cases as one line each).

use corral_core::{cycle, workload, PolicyKind};
use criterion::{criterion_group, criterion_main, Criterion, Throughput};

fn schedule_100k_on_10k(c: &mut Criterion) {
    let snapshot = workload::snapshot(PolicyKind::Fixed, 10_000, 100_000, 42);
    let mut g = c.benchmark_group("cycle");
    g.sample_size(10)
        .measurement_time(std::time::Duration::from_secs(10));
    g.throughput(Throughput::Elements(100_000));
    g.bench_function("schedule_100k_on_10k", |b| b.iter(|| cycle(&snapshot)));
    let snapshot = workload::snapshot(PolicyKind::Demand, 0, 100_000, 42);
    g.bench_function("plan_100k_20_templates", |b| b.iter(|| cycle(&snapshot)));
    g.finish();
}

criterion_group!(benches, schedule_100k_on_10k);
criterion_main!(benches);
