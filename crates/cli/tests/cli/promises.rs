//! The CLI keeps its promises (issue 14, item 4), as a user or a script types the commands:
//! `-o json` everywhere, with errors as JSON on stderr; request errors that name the slot; an
//! image's minimums named when they raise a request; `session run --count`; a session killed by
//! a signal exits as a shell reports it; output printed while the session still runs.
use crate::common;

use std::io::BufRead;

use common::{ok, text, Cluster};
use serde_json::Value;

#[test]
fn json_output_and_json_errors_for_scripts() {
    let c = Cluster::start(60);
    ok(c.cli(&["group", "create", "dev"]));
    let _agent = c.agent("a1", "dev", "cpu=4");

    // `session run -o json`: the final state on one line; the exit code a shell gives SIGKILL.
    let out = c.cli(&[
        "session",
        "run",
        "-o",
        "json",
        "--",
        "sh",
        "-c",
        "echo hi; kill -9 $$",
    ]);
    assert_eq!(out.status.code(), Some(137), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert_eq!(stdout.lines().count(), 1, "{stdout}");
    let ended: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(ended["state"], "failed");
    assert_eq!(ended["exit_code"], 137);
    assert_eq!(ended["end_reason"], "killed by signal 9");
    let id = ended["id"].as_str().unwrap();

    // `session logs -o json`: one object per chunk, with its offset.
    let logs = ok(c.cli(&["session", "logs", id, "-o", "json"]));
    let chunk: Value = serde_json::from_str(logs.lines().next().unwrap()).unwrap();
    assert_eq!(chunk["stream"], "stdout");
    assert_eq!(chunk["offset"], 0);
    assert_eq!(chunk["text"], "hi\n");

    // An error under -o json is JSON on stderr, with the manager's status and code.
    let out = c.cli(&["group", "delete", "nosuch", "-o", "json"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(out.stdout.is_empty());
    let error: Value = serde_json::from_slice(&out.stderr).unwrap();
    assert_eq!(error["error"]["status"], 404, "{error}");
    assert_eq!(error["error"]["code"], "not_found", "{error}");
    assert_eq!(error["error"]["message"], "group \"nosuch\" not found");
    // An error of the client's own is JSON too.
    let out = c.cli(&[
        "session",
        "run",
        "-o",
        "json",
        "--input",
        "/nonexistent",
        "--",
        "true",
    ]);
    let error: Value = serde_json::from_slice(&out.stderr).unwrap();
    assert!(
        error["error"]["message"]
            .as_str()
            .unwrap()
            .contains("--input \"/nonexistent\""),
        "{error}"
    );

    // A delete the manager answers with no content prints what it deleted.
    ok(c.cli(&["group", "create", "spare"]));
    let deleted: Value =
        serde_json::from_str(&ok(c.cli(&["group", "delete", "spare", "-o", "json"]))).unwrap();
    assert_eq!(
        deleted,
        serde_json::json!({"deleted": "group", "name": "spare"})
    );
}

#[test]
fn requests_name_unknown_slots_and_what_an_image_raised() {
    let c = Cluster::start(60);
    ok(c.cli(&["group", "create", "dev"]));
    let _agent = c.agent("a1", "dev", "cpu=4,mem=8GiB");
    let out = c.cli(&["session", "submit", "--request", "cpus=1", "--", "true"]);
    assert!(!out.status.success());
    assert!(
        text(&out.stderr)
            .contains("cpus=1 requested; no agent or template of the group has a \"cpus\" slot"),
        "{}",
        text(&out.stderr)
    );
    let out = c.cli(&["session", "submit", "--request", "cpu=lots", "--", "true"]);
    assert!(
        text(&out.stderr).contains("invalid value 'cpu=lots' for '--request <SLOTS>'"),
        "{}",
        text(&out.stderr)
    );

    ok(c.cli(&["image", "put", "big", "--min-slots", "cpu=2,mem=1GiB"]));
    let out = c.cli(&["session", "submit", "--image", "big", "--", "true"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr)
            .contains("image big's minimums raise the request cpu=1 to cpu=2,mem=1GiB"),
        "{}",
        text(&out.stderr)
    );
    // Refused: the message says the image raised it.
    ok(c.cli(&["image", "put", "huge", "--min-slots", "cpu=64"]));
    let out = c.cli(&["session", "submit", "--image", "huge", "--", "true"]);
    assert!(
        text(&out.stderr)
            .contains("(image \"huge\"'s minimums raised the request cpu=1 to cpu=64)"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn run_count_runs_sessions_at_once_and_exits_with_the_highest_code() {
    let c = Cluster::start(60);
    ok(c.cli(&["group", "create", "dev"]));
    let _agent = c.agent("a1", "dev", "cpu=4");
    // mkdir is atomic: one session exits 3, one 1, one 0.
    let marks = c.dir.path().join("marks");
    std::fs::create_dir(&marks).unwrap();
    let script = format!(
        "echo hi; if mkdir {m}/a; then exit 3; elif mkdir {m}/b; then exit 1; else exit 0; fi",
        m = marks.display()
    );
    let out = c.cli(&["session", "run", "--count", "3", "--", "sh", "-c", &script]);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "hi\nhi\nhi\n");
    let sessions = c.json(&["session", "ls", "-o", "json"]);
    assert_eq!(sessions.as_array().unwrap().len(), 3, "{sessions}");
}

/// What a session prints reaches `session run` while it still runs, and `session logs -f`.
#[test]
fn output_arrives_while_the_session_runs() {
    let c = Cluster::start(60);
    ok(c.cli(&["group", "create", "dev"]));
    let _agent = c.agent("a1", "dev", "cpu=4");
    let mut run = common::Proc(
        c.command(&["session", "run", "--", "sh", "-c", "echo first; sleep 300"])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap(),
    );
    let mut first = String::new();
    std::io::BufReader::new(run.0.stdout.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    assert_eq!(first, "first\n");
    let sessions = c.json(&["session", "ls", "-o", "json"]);
    let session = &sessions[0];
    assert_eq!(session["state"], "running", "{session}");
    let id = session["id"].as_str().unwrap();

    let mut follow = common::Proc(
        c.command(&["session", "logs", id, "-f"])
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let mut stdout = std::io::BufReader::new(follow.0.stdout.take().unwrap());
    let mut line = String::new();
    stdout.read_line(&mut line).unwrap();
    assert_eq!(line, "first\n");
    // The end of the session ends both.
    ok(c.cli(&["session", "cancel", id]));
    let status = follow.0.wait().unwrap();
    assert!(status.success());
    // Cancelled by someone else: it did not succeed.
    let status = run.0.wait().unwrap();
    assert_eq!(status.code(), Some(1));
}
