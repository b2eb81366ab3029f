//! `session submit` as people type it: the same defaults as `run` (the config's group, else
//! `dev`; one CPU), `--count` for an array of identical sessions, and sessions that learn their
//! id, group and allocation from their environment.
use crate::common;

use common::{ok, Cluster};

#[test]
fn submit_takes_runs_defaults_and_count_and_sessions_know_who_they_are() {
    let c = Cluster::start(60);
    ok(c.cli(&["group", "create", "dev"]));
    let _agent = c.agent("a1", "dev", "cpu=4");
    let out = ok(c.cli(&[
        "session",
        "submit",
        "--count",
        "3",
        "--",
        "sh",
        "-c",
        "echo $CORRAL_SESSION_ID $CORRAL_GROUP $CORRAL_ALLOCATION",
    ]));
    let ids: Vec<&str> = out.lines().collect();
    assert_eq!(ids.len(), 3, "{out}");
    for id in &ids {
        let done = c.until("the session ends", || {
            let s = c.listed(id);
            (s["state"] == "succeeded").then_some(s)
        });
        assert_eq!(done["group"], "dev");
        assert_eq!(done["request"]["cpu"], "1");
        assert_eq!(
            ok(c.cli(&["session", "logs", id])),
            format!("{id} dev cpu=1\n")
        );
    }
    let zero = c.cli(&["session", "submit", "--count", "0", "--", "true"]);
    assert!(!zero.status.success());
    assert!(
        common::text(&zero.stderr).contains("--count"),
        "{}",
        common::text(&zero.stderr)
    );
}

/// Ctrl-C on `session run` cancels the session, and the run exits as a shell does on SIGINT.
#[test]
fn ctrl_c_on_session_run_cancels_the_session() {
    let c = Cluster::start(60);
    ok(c.cli(&["group", "create", "dev"]));
    let _agent = c.agent("a1", "dev", "cpu=4");
    let run = c
        .command(&["session", "run", "--", "sleep", "300"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let id = c.until("the session runs", || {
        let list = c.json(&["session", "ls", "-o", "json"]);
        let s = list.as_array()?.first()?.clone();
        (s["state"] == "running").then(|| s["id"].as_str().unwrap().to_string())
    });
    let interrupted = std::process::Command::new("kill")
        .args(["-INT", &run.id().to_string()])
        .status()
        .unwrap();
    assert!(interrupted.success());
    let out = run.wait_with_output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(130),
        "{}",
        common::text(&out.stderr)
    );
    assert!(
        common::text(&out.stderr).contains(&format!("cancelling session {id}")),
        "{}",
        common::text(&out.stderr)
    );
    assert_eq!(c.listed(&id)["state"], "cancelled");
}
