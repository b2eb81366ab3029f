//! The `exec` provider running real plugins: the example plugin (examples/plugins/
//! local_agents.py, with a shell script standing in for `corral`) and small plugins written here.

mod support;

use std::path::{Path, PathBuf};
use std::time::Duration;

use corral_provider::ProviderSettings as _;
use corral_provider::{connect, ErrorClass, InstanceState, Provider, ProviderConfig};
use corral_testkit::{eventually_async, KillLeftovers};
use serde_json::{json, Value};
use support::*;

fn example_plugin() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/plugins/local_agents.py")
}

fn config(options: Value) -> ProviderConfig {
    serde_json::from_value(json!({"name": "exec", "options": options})).unwrap()
}

async fn provider(state: &Path, options: Value) -> Box<dyn Provider> {
    connect(
        &config(options),
        context("plugged", state, Path::new("/unused")),
    )
    .await
    .unwrap()
}

#[tokio::test]
async fn the_example_plugin_launches_lists_and_terminates_local_agents() {
    let dir = tempfile::tempdir().unwrap();
    let _leftovers = KillLeftovers::new(dir.path());
    let agent = script(&dir.path().join("corral"), STAND_IN_AGENT);
    let plugin_state = dir.path().join("plugin-state");
    let p = provider(
        &dir.path().join("state"),
        json!({
            "command": example_plugin(),
            "env": {"CORRAL_BINARY": agent, "CORRAL_PLUGIN_STATE": plugin_state},
        }),
    )
    .await;

    let offers = p.templates().await.unwrap();
    let names: Vec<_> = offers
        .iter()
        .map(|o| (o.name.as_str(), o.slots.as_str()))
        .collect();
    assert_eq!(
        names,
        [("small", "cpu=1,mem=1GiB"), ("large", "cpu=4,mem=8GiB")]
    );
    assert_eq!(offers[0].price_per_hour, Some(0.25));

    let launched = p.launch("small", &requests(&["p-1", "p-2"])).await.unwrap();
    assert_eq!(launched.len(), 2);
    let listed = p.list().await.unwrap();
    let seen: Vec<_> = listed
        .iter()
        .map(|i| {
            (
                i.agent_id.as_deref().unwrap(),
                i.template.as_deref(),
                i.state,
            )
        })
        .collect();
    assert_eq!(
        seen,
        [
            ("p-1", Some("small"), InstanceState::Running),
            ("p-2", Some("small"), InstanceState::Running)
        ]
    );

    // The plugin delivered each agent its settings, the token in the environment only.
    let log = plugin_state.join("plugged/p-1/agent.log");
    let (pid, child) = stand_in_pids(&log).await;
    let args = log_values(&log, "arg");
    for expected in ["--server", MANAGER, "agent", "p-1", "cpu=1,mem=1GiB"] {
        assert!(
            args.iter().any(|a| a == expected),
            "{expected} not in {args:?}"
        );
    }
    assert_eq!(log_values(&log, "token"), ["token-of-p-1"]);
    assert!(!cmdline(pid).contains("token-of"));

    let ids: Vec<String> = listed.iter().map(|i| i.id.clone()).collect();
    p.terminate(&ids).await.unwrap();
    assert!(p.list().await.unwrap().is_empty());
    assert!(
        !is_live(pid) && !is_live(child),
        "the agent or its child survived"
    );

    // The plugin's own classification comes through.
    let e = p.launch("medium", &requests(&["p-3"])).await.unwrap_err();
    assert_eq!(e.class, ErrorClass::Fatal);
    assert!(e.message.contains("medium"), "{e}");
}

/// Fails every other call (a counter in its working directory), with the classes capacity,
/// transient and fatal in turn; answers the others properly.
const FLAKY: &str = r#"#!/usr/bin/env python3
import json, sys
request = json.load(sys.stdin)
try:
    calls = int(open("calls").read())
except FileNotFoundError:
    calls = 0
open("calls", "w").write(str(calls + 1))
if calls % 2 == 0:
    cls = ["capacity", "transient", "fatal"][calls // 2 % 3]
    print(json.dumps({"error": {"class": cls, "message": f"call {calls} failed ({cls})"}}))
    sys.exit(1)
op = request["op"]
if op == "templates":
    print(json.dumps({"templates": [{"name": "small", "slots": "mem=1GiB, cpu=1"}]}))
elif op == "launch":
    print(json.dumps({"instances": [
        {"id": "vm-" + r["agent_id"], "agent_id": r["agent_id"], "template": request["template"],
         "state": "pending"} for r in request["requests"]]}))
elif op == "list":
    print(json.dumps({"instances": [{"id": "vm-1", "state": "stopping"}]}))
else:
    print("{}")
"#;

#[tokio::test]
async fn every_failing_call_carries_the_class_the_plugin_said() {
    let dir = tempfile::tempdir().unwrap();
    let _leftovers = KillLeftovers::new(dir.path());
    let plugin = script(&dir.path().join("flaky.py"), FLAKY);
    let p = provider(&dir.path().join("state"), json!({"command": plugin})).await;

    let e = p.templates().await.unwrap_err();
    assert_eq!(e.class, ErrorClass::Capacity);
    assert!(e.message.contains("call 0 failed"), "{e}");
    let offers = p.templates().await.unwrap();
    assert_eq!(offers[0].slots, "cpu=1,mem=1GiB", "slots in canonical form");

    let e = p.launch("small", &requests(&["f-1"])).await.unwrap_err();
    assert_eq!(e.class, ErrorClass::Transient);
    let launched = p.launch("small", &requests(&["f-1", "f-2"])).await.unwrap();
    let ids: Vec<_> = launched.iter().map(|i| i.id.as_str()).collect();
    assert_eq!(ids, ["vm-f-1", "vm-f-2"]);
    assert!(launched.iter().all(|i| i.state == InstanceState::Pending));

    let e = p.list().await.unwrap_err();
    assert_eq!(e.class, ErrorClass::Fatal);
    assert!(
        e.message.contains("flaky.py") && e.message.contains("list"),
        "{e}"
    );
    let listed = p.list().await.unwrap();
    assert_eq!(listed[0].state, InstanceState::Stopping);
    assert_eq!(listed[0].agent_id, None);

    let e = p.terminate(&["vm-1".into()]).await.unwrap_err();
    assert_eq!(e.class, ErrorClass::Capacity);
    p.terminate(&["vm-1".into()]).await.unwrap();
}

/// Answers as its first argument says.
const GARBAGE: &str = r#"#!/bin/sh
cat >/dev/null
case "$1" in
not-json) echo "hello, manager" ;;
extra) echo '{"instances": []}'; echo 'done.' ;;
empty) ;;
bad-state) echo '{"instances": [{"id": "x", "state": "runing"}]}' ;;
missing-field) echo '{"instances": [{"id": "x"}]}' ;;
unknown-field) echo '{"instances": [], "next_page": 2}' ;;
long) printf 'x%.0s' $(seq 1 1000) ;;
exit-3) echo '{"instances": []}'; echo "first line" >&2; echo "out of luck" >&2; exit 3 ;;
bad-error) echo '{"error": {"class": "sometimes", "message": "?"}}' ;;
stranger) echo '{"instances": [{"id": "x", "agent_id": "not-asked", "state": "running"}]}' ;;
held) sleep 4 & echo '{"instances": []}' ;;
esac
"#;

#[tokio::test]
async fn garbage_answers_are_transient_and_name_the_problem() {
    let dir = tempfile::tempdir().unwrap();
    let _leftovers = KillLeftovers::new(dir.path());
    let plugin = script(&dir.path().join("garbage.sh"), GARBAGE);
    let state = dir.path().join("state");
    for (mode, expected) in [
        ("not-json", "not JSON"),
        ("extra", "extra output after the JSON response"),
        ("empty", "no response on standard output"),
        ("bad-state", "instances[0].state: unknown variant `runing`"),
        ("missing-field", "missing field `state`"),
        ("unknown-field", "unknown field `next_page`"),
        ("exit-3", "exit status: 3"),
        ("bad-error", "invalid error object"),
        ("held", "exited (exit status: 0) but its output stayed open"),
    ] {
        let p = provider(&state, json!({"command": plugin, "args": [mode]})).await;
        let e = p.list().await.unwrap_err();
        assert_eq!(e.class, ErrorClass::Transient, "{mode}: {e}");
        assert!(e.message.contains(expected), "{mode}: {e}");
        assert!(e.message.contains("garbage.sh (list)"), "{mode}: {e}");
    }
    // The end of stderr is quoted; long output is cut.
    let p = provider(&state, json!({"command": plugin, "args": ["exit-3"]})).await;
    let e = p.list().await.unwrap_err();
    assert!(e.message.contains("first line | out of luck"), "{e}");
    let p = provider(&state, json!({"command": plugin, "args": ["long"]})).await;
    let e = p.list().await.unwrap_err();
    assert!(e.message.len() < 400, "{} chars: {e}", e.message.len());
    // A launch may only answer for the agents asked for.
    let p = provider(&state, json!({"command": plugin, "args": ["stranger"]})).await;
    let e = p.launch("small", &requests(&["asked"])).await.unwrap_err();
    assert_eq!(e.class, ErrorClass::Transient);
    assert!(e.message.contains("not-asked"), "{e}");
}

/// Issue 9: a plugin that exits without reading its request (here larger than a pipe holds, so
/// that writing it really fails with EPIPE) is a transient failure that says so: not a crash
/// of the manager (SIGPIPE), not a hang.
#[tokio::test]
async fn a_plugin_that_exits_without_reading_its_request_is_transient() {
    let dir = tempfile::tempdir().unwrap();
    let _leftovers = KillLeftovers::new(dir.path());
    let state = dir.path().join("state");
    let script_plugin = script(&dir.path().join("exit0.sh"), "#!/bin/sh\nexit 0\n");
    let ids: Vec<String> = (0..3000).map(|i| format!("agent-{i:05}")).collect();
    let ids: Vec<&str> = ids.iter().map(String::as_str).collect();
    let many = requests(&ids);
    assert!(serde_json::to_vec(&many).unwrap().len() > 128 << 10);
    for plugin in [Path::new("/bin/true"), &script_plugin] {
        let p = provider(&state, json!({ "command": plugin })).await;
        let e = tokio::time::timeout(Duration::from_secs(30), p.launch("small", &many))
            .await
            .expect("the launch hung")
            .unwrap_err();
        assert_eq!(e.class, ErrorClass::Transient, "{plugin:?}: {e}");
        assert!(
            e.message.contains("closed its standard input")
                && e.message.contains("without answering"),
            "{plugin:?}: {e}"
        );
    }
}

/// Hangs with a child, after writing both pids.
const HANG: &str = r#"#!/bin/sh
echo $$ > plugin.pid
sleep 300 &
echo $! > child.pid
wait
"#;

/// The pid the plugin wrote into `path`, once it has.
async fn read_pid(path: &Path) -> i32 {
    let what = format!("a pid in {}", path.display());
    eventually_async(&what, Duration::from_secs(5), || {
        let read = std::fs::read_to_string(path);
        std::future::ready(read.ok().and_then(|text| text.trim().parse().ok()))
    })
    .await
}

/// Neither `pid` nor `child` is alive, once the kernel has ended them (SIGKILL is sent before
/// the call returns, and takes effect a moment later).
async fn both_end(what: &str, pid: i32, child: i32) {
    eventually_async(what, Duration::from_secs(5), || {
        std::future::ready(!is_live(pid) && !is_live(child))
    })
    .await;
}

#[tokio::test]
async fn a_plugin_past_its_timeout_is_killed_with_its_group() {
    let dir = tempfile::tempdir().unwrap();
    let _leftovers = KillLeftovers::new(dir.path());
    let plugin = script(&dir.path().join("hang.sh"), HANG);
    let state = dir.path().join("state");
    let p = provider(&state, json!({"command": plugin, "timeout_secs": 1})).await;
    // The call ends at the plugin's timeout, not when the plugin would (after its child's
    // 300 s): the bound only tells a hang from an answer.
    let e = tokio::time::timeout(Duration::from_secs(60), p.list())
        .await
        .expect("the call waited for the hung plugin")
        .unwrap_err();
    assert_eq!(e.class, ErrorClass::Transient);
    assert!(e.message.contains("did not answer within 1 s"), "{e}");
    let (pid, child) = (
        read_pid(&state.join("plugin.pid")).await,
        read_pid(&state.join("child.pid")).await,
    );
    both_end(
        &format!("plugin {pid} and its child {child} to end"),
        pid,
        child,
    )
    .await;
    assert!(is_reaped(pid), "the plugin was left a zombie");

    // A call abandoned by its caller (the manager's own timeout) kills the plugin too.
    std::fs::remove_file(state.join("plugin.pid")).unwrap();
    std::fs::remove_file(state.join("child.pid")).unwrap();
    let p = provider(&state, json!({"command": plugin, "timeout_secs": 60})).await;
    let abandoned = tokio::time::timeout(Duration::from_millis(500), p.list()).await;
    assert!(abandoned.is_err());
    let (pid, child) = (
        read_pid(&state.join("plugin.pid")).await,
        read_pid(&state.join("child.pid")).await,
    );
    let what = format!("the abandoned plugin {pid} and its child {child} to end");
    both_end(&what, pid, child).await;
}

/// Keeps its request, environment and arguments in its working directory.
const NOSY: &str = r#"#!/usr/bin/env python3
import json, os, sys
request = json.load(sys.stdin)
json.dump(request, open("request.json", "w"))
json.dump(dict(os.environ), open("env.json", "w"))
json.dump(open("/proc/self/cmdline").read().split("\0"), open("argv.json", "w"))
if request["op"] == "launch":
    print(json.dumps({"instances": [{"id": r["agent_id"], "agent_id": r["agent_id"],
                                     "state": "pending"} for r in request["requests"]]}))
else:
    print(json.dumps({"instances": []}))
"#;

fn read_json(path: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

#[tokio::test]
async fn secrets_reach_the_environment_only_and_requests_follow_the_protocol() {
    let dir = tempfile::tempdir().unwrap();
    let _leftovers = KillLeftovers::new(dir.path());
    let plugin = script(&dir.path().join("nosy.py"), NOSY);
    let state = dir.path().join("state");
    let p = provider(
        &state,
        json!({
            "command": plugin,
            "args": ["--region", "local"],
            "env": {"PLAIN": "visible", "API_KEY": "overridden"},
            "secret_env": {"API_KEY": "s3cret"},
        }),
    )
    .await;
    p.launch("large", &requests(&["n-1"])).await.unwrap();

    let env = read_json(&state.join("env.json"));
    assert_eq!(env["API_KEY"], "s3cret");
    assert_eq!(env["PLAIN"], "visible");
    assert!(env.get("PATH").is_some());
    // Nothing else of the manager's environment (cargo sets this one for tests).
    assert!(env.get("CARGO_MANIFEST_DIR").is_none(), "{env}");
    let argv = read_json(&state.join("argv.json")).to_string();
    assert!(
        argv.contains("--region") && !argv.contains("s3cret"),
        "{argv}"
    );

    let request = read_json(&state.join("request.json"));
    assert_eq!(request["version"], 1);
    assert_eq!(request["op"], "launch");
    assert_eq!(request["group"], "plugged");
    assert_eq!(request["manager_url"], MANAGER);
    assert_eq!(request["template"], "large");
    assert_eq!(
        request["requests"],
        json!([{"agent_id": "n-1", "token": "token-of-n-1"}])
    );
    assert_eq!(
        request["templates"][1],
        json!({"name": "large", "slots": "cpu=4,mem=8GiB", "price_per_hour": 1.0,
               "labels": {"zone": "local"}})
    );

    p.terminate(&["n-1".into()]).await.unwrap_err(); // answers `instances`, not `{}`
    let request = read_json(&state.join("request.json"));
    assert_eq!(request["op"], "terminate");
    assert_eq!(request["ids"], json!(["n-1"]));
    assert!(request.get("requests").is_none() && request.get("template").is_none());
}

#[tokio::test]
async fn options_are_checked_and_named() {
    for (options, field) in [
        (json!({}), "provider.options"),
        (json!({"command": "plugin.py"}), "provider.options.command"),
        (
            json!({"command": "/p", "timeout_secs": 0}),
            "provider.options.timeout_secs",
        ),
        (
            json!({"command": "/p", "timeout_secs": 3601}),
            "provider.options.timeout_secs",
        ),
        (
            json!({"command": "/p", "env": {"A-B": "x"}}),
            "provider.options.env",
        ),
        (
            json!({"command": "/p", "secret_env": {"K": 1}}),
            "provider.options.secret_env",
        ),
        (json!({"command": "/p", "shell": true}), "provider.options"),
    ] {
        let e = config(options.clone()).validate().unwrap_err();
        assert!(e.field.starts_with(field), "{options}: {e}");
    }
    let dir = tempfile::tempdir().unwrap();
    let _leftovers = KillLeftovers::new(dir.path());
    let missing = dir.path().join("missing.py");
    let e = connect(
        &config(json!({"command": missing})),
        context("g", dir.path(), Path::new("/unused")),
    )
    .await
    .err()
    .unwrap();
    assert_eq!(e.class, ErrorClass::Fatal);
    assert!(e.message.contains("missing.py"), "{e}");
}
