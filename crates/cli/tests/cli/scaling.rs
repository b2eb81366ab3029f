//! Groups that really grow and shrink: the `process` and `docker` providers start `corral agent`
//! processes or containers for a group with min 0 and max 4, and the whole story (scale out, run,
//! idle, mark, drain, scale back to 0) is read back from the events, as an operator would.
use crate::common;

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{json, Value};

use common::*;

/// The group: demand policy, min 0, max 4, agents of one CPU each, quick scale-in.
fn group(provider: Value) -> Value {
    json!({
        "name": "auto",
        "policy": {"kind": "demand", "min_nodes": 0, "max_nodes": 4, "idle_wait_secs": 2,
                   "cooldown_secs": 0, "max_launches_per_pass": 4},
        "templates": [{"name": "small", "slots": "cpu=1,mem=512MiB", "price_per_hour": 0.05, "max": 4}],
        "provider": provider,
    })
}

/// The group's events, oldest first.
fn events(c: &Cluster) -> Vec<Value> {
    let mut list = c
        .json(&["events", "--group", "auto", "--limit", "5000", "-o", "json"])
        .as_array()
        .cloned()
        .unwrap_or_default();
    list.reverse();
    list
}

fn live_instances(c: &Cluster) -> usize {
    c.json(&["group", "instances", "auto", "-o", "json"])["instances"]
        .as_array()
        .map_or(usize::MAX, Vec::len)
}

/// The scenario of the providers issue, for one provider.
fn scale_out_run_and_back_to_zero(provider: Value) -> Cluster {
    let c = Cluster::start(5);
    let file = c.dir.path().join("group.json");
    std::fs::write(&file, group(provider).to_string()).unwrap();
    let out = c.cli(&["group", "create", "auto", "--file", file.to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out.stderr));

    // An impossible request is refused at submit, and launches nothing.
    let out = c.cli(&[
        "session",
        "submit",
        "--group",
        "auto",
        "--request",
        "cpu=8",
        "--",
        "true",
    ]);
    assert!(!out.status.success());
    assert!(text(&out.stderr).contains("cpu=8"), "{}", text(&out.stderr));
    // Refused in the response means never stored: no pass can see it, nor launch for it.
    let stored = c.json(&["session", "ls", "--group", "auto", "-o", "json"]);
    assert_eq!(stored, json!([]), "the refused request was stored");
    assert_eq!(live_instances(&c), 0, "nothing launched for it");

    let ids: Vec<String> = (0..10)
        .map(|i| {
            c.submit(&[
                "--group",
                "auto",
                "--request",
                "cpu=1",
                "--type",
                "batch",
                "--",
                "sh",
                "-c",
                &format!("sleep 2; echo session {i}"),
            ])
        })
        .collect();

    // It scales out, never past 4, and runs them all.
    let mut most = 0;
    c.until_for(180, "all 10 sessions succeed", || {
        most = most.max(live_instances(&c));
        let list = c.json(&["session", "ls", "--group", "auto", "-o", "json"]);
        let done = list
            .as_array()?
            .iter()
            .filter(|s| ids.iter().any(|id| s["id"] == id.as_str()) && s["state"] == "succeeded")
            .count();
        (done == 10).then_some(())
    });
    assert!(most <= 4, "{most} instances at once; max is 4");
    for id in &ids {
        let out = c.cli(&["session", "logs", id]);
        assert!(
            text(&out.stdout).starts_with("session "),
            "{id}: {}",
            text(&out.stdout)
        );
    }

    // Idle: marked, drained, terminated; back to zero, and every instance is gone.
    c.until_for(120, "the group is back to 0 agents", || {
        let agents = c.json(&["agent", "ls", "-o", "json"]);
        let standing = agents
            .as_array()?
            .iter()
            .filter(|a| a["state"] != "terminated")
            .count();
        (standing == 0 && live_instances(&c) == 0).then_some(())
    });

    // The events tell the story, in order.
    let events = events(&c);
    let kinds: Vec<&str> = events.iter().filter_map(|e| e["kind"].as_str()).collect();
    let first = |kind: &str| {
        kinds
            .iter()
            .position(|k| *k == kind)
            .unwrap_or_else(|| panic!("no {kind} event in {kinds:?}"))
    };
    assert!(first("launch") < first("launched"), "{kinds:?}");
    // An agent may join before the provider's launch call returns: only the decision must
    // come first.
    assert!(first("launch") < first("joined"), "{kinds:?}");
    assert!(first("joined") < first("placed"), "{kinds:?}");
    assert!(first("placed") < first("mark"), "{kinds:?}");
    assert!(first("mark") < first("terminate"), "{kinds:?}");
    assert!(first("terminate") < first("terminated"), "{kinds:?}");
    let launched: usize = events
        .iter()
        .filter(|e| e["kind"] == "launched")
        .filter_map(|e| e["message"].as_str())
        .filter_map(|m| {
            m.strip_prefix("launched ")?
                .split(' ')
                .next()?
                .parse::<usize>()
                .ok()
        })
        .sum();
    let terminated = kinds.iter().filter(|k| **k == "terminated").count();
    assert!(
        launched >= 1 && launched == terminated,
        "{launched} launched, {terminated} terminated"
    );

    // No session landed on a marked agent.
    let mut marked: BTreeSet<&str> = BTreeSet::new();
    for e in &events {
        let agent = e["agent"].as_str().unwrap_or_default();
        match e["kind"].as_str().unwrap_or_default() {
            "mark" => {
                marked.insert(agent);
            }
            "unmark" => {
                marked.remove(agent);
            }
            "placed" => assert!(!marked.contains(agent), "placed on marked agent {agent}"),
            _ => {}
        }
    }
    // Every session ran on an agent the provider launched for the group.
    let mut per_agent: BTreeMap<String, usize> = BTreeMap::new();
    for e in events.iter().filter(|e| e["kind"] == "placed") {
        *per_agent
            .entry(e["agent"].as_str().unwrap().to_string())
            .or_default() += 1;
    }
    assert!(
        per_agent.keys().all(|a| a.starts_with("auto-")),
        "{per_agent:?}"
    );
    assert_eq!(per_agent.values().sum::<usize>(), 10);
    c
}

#[test]
fn the_process_provider_scales_a_group_out_and_back_to_zero() {
    let c = scale_out_run_and_back_to_zero(json!({
        "name": "process",
        "launch": {"max_provisioning_secs": 60, "reconcile_secs": 2},
    }));
    // No agent process is left: the provider forgets an instance once it has stopped it.
    let state = c.dir.path().join("data/providers/auto");
    let left: Vec<_> = std::fs::read_dir(&state)
        .unwrap()
        .filter_map(|d| d.ok())
        .filter(|d| d.path().join("instance.json").exists())
        .map(|d| d.file_name())
        .collect();
    assert!(left.is_empty(), "agents still running: {left:?}");
}

#[test]
fn the_docker_provider_scales_a_group_out_and_back_to_zero() {
    if !docker_and_busybox_available() {
        return;
    }
    // The agent image, built from this very binary as an operator would; without its debug
    // information (close to a gigabyte in a test build) where binutils can strip it.
    let tag = "corral-agent:e2e";
    let dir = tempfile::tempdir().unwrap();
    let stripped = dir.path().join("corral");
    let binary = match std::process::Command::new("objcopy")
        .args(["--strip-debug", CORRAL])
        .arg(&stripped)
        .status()
    {
        Ok(s) if s.success() => stripped,
        _ => std::path::PathBuf::from(CORRAL),
    };
    let out = std::process::Command::new(CORRAL)
        .args(["agent-image", "--tag", tag, "--binary"])
        .arg(&binary)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    // The image goes when the test ends, whatever happens.
    struct RemoveImage(&'static str);
    impl Drop for RemoveImage {
        fn drop(&mut self) {
            let _ = std::process::Command::new("docker")
                .args(["rmi", "-f", self.0])
                .output();
        }
    }
    let _image = RemoveImage(tag);
    // The group's containers go too, before the image, also when the test fails.
    let _containers = corral_testkit::RemoveContainers::new("label=corral.io/group=auto");
    scale_out_run_and_back_to_zero(json!({
        "name": "docker",
        "options": {"image": tag},
        "launch": {"max_provisioning_secs": 60, "reconcile_secs": 2},
    }));
    // No container of the group is left behind.
    let out = std::process::Command::new("docker")
        .args(["ps", "-a", "-q", "--filter", "label=corral.io/group=auto"])
        .output()
        .unwrap();
    assert_eq!(text(&out.stdout).trim(), "", "containers left behind");
}

/// A plugin that fails every other call of each operation, the first included (a transient
/// error, as a flaky vendor API would give), and passes the rest to the Python example of
/// docs/plugins.md. Counted per operation, so that launches fail whatever order the driver's
/// calls come in. The driver may call the plugin concurrently (list while a launch runs), so
/// the counters are read and written under a lock.
const FLAKY_PLUGIN: &str = r#"#!/bin/sh
request=$(cat)
op=$(printf '%s' "$request" | python3 -c 'import json, sys; print(json.load(sys.stdin)["op"])')
count_file="$CORRAL_PLUGIN_STATE/calls.$op"
exec 9>>"$CORRAL_PLUGIN_STATE/lock"
flock 9
n=$(( $(cat "$count_file" 2>/dev/null || echo 0) + 1 ))
echo "$n" > "$count_file"
[ $((n % 2)) -eq 1 ] && echo "$op $n" >> "$CORRAL_PLUGIN_STATE/failed"
flock -u 9
exec 9>&-
if [ $((n % 2)) -eq 1 ]; then
    echo '{"error": {"class": "transient", "message": "injected failure"}}'
    exit 0
fi
printf '%s' "$request" | python3 "$EXAMPLE"
"#;

#[test]
fn an_exec_plugin_failing_half_its_calls_backs_off_and_never_exceeds_max() {
    let state = tempfile::tempdir().unwrap();
    // The plugin's agents work under its state directory: killed when the test ends.
    let _leftovers = KillLeftovers::new(state.path());
    let plugin = state.path().join("flaky.sh");
    std::fs::write(&plugin, FLAKY_PLUGIN).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&plugin, std::fs::Permissions::from_mode(0o755)).unwrap();
    let example = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../examples/plugins/local_agents.py")
        .canonicalize()
        .unwrap();
    let c = scale_out_run_and_back_to_zero(json!({
        "name": "exec",
        "options": {
            "command": plugin,
            "env": {
                "CORRAL_BINARY": CORRAL,
                "CORRAL_PLUGIN_STATE": state.path(),
                "EXAMPLE": example,
            },
            "timeout_secs": 30,
        },
        "launch": {"max_provisioning_secs": 60, "reconcile_secs": 2,
                   "backoff_initial_secs": 1, "backoff_max_secs": 4},
    }));
    // Half of each operation's calls failed, and launches among them.
    let failed = std::fs::read_to_string(state.path().join("failed")).unwrap_or_default();
    let calls = |op: &str| -> usize {
        std::fs::read_to_string(state.path().join(format!("calls.{op}")))
            .map(|n| n.trim().parse().unwrap())
            .unwrap_or(0)
    };
    for op in ["templates", "launch", "list", "terminate"] {
        let failed = failed.lines().filter(|l| l.split(' ').next() == Some(op));
        assert_eq!(
            failed.count(),
            calls(op).div_ceil(2),
            "{op}: {} calls",
            calls(op)
        );
    }
    assert!(calls("launch") >= 2, "{} launches", calls("launch"));
    // Failed launches backed the template off, and the events say so.
    let events = events(&c);
    assert!(
        events.iter().any(|e| e["kind"] == "launch_failed"
            && e["message"]
                .as_str()
                .unwrap_or_default()
                .contains("injected failure")
            && e["message"]
                .as_str()
                .unwrap_or_default()
                .contains("backs off")),
        "no backoff after a failed launch"
    );
    // Every agent the plugin started is stopped.
    let instances =
        std::fs::read_to_string(state.path().join("instances.json")).unwrap_or_default();
    let left: Value = serde_json::from_str(&instances).unwrap();
    assert_eq!(left["instances"], json!({}), "agents the plugin still runs");
}

/// The start time `/proc/<pid>/stat` gives a process, as the process provider records it.
fn start_time(pid: u32) -> u64 {
    corral_runtime::procfs::stat(pid as i32).unwrap().start_time
}

#[test]
fn reconciliation_ends_unknown_instances_and_loses_agents_whose_instance_vanished() {
    let c = Cluster::start(60);
    let mut g = group(json!({
        "name": "process",
        "launch": {"reconcile_secs": 1, "orphan_grace_secs": 2},
    }));
    g["policy"]["idle_wait_secs"] = json!(600);
    let file = c.dir.path().join("group.json");
    std::fs::write(&file, g.to_string()).unwrap();
    assert!(c
        .cli(&["group", "create", "auto", "--file", file.to_str().unwrap()])
        .status
        .success());

    // An instance carrying the group's mark that the manager never launched (a leftover of a
    // lost database, say): the provider lists it; it is terminated after the grace period.
    let state = c.dir.path().join("data/providers/auto");
    let orphan = std::process::Command::new("setsid")
        .args(["sleep", "300"])
        .spawn()
        .unwrap();
    let orphan_pid = orphan.id();
    let _orphan = Proc(orphan);
    std::fs::create_dir_all(state.join("auto-0rphan")).unwrap();
    std::fs::write(
        state.join("auto-0rphan/instance.json"),
        json!({"pid": orphan_pid, "start_time": start_time(orphan_pid), "template": "small",
               "agent_id": "auto-0rphan", "group": "auto"})
        .to_string(),
    )
    .unwrap();

    // A session runs on a launched agent; then its instance vanishes (every process of it dies).
    let id = c.submit(&[
        "--group",
        "auto",
        "--request",
        "cpu=1",
        "--type",
        "batch",
        "--",
        "sh",
        "-c",
        "sleep 3; echo survived",
    ]);
    let first = c.until_for(60, "the session runs", || {
        let s = c.listed(&id);
        (s["state"] == "running").then(|| s["agent"].as_str().unwrap().to_string())
    });
    let record: Value = serde_json::from_str(
        &std::fs::read_to_string(state.join(&first).join("instance.json")).unwrap(),
    )
    .unwrap();
    let sid = record["pid"].as_i64().unwrap() as i32;
    for pgrp in corral_runtime::procfs::session_groups(sid) {
        unsafe { libc::kill(-pgrp, libc::SIGKILL) };
    }

    // The agent is lost and terminated, the session requeued and run on a new instance.
    let second = c.until_for(60, "the session succeeds elsewhere", || {
        let s = c.listed(&id);
        (s["state"] == "succeeded").then(|| s["agent"].as_str().unwrap().to_string())
    });
    assert_ne!(first, second);
    assert_eq!(text(&c.cli(&["session", "logs", &id]).stdout), "survived\n");
    let story = events(&c);
    let gone = story
        .iter()
        .find(|e| e["kind"] == "instance_gone")
        .expect("an instance_gone event");
    assert_eq!(gone["agent"], first.as_str());
    assert!(
        gone["message"]
            .as_str()
            .unwrap()
            .contains("1 session(s) requeued"),
        "{gone}"
    );
    let agents = c.json(&["agent", "ls", "-o", "json"]);
    let state_of = |a: &str| {
        agents
            .as_array()
            .unwrap()
            .iter()
            .find(|x| x["id"] == a)
            .unwrap()["state"]
            .clone()
    };
    assert_eq!(state_of(&first), "terminated");

    // The orphan was terminated, and said so.
    c.until_for(30, "the orphan is terminated", || {
        (!corral_runtime::procfs::stat(orphan_pid as i32).is_some_and(|s| s.alive())).then_some(())
    });
    assert!(events(&c).iter().any(|e| e["kind"] == "orphan"
        && e["message"]
            .as_str()
            .unwrap_or_default()
            .contains("auto-0rphan")));
}

/// The README's scaling demo with the default settings: a burst of six `sleep 5` sessions to a
/// `process` group with max 3 is planned once, as one launch of three agents, and runs two by
/// two: all done within 15 s of the first submit (timed by the manager's own clock). Then the
/// group scales back to 0 after the idle wait.
#[test]
fn the_readme_burst_runs_on_three_agents_at_once_and_the_group_goes_back_to_zero() {
    let c = Cluster::start(5);
    ok(c.cli(&[
        "group",
        "create",
        "auto",
        "--policy",
        "demand",
        "--min-nodes",
        "0",
        "--max-nodes",
        "3",
        "--idle-wait-secs",
        "2",
    ]));
    let templates = c.dir.path().join("templates.json");
    std::fs::write(
        &templates,
        r#"[{"name": "small", "slots": "cpu=1,mem=1GiB", "max": 4}]"#,
    )
    .unwrap();
    ok(c.cli(&[
        "group",
        "templates",
        "auto",
        "--file",
        templates.to_str().unwrap(),
    ]));
    ok(c.cli(&["group", "provider", "auto", "--provider", "process"]));

    let ids: Vec<String> = (0..6)
        .map(|_| c.submit(&["--group", "auto", "--request", "cpu=1", "--", "sleep", "5"]))
        .collect();
    let sessions = c.until_for(60, "all 6 sessions succeed", || {
        let list = c.json(&["session", "ls", "--group", "auto", "-o", "json"]);
        let ours: Vec<Value> = list
            .as_array()?
            .iter()
            .filter(|s| ids.iter().any(|id| s["id"] == id.as_str()))
            .cloned()
            .collect();
        (ours.len() == 6 && ours.iter().all(|s| s["state"] == "succeeded")).then_some(ours)
    });
    let first_submit = sessions
        .iter()
        .filter_map(|s| s["submitted_at"].as_i64())
        .min()
        .unwrap();
    let last_end = sessions
        .iter()
        .filter_map(|s| s["updated_at"].as_i64())
        .max()
        .unwrap();
    eprintln!(
        "the burst ran in {} ms from the first submit to the last end",
        last_end - first_submit
    );
    assert!(
        last_end - first_submit <= 15_000,
        "the burst took {} ms from the first submit to the last end",
        last_end - first_submit
    );

    let events = events(&c);
    let launches: Vec<&str> = events
        .iter()
        .filter(|e| e["kind"] == "launch")
        .filter_map(|e| e["message"].as_str())
        .collect();
    assert_eq!(
        launches.len(),
        1,
        "one pass launches for the whole burst: {launches:?}"
    );
    assert!(launches[0].starts_with("3 × small"), "{launches:?}");
    let agents: BTreeSet<&str> = events
        .iter()
        .filter(|e| e["kind"] == "placed")
        .filter_map(|e| e["agent"].as_str())
        .collect();
    assert_eq!(agents.len(), 3, "{agents:?}");

    c.until_for(60, "the group is back to 0 agents", || {
        let agents = c.json(&["agent", "ls", "--group", "auto", "-o", "json"]);
        let standing = agents
            .as_array()?
            .iter()
            .filter(|a| a["state"] != "terminated")
            .count();
        (standing == 0 && live_instances(&c) == 0).then_some(())
    });
}

/// An instance the vendor accepts but whose agent never joins is no success: the template backs
/// off longer after each one, instead of starting again from the first backoff.
#[test]
fn instances_that_never_join_back_off_longer_each_time() {
    let c = Cluster::start(5);
    // The "agent" exits at once: the process provider starts it, nothing joins.
    let binary = c.dir.path().join("no-agent.sh");
    std::fs::write(&binary, "#!/bin/sh\nexit 0\n").unwrap();
    std::fs::set_permissions(&binary, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let provider = json!({
        "name": "process",
        "options": {"binary": binary},
        "launch": {"max_provisioning_secs": 1, "reconcile_secs": 1,
                   "backoff_initial_secs": 1, "backoff_max_secs": 600},
    });
    let file = c.dir.path().join("group.json");
    std::fs::write(&file, group(provider).to_string()).unwrap();
    ok(c.cli(&["group", "create", "auto", "--file", file.to_str().unwrap()]));
    c.submit(&["--group", "auto", "--request", "cpu=1", "--", "true"]);
    let failures = c.until_for(60, "two failed launches", || {
        let failed: Vec<String> = events(&c)
            .into_iter()
            .filter(|e| e["kind"] == "launch_failed")
            .map(|e| e["message"].as_str().unwrap().to_string())
            .collect();
        (failed.len() >= 2).then_some(failed)
    });
    // Its process ends at once: seen ended by reconciliation, or late by the provisioning
    // time-out, whichever looks first; either way it never joined.
    assert!(
        failures[0].contains("did not join within 1 s")
            || failures[0].contains("ended before joining"),
        "{failures:?}"
    );
    assert!(
        failures[0].contains("backs off for 1 s (failure 1 in a row)"),
        "{failures:?}"
    );
    assert!(
        failures[1].contains("backs off for 2 s (failure 2 in a row)"),
        "{failures:?}"
    );
}

/// A plugin whose every call fails (a transient error, as a vendor API that is down) while
/// `$CORRAL_PLUGIN_STATE/down` exists, and that passes calls to the Python example of
/// docs/plugins.md otherwise. Each call is recorded as "<ms since the epoch> <op>".
const OUTAGE_PLUGIN: &str = r#"#!/bin/sh
input=$(cat)
op=$(printf '%s' "$input" | sed -n 's/.*"op": *"\([a-z_]*\)".*/\1/p')
echo "$(date +%s%3N) $op" >> "$CORRAL_PLUGIN_STATE/calls"
if [ -e "$CORRAL_PLUGIN_STATE/down" ]; then
    echo '{"error": {"class": "transient", "message": "injected outage"}}'
    exit 0
fi
printf '%s' "$input" | exec python3 "$EXAMPLE"
"#;

/// The seconds and the count of "backs off for S s (failure N in a row)".
fn backoff_of(message: &str) -> Option<(u64, u64)> {
    let secs = message.split("backs off for ").nth(1)?.split(' ').next()?;
    let count = message.split("(failure ").nth(1)?.split(' ').next()?;
    Some((secs.parse().ok()?, count.parse().ok()?))
}

/// The vendor's API fails every call for a whole minute, and the manager is killed and started
/// again in the middle of it: the template backs off, doubling up to its maximum and never
/// above, the backoff survives the restart (the failures go on counting), the plugin is called
/// a few times rather than hammered, and once the API is back the waiting session runs.
#[test]
fn a_provider_failing_every_call_for_a_minute_backs_off_never_above_its_maximum() {
    const OUTAGE: std::time::Duration = std::time::Duration::from_secs(60);
    const MAX_BACKOFF: u64 = 8;
    let mut c = Cluster::start(5);
    let state = c.dir.path().join("plugin");
    std::fs::create_dir(&state).unwrap();
    let plugin = state.join("outage.sh");
    std::fs::write(&plugin, OUTAGE_PLUGIN).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&plugin, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::write(state.join("down"), "").unwrap();
    let example = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../examples/plugins/local_agents.py")
        .canonicalize()
        .unwrap();
    let provider = json!({
        "name": "exec",
        "options": {
            "command": plugin,
            "env": {
                "CORRAL_BINARY": CORRAL,
                "CORRAL_PLUGIN_STATE": state,
                "EXAMPLE": example,
            },
            "timeout_secs": 30,
        },
        "launch": {"max_provisioning_secs": 60, "reconcile_secs": 2,
                   "backoff_initial_secs": 1, "backoff_max_secs": MAX_BACKOFF},
    });
    let file = c.dir.path().join("group.json");
    std::fs::write(&file, group(provider).to_string()).unwrap();
    ok(c.cli(&["group", "create", "auto", "--file", file.to_str().unwrap()]));
    let session = c.submit(&["--group", "auto", "--request", "cpu=1", "--", "true"]);

    let failures = |c: &Cluster| -> Vec<(u64, u64)> {
        events(c)
            .iter()
            .filter(|e| e["kind"] == "launch_failed")
            .filter_map(|e| backoff_of(e["message"].as_str().unwrap_or_default()))
            .collect()
    };
    c.until("a first failed launch", || {
        (!failures(&c).is_empty()).then_some(())
    });
    let outage = std::time::Instant::now();
    // Well into the backoff's maximum, the manager crashes and comes back.
    let before_restart = c.until_for(40, "the backoff at its maximum", || {
        let f = failures(&c);
        f.last()
            .is_some_and(|&(secs, _)| secs == MAX_BACKOFF)
            .then_some(f)
    });
    c.kill_server();
    c.start_server();
    let after_restart = c.until_for(30, "a failed launch after the restart", || {
        let f = failures(&c);
        (f.len() > before_restart.len()).then_some(f)
    });
    let (secs, count) = after_restart[before_restart.len()];
    let (_, count_before) = *before_restart.last().unwrap();
    assert_eq!(
        (secs, count),
        (MAX_BACKOFF, count_before + 1),
        "the restarted manager goes on from the kept backoff, not from the first"
    );
    // The rest of the minute: the outage's length, what the test is about.
    while outage.elapsed() < OUTAGE {
        assert_eq!(
            c.listed(&session)["state"],
            "pending",
            "the session waits while the provider fails"
        );
        std::thread::sleep(std::time::Duration::from_secs(1));
    }
    std::fs::remove_file(state.join("down")).unwrap();
    c.until_for(
        60,
        "the session succeeded once the provider is back",
        || (c.listed(&session)["state"] == "succeeded").then_some(()),
    );

    // Doubling from 1 s up to the maximum, and never above it.
    let all = failures(&c);
    let secs: Vec<u64> = all.iter().map(|&(s, _)| s).collect();
    assert_eq!(secs[..4], [1, 2, 4, 8], "{secs:?}");
    assert!(secs.iter().all(|&s| s <= MAX_BACKOFF), "{secs:?}");
    let counts: Vec<u64> = all.iter().map(|&(_, n)| n).collect();
    assert_eq!(
        counts,
        (1..=counts.len() as u64).collect::<Vec<_>>(),
        "one count of failures in a row, through the restart"
    );
    // The launch calls of the minute, and how far apart.
    let calls = std::fs::read_to_string(state.join("calls")).unwrap();
    let launches: Vec<u64> = calls
        .lines()
        .filter(|l| l.ends_with(" launch"))
        .map(|l| l.split(' ').next().unwrap().parse().unwrap())
        .collect();
    let failed = launches.len() - 1;
    assert_eq!(failed, all.len(), "every failed launch call said so");
    // 1 + 2 + 4 + 8 s, then one call each 8 s: about 10 in the minute.
    assert!(
        (8..=12).contains(&failed),
        "{failed} failed launch calls in {} s",
        OUTAGE.as_secs()
    );
    // Each call comes when the backoff before it ends: never within it, and soon after it (the
    // restart included), the last one the launch that went through.
    let gaps: Vec<u64> = launches.windows(2).map(|p| p[1] - p[0]).collect();
    eprintln!(
        "{failed} failed launch calls in {} s, backing off {secs:?} s, {gaps:?} ms apart",
        OUTAGE.as_secs(),
    );
    assert_eq!(gaps.len(), secs.len());
    for (gap_ms, backoff) in gaps.iter().zip(&secs) {
        assert!(
            (backoff * 1000 - 100..=backoff * 1000 + 3000).contains(gap_ms),
            "launch calls {gap_ms} ms apart after a backoff of {backoff} s: {gaps:?}"
        );
    }
}
