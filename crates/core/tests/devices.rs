//! Devices one by one: whole devices and fractions of one device, model and memory constraints,
//! checked through the cycle as an operator sees it, and against a brute-force checker on
//! random small clusters.

mod common;

use std::collections::HashMap;

use common::snapshot;
use corral_core::devices::{parse_request, DeviceConstraint};
use corral_core::{cycle, Decisions, Device, Session, SessionId, Snapshot, Timestamp};
use proptest::prelude::*;
use serde_json::json;

const A100: &str = "NVIDIA A100-SXM4-80GB";
const H100: &str = "NVIDIA H100 80GB HBM3";

fn device(id: &str, model: &str, allocated: &str) -> serde_json::Value {
    json!({"id": id, "kind": "gpu", "model": model, "memory": "80GiB", "allocated": allocated})
}

/// A fixed group of agents given as (id, devices, the gpu already allocated on them).
fn group(agents: &[(&str, Vec<serde_json::Value>)], sessions: &[(&str, &str)]) -> Snapshot {
    let agents: Vec<serde_json::Value> = agents
        .iter()
        .map(|(id, devices)| {
            let allocated: u64 = devices
                .iter()
                .map(|d| {
                    corral_core::Quantity::parse("gpu", d["allocated"].as_str().unwrap())
                        .unwrap()
                        .milli()
                })
                .sum();
            let allocated = corral_core::Quantity::from_milli(allocated);
            json!({
                "id": id, "capacity": format!("cpu=64,gpu={}", devices.len()),
                "allocated": format!("gpu={allocated}"), "devices": devices, "idle_since": 0
            })
        })
        .collect();
    let mut s = snapshot(json!({"group": {"policy": "fixed"}, "agents": agents}));
    s.sessions = sessions
        .iter()
        .enumerate()
        .map(|(i, (id, request))| {
            let (request, constraints) = parse_request(request).unwrap();
            pending(id, i as i64, request, constraints)
        })
        .collect();
    s
}

fn pending(
    id: &str,
    at: i64,
    request: corral_core::Slots,
    constraints: Vec<DeviceConstraint>,
) -> Session {
    Session {
        id: SessionId(id.into()),
        group: "g".into(),
        owner: "alice".into(),
        priority: 0,
        request,
        image: None,
        kind: Default::default(),
        submitted_at: Timestamp(at),
        state: Default::default(),
        agent: None,
        blocked_passes: 0,
        constraints,
        devices: Vec::new(),
        array: None,
    }
}

/// Per placed session: its agent and its devices as `id=share`.
fn grants(d: &Decisions) -> Vec<(String, String, Vec<String>)> {
    d.placements
        .iter()
        .map(|p| {
            let devices = p
                .devices
                .iter()
                .map(|g| format!("{}={}", g.id, g.share))
                .collect();
            (p.session.0.clone(), p.agent.0.clone(), devices)
        })
        .collect()
}

fn waits(d: &Decisions) -> Vec<String> {
    d.waiting.iter().map(|w| w.session.0.clone()).collect()
}

fn rejected(d: &Decisions) -> Vec<(String, String)> {
    d.rejections
        .iter()
        .map(|r| (r.session.0.clone(), r.reason.to_string()))
        .collect()
}

#[test]
fn a_fraction_never_spans_two_devices_with_room_left_on_each() {
    // 0.6 used on each of two GPUs: 0.8 fits on neither although 0.8 of the sum is free.
    let two = || vec![device("GPU-a", A100, "0.6"), device("GPU-b", A100, "0.6")];
    let d = cycle(&group(&[("a1", two())], &[("s1", "gpu=0.8")]));
    assert_eq!(grants(&d), []);
    assert_eq!(waits(&d), ["s1"]);
    assert_eq!(
        rejected(&d),
        [],
        "a fresh agent holds it: it waits, not refused"
    );
    let d = cycle(&group(&[("a1", two())], &[("s1", "gpu=0.4")]));
    assert_eq!(
        grants(&d),
        [("s1".into(), "a1".into(), vec!["GPU-a=0.4".to_string()])]
    );
}

#[test]
fn three_sessions_of_six_tenths_on_two_devices_two_run_and_one_waits() {
    let two = vec![device("GPU-a", A100, "0"), device("GPU-b", A100, "0")];
    let d = cycle(&group(
        &[("a1", two)],
        &[("s1", "gpu=0.6"), ("s2", "gpu=0.6"), ("s3", "gpu=0.6")],
    ));
    assert_eq!(
        grants(&d),
        [
            ("s1".into(), "a1".into(), vec!["GPU-a=0.6".to_string()]),
            ("s2".into(), "a1".into(), vec!["GPU-b=0.6".to_string()]),
        ]
    );
    assert_eq!(waits(&d), ["s3"]);
    assert!(
        d.waiting[0].reason.to_string().contains("fixed"),
        "{}",
        d.waiting[0].reason
    );
}

#[test]
fn agents_that_give_gpus_only_as_a_number_stand_for_that_many_devices() {
    let mut s = snapshot(json!({
        "group": {"policy": "fixed"},
        "agents": [{"id": "a1", "capacity": "cpu=8,gpu=2", "idle_since": 0}],
    }));
    for (i, id) in ["s1", "s2", "s3"].iter().enumerate() {
        s.sessions
            .push(pending(id, i as i64, "gpu=0.6".parse().unwrap(), vec![]));
    }
    let d = cycle(&s);
    assert_eq!(
        grants(&d),
        [
            ("s1".into(), "a1".into(), vec!["gpu0=0.6".to_string()]),
            ("s2".into(), "a1".into(), vec!["gpu1=0.6".to_string()]),
        ]
    );
    assert_eq!(waits(&d), ["s3"]);
}

#[test]
fn whole_devices_are_idle_ones_and_fractions_fill_shared_devices_first() {
    let agents = || {
        vec![(
            "a1",
            vec![
                device("GPU-a", A100, "0"),
                device("GPU-b", A100, "0.3"),
                device("GPU-c", A100, "0"),
            ],
        )]
    };
    let d = cycle(&group(&agents(), &[("s1", "gpu=0.5"), ("s2", "gpu=2")]));
    assert_eq!(
        grants(&d),
        [
            ("s1".into(), "a1".into(), vec!["GPU-b=0.5".to_string()]),
            (
                "s2".into(),
                "a1".into(),
                vec!["GPU-a=1".to_string(), "GPU-c=1".to_string()]
            ),
        ]
    );
    let d = cycle(&group(&agents(), &[("s1", "gpu=3")]));
    assert_eq!(waits(&d), ["s1"], "GPU-b is shared: only two are idle");
}

#[test]
fn model_and_memory_constraints_pick_the_devices() {
    let agents = [
        (
            "a100",
            vec![device("GPU-a", A100, "0"), device("GPU-b", A100, "0")],
        ),
        ("h100", vec![device("GPU-h", H100, "0")]),
    ];
    let d = cycle(&group(
        &agents,
        &[
            ("s1", "gpu=1,gpu.model=H100*"),
            ("s2", "gpu=0.5,gpu.model=a100-sxm4-80gb"),
            ("s3", "gpu=1,gpu.model=V100*"),
            ("s4", "gpu=1,gpu.mem>=96GiB"),
        ],
    ));
    assert_eq!(
        grants(&d),
        [
            ("s1".into(), "h100".into(), vec!["GPU-h=1".to_string()]),
            ("s2".into(), "a100".into(), vec!["GPU-a=0.5".to_string()]),
        ]
    );
    assert_eq!(
        rejected(&d),
        [
            (
                "s3".into(),
                "gpu=1 requested; no agent or template of the group has 1 whole gpu device(s) (no device of the group matches its constraints)".into()
            ),
            (
                "s4".into(),
                "gpu=1 requested; no agent or template of the group has 1 whole gpu device(s) (no device of the group matches its constraints)".into()
            ),
        ]
    );
}

#[test]
fn a_fraction_with_memory_needs_one_device_with_both_free() {
    // GPU-a has the share but not the memory free; GPU-b the memory but not the share.
    let mut a = device("GPU-a", A100, "0.2");
    a["allocated_memory"] = json!("75GiB");
    let b = device("GPU-b", A100, "0.7");
    let s = group(
        &[("a1", vec![a.clone(), b.clone()])],
        &[("s1", "gpu=0.5,gpu.mem=10GiB")],
    );
    let mut s = s;
    s.agents[0].capacity = "cpu=64,gpu=2,gpu.mem=160GiB".parse().unwrap();
    s.agents[0].allocated = "gpu=0.9,gpu.mem=75GiB".parse().unwrap();
    let d = cycle(&s);
    assert_eq!(grants(&d), []);
    assert_eq!(waits(&d), ["s1"]);
    let s = group(
        &[("a1", vec![a, b, device("GPU-c", A100, "0.4")])],
        &[("s1", "gpu=0.5,gpu.mem=10GiB")],
    );
    let mut s = s;
    s.agents[0].capacity = "cpu=64,gpu=3,gpu.mem=240GiB".parse().unwrap();
    s.agents[0].allocated = "gpu=1.3,gpu.mem=75GiB".parse().unwrap();
    let d = cycle(&s);
    assert_eq!(
        grants(&d),
        [("s1".into(), "a1".into(), vec!["GPU-c=0.5".to_string()])]
    );
    assert_eq!(
        d.placements[0].devices[0].memory.milli(),
        10 * (1u64 << 30) * 1000
    );
}

#[test]
fn requests_devices_cannot_serve_are_refused_with_the_reason() {
    let two = vec![device("GPU-a", A100, "0"), device("GPU-b", A100, "0")];
    let d = cycle(&group(
        &[("a1", two)],
        &[("s1", "gpu=1.5"), ("s2", "gpu=1,gpu.mem=10GiB")],
    ));
    assert_eq!(
        rejected(&d),
        [
            ("s1".into(), "gpu=1.5: ask for whole devices (gpu=1, gpu=2, ...) or for a fraction of one device (gpu=0.5); a request is never split over devices".into()),
            ("s2".into(), "gpu.mem is the memory of a fraction of one device: ask for a fraction (gpu=0.5,gpu.mem=10GiB); whole devices come with all their memory".into()),
        ]
    );
}

// Random small clusters: every placement checked device by device, and every "no room" and
// every rejection checked by trying each agent's devices by brute force.

const MODELS: [&str; 2] = [A100, H100];

#[derive(Debug, Clone)]
struct Ask {
    whole: u32,
    fraction: u64,
    memory_gib: u64,
    model: Option<usize>,
}

fn asks() -> impl Strategy<Value = Ask> {
    prop_oneof![
        (1u32..=3, proptest::option::of(0usize..2)).prop_map(|(whole, model)| Ask {
            whole,
            fraction: 0,
            memory_gib: 0,
            model
        }),
        (1u64..10, 0u64..3, proptest::option::of(0usize..2)).prop_map(|(tenths, mem, model)| Ask {
            whole: 0,
            fraction: tenths * 100,
            memory_gib: mem * 20,
            model
        }),
    ]
}

/// Per agent, per device: (model, tenths allocated, twenties of GiB allocated).
type Cluster = Vec<Vec<(usize, u64, u64)>>;

fn clusters() -> impl Strategy<Value = (Cluster, Vec<Ask>)> {
    let agent = proptest::collection::vec((0usize..2, 0u64..=10, 0u64..=4), 1..=4);
    (
        proptest::collection::vec(agent, 1..=3),
        proptest::collection::vec(asks(), 1..=10),
    )
}

fn build(agents: &[Vec<(usize, u64, u64)>], asks: &[Ask]) -> Snapshot {
    let mut s = snapshot(json!({"group": {"policy": "fixed"}}));
    s.group.scheduler.head_of_line = corral_core::HeadOfLine::Backfill;
    s.group.scheduler.skip_after = 0;
    for (i, devices) in agents.iter().enumerate() {
        let list: Vec<Device> = devices
            .iter()
            .enumerate()
            .map(|(j, &(model, tenths, gib))| {
                let mut d = Device::new(
                    &format!("GPU-{i}-{j}"),
                    "gpu",
                    MODELS[model],
                    corral_core::Quantity::parse("mem", "80GiB").unwrap(),
                )
                .unwrap();
                d.allocated = corral_core::Quantity::from_milli(tenths * 100);
                d.allocated_memory =
                    corral_core::Quantity::parse("mem", &format!("{}GiB", gib * 20)).unwrap();
                d
            })
            .collect();
        let share: u64 = list.iter().map(|d| d.allocated.milli()).sum();
        let gib: u64 = devices.iter().map(|d| d.2 * 20).sum();
        let mut agent: corral_core::Agent = serde_json::from_value(json!({
            "id": format!("a{i}"), "capacity": format!("cpu=64,gpu={},gpu.mem={}GiB", list.len(), 80 * list.len()),
            "allocated": format!("gpu={},gpu.mem={gib}GiB", corral_core::Quantity::from_milli(share)),
            "idle_since": 0
        }))
        .unwrap();
        agent.devices = list;
        s.agents.push(agent);
    }
    for (k, a) in asks.iter().enumerate() {
        let mut text = if a.whole > 0 {
            format!("cpu=1,gpu={}", a.whole)
        } else {
            format!(
                "cpu=1,gpu={}",
                corral_core::Quantity::from_milli(a.fraction)
            )
        };
        if a.memory_gib > 0 {
            text.push_str(&format!(",gpu.mem={}GiB", a.memory_gib));
        }
        if let Some(m) = a.model {
            text.push_str(&format!(",gpu.model={}", &MODELS[m][7..11]));
            text.push('*');
        }
        let (request, constraints) = parse_request(&text).unwrap();
        s.sessions
            .push(pending(&format!("s{k:02}"), k as i64, request, constraints));
    }
    s
}

/// Free share and memory (thousandths) per device id.
type Free = HashMap<String, (u64, u64)>;

/// Whether a device list with `free` left could hold `ask`, trying every device.
fn brute_fits(devices: &[Device], free: &Free, ask: &Ask) -> bool {
    let ok_model = |d: &Device| ask.model.is_none_or(|m| d.model == MODELS[m]);
    let mem = ask.memory_gib * (1 << 30) * 1000;
    if ask.whole > 0 {
        let idle = devices
            .iter()
            .filter(|d| ok_model(d) && free[&d.id] == (1000, d.memory.milli()))
            .count();
        idle >= ask.whole as usize
    } else {
        devices
            .iter()
            .any(|d| ok_model(d) && free[&d.id].0 >= ask.fraction && free[&d.id].1 >= mem)
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// A pass that carries the agents' dense form and the device layout from another group
    /// state decides as a fresh pass: requests with models and memory make groups the kept
    /// layout lacks, and agents of other models make another layout.
    #[test]
    fn a_carried_pass_with_devices_decides_as_a_fresh_one(
        (agents, asks) in clusters(),
        (later_agents, later_asks) in clusters(),
    ) {
        let (first, second) = (build(&agents, &asks), build(&later_agents, &later_asks));
        let mut carry = corral_core::Carry::default();
        corral_core::cycle_carrying(&first, &mut carry);
        for a in &second.agents {
            if first.agents.iter().any(|b| b.id == a.id && (b.allocated != a.allocated || b.capacity != a.capacity || b.devices != a.devices)) {
                carry.changed(&a.id);
            }
        }
        prop_assert_eq!(corral_core::cycle_carrying(&second, &mut carry), cycle(&second));
        // And again, nothing changed: everything as kept.
        prop_assert_eq!(corral_core::cycle_carrying(&second, &mut carry), cycle(&second));
    }

    #[test]
    fn placements_hold_device_by_device_and_every_refusal_is_right((agents, asks) in clusters()) {
        let s = build(&agents, &asks);
        let d = cycle(&s);
        let mut free: Free = s.agents.iter().flat_map(|a| a.devices.iter()).map(|d| {
            (d.id.clone(), (1000 - d.allocated.milli(), d.memory.milli() - d.allocated_memory.milli()))
        }).collect();
        let fresh: Free = s.agents.iter().flat_map(|a| a.devices.iter()).map(|d| (d.id.clone(), (1000, d.memory.milli()))).collect();
        let ask_of = |id: &SessionId| &asks[id.0[1..].parse::<usize>().unwrap()];
        for p in &d.placements {
            let ask = ask_of(&p.session);
            let agent = s.agents.iter().find(|a| a.id == p.agent).unwrap();
            let expected = if ask.whole > 0 { ask.whole as usize } else { 1 };
            prop_assert_eq!(p.devices.len(), expected, "{} got {:?}", p.session, p.devices);
            let mut seen = std::collections::HashSet::new();
            for g in &p.devices {
                let dev = agent.devices.iter().find(|x| x.id == g.id);
                prop_assert!(dev.is_some(), "{} is not a device of {}", g.id, agent.id);
                let dev = dev.unwrap();
                prop_assert!(seen.insert(&g.id), "{} granted twice", g.id);
                prop_assert!(ask.model.is_none_or(|m| dev.model == MODELS[m]), "{} is not of the model asked", g.id);
                let f = free.get_mut(&g.id).unwrap();
                if ask.whole > 0 {
                    prop_assert_eq!(*f, (1000, dev.memory.milli()), "whole device {} was not idle", g.id);
                    prop_assert_eq!(g.share.milli(), 1000);
                } else {
                    prop_assert_eq!(g.share.milli(), ask.fraction);
                }
                prop_assert!(f.0 >= g.share.milli() && f.1 >= g.memory.milli(), "{} over its capacity", g.id);
                f.0 -= g.share.milli();
                f.1 -= g.memory.milli();
            }
        }
        // Nothing behind waits for a blocked head (backfill at once): a session left waiting
        // fits on no agent even now, and capacity only shrank during the pass.
        for w in &d.waiting {
            let ask = ask_of(&w.session);
            for a in &s.agents {
                prop_assert!(!brute_fits(&a.devices, &free, ask), "{} waits but fits on {}", w.session, a.id);
            }
        }
        for r in &d.rejections {
            let ask = ask_of(&r.session);
            for a in &s.agents {
                prop_assert!(!brute_fits(&a.devices, &fresh, ask), "{} refused but an idle {} holds it", r.session, a.id);
            }
        }
        for (k, ask) in asks.iter().enumerate() {
            let id = SessionId(format!("s{k:02}"));
            let refused = d.rejections.iter().any(|r| r.session == id);
            let any = s.agents.iter().any(|a| brute_fits(&a.devices, &fresh, ask));
            prop_assert_eq!(refused, !any, "{} refused: {}, an idle agent holds it: {}", id, refused, any);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn the_index_summary_stays_equal_to_its_recomputation((agents, asks) in clusters(), spread in any::<bool>()) {
        use corral_core::ledger::DeviceLayout;
        use corral_core::schedule::FreeIndex;
        let s = build(&agents, &asks);
        let gpu = corral_core::SlotName::new("gpu").unwrap();
        let mut layout = DeviceLayout::new(vec![gpu], s.agents.iter().flat_map(|a| &a.devices), 1);
        // Every request's group is made before any vector: the groups are the dimensions.
        let resolved: Vec<_> = s.sessions.iter().map(|x| layout.resolve(&x.request, &x.constraints).unwrap()).collect();
        let width = 1 + layout.dims();
        let needs: Vec<Vec<u64>> = resolved.iter().map(|need| {
            let mut v = vec![0u64; width];
            v[0] = 1000;
            layout.write_need(need, &mut v);
            v
        }).collect();
        let ledgers: Vec<_> = s.agents.iter().map(|a| layout.ledger(&a.devices)).collect();
        let free: Vec<Box<[u64]>> = ledgers.iter().map(|l| {
            let mut v = vec![0u64; width];
            v[0] = 64_000;
            layout.write_free(l, &mut v);
            v.into_boxed_slice()
        }).collect();
        let free = corral_core::dense::Rows::of(width, free.iter().map(|v| &v[..]));
        let mut index = FreeIndex::new(width, free, vec![true; s.agents.len()]).with_devices(&std::sync::Arc::new(layout.clone()), ledgers);
        let placement = if spread { corral_core::PlacementStrategy::Spread } else { corral_core::PlacementStrategy::Binpack };
        for need in &needs {
            if let Some(a) = index.find(need, placement) {
                index.take(a, need);
            }
            for a in 0..s.agents.len() {
                let mut again = index.free(a).to_vec();
                layout.write_free(index.ledger(a).unwrap(), &mut again);
                prop_assert_eq!(&again[..], index.free(a), "agent {}'s summary drifted", a);
            }
        }
    }
}

#[test]
fn the_planner_launches_for_fractions_as_devices_hold_them() {
    // Two tenths more than half a device each: one a device, so three need two instances of
    // two GPUs, although 1.8 GPUs would fit in one.
    let s = snapshot(json!({
        "now": 1_800_000,
        "group": {"policy": "demand"},
        "templates": [{"name": "g2", "slots": "cpu=8,gpu=2", "price": 1.0, "max": 10}],
        "sessions": [
            {"id": "s1", "owner": "a", "request": "cpu=1,gpu=0.6"},
            {"id": "s2", "owner": "a", "request": "cpu=1,gpu=0.6"},
            {"id": "s3", "owner": "a", "request": "cpu=1,gpu=0.6"}
        ]
    }));
    let d = cycle(&s);
    let launched: Vec<(String, u32)> = d
        .launches
        .iter()
        .map(|l| (l.template.clone(), l.count))
        .collect();
    assert_eq!(launched, [("g2".to_string(), 2)]);
    // Quarters share a device four ways: eight of them fit one instance.
    let mut s = s;
    for x in &mut s.sessions {
        x.request = "cpu=1,gpu=0.25".parse().unwrap();
    }
    let d = cycle(&s);
    assert_eq!(d.launches.len(), 1);
    assert_eq!(d.launches[0].count, 1);
}

#[test]
fn a_number_no_machine_has_stands_for_a_bounded_list_of_devices() {
    // `gpu=1P` (10^15 GPUs): the pass must not build that many stand-ins.
    let mut s = snapshot(json!({
        "group": {"policy": "fixed"},
        "agents": [{"id": "a1", "capacity": "cpu=8,gpu=1P", "idle_since": 0}],
    }));
    s.sessions
        .push(pending("s1", 0, "gpu=2".parse().unwrap(), vec![]));
    let d = cycle(&s);
    assert_eq!(
        grants(&d),
        [(
            "s1".into(),
            "a1".into(),
            vec!["gpu0=1".to_string(), "gpu1=1".to_string()]
        )]
    );
}
