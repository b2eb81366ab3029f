//! Lifecycles that end, as an admin types them: an agent removed once it runs nothing (with the
//! token its join made), then its group deleted; tokens listed and revoked, a revoked one
//! refused at once; an expired bootstrap token forgotten after the manager's retention.

use crate::common;

use common::{ok, text, Cluster};
use serde_json::Value;

#[test]
fn an_agent_is_removed_once_it_runs_nothing_and_then_its_group_goes() {
    let c = Cluster::start(60);
    ok(c.cli(&["group", "create", "g"]));
    let agent = c.agent("a1", "g", "cpu=2");
    let id = c.submit(&["--group", "g", "--request", "cpu=1", "--", "sleep", "300"]);
    c.until("the session to run", || {
        (c.listed(&id)["state"] == "running").then_some(())
    });
    // The join made the agent a token of its own.
    let tokens = c.json(&["token", "ls", "-o", "json"]);
    let own = |tokens: &Value| {
        tokens
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["role"] == "agent" && t["user"] == "a1")
    };
    assert!(own(&tokens), "{tokens}");

    let refused = c.cli(&["agent", "rm", "a1"]);
    assert!(!refused.status.success());
    let why = text(&refused.stderr);
    assert!(why.contains(&id) && why.contains("runs sessions"), "{why}");
    let refused = c.cli(&["group", "delete", "g"]);
    assert!(!refused.status.success(), "a group in use stays");

    ok(c.cli(&["session", "cancel", &id]));
    drop(agent);
    assert_eq!(ok(c.cli(&["agent", "rm", "a1"])).trim(), "agent a1 removed");
    let agents = c.json(&["agent", "ls", "-o", "json"]);
    assert_eq!(agents, Value::Array(vec![]), "{agents}");
    assert!(
        !own(&c.json(&["token", "ls", "-o", "json"])),
        "its token went with it"
    );
    let again = c.cli(&["agent", "rm", "a1"]);
    assert!(
        text(&again.stderr).contains("not found"),
        "{}",
        text(&again.stderr)
    );
    ok(c.cli(&["group", "delete", "g"]));
}

#[test]
fn a_revoked_token_is_refused_at_once_and_the_last_admin_token_stays() {
    let c = Cluster::start(60);
    let created: Value =
        serde_json::from_str(&ok(c.cli(&["token", "create", "bob", "-o", "json"]))).unwrap();
    let (bob_id, bob) = (
        created["id"].as_str().unwrap(),
        created["token"].as_str().unwrap(),
    );
    ok(c.as_user(bob, &["session", "ls"]));

    let table = ok(c.cli(&["token", "ls"]));
    assert!(
        table.contains("ROLE") && table.contains(bob_id) && table.contains("bob"),
        "{table}"
    );
    assert!(!table.contains(bob), "never a secret");
    // Users do not manage tokens.
    let refused = c.as_user(bob, &["token", "ls"]);
    assert!(
        text(&refused.stderr).contains("admin"),
        "{}",
        text(&refused.stderr)
    );

    assert_eq!(
        ok(c.cli(&["token", "revoke", bob_id])).trim(),
        format!("token {bob_id} revoked")
    );
    let refused = c.as_user(bob, &["session", "ls"]);
    assert!(!refused.status.success(), "a revoked token still works");

    // The only admin token cannot be revoked.
    let tokens = c.json(&["token", "ls", "-o", "json"]);
    let admin = tokens
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["role"] == "admin")
        .unwrap()["id"]
        .as_str()
        .unwrap()
        .to_string();
    let refused = c.cli(&["token", "revoke", &admin]);
    assert!(
        text(&refused.stderr).contains("last admin token"),
        "{}",
        text(&refused.stderr)
    );
    ok(c.cli(&["session", "ls"]));
}

#[test]
fn an_expired_bootstrap_token_is_forgotten_after_the_retention() {
    let c = Cluster::start_with(60, &["--retention-secs", "1"]);
    ok(c.cli(&["group", "create", "g"]));
    ok(c.cli(&["group", "bootstrap-token", "g", "--ttl-secs", "1"]));
    let bootstrap = |tokens: &Value| {
        tokens
            .as_array()
            .is_some_and(|t| t.iter().any(|t| t["role"] == "bootstrap"))
    };
    assert!(bootstrap(&c.json(&["token", "ls", "-o", "json"])));
    // Expired after 1 s, forgotten 1 s later, at the next prune (every second here).
    c.until("the expired token to be forgotten", || {
        (!bootstrap(&c.json(&["token", "ls", "-o", "json"]))).then_some(())
    });
    assert!(
        ok(c.cli(&["token", "ls"])).contains("admin"),
        "the admin token stays"
    );
}
