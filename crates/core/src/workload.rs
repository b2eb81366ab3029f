//! Synthetic, seeded workloads for benchmarks and tests: a cloud-like template catalog, agents
//! launched from it, and a mix of CPU and GPU sessions.

use std::collections::BTreeMap;

use crate::dense::{SlotIndex, Vector};
use crate::model::*;
use crate::planner::{DemandClass, Offer};
use crate::slots::{Quantity, SlotName, Slots};
use crate::snapshot::Snapshot;

pub use crate::rng::Rng;

const GIB: u64 = 1 << 30;

fn slots(cpu: u64, mem_gib: u64, gpu: u64) -> Slots {
    let name = |n: &str| SlotName::new(n).expect("constant slot name");
    let milli = |units: u64| Quantity::from_milli(units * 1000);
    Slots::from_pairs([
        (name("cpu"), milli(cpu)),
        (name("mem"), milli(mem_gib * GIB)),
        (name("gpu"), milli(gpu)),
    ])
    .expect("distinct names")
}

/// Twenty templates shaped and priced like a public cloud's on-demand instances (compute-,
/// general- and memory-optimised CPU families, and GPU families), each with at most `max`.
pub fn catalog(max: u32) -> Vec<InstanceTemplate> {
    #[rustfmt::skip]
    let rows: [(&str, u64, u64, u64, f64); 20] = [
        ("c5.large", 2, 4, 0, 0.085), ("c5.xlarge", 4, 8, 0, 0.17), ("c5.2xlarge", 8, 16, 0, 0.34),
        ("c5.4xlarge", 16, 32, 0, 0.68), ("c5.9xlarge", 36, 72, 0, 1.53), ("c5.18xlarge", 72, 144, 0, 3.06),
        ("m5.large", 2, 8, 0, 0.096), ("m5.xlarge", 4, 16, 0, 0.192), ("m5.2xlarge", 8, 32, 0, 0.384),
        ("m5.4xlarge", 16, 64, 0, 0.768), ("m5.12xlarge", 48, 192, 0, 2.304), ("m5.24xlarge", 96, 384, 0, 4.608),
        ("r5.large", 2, 16, 0, 0.126), ("r5.2xlarge", 8, 64, 0, 0.504), ("r5.8xlarge", 32, 256, 0, 2.016),
        ("r5.24xlarge", 96, 768, 0, 6.048), ("g4dn.xlarge", 4, 16, 1, 0.526), ("g4dn.12xlarge", 48, 192, 4, 3.912),
        ("p3.8xlarge", 32, 244, 4, 12.24), ("p3.16xlarge", 64, 488, 8, 24.48),
    ];
    rows.iter()
        .map(|&(name, cpu, mem, gpu, price)| InstanceTemplate {
            name: name.into(),
            slots: slots(cpu, mem, gpu),
            price_per_hour: price,
            max,
            labels: Default::default(),
            devices: Vec::new(),
        })
        .collect()
}

/// `n` pending sessions: 70% CPU-only (1-16 cpu, 1-8 GiB per cpu), 30% GPU (1-4 gpu, 4-8 cpu and
/// 8-32 GiB per gpu), from eight owners, with priorities 0-3, submitted one millisecond apart.
pub fn sessions(n: usize, rng: &mut Rng) -> Vec<Session> {
    (0..n)
        .map(|i| {
            let request = if rng.below(10) < 7 {
                let cpu = *rng.pick(&[1, 1, 2, 2, 4, 4, 8, 16]);
                slots(cpu, cpu * rng.pick(&[1, 2, 4, 8]), 0)
            } else {
                let gpu = *rng.pick(&[1, 1, 1, 2, 4]);
                slots(gpu * rng.pick(&[4, 8]), gpu * rng.pick(&[8, 16, 32]), gpu)
            };
            Session {
                id: SessionId(format!("s{i:06}")),
                group: "bench".into(),
                owner: format!("user{}", rng.below(8)),
                priority: rng.below(4) as i32,
                request,
                image: None,
                kind: SessionType::Batch,
                submitted_at: Timestamp(i as i64),
                state: SessionState::Pending,
                agent: None,
                blocked_passes: 0,
                constraints: Vec::new(),
                devices: Vec::new(),
                array: None,
            }
        })
        .collect()
}

/// `n` alive, empty agents, each of a template drawn from the larger half of `templates`.
pub fn agents(n: usize, templates: &[InstanceTemplate], rng: &mut Rng) -> Vec<Agent> {
    let large: Vec<&InstanceTemplate> = templates
        .iter()
        .filter(|t| t.slots.get("cpu") >= Quantity::from_milli(16_000))
        .collect();
    (0..n)
        .map(|i| {
            let t = *rng.pick(&large);
            Agent {
                id: AgentId(format!("a{i:05}")),
                group: "bench".into(),
                template: Some(t.name.clone()),
                capacity: t.slots.clone(),
                allocated: Slots::new(),
                state: AgentState::Alive,
                labels: Default::default(),
                external: false,
                drained_by_hand: false,
                version: None,
                platform: None,
                updating: None,
                idle_since: Some(Timestamp(0)),
                devices: Vec::new(),
            }
        })
        .collect()
}

/// A group of `agents` agents and `sessions` pending sessions under `policy`.
pub fn snapshot(policy: PolicyKind, agents_n: usize, sessions_n: usize, seed: u64) -> Snapshot {
    let mut rng = Rng::new(seed);
    let templates = catalog(100_000);
    Snapshot {
        now: Timestamp(sessions_n as i64),
        group: ScalingGroup {
            name: "bench".into(),
            policy: ScalingPolicy {
                kind: policy,
                max_nodes: 1_000_000,
                max_launches_per_pass: 1_000_000,
                // Measures the pass that plans for the whole queue, as the window closes.
                batch_idle_ms: 0,
                batch_max_ms: 0,
                ..ScalingPolicy::default()
            },
            scheduler: SchedulerConfig::default(),
            templates: templates.clone(),
        },
        agents: agents(agents_n, &templates, &mut rng),
        sessions: sessions(sessions_n, &mut rng),
        images: vec![],
        in_flight: vec![],
        last_scale_out: None,
        launch_limits: Default::default(),
        array_holding: Default::default(),
        removed: Default::default(),
    }
}

/// `n` sessions of the mix as the launch planner sees them from an empty group: demand classes
/// over the catalog (slot order `cpu`, `gpu`, `mem`).
pub fn scale_out_problem(n: usize, seed: u64) -> (Vec<DemandClass>, Vec<Offer>) {
    demand_of(&snapshot(PolicyKind::Demand, 0, n, seed))
}

/// A snapshot's pending sessions as demand classes (by required shares) over its templates.
pub fn demand_of(s: &Snapshot) -> (Vec<DemandClass>, Vec<Offer>) {
    let required: Vec<Slots> = s.pending().map(|p| s.required_shares(p)).collect();
    let index = SlotIndex::of(s.group.templates.iter().map(|t| &t.slots).chain(&required));
    let mut counts: BTreeMap<Vector, u32> = BTreeMap::new();
    for r in &required {
        *counts.entry(index.vector(r)).or_default() += 1;
    }
    let classes = counts
        .into_iter()
        .map(|(need, count)| DemandClass { need, count })
        .collect();
    let offers = s
        .group
        .templates
        .iter()
        .map(|t| Offer::of(t, &index, t.max))
        .collect();
    (classes, offers)
}

/// The two GPU models of [`gpu_snapshot`].
pub const GPU_MODELS: [&str; 2] = ["NVIDIA A100-SXM4-80GB", "NVIDIA H100 80GB HBM3"];

/// A fixed group of `agents_n` agents of 8 GPUs each (half A100, half H100, 80 GiB each; 96 cpu,
/// 1 TiB) and `sessions_n` pending GPU sessions: 40% whole devices (1, 2, 4 or 8), 60% a
/// fraction of one (0.1 to 0.5, a third of them with 10 GiB of its memory), half of all
/// constrained to one model.
pub fn gpu_snapshot(agents_n: usize, sessions_n: usize, seed: u64) -> Snapshot {
    let mut rng = Rng::new(seed);
    let agents = (0..agents_n)
        .map(|i| {
            let model = GPU_MODELS[i % 2];
            let devices = (0..8)
                .map(|j| {
                    crate::devices::Device::new(
                        &format!("GPU-{i:05}-{j}"),
                        "gpu",
                        model,
                        Quantity::from_milli(80 * GIB * 1000),
                    )
                    .expect("gpu is a device kind")
                })
                .collect();
            Agent {
                id: AgentId(format!("a{i:05}")),
                group: "bench".into(),
                template: None,
                capacity: slots(96, 1024, 8)
                    .checked_add(&format!("gpu.mem={}GiB", 8 * 80).parse().expect("slots"))
                    .expect("no overflow"),
                allocated: Slots::new(),
                state: AgentState::Alive,
                labels: Default::default(),
                external: false,
                drained_by_hand: false,
                version: None,
                platform: None,
                updating: None,
                idle_since: Some(Timestamp(0)),
                devices,
            }
        })
        .collect();
    let sessions = (0..sessions_n)
        .map(|i| {
            let mut text = if rng.below(10) < 4 {
                format!("cpu=8,mem=64GiB,gpu={}", rng.pick(&[1, 1, 2, 4, 8]))
            } else {
                let tenths = 1 + rng.below(5);
                let mut t = format!("cpu=2,mem=16GiB,gpu=0.{tenths}");
                if rng.below(3) == 0 {
                    t.push_str(",gpu.mem=10GiB");
                }
                t
            };
            if rng.below(2) == 0 {
                text.push_str(if rng.below(2) == 0 {
                    ",gpu.model=A100*"
                } else {
                    ",gpu.model=H100*"
                });
            }
            let (request, constraints) =
                crate::devices::parse_request(&text).expect("a valid request");
            Session {
                id: SessionId(format!("s{i:06}")),
                group: "bench".into(),
                owner: format!("user{}", rng.below(8)),
                priority: 0,
                request,
                image: None,
                kind: SessionType::Batch,
                submitted_at: Timestamp(i as i64),
                state: SessionState::Pending,
                agent: None,
                blocked_passes: 0,
                constraints,
                devices: Vec::new(),
                array: None,
            }
        })
        .collect();
    Snapshot {
        now: Timestamp(sessions_n as i64),
        group: ScalingGroup {
            name: "bench".into(),
            policy: ScalingPolicy::default(),
            // Every session tries its luck: none holds the others back.
            scheduler: SchedulerConfig {
                head_of_line: HeadOfLine::Backfill,
                skip_after: 0,
                ..SchedulerConfig::default()
            },
            templates: vec![],
        },
        agents,
        sessions,
        images: vec![],
        in_flight: vec![],
        last_scale_out: None,
        launch_limits: Default::default(),
        array_holding: Default::default(),
        removed: Default::default(),
    }
}

/// [`gpu_snapshot`]'s group of `agents_n` agents offered sessions until their GPU requests add
/// up to `offered` times its GPUs (1.3 for 130%), served strictly in order: the pass stops at
/// the first that finds no room, as a cluster fills.
pub fn gpu_offered(agents_n: usize, offered: f64, seed: u64) -> Snapshot {
    let capacity = (agents_n * 8 * 1000) as f64;
    let mut s = gpu_snapshot(agents_n, agents_n * 64, seed);
    s.group.scheduler.head_of_line = HeadOfLine::Strict;
    let mut total = 0u64;
    s.sessions.retain(|x| {
        total += x.request.get("gpu").milli();
        (total as f64) <= capacity * offered
    });
    s
}
