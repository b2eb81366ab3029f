//! Session arrays from the command line: `session submit --array` prints the array's id, `session
//! ls` folds the array into one line with its counts by state (`--expand` lists its sessions),
//! `session wait` waits for all of them and exits with the highest exit code, `session cancel`
//! cancels them as one, and a bad range is refused before any request, naming it.

use crate::common;

use common::{ok, text, Cluster};
use serde_json::Value;

fn sessions_of(c: &Cluster, array: &str) -> Vec<Value> {
    let list = c.json(&["session", "ls", "--expand", "-o", "json"]);
    list.as_array()
        .unwrap()
        .iter()
        .filter(|s| {
            s["id"]
                .as_str()
                .is_some_and(|id| id.starts_with(&format!("{array}x")))
        })
        .cloned()
        .collect()
}

/// A dashboard page as the admin's browser reads it (the cookie logging in sets).
fn dashboard(c: &Cluster, path: &str) -> String {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", c.port)).unwrap();
    write!(
        stream,
        "GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\nCookie: corral_ui={}\r\n\r\n",
        c.token
    )
    .unwrap();
    let mut page = String::new();
    stream.read_to_string(&mut page).unwrap();
    assert!(
        page.starts_with("HTTP/1.0 200") || page.starts_with("HTTP/1.1 200"),
        "{page}"
    );
    page
}

#[test]
fn an_array_is_submitted_listed_waited_for_and_cancelled_as_one() {
    let c = Cluster::start(60);
    ok(c.cli(&["group", "create", "g"]));
    let _agent = c.agent("a1", "g", "cpu=4");

    let plain = c.submit(&["--group", "g", "--", "true"]);
    let bad = c.cli(&[
        "session", "submit", "--group", "g", "--array", "5-1", "--", "true",
    ]);
    assert!(!bad.status.success());
    let why = text(&bad.stderr);
    assert!(
        why.contains("5-1") && why.contains("below the first"),
        "{why}"
    );

    let submitted = c.cli(&[
        "session",
        "submit",
        "--group",
        "g",
        "--array",
        "0-4%2",
        "--",
        "sh",
        "-c",
        "echo $CORRAL_ARRAY_INDEX; exit $CORRAL_ARRAY_INDEX",
    ]);
    let array = ok(submitted.clone()).trim().to_string();
    assert!(
        text(&submitted.stderr).contains("5 sessions"),
        "{}",
        text(&submitted.stderr)
    );

    let waited = c.cli(&["session", "wait", &array]);
    assert_eq!(waited.status.code(), Some(4), "{}", text(&waited.stderr));

    let listing = ok(c.cli(&["session", "ls"]));
    println!("{listing}");
    let lines: Vec<&str> = listing.lines().filter(|l| l.contains(&array)).collect();
    assert_eq!(lines.len(), 1, "one folded line:\n{listing}");
    assert!(
        lines[0].contains("1 succeeded, 4 failed"),
        "counts by state:\n{listing}"
    );
    assert!(
        listing.contains(&plain),
        "sessions of no array too:\n{listing}"
    );
    let first_row = listing.lines().nth(1).unwrap_or_default();
    assert!(first_row.starts_with(&array), "newest first:\n{listing}");

    let expanded = ok(c.cli(&["session", "ls", "--expand"]));
    println!("{expanded}");
    assert_eq!(
        expanded.lines().filter(|l| l.contains(&array)).count(),
        5,
        "{expanded}"
    );
    let members = sessions_of(&c, &array);
    assert_eq!(members.len(), 5);
    let third = members
        .iter()
        .find(|s| s["array_index"] == 3)
        .expect("index 3");
    let logs = ok(c.cli(&["session", "logs", third["id"].as_str().unwrap()]));
    assert_eq!(logs.trim(), "3");

    // The dashboard shows the array as one row with its counts, linking to its sessions.
    let overview = dashboard(&c, "/ui");
    assert!(
        overview.contains(&format!(r#"data-array="{array}""#)),
        "{overview}"
    );
    assert!(overview.contains("1 succeeded, 4 failed"), "{overview}");
    assert!(
        !overview.contains(&format!(r#"data-session="{array}x"#)),
        "{overview}"
    );
    let of_array = dashboard(&c, &format!("/ui?array={array}"));
    for i in 0..5 {
        let link = format!(r#"href="/ui/sessions/{array}x{i}""#);
        assert!(of_array.contains(&link), "{of_array}");
    }

    // Cancelling a running array cancels every session of it.
    let sleepers = c.submit(&["--group", "g", "--array", "0-3", "--", "sleep", "600"]);
    c.until("the sleepers to run", || {
        let running = sessions_of(&c, &sleepers)
            .iter()
            .filter(|s| s["state"] == "running")
            .count();
        (running == 4).then_some(())
    });
    // The group's page too: one row with its counts, none per session.
    let group_page = dashboard(&c, "/ui/groups/g");
    assert!(
        group_page.contains(&format!(r#"data-array="{sleepers}""#)),
        "{group_page}"
    );
    assert!(group_page.contains("4 running"), "{group_page}");
    assert!(
        !group_page.contains(&format!(r#"data-session="{sleepers}x"#)),
        "{group_page}"
    );
    let cancelled = ok(c.cli(&["session", "cancel", &sleepers]));
    assert!(cancelled.contains("cancelled 4"), "{cancelled}");
    c.until("every sleeper cancelled", || {
        sessions_of(&c, &sleepers)
            .iter()
            .all(|s| s["state"] == "cancelled")
            .then_some(())
    });
    let expanded = ok(c.cli(&["session", "ls", "--expand"]));
    let rows: Vec<&str> = expanded.lines().filter(|l| l.contains(&sleepers)).collect();
    assert_eq!(rows.len(), 4, "{expanded}");
    assert!(rows.iter().all(|r| r.contains("cancelled")), "{expanded}");
    let waited = c.cli(&["session", "wait", &sleepers]);
    assert_eq!(waited.status.code(), Some(1), "cancelled sessions: exit 1");
}

#[test]
fn each_session_of_an_array_gets_its_own_input_file() {
    let c = Cluster::start(60);
    ok(c.cli(&["group", "create", "g"]));
    let _agent = c.agent("a1", "g", "cpu=4");
    let inputs = c.dir.path().join("inputs");
    std::fs::create_dir(&inputs).unwrap();
    for i in [0, 2] {
        std::fs::write(inputs.join(format!("part-{i}.txt")), format!("part {i}\n")).unwrap();
    }
    let template = inputs.join("part-{index}.txt");
    let template = template.to_str().unwrap();

    // Index 1 has no file: refused, naming it, and nothing is submitted.
    let missing = c.cli(&[
        "session", "submit", "--group", "g", "--array", "0-2", "--input", template, "--", "true",
    ]);
    assert!(!missing.status.success());
    let why = text(&missing.stderr);
    assert!(
        why.contains("part-1.txt") && why.contains("index 1"),
        "{why}"
    );
    assert_eq!(
        c.json(&["session", "ls", "--expand", "-o", "json"]),
        serde_json::json!([]),
        "nothing submitted"
    );

    let array = c.submit(&[
        "--group",
        "g",
        "--array",
        "0-2:2",
        "--input",
        template,
        "--",
        "cat",
        "part-{index}.txt",
    ]);
    let waited = c.cli(&["session", "wait", &array]);
    assert_eq!(waited.status.code(), Some(0), "{}", text(&waited.stderr));
    let members = sessions_of(&c, &array);
    assert_eq!(members.len(), 2);
    for member in members {
        let logs = ok(c.cli(&["session", "logs", member["id"].as_str().unwrap()]));
        assert_eq!(logs.trim(), format!("part {}", member["array_index"]));
    }
}
