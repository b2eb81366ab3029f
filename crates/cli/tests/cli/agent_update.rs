//! Agent auto-update through a real manager and a real agent process: two versions of one
//! build (the real `corral` binary with its version stamped, `corral_api::agent_builds`),
//! uploaded with `corral agent-build put`; an agent on version A with its group's target B is
//! marked only once idle, replaces its own binary, executes it, joins again as the same agent
//! with its own token (the token it was started with is revoked meanwhile), and takes new
//! sessions; a build damaged on the manager's disk is refused by the agent, which stays on A,
//! unmarked, with an event, and is not asked again; a session on another agent runs through
//! the whole exercise untouched.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use common::{ok, text, Cluster, Proc};
use corral_api::agent_builds::{STAMP_LEN, STAMP_MARK};
use serde_json::Value;

/// A copy of the `corral` under test in DIR/NAME/corral, reporting `version`.
fn stamped(c: &Cluster, name: &str, version: &str) -> PathBuf {
    let mut bytes = std::fs::read(common::CORRAL).unwrap();
    let at: Vec<usize> = bytes
        .windows(STAMP_MARK.len())
        .enumerate()
        .filter(|(_, w)| *w == STAMP_MARK)
        .map(|(i, _)| i)
        .collect();
    assert_eq!(at.len(), 1, "one version stamp in the binary");
    let slot = &mut bytes[at[0] + STAMP_MARK.len()..][..STAMP_LEN];
    slot.fill(0);
    slot[..version.len()].copy_from_slice(version.as_bytes());
    let dir = c.dir.path().join(name);
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("corral");
    std::fs::write(&path, bytes).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    assert_eq!(says_version(&path), format!("corral {version}"));
    path
}

fn says_version(binary: &Path) -> String {
    text(
        &Command::new(binary)
            .arg("--version")
            .output()
            .unwrap()
            .stdout,
    )
    .trim()
    .to_string()
}

fn agent(c: &Cluster, id: &str) -> Value {
    let agents = c.json(&["agent", "ls", "-o", "json"]);
    agents
        .as_array()
        .and_then(|a| a.iter().find(|a| a["id"] == id).cloned())
        .unwrap_or_default()
}

fn events_of(c: &Cluster, agent: &str) -> Vec<Value> {
    let events = c.json(&["events", "--agent", agent, "--limit", "1000", "-o", "json"]);
    let mut events = events.as_array().cloned().unwrap_or_default();
    events.reverse(); // Oldest first.
    events
}

/// A session that runs until the file `release` exists.
fn held_session(c: &Cluster, release: &Path, request: &str) -> String {
    let wait = format!("while [ ! -e {} ]; do sleep 0.1; done", release.display());
    c.submit(&[
        "--group",
        "up",
        "--request",
        request,
        "--",
        "sh",
        "-c",
        &wait,
    ])
}

fn until_state(c: &Cluster, id: &str, state: &str) {
    c.until_for(60, &format!("session {id} {state}"), || {
        (c.listed(id)["state"] == state).then_some(())
    });
}

#[test]
fn an_idle_agent_updates_itself_and_a_corrupt_build_changes_nothing() {
    let c = Cluster::start(5);
    ok(c.cli(&["group", "create", "up"]));
    let (a, b, bad) = (
        stamped(&c, "a", "9.0.0-a"),
        stamped(&c, "b", "9.0.0-b"),
        stamped(&c, "bad", "9.0.0-bad"),
    );
    for build in [&b, &bad] {
        let put = ok(c.cli(&["agent-build", "put", build.to_str().unwrap()]));
        assert!(put.starts_with("agent build 9.0.0-"), "{put}");
    }
    // A version names one file: another file under it (one that says that version too) is
    // refused, and nothing is left of it.
    let impostor = c.dir.path().join("impostor");
    std::fs::write(&impostor, "#!/bin/sh\necho corral 9.0.0-b\n").unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&impostor, std::fs::Permissions::from_mode(0o755)).unwrap();
    let other = c.cli(&[
        "agent-build",
        "put",
        impostor.to_str().unwrap(),
        "--version",
        "9.0.0-b",
    ]);
    assert!(!other.status.success());
    assert!(
        text(&other.stderr).contains("held already"),
        "{}",
        text(&other.stderr)
    );
    let kept = std::fs::read_dir(c.dir.path().join("data").join("agent-builds"))
        .unwrap()
        .count();
    assert_eq!(kept, 2, "one file a build, no partial upload left");
    let builds = c.json(&["agent-build", "ls", "-o", "json"]);
    assert_eq!(builds.as_array().map(Vec::len), Some(2), "{builds}");
    // Damaged on the manager's disk after it was uploaded: the agent must find out.
    let bad_sha = builds[0]["sha256"].as_str().unwrap().to_string();
    assert_eq!(builds[0]["version"], "9.0.0-b");
    let bad_sha = if builds[1]["version"] == "9.0.0-bad" {
        builds[1]["sha256"].as_str().unwrap().to_string()
    } else {
        bad_sha
    };
    let kept = c
        .dir
        .path()
        .join("data")
        .join("agent-builds")
        .join(&bad_sha);
    let mut damaged = std::fs::read(&kept).unwrap();
    let middle = damaged.len() / 2;
    damaged[middle] ^= 0xff;
    std::fs::write(&kept, damaged).unwrap();

    // A session on another agent, there for the whole exercise (busy, w1 is never marked; it
    // runs a copy of its own, as it may update itself once the session ends).
    let w = stamped(&c, "w", "9.0.0-w");
    let mut worker = c.agent_command("w1", "up", "cpu=1");
    worker.stdout(Stdio::null());
    let worker = Command::new(&w)
        .args(worker.get_args())
        .envs(worker.get_envs().filter_map(|(k, v)| v.map(|v| (k, v))))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn();
    let _w1 = Proc(worker.unwrap());
    c.until("w1 joins", || {
        (agent(&c, "w1")["state"] == "alive").then_some(())
    });
    let done = c.dir.path().join("done");
    let steady = held_session(&c, &done, "cpu=1");
    until_state(&c, &steady, "running");

    // u1 runs version A, joining with a token revoked once it has joined: after its update it
    // can only join again with its own.
    let created: Value = serde_json::from_str(&ok(
        c.cli(&["token", "create", "joiner", "--role", "admin", "-o", "json"])
    ))
    .unwrap();
    let log = std::fs::File::create(c.dir.path().join("u1.log")).unwrap();
    let mut u1 = Command::new(&a);
    u1.args([
        "agent",
        "--group",
        "up",
        "--id",
        "u1",
        "--capacity",
        "cpu=2",
    ])
    .arg("--work-dir")
    .arg(c.dir.path().join("u1"))
    .env("CORRAL_SERVER", c.url())
    .env("CORRAL_TOKEN", created["token"].as_str().unwrap())
    .env("CORRAL_CONFIG", c.dir.path().join("none.toml"))
    // Its held sessions wait for files of the test's directory, which a sandbox hides.
    .env("CORRAL_AGENT_ISOLATION", "off")
    .stdout(Stdio::null())
    .stderr(log);
    let mut u1 = c.agent_from("u1", u1);
    ok(c.cli(&["token", "revoke", created["id"].as_str().unwrap()]));
    assert_eq!(agent(&c, "u1")["version"], "9.0.0-a");
    let release_first = c.dir.path().join("first");
    let first = held_session(&c, &release_first, "cpu=2");
    until_state(&c, &first, "running");
    assert_eq!(c.listed(&first)["agent"], "u1");

    // The target is the damaged build: u1 waits for its session, then fails to update.
    ok(c.cli(&[
        "group",
        "set-policy",
        "up",
        "--agent-update",
        "on",
        "--agent-update-target",
        "9.0.0-bad",
        "--agent-update-idle-secs",
        "1",
    ]));
    std::fs::write(&release_first, "").unwrap();
    until_state(&c, &first, "succeeded");
    c.until_for(60, "u1's update to fail", || {
        events_of(&c, "u1")
            .iter()
            .any(|e| e["kind"] == "update_failed")
            .then_some(())
    });
    let events = events_of(&c, "u1");
    let failed = events
        .iter()
        .find(|e| e["kind"] == "update_failed")
        .unwrap();
    let message = failed["message"].as_str().unwrap();
    assert!(
        message.contains("could not update to 9.0.0-bad, and runs on 9.0.0-a")
            && message.contains("corrupt"),
        "{message}"
    );
    assert_eq!(
        says_version(&a),
        "corral 9.0.0-a",
        "the binary is as it was"
    );
    assert!(u1.0.try_wait().unwrap().is_none(), "u1 runs on");
    c.until("u1 to be unmarked", || {
        (agent(&c, "u1")["state"] == "alive").then_some(())
    });
    assert_eq!(agent(&c, "u1")["version"], "9.0.0-a");
    // Unmarked, it takes sessions; idle again, it is not asked for the failed build again.
    let second = c.submit(&["--group", "up", "--request", "cpu=2", "--", "true"]);
    until_state(&c, &second, "succeeded");
    assert_eq!(c.listed(&second)["agent"], "u1");

    // The target is B: u1, idle, updates, and is the same process (executed in place).
    ok(c.cli(&[
        "group",
        "set-policy",
        "up",
        "--agent-update-target",
        "9.0.0-b",
    ]));
    c.until_for(60, "u1 to run 9.0.0-b", || {
        let u = agent(&c, "u1");
        (u["version"] == "9.0.0-b" && u["state"] == "alive").then_some(())
    });
    assert!(
        u1.0.try_wait().unwrap().is_none(),
        "the same process runs on"
    );
    // Its token came over a pipe: what the process was started with (which a session of the
    // same account could read in /proc) does not hold it (issue 43, item 10).
    let environ = std::fs::read(format!("/proc/{}/environ", u1.0.id())).unwrap();
    let environ = String::from_utf8_lossy(&environ);
    assert!(
        !environ.contains("CORRAL_AGENT_RESUME_TOKEN"),
        "the token is in the updated agent's environment"
    );
    assert!(environ.contains("CORRAL_AGENT_RESUME_FD="), "{environ}");
    assert_eq!(
        says_version(&a),
        "corral 9.0.0-b",
        "its binary was replaced"
    );
    let listed = ok(c.cli(&["agent", "ls"]));
    let row = listed
        .lines()
        .find(|l| l.starts_with("u1 "))
        .unwrap_or_default();
    assert!(row.trim_end().ends_with("9.0.0-b"), "{listed}");
    // Once it uses the token its update's join answered with, its older ones are revoked: it
    // holds one (issue 43).
    c.until_for(30, "u1 to hold one agent token", || {
        let tokens = c.json(&["token", "ls", "-o", "json"]);
        let held = tokens
            .as_array()
            .unwrap()
            .iter()
            .filter(|t| t["role"] == "agent" && t["user"] == "u1")
            .count();
        (held == 1).then_some(())
    });
    let third = c.submit(&["--group", "up", "--request", "cpu=2", "--", "true"]);
    until_state(&c, &third, "succeeded");
    assert_eq!(c.listed(&third)["agent"], "u1");

    // A build a group targets stays; one no group targets goes, with its file.
    let targeted = c.cli(&["agent-build", "rm", "9.0.0-b"]);
    assert!(!targeted.status.success());
    assert!(
        text(&targeted.stderr).contains("agent update target of group(s) up"),
        "{}",
        text(&targeted.stderr)
    );
    let removed = ok(c.cli(&["agent-build", "rm", "9.0.0-bad"]));
    assert!(removed.contains("agent build 9.0.0-bad for"), "{removed}");
    assert!(!kept.exists(), "the damaged build's file is gone");
    let builds = c.json(&["agent-build", "ls", "-o", "json"]);
    assert_eq!(builds.as_array().map(Vec::len), Some(1), "{builds}");

    // What happened, in order: marked only after the first session ended, one try at the
    // damaged build, one update to B.
    let events = events_of(&c, "u1");
    let kinds: Vec<&str> = events
        .iter()
        .filter_map(|e| e["kind"].as_str())
        .filter(|k| ["updating", "updated", "update_failed"].contains(k))
        .collect();
    assert_eq!(
        kinds,
        ["updating", "update_failed", "updating", "updated"],
        "{events:?}"
    );
    // The session's last event is its end.
    let first_events = c.json(&["events", "--session", &first, "-o", "json"]);
    let first_ended = first_events[0]["at"].as_i64().unwrap();
    assert_eq!(first_events[0]["kind"], "succeeded", "{first_events}");
    let first_mark = events.iter().find(|e| e["kind"] == "updating").unwrap()["at"]
        .as_i64()
        .unwrap();
    assert!(
        first_mark >= first_ended,
        "marked at {first_mark}, the session ended at {first_ended}"
    );
    let updated = events.iter().find(|e| e["kind"] == "updated").unwrap();
    assert!(
        updated["message"]
            .as_str()
            .unwrap()
            .contains("updated from 9.0.0-a to 9.0.0-b"),
        "{updated}"
    );

    // The session on w1 ran all along, placed once.
    assert_eq!(c.listed(&steady)["state"], "running");
    assert_eq!(c.listed(&steady)["agent"], "w1");
    std::fs::write(&done, "").unwrap();
    until_state(&c, &steady, "succeeded");
    let placed = c.json(&["events", "--session", &steady, "-o", "json"]);
    let placements = placed
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["kind"] == "placed")
        .count();
    assert_eq!(placements, 1, "{placed}");
}

/// Issue 43: `agent-build put corral` uploads ./corral (not a `corral` on PATH) under the
/// version that file says; a --version the file contradicts is refused, naming both.
#[test]
fn a_build_is_put_under_the_version_the_file_named_says() {
    let c = Cluster::start(5);
    let build = stamped(&c, "new", "9.1.0-new");
    let dir = build.parent().unwrap();
    // A `corral` of another version on PATH: the one under test.
    let installed = Path::new(common::CORRAL);
    assert_ne!(says_version(installed), "corral 9.1.0-new");
    let path = format!(
        "{}:{}",
        installed.parent().unwrap().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let put = |args: &[&str]| {
        c.command(args)
            .current_dir(dir)
            .env("PATH", &path)
            .output()
            .unwrap()
    };
    let refused = put(&["agent-build", "put", "corral", "--version", "9.1.0-other"]);
    let why = text(&refused.stderr);
    assert!(!refused.status.success(), "{why}");
    assert!(
        why.contains("says it is version 9.1.0-new, not 9.1.0-other"),
        "{why}"
    );
    let stored = ok(put(&["agent-build", "put", "corral"]));
    assert!(stored.starts_with("agent build 9.1.0-new for "), "{stored}");
    // Given and agreeing, the version is taken.
    ok(put(&[
        "agent-build",
        "put",
        "./corral",
        "--version",
        "9.1.0-new",
    ]));
    let builds = c.json(&["agent-build", "ls", "-o", "json"]);
    assert_eq!(builds.as_array().map(Vec::len), Some(1), "{builds}");
    assert_eq!(builds[0]["version"], "9.1.0-new");
    assert_eq!(builds[0]["size"], std::fs::metadata(&build).unwrap().len());
}
