//! Listings people can use: `session ls` newest first, oldest first on request, active sessions
//! first with `--active`, with each session's age, run time, agent and command; an unknown
//! group is an error naming it, not an empty list.

use crate::common;

use common::{ok, text, Cluster};
use serde_json::Value;

fn ids(list: &Value) -> Vec<String> {
    list.as_array()
        .unwrap()
        .iter()
        .map(|s| s["id"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn sessions_are_listed_newest_first_and_only_active_ones_on_request() {
    let c = Cluster::start(60);
    ok(c.cli(&["group", "create", "g"]));
    let _agent = c.agent("a1", "g", "cpu=4");
    let first = c.submit(&["--group", "g", "--request", "cpu=1", "--", "sleep", "300"]);
    let second = c.submit(&["--group", "g", "--request", "cpu=1", "--", "true"]);
    let third = c.submit(&["--group", "g", "--request", "cpu=1", "--", "sleep", "301"]);
    ok(c.cli(&["session", "cancel", &third]));
    c.until("the first to run and the second to end", || {
        (c.listed(&first)["state"] == "running" && c.listed(&second)["state"] == "succeeded")
            .then_some(())
    });

    let newest = c.json(&["session", "ls", "-o", "json"]);
    assert_eq!(
        ids(&newest),
        [third.as_str(), second.as_str(), first.as_str()]
    );
    let oldest = c.json(&["session", "ls", "--oldest", "-o", "json"]);
    assert_eq!(
        ids(&oldest),
        [first.as_str(), second.as_str(), third.as_str()]
    );
    let active = c.json(&["session", "ls", "--active", "-o", "json"]);
    assert_eq!(
        ids(&active),
        [first.as_str()],
        "only what has not ended (issue 51 item 10)"
    );
    let one = c.json(&["session", "ls", "--limit", "1", "-o", "json"]);
    assert_eq!(ids(&one), [third.as_str()]);
    let page = c.cli(&["session", "ls", "--limit", "1"]);
    let hint = text(&page.stderr);
    assert!(hint.contains(&format!("--after {third}")), "{hint}");
    let next = c.json(&[
        "session", "ls", "--limit", "1", "--after", &third, "-o", "json",
    ]);
    assert_eq!(
        ids(&next),
        [second.as_str()],
        "the next page goes on to older ones"
    );

    let table = ok(c.cli(&["session", "ls"]));
    for column in ["AGE", "DURATION", "AGENT", "COMMAND"] {
        assert!(table.contains(column), "{table}");
    }
    let running = table.lines().find(|l| l.starts_with(&first)).unwrap();
    assert!(
        running.contains("a1") && running.contains("sleep 300"),
        "{running}"
    );

    let unknown = c.cli(&["session", "ls", "--group", "nope"]);
    assert!(!unknown.status.success());
    assert!(
        text(&unknown.stderr).contains("\"nope\""),
        "{}",
        text(&unknown.stderr)
    );
}

/// The lines a long-running `corral` command prints, as they come.
fn lines_of(c: &Cluster, args: &[&str]) -> (common::Proc, std::sync::mpsc::Receiver<String>) {
    use std::io::BufRead;
    let mut child = c
        .command(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
        {
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    (common::Proc(child), rx)
}

/// Reads lines (JSON objects) until one satisfies `wanted`; every line read is returned.
fn read_until(
    rx: &std::sync::mpsc::Receiver<String>,
    what: &str,
    wanted: impl Fn(&Value) -> bool,
) -> Vec<Value> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let mut seen = Vec::new();
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        let line = rx
            .recv_timeout(left)
            .unwrap_or_else(|_| panic!("no line with {what} in {seen:?}"));
        let value: Value = serde_json::from_str(&line)
            .unwrap_or_else(|e| panic!("not one JSON object per line ({e}): {line}"));
        seen.push(value);
        if wanted(seen.last().unwrap()) {
            return seen;
        }
    }
}

#[test]
fn events_and_sessions_are_followed_as_they_happen_and_logs_tailed() {
    let c = Cluster::start(60);
    ok(c.cli(&["group", "create", "g"]));
    let _agent = c.agent("a1", "g", "cpu=4");
    let (_events, events) = lines_of(&c, &["events", "-f", "--group", "g", "-o", "json"]);
    let (_watch, watch) = lines_of(&c, &["session", "ls", "--watch", "-o", "json"]);

    let id = c.submit(&[
        "--group",
        "g",
        "--request",
        "cpu=1",
        "--",
        "sh",
        "-c",
        "echo one; echo two; echo three; exec sleep 300",
    ]);
    let followed = read_until(&events, "the session's placement", |e| {
        e["kind"] == "placed" && e["session"] == id.as_str()
    });
    let ids: Vec<i64> = followed.iter().filter_map(|e| e["id"].as_i64()).collect();
    assert!(ids.windows(2).all(|w| w[0] < w[1]), "oldest first: {ids:?}");
    read_until(&watch, "the session running", |s| {
        s["id"] == id.as_str() && s["state"] == "running"
    });
    c.until("its three lines", || {
        (ok(c.cli(&["session", "logs", &id])).lines().count() == 3).then_some(())
    });
    ok(c.cli(&["session", "cancel", &id]));
    read_until(&watch, "the session printed again once cancelled", |s| {
        s["id"] == id.as_str() && s["state"] == "cancelled"
    });

    assert_eq!(
        ok(c.cli(&["session", "logs", &id, "--tail", "2"])),
        "two\nthree\n"
    );
    assert_eq!(
        ok(c.cli(&["session", "logs", &id, "--tail", "9"])),
        "one\ntwo\nthree\n"
    );

    let alive = c.json(&["agent", "ls", "--state", "alive", "-o", "json"]);
    assert_eq!(alive.as_array().unwrap().len(), 1, "{alive}");
    let lost = c.json(&["agent", "ls", "--state", "lost", "-o", "json"]);
    assert_eq!(lost, serde_json::json!([]));

    for (args, name) in [
        (&["agent", "ls", "--group", "nope"][..], "\"nope\""),
        (&["events", "--group", "nope"][..], "\"nope\""),
        (&["events", "--session", "s-nope"][..], "\"s-nope\""),
        (&["events", "--agent", "a-nope"][..], "\"a-nope\""),
    ] {
        let out = c.cli(args);
        assert!(!out.status.success(), "{args:?} succeeded");
        let err = text(&out.stderr);
        assert!(err.contains(name), "{args:?}: {err}");
    }
}

/// `events --limit N` says more may follow only when there are older events.
#[test]
fn events_say_more_may_follow_only_when_there_is_more() {
    let c = Cluster::start(60);
    ok(c.cli(&["group", "create", "dev"]));
    let _agent = c.agent("a1", "dev", "cpu=4");
    let id = c.submit(&["--", "true"]);
    c.until("the session ends", || {
        (c.listed(&id)["state"] == "succeeded").then_some(())
    });
    let all = c.json(&["events", "-o", "json"]);
    let count = all.as_array().unwrap().len();
    assert!(count >= 2, "{all}");
    let every = c.cli(&["events", "--limit", &count.to_string()]);
    assert!(
        !common::text(&every.stderr).contains("more may follow"),
        "{}",
        common::text(&every.stderr)
    );
    let fewer = c.cli(&["events", "--limit", &(count - 1).to_string()]);
    assert!(
        common::text(&fewer.stderr).contains("(more may follow: --before 2)"),
        "{}",
        common::text(&fewer.stderr)
    );
}
