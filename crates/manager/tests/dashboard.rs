//! The dashboard over HTTP, without a browser (tests/dashboard.rs of corral-cli drives a real
//! one): logging in sets a cookie that only the dashboard reads, pages need it, and a page
//! shows what the API would show the same token, escaped.

mod common;

use common::{hello_in_the_log, scheduled_session, Manager};
use reqwest::header::{CONTENT_SECURITY_POLICY, LOCATION, SET_COOKIE};
use reqwest::{redirect, Client, StatusCode};

fn browser() -> Client {
    Client::builder()
        .redirect(redirect::Policy::none())
        .build()
        .unwrap()
}

async fn page(m: &Manager, path: &str, token: &str) -> (StatusCode, String) {
    let r = browser()
        .get(format!("{}{path}", m.base))
        .header("cookie", format!("corral_ui={token}"))
        .send()
        .await
        .unwrap();
    (r.status(), r.text().await.unwrap())
}

on_both!(
    logging_in_sets_a_cookie_only_the_dashboard_reads,
    |m: Manager| async move {
        let b = browser();
        let r = b.get(format!("{}/ui", m.base)).send().await.unwrap();
        assert_eq!(r.status(), StatusCode::SEE_OTHER);
        assert_eq!(r.headers()[LOCATION], "/ui/login");

        let log_in = |token: &str, origin: &str| {
            b.post(format!("{}/ui/login", m.base))
                .header("content-type", "application/x-www-form-urlencoded")
                .header("origin", origin)
                .body(format!("token={token}"))
                .send()
        };
        let here = m.base.clone();
        let r = log_in("corral_nope", &here).await.unwrap();
        assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
        assert!(r.text().await.unwrap().contains("not valid"));
        let r = log_in(&m.admin, "https://elsewhere.example").await.unwrap();
        assert_eq!(
            r.status(),
            StatusCode::FORBIDDEN,
            "a form from another site"
        );
        assert!(r.headers().get(SET_COOKIE).is_none());

        let r = log_in(&m.admin, &here).await.unwrap();
        assert_eq!(r.status(), StatusCode::SEE_OTHER);
        let cookie = r.headers()[SET_COOKIE].to_str().unwrap().to_string();
        for attribute in ["HttpOnly", "SameSite=Strict", "Path=/ui"] {
            assert!(cookie.contains(attribute), "{cookie}");
        }
        assert!(
            !cookie.contains("Secure"),
            "no Secure over plain HTTP: {cookie}"
        );

        // The cookie opens the pages, never the API.
        let (status, html) = page(&m, "/ui", &m.admin).await;
        assert_eq!(status, StatusCode::OK);
        assert!(html.contains("Scaling groups"), "{html}");
        let r = b
            .get(format!("{}/api/v1/groups", m.base))
            .header("cookie", format!("corral_ui={}", m.admin))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::UNAUTHORIZED);

        // A revoked token's cookie sends the browser back to log in, clearing it.
        let user = m.user_token("ann").await;
        assert_eq!(page(&m, "/ui", &user).await.0, StatusCode::OK);
        let tokens = m.get("/api/v1/tokens").await.body;
        let id = tokens
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["user"] == "ann")
            .unwrap()["id"]
            .as_str()
            .unwrap()
            .to_string();
        let r = m
            .call(
                reqwest::Method::DELETE,
                &format!("/api/v1/tokens/{id}"),
                Some(&m.admin),
                None,
            )
            .await;
        assert!(r.status.is_success(), "{}", r.body);
        let r = b
            .get(format!("{}/ui", m.base))
            .header("cookie", format!("corral_ui={user}"))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::SEE_OTHER);
        assert!(r.headers()[SET_COOKIE]
            .to_str()
            .unwrap()
            .contains("Max-Age=0"));
    }
);

on_both!(
    pages_show_what_the_token_may_see_escaped,
    |m: Manager| async move {
        let id = scheduled_session(&m).await;
        hello_in_the_log(&m, &id).await;
        let r = m
            .post(
                "/api/v1/sessions",
                r#"{"group": "g", "command": ["echo", "<script>alert(1)</script>"], "request": "cpu=1"}"#,
            )
            .await;
        assert_eq!(r.status, StatusCode::CREATED, "{}", r.body);
        let tricky = r.body["id"].as_str().unwrap().to_string();

        let (status, html) = page(&m, "/ui/groups/g", &m.admin).await;
        assert_eq!(status, StatusCode::OK);
        assert!(html.contains(r#"data-agent="a1""#), "{html}");
        assert!(
            html.contains(&format!(r#"href="/ui/sessions/{id}""#)),
            "{html}"
        );
        assert!(html.contains(r#"<svg id="timeline""#), "{html}");
        assert!(
            html.contains(r#"data-kind="registered""#),
            "the join is on the timeline: {html}"
        );

        let r = browser()
            .get(format!("{}/ui/sessions/{tricky}", m.base))
            .header("cookie", format!("corral_ui={}", m.admin))
            .send()
            .await
            .unwrap();
        let csp = r.headers()[CONTENT_SECURITY_POLICY]
            .to_str()
            .unwrap()
            .to_string();
        assert!(csp.contains("script-src 'self'"), "{csp}");
        let html = r.text().await.unwrap();
        assert!(
            html.contains("&lt;script&gt;alert(1)&lt;/script&gt;"),
            "{html}"
        );
        assert!(!html.contains("<script>alert"), "{html}");

        let (status, html) = page(&m, &format!("/ui/sessions/{id}"), &m.admin).await;
        assert_eq!(status, StatusCode::OK);
        assert!(
            html.contains("hello\n</pre>"),
            "the log is on the page: {html}"
        );
        let r = browser()
            .get(format!("{}/ui/sessions/{id}/logs/stdout?offset=2", m.base))
            .header("cookie", format!("corral_ui={}", m.admin))
            .send()
            .await
            .unwrap();
        assert_eq!(r.headers()["x-corral-ended"], "false");
        assert_eq!(r.text().await.unwrap(), "llo\n");

        // Another user: not their session, not in their lists; a missing group is a 404 page.
        let bob = m.user_token("bob").await;
        let (status, html) = page(&m, &format!("/ui/sessions/{id}"), &bob).await;
        assert_eq!(status, StatusCode::FORBIDDEN);
        assert!(
            html.contains("another user") && !html.contains("hello"),
            "{html}"
        );
        let (status, _) = page(&m, &format!("/ui/sessions/{id}/logs/stdout"), &bob).await;
        assert_eq!(status, StatusCode::FORBIDDEN);
        // An output file: its owner's to download, not bob's.
        let r = m
            .client
            .put(format!(
                "{}/api/v1/agents/a1/sessions/{id}/outputs/out.txt",
                m.base
            ))
            .bearer_auth(&m.admin)
            .body("result of the run\n")
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::NO_CONTENT);
        let (status, body) =
            page(&m, &format!("/ui/sessions/{id}/outputs/out.txt"), &m.admin).await;
        assert_eq!(
            (status, body.as_str()),
            (StatusCode::OK, "result of the run\n")
        );
        let (status, body) = page(&m, &format!("/ui/sessions/{id}/outputs/out.txt"), &bob).await;
        assert_eq!(status, StatusCode::FORBIDDEN);
        assert!(!body.contains("result of the run"), "{body}");
        let (status, html) = page(&m, "/ui/groups/g", &bob).await;
        assert_eq!(status, StatusCode::OK);
        assert!(!html.contains(&id) && !html.contains(&tricky), "{html}");
        let (status, _) = page(&m, "/ui", &bob).await;
        assert_eq!(status, StatusCode::OK);
        let (status, html) = page(&m, "/ui/groups/nope", &bob).await;
        assert_eq!(status, StatusCode::NOT_FOUND);
        assert!(html.contains("no group") || html.contains("nope"), "{html}");
    }
);
