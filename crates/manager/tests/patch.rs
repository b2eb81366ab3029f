//! `PATCH /api/v1/groups/{name}`: a JSON merge patch (RFC 7396) of a group's settings changes
//! only what it names, null puts a field back to its default, and a result PUT would refuse is
//! refused the same way, with nothing changed.

mod common;

use common::{Manager, Reply};
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

const MERGE_PATCH: &str = "application/merge-patch+json";

/// A manager with group `g`: every kind of setting away from its default (but the policy's
/// kind: a fixed group launches nothing).
async fn manager() -> Manager {
    let m = Manager::start(None).await;
    let g = json!({
        "name": "g",
        "policy": {"min_nodes": 1, "max_nodes": 5, "headroom": "cpu=2,mem=4GiB",
                   "cooldown_secs": 5, "termination": {"mode": "idle", "idle_timeout_secs": 60,
                                                       "max_lifetime_secs": 3600}},
        "scheduler": {"sequencer": "priority", "placement": "spread"},
        "templates": [{"name": "small", "slots": "cpu=4,mem=8GiB", "max": 3}],
        "provider": {"name": "process", "options": {"extra_args": ["--verbose"]},
                     "launch": {"budget": 7}},
    });
    let r = m.post("/api/v1/groups", &g.to_string()).await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.body);
    m
}

/// Sends `body` as a merge patch of group `name` with `token`.
async fn patch(m: &Manager, name: &str, token: &str, body: &Value) -> Reply {
    let r = m
        .client
        .patch(format!("{}/api/v1/groups/{name}", m.base))
        .bearer_auth(token)
        .header("content-type", MERGE_PATCH)
        .body(body.to_string())
        .send()
        .await
        .unwrap();
    let status = r.status();
    Reply {
        status,
        body: r.json().await.unwrap(),
    }
}

async fn group(m: &Manager, name: &str) -> Value {
    let r = m.get(&format!("/api/v1/groups/{name}")).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    r.body
}

#[tokio::test]
async fn a_patch_changes_only_what_it_names() {
    let m = manager().await;
    let before = group(&m, "g").await;
    let r = patch(
        &m,
        "g",
        &m.admin,
        &json!({"policy": {"max_nodes": 8, "headroom": {"gpu": 1},
                           "termination": {"idle_timeout_secs": 120}},
                "scheduler": {"placement": "binpack"},
                "provider": {"options": {"runtime": "process"}}}),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);

    let mut want = before;
    want["policy"]["max_nodes"] = json!(8);
    want["policy"]["headroom"]["gpu"] = json!("1");
    want["policy"]["termination"]["idle_timeout_secs"] = json!(120);
    want["scheduler"]["placement"] = json!("binpack");
    want["provider"]["options"]["runtime"] = json!("process");
    assert_eq!(r.body, want, "the answer is the updated group");
    assert_eq!(group(&m, "g").await, want);

    // The group's own name may be given; an empty patch changes nothing.
    for body in [json!({"name": "g"}), json!({})] {
        let r = patch(&m, "g", &m.admin, &body).await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.body);
        assert_eq!(r.body, want);
    }
}

#[tokio::test]
async fn null_puts_a_field_back_to_its_default() {
    let m = manager().await;
    let r = m.post("/api/v1/groups", r#"{"name": "defaults"}"#).await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.body);
    let defaults = r.body;

    let r = patch(
        &m,
        "g",
        &m.admin,
        &json!({"policy": {"cooldown_secs": null, "headroom": {"mem": null, "gpu": null},
                           "termination": {"max_lifetime_secs": null}},
                "scheduler": null,
                "provider": {"launch": {"budget": null}}}),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    let g = group(&m, "g").await;
    assert_eq!(g, r.body);
    let policy = &g["policy"];
    assert_eq!(policy["cooldown_secs"], defaults["policy"]["cooldown_secs"]);
    assert_eq!(policy["headroom"], json!({"cpu": "2"}));
    assert_eq!(policy["termination"]["max_lifetime_secs"], Value::Null);
    assert_eq!(policy["termination"]["idle_timeout_secs"], 60);
    assert_eq!(policy["max_nodes"], 5);
    assert_eq!(g["scheduler"], defaults["scheduler"]);
    assert_eq!(
        g["provider"]["launch"]["budget"],
        defaults["provider"]["launch"]["budget"]
    );
    assert_eq!(
        g["provider"]["options"],
        json!({"extra_args": ["--verbose"]})
    );

    // A null policy is the default policy, a null provider the default provider (static).
    let r = patch(
        &m,
        "g",
        &m.admin,
        &json!({"policy": null, "provider": null}),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    assert_eq!(r.body["policy"], defaults["policy"]);
    assert_eq!(r.body["provider"], defaults["provider"]);
    assert_eq!(r.body["templates"][0]["name"], "small");
}

#[tokio::test]
async fn an_invalid_result_is_refused_naming_the_field_and_changes_nothing() {
    let m = manager().await;
    let before = group(&m, "g").await;
    let cases = [
        // PUT's own checks, on the result: min_nodes above the stored max_nodes.
        (json!({"policy": {"min_nodes": 9}}), "min_nodes"),
        (json!({"policy": {"max_nodes": 0}}), "min_nodes"),
        (json!({"policy": {"kind": "greedy"}}), "policy.kind"),
        (json!({"policy": {"colour": "red"}}), "policy.colour"),
        // A field no setting has, even set to null (which would remove nothing).
        (json!({"policy": {"colour": null}}), "policy.colour"),
        (json!({"colour": null}), "colour"),
        (
            json!({"scheduler": {"termination": null}}),
            "scheduler.termination",
        ),
        (
            json!({"provider": {"launch": {"retries": null}}}),
            "provider.launch.retries",
        ),
        (
            json!({"policy": {"headroom": {"GPU!": null}}}),
            "policy.headroom.GPU!",
        ),
        (
            json!({"templates": [{"name": "a", "slots": "cpu=1"}, {"name": "a", "slots": "cpu=2"}]}),
            "template",
        ),
        (
            json!({"provider": {"options": {"colour": "red"}}}),
            "provider.options.colour",
        ),
        (json!({"provider": {"name": null}}), "name"),
        // Groups cannot be renamed, nor lose their name.
        (json!({"name": "h"}), "name"),
        (json!({"name": null}), "name"),
    ];
    for (body, field) in cases {
        let r = patch(&m, "g", &m.admin, &body).await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{body}: {}", r.body);
        let message = r.body["error"]["message"].as_str().unwrap_or_default();
        assert!(
            message.contains(field),
            "{body}: {message} names no {field}"
        );
    }
    let r = patch(&m, "g", &m.admin, &json!({"policy": {"colour": null}})).await;
    assert_eq!(r.body["error"]["code"], "invalid_body");
    assert_eq!(r.body["error"]["details"]["field"], "policy.colour");
    assert!(r.body["error"]["message"]
        .as_str()
        .unwrap_or_default()
        .starts_with("policy.colour: unknown field `colour`"));

    // A body that is not a merge patch.
    for body in ["[]", "null", "3", "{"] {
        let r = m
            .call(
                Method::PATCH,
                "/api/v1/groups/g",
                Some(&m.admin),
                Some(body),
            )
            .await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{body}: {}", r.body);
    }
    let r = m
        .client
        .patch(format!("{}/api/v1/groups/g", m.base))
        .bearer_auth(&m.admin)
        .header("content-type", "application/json-patch+json")
        .body(r#"[{"op": "replace", "path": "/policy/max_nodes", "value": 9}]"#)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::UNSUPPORTED_MEDIA_TYPE);
    assert_eq!(r.headers()["accept-patch"], MERGE_PATCH);

    assert_eq!(group(&m, "g").await, before, "nothing changed");
}

#[tokio::test]
async fn only_an_admin_patches_and_only_a_group_that_exists() {
    let m = manager().await;
    let before = group(&m, "g").await;
    let alice = m.user_token("alice").await;
    let body = json!({"policy": {"max_nodes": 9}});
    let r = patch(&m, "g", &alice, &body).await;
    assert_eq!(r.status, StatusCode::FORBIDDEN, "{}", r.body);
    assert_eq!(group(&m, "g").await, before);

    let r = patch(&m, "nosuch", &m.admin, &body).await;
    assert_eq!(r.status, StatusCode::NOT_FOUND, "{}", r.body);
    assert!(
        r.body["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("nosuch"),
        "{}",
        r.body
    );

    // application/json is taken too.
    let r = m
        .call(
            Method::PATCH,
            "/api/v1/groups/g",
            Some(&m.admin),
            Some(&body.to_string()),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    assert_eq!(r.body["policy"]["max_nodes"], 9);
}
