//! `corral bench scale`: a burst of sessions submitted at once to a `demand` group, timed from the
//! first submit to the last launch call the burst needs. Everything is real (HTTP API, store,
//! control loop, batching window, scaling driver, exec provider protocol) except the machines:
//! the provider is a plugin that records each call and starts nothing.

use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context, Result};
use corral_api::events::Event;
use corral_api::sessions::NewSession;
use corral_api::Client;
use corral_core::SessionType;
use serde_json::{json, Value};

use crate::bench_api::InProcess;

/// The plugin: answers the exec protocol from a state file, and appends `<ns since the epoch>
/// <instances>` to `launches.log` when a launch call starts.
const PLUGIN: &str = r#"#!/usr/bin/env python3
import fcntl, json, sys, time
called = time.time_ns()
req = json.load(sys.stdin)
with open("instances.lock", "a") as lock:
    fcntl.flock(lock, fcntl.LOCK_EX)
    try:
        with open("instances.json") as f:
            instances = json.load(f)
    except FileNotFoundError:
        instances = []
    op = req["op"]
    if op == "templates":
        answer = {"templates": req["templates"]}
    elif op == "list":
        answer = {"instances": instances}
    elif op == "launch":
        started = [{"id": "i-" + r["agent_id"], "agent_id": r["agent_id"],
                    "template": req["template"], "state": "pending"} for r in req["requests"]]
        instances += started
        with open("launches.log", "a") as log:
            log.write(f"{called} {len(started)}\n")
        answer = {"instances": started}
    elif op == "terminate":
        instances = [i for i in instances if i["id"] not in req["ids"]]
        answer = {}
    else:
        answer = {"error": {"kind": "fatal", "message": "unknown op " + op}}
    with open("instances.json", "w") as f:
        json.dump(instances, f)
json.dump(answer, sys.stdout)
"#;

/// What each template offers; sessions ask for one CPU, so a burst of N needs N / 8 instances.
const TEMPLATE_CPUS: usize = 8;

pub async fn run(sessions: usize, concurrency: usize) -> Result<()> {
    let manager = InProcess::start(None).await?;
    let client = Client::new(&manager.base, &manager.token, None)?;
    let group = manager.group.clone();
    let plugin_dir = tempfile::tempdir()?;
    let plugin = plugin_dir.path().join("recorder.py");
    write_executable(&plugin, PLUGIN)?;
    let body = json!({
        "name": group,
        // The policy's defaults, the batching window among them; room for the whole burst.
        "policy": {"kind": "demand", "max_nodes": 100_000, "max_launches_per_pass": 100_000},
        "templates": [{"name": "c8", "slots": format!("cpu={TEMPLATE_CPUS},mem=32GiB"),
                       "max": 100_000}],
        "provider": {"name": "exec", "options": {"command": plugin, "timeout_secs": 120},
                     "launch": {"budget": 100_000}},
    });
    client.post::<Value, _>(&["groups"], Some(&body)).await?;
    let state = manager.data_dir().join("providers").join(&group);

    let session = Arc::new(NewSession {
        group: group.clone(),
        kind: Some(SessionType::Batch),
        command: vec!["true".into()],
        request: "cpu=1,mem=1GiB".parse()?,
        ..NewSession::default()
    });
    let first_submit = epoch_ns()?;
    let start = Instant::now();
    let next = Arc::new(AtomicUsize::new(0));
    let clients: Vec<_> = (0..concurrency)
        .map(|_| {
            let (client, session, next) = (client.clone(), session.clone(), next.clone());
            tokio::spawn(async move {
                while next.fetch_add(1, Ordering::Relaxed) < sessions {
                    client
                        .post::<Value, _>(&["sessions"], Some(&*session))
                        .await?;
                }
                anyhow::Ok(())
            })
        })
        .collect();
    for c in clients {
        c.await??;
    }
    let submitted = start.elapsed();

    let needed = sessions.div_ceil(TEMPLATE_CPUS);
    let deadline = Instant::now() + Duration::from_secs(120);
    let calls = loop {
        let calls = launch_calls(&state.join("launches.log"))?;
        if calls.iter().map(|(_, n)| n).sum::<usize>() >= needed {
            break calls;
        }
        if Instant::now() > deadline {
            bail!("{needed} instances not all launched two minutes after the burst: {calls:?}");
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    let last_call = calls
        .iter()
        .map(|(at, _)| *at)
        .max()
        .unwrap_or(first_submit);
    let query = [
        ("group", Some(group.clone())),
        ("limit", Some("1000".to_string())),
    ];
    let events: Vec<Event> = client.get(&["events"], &query).await?.body()?;
    let passes = events.iter().filter(|e| e.kind == "launch").count();
    println!(
        "scale_burst_launch_ms {:.0} ms",
        (last_call.saturating_sub(first_submit)) as f64 / 1e6
    );
    println!("scale_burst_launch_passes {passes} passes");
    eprintln!(
        "# {sessions} sessions by {concurrency} clients, all acknowledged after {:.0} ms; \
         {needed} instances in {} launch call(s)",
        submitted.as_secs_f64() * 1e3,
        calls.len()
    );
    Ok(())
}

fn epoch_ns() -> Result<u128> {
    Ok(SystemTime::now().duration_since(UNIX_EPOCH)?.as_nanos())
}

/// The plugin's record: per launch call, when it started and how many instances it asked for.
fn launch_calls(log: &Path) -> Result<Vec<(u128, usize)>> {
    let text = match std::fs::read_to_string(log) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e).context("reading the plugin's launch log"),
    };
    // A line still being written has no newline yet.
    text.split_inclusive('\n')
        .filter_map(|l| l.strip_suffix('\n'))
        .map(|line| {
            let (at, count) = line
                .split_once(' ')
                .with_context(|| format!("launch log line {line:?}"))?;
            Ok((at.parse()?, count.parse()?))
        })
        .collect()
}

fn write_executable(path: &Path, text: &str) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::write(path, text)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755))?;
    Ok(())
}
