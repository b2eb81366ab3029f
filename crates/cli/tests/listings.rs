//! Listings people can use: `session ls` newest first, oldest first on request, active sessions
//! first with `--active`, with each session's age, run time, agent and command; an unknown
//! group is an error naming it, not an empty list.

mod common;

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
fn sessions_are_listed_newest_first_and_active_first_on_request() {
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
        [first.as_str(), third.as_str(), second.as_str()],
        "running first"
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
