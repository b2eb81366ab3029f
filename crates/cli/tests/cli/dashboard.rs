//! The dashboard in a real browser: headless Chromium (Debian's package) driven by Selenium
//! (`tests/browser/dashboard.py`) logs in to a running `corral server` with agents, sessions and
//! scaling events, checks what the pages show, follows a session's log as it grows, and checks
//! that one user cannot see another's session. Screenshots are kept in
//! `target/tmp/dashboard/` as the test's artifacts.
use crate::common;

use common::*;

#[test]
fn the_dashboard_shows_groups_agents_queue_timeline_and_logs_in_a_browser() {
    if corral_testkit::require_ok(
        "a browser (apt-get install chromium chromium-driver; pip install selenium)",
        browser_available(),
    )
    .is_none()
    {
        return;
    }
    let c = Cluster::start(60);
    // A fixed group with one agent: alice's session runs on it, bob's waits for room.
    ok(c.cli(&["group", "create", "web"]));
    let _a1 = c.agent("a1", "web", "cpu=2");
    // A demand group whose idle agent is marked and let go: scaling events on its timeline.
    ok(c.cli(&[
        "group",
        "create",
        "burst",
        "--policy",
        "demand",
        "--idle-wait-secs",
        "0",
    ]));
    ok(c.cli(&[
        "agent",
        "register",
        "spare",
        "--group",
        "burst",
        "--capacity",
        "cpu=1",
    ]));
    let alice = ok(c.cli(&["token", "create", "alice"])).trim().to_string();
    let bob = ok(c.cli(&["token", "create", "bob"])).trim().to_string();
    let submit = |token: &str, args: &[&str]| {
        let out = c.as_user(
            token,
            &[&["session", "submit", "--group", "web"], args].concat(),
        );
        ok(out).trim().to_string()
    };
    // A second line 4 s later: the browser sees it arrive while the page is open.
    let alice_session = submit(
        &alice,
        &[
            "--request",
            "cpu=2",
            "--",
            "sh",
            "-c",
            "echo hello from alice; sleep 4; echo second line; sleep 60",
        ],
    );
    c.until("alice's session runs", || {
        (c.listed(&alice_session)["state"] == "running").then_some(())
    });
    let bob_session = submit(&bob, &["--request", "cpu=2", "--", "true"]);
    c.until("bob's session waits with a reason", || {
        c.listed(&bob_session)["wait_reason"]
            .is_string()
            .then_some(())
    });
    c.until("the idle agent of burst is let go", || {
        let events = c.json(&["events", "--group", "burst", "-o", "json"]);
        events
            .as_array()
            .is_some_and(|e| e.iter().any(|e| e["kind"] == "mark"))
            .then_some(())
    });

    let url = c.url();
    let (report, artifacts) = run_browser_script(
        "dashboard",
        &[
            ("DASHBOARD_URL", &url),
            ("ADMIN_TOKEN", &c.token),
            ("ALICE_TOKEN", &alice),
            ("BOB_TOKEN", &bob),
            ("ALICE_SESSION", &alice_session),
            ("BOB_SESSION", &bob_session),
        ],
    );
    for step in [
        "logged in as admin",
        "group page",
        "timeline",
        "session log followed",
        "bob is refused alice's session",
    ] {
        assert!(report.contains(step), "{step} missing from: {report}");
    }
    assert!(artifacts.join("group-web.png").exists());
}
