//! Planning problems built from the input's bytes rather than parsed from them: small groups
//! with agents, sessions, templates and images whose amounts, timestamps, counts and limits
//! range over everything the types allow (a peer's bad report included: allocations above
//! capacity, sessions on unknown agents). Validation and a pass of the cycle never panic, and
//! the output serialises. The `plan` target reaches the same code through JSON text.
#![no_main]

use corral_core::plan::{plan, Problem};
use libfuzzer_sys::arbitrary::{Result, Unstructured};
use libfuzzer_sys::fuzz_target;
use serde_json::{json, Value};

const SLOTS: [&str; 4] = ["cpu", "mem", "gpu", "disk"];

fn pick<'a, T>(u: &mut Unstructured, items: &'a [T]) -> Result<&'a T> {
    u.choose(items)
}

fn amount(u: &mut Unstructured) -> Result<String> {
    Ok(match u.int_in_range(0..=5)? {
        0 => "0".to_string(),
        1 => u.int_in_range(1..=64u32)?.to_string(),
        2 => format!(
            "{}.{}",
            u.int_in_range(0..=8u32)?,
            u.int_in_range(1..=999u32)?
        ),
        3 => format!("{}GiB", u.int_in_range(1..=1024u32)?),
        4 => "18446744073709551".to_string(),
        _ => format!("{}m", u.arbitrary::<u64>()? % 18_446_744_073_709_551_615),
    })
}

fn slots(u: &mut Unstructured) -> Result<Value> {
    let mut map = serde_json::Map::new();
    for name in SLOTS {
        if u.arbitrary()? {
            map.insert(name.into(), Value::String(amount(u)?));
        }
    }
    Ok(Value::Object(map))
}

fn timestamp(u: &mut Unstructured) -> Result<i64> {
    Ok(match u.int_in_range(0..=3)? {
        0 => 0,
        1 => u.int_in_range(0..=10_000_000i64)?,
        2 => i64::MAX - u.int_in_range(0..=1000i64)?,
        _ => u.arbitrary()?,
    })
}

fn secs(u: &mut Unstructured) -> Result<u64> {
    Ok(match u.int_in_range(0..=2)? {
        0 => u.int_in_range(0..=3600u64)?,
        1 => u64::MAX,
        _ => u.arbitrary()?,
    })
}

fn problem(u: &mut Unstructured) -> Result<Value> {
    let n_templates = u.int_in_range(0..=3usize)?;
    let n_agents = u.int_in_range(0..=4usize)?;
    let n_images = u.int_in_range(0..=2usize)?;
    let template = |u: &mut Unstructured| -> Result<Value> {
        Ok(if n_templates > 0 && u.arbitrary()? {
            json!(format!("t{}", u.int_in_range(0..=n_templates - 1)?))
        } else {
            Value::Null
        })
    };
    let mut templates = Vec::new();
    for i in 0..n_templates {
        templates.push(json!({
            "name": format!("t{i}"),
            "slots": slots(u)?,
            "price": f64::from(u.arbitrary::<u16>()?) / 100.0,
            "max": if u.arbitrary()? { u.int_in_range(0..=5u32)? } else { u.arbitrary()? },
        }));
    }
    let states = ["alive", "marked", "lost", "terminated"];
    let mut agents = Vec::new();
    for i in 0..n_agents {
        agents.push(json!({
            "id": format!("a{i}"),
            "template": template(u)?,
            "capacity": slots(u)?,
            "allocated": slots(u)?,
            "state": pick(u, &states)?,
            "external": u.arbitrary::<bool>()?,
            "drained_by_hand": u.arbitrary::<bool>()?,
            "idle_since": if u.arbitrary()? { json!(timestamp(u)?) } else { Value::Null },
        }));
    }
    let mut images = Vec::new();
    for i in 0..n_images {
        images.push(json!({"name": format!("i{i}"), "min_slots": slots(u)?}));
    }
    let session_states = ["pending", "pending", "scheduled", "running"];
    let mut sessions = Vec::new();
    for i in 0..u.int_in_range(0..=8usize)? {
        let state = *pick(u, &session_states)?;
        let agent = if state != "pending" && n_agents > 0 {
            json!(format!("a{}", u.int_in_range(0..=n_agents)?))
        } else {
            Value::Null
        };
        sessions.push(json!({
            "id": format!("s{i}"),
            "owner": format!("u{}", u.int_in_range(0..=2u8)?),
            "priority": u.arbitrary::<i32>()?,
            "request": slots(u)?,
            "image": if n_images > 0 && u.arbitrary()? { json!(format!("i{}", u.int_in_range(0..=n_images - 1)?)) } else { Value::Null },
            "type": pick(u, &["interactive", "batch"])?,
            "submitted_at": timestamp(u)?,
            "state": state,
            "agent": agent,
            "blocked_passes": u.arbitrary::<u32>()?,
        }));
    }
    let mut in_flight = Vec::new();
    if n_templates > 0 {
        for _ in 0..u.int_in_range(0..=2usize)? {
            in_flight.push(json!({
                "template": format!("t{}", u.int_in_range(0..=n_templates - 1)?),
                "count": if u.arbitrary()? { u.int_in_range(0..=4u32)? } else { u.arbitrary()? },
                "since": timestamp(u)?,
            }));
        }
    }
    let min_nodes = u.int_in_range(0..=4u32)?;
    Ok(json!({
        "now": timestamp(u)?,
        "group": {
            "policy": pick(u, &["fixed", "demand"])?,
            "scheduler": pick(u, &["fifo", "lifo", "priority", "drf"])?,
            "placement": pick(u, &["binpack", "spread"])?,
            "head_of_line": pick(u, &["strict", "backfill"])?,
            "skip_after": u.int_in_range(0..=3u32)?,
            "min_nodes": min_nodes,
            // Small, or up to 10^8 (a huge count in flight once cost a bin per instance; the
            // regression test is in crates/core/tests/cycle.rs).
            "max_nodes": min_nodes.saturating_add(if u.arbitrary()? { u.int_in_range(0..=6u32)? } else { u.int_in_range(0..=100_000_000u32)? }),
            "headroom": slots(u)?,
            "idle_wait_secs": secs(u)?,
            "cooldown_secs": secs(u)?,
            "max_launches_per_pass": if u.arbitrary()? { u.int_in_range(0..=8u32)? } else { u.arbitrary()? },
            "on_agent_lost": pick(u, &["requeue", "fail"])?,
            "termination": {
                "mode": pick(u, &["persistent", "idle"])?,
                "idle_timeout_secs": secs(u)?,
                "max_lifetime_secs": if u.arbitrary()? { json!(secs(u)?) } else { Value::Null },
            },
        },
        "templates": templates,
        "agents": agents,
        "images": images,
        "sessions": sessions,
        "in_flight": in_flight,
        "last_scale_out": if u.arbitrary()? { json!(timestamp(u)?) } else { Value::Null },
    }))
}

fuzz_target!(|data: &[u8]| {
    let mut u = Unstructured::new(data);
    let Ok(value) = problem(&mut u) else {
        return;
    };
    // `CORRAL_FUZZ_PRINT=1 cargo fuzz run cycle ARTIFACT` shows the problem an input makes.
    if std::env::var_os("CORRAL_FUZZ_PRINT").is_some() {
        eprintln!("{value:#}");
    }
    let problem: Problem = match serde_json::from_value(value.clone()) {
        Ok(p) => p,
        Err(e) => panic!("the generator wrote a problem that does not parse: {e}\n{value}"),
    };
    let Ok(snapshot) = problem.into_snapshot() else {
        return;
    };
    let out = plan(&snapshot);
    serde_json::to_string(&out).unwrap();
});
