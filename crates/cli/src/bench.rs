//! `corral bench`: benchmarks that print one comparable `name value unit` line per case.

use std::time::Instant;

use anyhow::Result;
use clap::Subcommand;
use corral_core::plan::summarize;
use corral_core::{cycle, planner, workload, PolicyKind};

// `corral bench agent`; declared here so that main.rs need not change.

#[derive(Subcommand)]
pub enum Target {
    /// The core engine: scheduling throughput, scale-out planning time and cost.
    Core {
        /// Runs per case; the best is reported (the machine's noise only ever slows a run).
        #[arg(long, default_value_t = 3)]
        runs: u32,
        /// Seed of the synthetic workload.
        #[arg(long, default_value_t = 42)]
        seed: u64,
    },
    /// The manager through its HTTP API and store: sessions submitted and placed per second,
    /// and submit latency at a steady rate; SQLite always, PostgreSQL with --database-url.
    Api {
        /// A PostgreSQL database to run the PostgreSQL cases on (postgres://...).
        #[arg(long, env = "CORRAL_BENCH_DATABASE_URL")]
        database_url: Option<String>,
        /// Sessions submitted in the throughput case.
        #[arg(long, default_value_t = 20_000)]
        sessions: usize,
        /// Clients submitting at once in the throughput case.
        #[arg(long, default_value_t = 32)]
        concurrency: usize,
        /// Submits per second in the latency case.
        #[arg(long, default_value_t = 500)]
        rate: u32,
        /// Length of the latency case in seconds.
        #[arg(long, default_value_t = 10)]
        seconds: u64,
    },
    /// Agents: submit to process start on a warm agent (process runtime), and the manager's CPU
    /// for thousands of simulated agents heartbeating every 5 s (the manager runs as a child
    /// process), one case per number of agents. 0 sessions or 0 agents skips that case.
    Agent {
        /// Sessions run one after another in the start-latency case.
        #[arg(long, default_value_t = 200)]
        sessions: usize,
        /// Simulated agents in the heartbeat cases, one case each (comma-separated).
        #[arg(long, value_delimiter = ',', default_value = "5000,20000")]
        agents: Vec<usize>,
        /// Seconds over which the manager's CPU is measured once all agents joined.
        #[arg(long, default_value_t = 20)]
        window_secs: u64,
    },
    /// Scale-out for a burst: sessions submitted at once to a `demand` group with the default
    /// batching window, timed from the first submit to the last launch call they need, and the
    /// passes that launched (the provider is a plugin that records its calls).
    Scale {
        /// Sessions in the burst (one CPU each; the template has eight).
        #[arg(long, default_value_t = 1000)]
        sessions: usize,
        /// Clients submitting at once.
        #[arg(long, default_value_t = 32)]
        concurrency: usize,
    },
    /// `corral session run` against `srun`, side by side: the median wall time of `true` and of
    /// `sh -c 'echo hello; sleep 0.2'` through `corral dev`, and through this host's Slurm when
    /// one answers (`.ci/slurm.sh` starts one).
    Run {
        /// Timed runs of each command (after three to warm up).
        #[arg(long, default_value_t = 30)]
        runs: usize,
    },
    /// Interactive sessions through `corral dev`, each beside the same traffic sent directly:
    /// a forwarded port's throughput (an echo server in the session, SHA-256 checked), a
    /// keystroke's round trip through `session exec -- cat`, terminals held at once with the
    /// child's CPU, and an app's HTTP requests and WebSocket messages through the manager's
    /// proxy (10 clients), with the latency it adds at 100 requests/s. Needs python3 (the
    /// session's echo server).
    Interactive {
        /// MiB sent through the forwarded port (and echoed back).
        #[arg(long, default_value_t = 1024)]
        megabytes: u64,
        /// Keystrokes timed.
        #[arg(long, default_value_t = 1000)]
        keystrokes: usize,
        /// Terminals held open at once.
        #[arg(long, default_value_t = 1000)]
        terminals: usize,
        /// Seconds each app throughput is measured for (requests, then WebSocket messages).
        #[arg(long, default_value_t = 5.0)]
        app_seconds: f64,
    },
    /// The dashboard: its group page, overview and a session page with thousands of agents and
    /// sessions in the store (median time to the whole page); SQLite always, PostgreSQL with
    /// --database-url.
    Ui {
        /// A PostgreSQL database to run the PostgreSQL case on (postgres://...).
        #[arg(long, env = "CORRAL_BENCH_DATABASE_URL")]
        database_url: Option<String>,
        /// Sessions submitted (one CPU each: those the agents hold run, the rest wait).
        #[arg(long, default_value_t = 10_000)]
        sessions: usize,
        /// Agents registered (four CPUs each).
        #[arg(long, default_value_t = 1_000)]
        agents: usize,
        /// Fetches of each page.
        #[arg(long, default_value_t = 20)]
        runs: usize,
    },
    /// The simulator: simulated sessions per second of wall time (a seeded synthetic trace on
    /// examples/simulate/ml-cloud.toml, a demand group of five templates) and the whole HPC2N
    /// replay on examples/simulate/hpc2n-demand.toml.
    Sim {
        /// Sessions in the synthetic trace.
        #[arg(long, default_value_t = 100_000)]
        sessions: usize,
        /// Runs per case; the best is reported.
        #[arg(long, default_value_t = 3)]
        runs: u32,
        /// Seed of the synthetic trace.
        #[arg(long, default_value_t = 42)]
        seed: u64,
        /// The HPC2N log (skipped when absent).
        #[arg(long, default_value = "../shared/data/hpc2n.swf")]
        hpc2n: std::path::PathBuf,
    },
    /// High availability: three managers on one PostgreSQL database, the owner of a group
    /// SIGKILLed; the time until the group places a session again (the new owner's first pass).
    Ha {
        /// The PostgreSQL database the managers share (postgres://...).
        #[arg(long, env = "CORRAL_BENCH_DATABASE_URL")]
        database_url: Option<String>,
        /// The managers' --lease-secs.
        #[arg(long, default_value_t = 5)]
        lease_secs: u64,
        /// Runs, each with three fresh managers; the median and the longest are reported.
        #[arg(long, default_value_t = 3)]
        runs: usize,
    },
    /// Batch systems: jobs submitted per second through the API to the real Slurm on this host,
    /// and the time of one poll of all their states (`.ci/slurm.sh` starts a Slurm).
    Batch {
        /// Jobs submitted (held, so none runs; cancelled at the end).
        #[arg(long, default_value_t = 1000)]
        jobs: usize,
        /// Clients submitting at once.
        #[arg(long, default_value_t = 8)]
        concurrency: usize,
        /// Polls timed; the best is reported.
        #[arg(long, default_value_t = 3)]
        runs: u32,
    },
}

pub fn run(target: Target) -> Result<()> {
    match target {
        Target::Core { runs, seed } => core(runs.max(1), seed),
        Target::Sim {
            sessions,
            runs,
            seed,
            hpc2n,
        } => crate::bench_sim::run(sessions.max(1), runs.max(1), seed, &hpc2n),
        Target::Api {
            database_url,
            sessions,
            concurrency,
            rate,
            seconds,
        } => {
            let runtime = tokio::runtime::Runtime::new()?;
            runtime.block_on(crate::bench_api::run(
                database_url,
                sessions,
                concurrency.max(1),
                rate.max(1),
                seconds.max(1),
            ))
        }
        Target::Agent {
            sessions,
            agents,
            window_secs,
        } => {
            let runtime = tokio::runtime::Runtime::new()?;
            runtime.block_on(crate::bench_agent::run(sessions, &agents, window_secs))
        }
        Target::Scale {
            sessions,
            concurrency,
        } => {
            let runtime = tokio::runtime::Runtime::new()?;
            runtime.block_on(crate::bench_scale::run(sessions.max(1), concurrency.max(1)))
        }
        Target::Run { runs } => crate::bench_run::run(runs.max(1)),
        Target::Interactive {
            megabytes,
            keystrokes,
            terminals,
            app_seconds,
        } => {
            let runtime = tokio::runtime::Runtime::new()?;
            runtime.block_on(crate::bench_interactive::run(
                megabytes.max(1),
                keystrokes.max(1),
                terminals,
                app_seconds.clamp(0.5, 600.0),
            ))
        }
        Target::Ha {
            database_url,
            lease_secs,
            runs,
        } => {
            let runtime = tokio::runtime::Runtime::new()?;
            runtime.block_on(crate::bench_ha::run(
                database_url,
                lease_secs.max(1),
                runs.max(1),
            ))
        }
        Target::Ui {
            database_url,
            sessions,
            agents,
            runs,
        } => {
            let runtime = tokio::runtime::Runtime::new()?;
            runtime.block_on(crate::bench_ui::run(
                database_url,
                sessions,
                agents.max(1),
                runs.max(1),
            ))
        }
        Target::Batch {
            jobs,
            concurrency,
            runs,
        } => {
            let runtime = tokio::runtime::Runtime::new()?;
            runtime.block_on(crate::bench_batch::run(
                jobs.max(1),
                concurrency.max(1),
                runs.max(1),
            ))
        }
    }
}

fn best_of<T>(runs: u32, mut f: impl FnMut() -> T) -> (f64, T) {
    let mut best = f64::INFINITY;
    let mut out = None;
    for _ in 0..runs {
        let start = Instant::now();
        let r = f();
        best = best.min(start.elapsed().as_secs_f64());
        out = Some(r);
    }
    (best, out.expect("at least one run"))
}

/// Times a whole pass over `snapshot` and prints its placements per second.
fn placements_per_second(case: &str, runs: u32, snapshot: &corral_core::Snapshot) {
    let (secs, decisions) = best_of(runs, || cycle(snapshot));
    println!(
        "{case} {:.0} placements/s",
        decisions.placements.len() as f64 / secs
    );
    eprintln!(
        "# {} placed, {} waiting, {:.1} ms per pass",
        decisions.placements.len(),
        decisions.waiting.len(),
        secs * 1e3
    );
}

fn core(runs: u32, seed: u64) -> Result<()> {
    // 100,000 pending sessions of mixed shapes onto 10,000 heterogeneous agents; the whole pass
    // (admission, trial placement, scaling, placement) is timed.
    let snapshot = workload::snapshot(PolicyKind::Fixed, 10_000, 100_000, seed);
    placements_per_second("schedule_100k_on_10k", runs, &snapshot);

    // Devices one by one: 10,000 agents of 8 GPUs of two models, 100,000 sessions of whole
    // devices and fractions of one, half of them constrained to a model.
    let snapshot = workload::gpu_snapshot(10_000, 100_000, seed);
    placements_per_second("schedule_100k_on_10k_devices", runs, &snapshot);
    // How much of 1,000 agents' GPUs (8,000 devices) is allocated when the first request of a
    // seeded stream of whole and fractional ones (130% of their capacity, in order) finds no
    // room: what fragmentation leaves unusable (best fit on devices).
    let snapshot = workload::gpu_offered(1_000, 1.3, seed);
    let decisions = cycle(&snapshot);
    let allocated: u64 = decisions
        .placements
        .iter()
        .map(|p| p.slots.get("gpu").milli())
        .sum();
    println!(
        "gpu_allocation_ratio {:.4} ratio",
        allocated as f64 / (1_000.0 * 8.0 * 1000.0)
    );

    // Scale-out for 100,000 pending sessions over the 20-template catalog, from no agents.
    let snapshot = workload::snapshot(PolicyKind::Demand, 0, 100_000, seed);
    let (secs, decisions) = best_of(runs, || cycle(&snapshot));
    println!("plan_100k_20_templates {:.1} ms", secs * 1e3);
    let summary = summarize(&snapshot, &decisions);
    let bound = summary.lower_bound_cost.unwrap_or(f64::NAN);
    println!(
        "plan_cost_over_lower_bound {:.4} ratio",
        summary.cost_per_hour / bound
    );
    // That LP may take a session's GPU from one template and its memory from another; the class
    // bound keeps each session whole on one instance, so it is what packing can approach.
    let (classes, offers) = workload::demand_of(&snapshot);
    let class_bound = planner::class_lower_bound(&classes, &offers).unwrap_or(f64::NAN);
    println!(
        "plan_cost_over_class_bound {:.4} ratio",
        summary.cost_per_hour / class_bound
    );
    eprintln!(
        "# {} nodes, {:.2}/h, lower bound {:.2}/h, {} left waiting",
        summary.node_count, summary.cost_per_hour, bound, summary.unplaced
    );
    Ok(())
}
