//! `corral plan` as a user runs it: the documented example, JSON output, and bad input.

use std::io::Write;
use std::process::{Command, Output, Stdio};

use serde_json::Value;

fn corral(args: &[&str], stdin: &str) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_corral"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("corral runs");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

fn example() -> String {
    std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../examples/plan.json"
    ))
    .unwrap()
}

#[test]
fn the_documented_example_plans_as_the_docs_say() {
    let out = corral(&["plan", "--output", "json", "-"], &example());
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let summary = &v["summary"];
    assert_eq!(summary["nodes"], serde_json::json!({"g4": 1}));
    assert_eq!(summary["node_count"], 1);
    assert_eq!(summary["cost_per_hour"], 3.06);
    assert_eq!(summary["lower_bound_cost"], 3.06);
    assert_eq!(summary["rejected"], 1);
    assert_eq!(summary["unplaced"], 1);
    assert_eq!(summary["placed"], 3);
    let rejection = &v["decisions"]["rejections"][0];
    assert_eq!(rejection["session"], "s5");
    assert_eq!(
        rejection["reason"],
        "gpu=8 requested; the largest agent or template offers gpu=4"
    );
    assert_eq!(
        v["decisions"]["waiting"][0]["reason"],
        "waits for a new g4 instance (launched in this pass)"
    );
}

#[test]
fn the_table_names_what_was_decided() {
    let out = corral(&["plan", "-"], &example());
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.starts_with("launch    1 x g4 (1 nodes, 3.060/h; lower bound 3.060/h)\n"),
        "{text}"
    );
    assert!(
        text.contains("s5       gpu=8 requested; the largest agent or template offers gpu=4"),
        "{text}"
    );
}

#[test]
fn bad_problems_are_refused_naming_what_is_wrong() {
    let cases = [
        (
            r#"{"sessions": [{"id": "s1", "request": {"cpu": -1}}]}"#,
            "cpu: negative amount",
        ),
        (
            r#"{"sessions": [{"id": "s1", "request": {"cpu": "2XB"}}]}"#,
            "unknown unit \"XB\"",
        ),
        (r#"{"group": {"polcy": "demand"}}"#, "unknown field `polcy`"),
        (
            r#"{"sessions": [{"id": "s1", "request": "cpu=1"}, {"id": "s1", "request": "cpu=1"}]}"#,
            "session \"s1\" appears twice",
        ),
        (
            r#"{"agents": [{"id": "a1", "template": "nope", "capacity": "cpu=1"}]}"#,
            "agent \"a1\" names template \"nope\"",
        ),
        (
            r#"{"group": {"min_nodes": 5, "max_nodes": 2}}"#,
            "min_nodes (5) is above max_nodes (2)",
        ),
        (
            r#"{"templates": [{"name": "t", "slots": "cpu=1", "price": -1}]}"#,
            "template \"t\": price must be",
        ),
        ("{", "EOF while parsing"),
    ];
    for (input, expected) in cases {
        let out = corral(&["plan", "-"], input);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{input} was accepted");
        assert!(
            err.contains(expected),
            "{input}: expected {expected:?} in {err:?}"
        );
        assert!(out.stdout.is_empty(), "{input}: printed a plan anyway");
    }
}
