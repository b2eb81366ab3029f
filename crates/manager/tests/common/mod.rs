//! A real manager on a loopback port, on SQLite in a temporary directory or (with
//! `CORRAL_TEST_DATABASE_URL`) on a fresh PostgreSQL database of its own.

#![allow(dead_code)]

use std::time::Duration;

use corral_manager::{serve_on, start, Config};
use reqwest::{Method, StatusCode};
use serde_json::Value;

pub struct Manager {
    pub base: String,
    pub admin: String,
    pub client: reqwest::Client,
    pub config: Config,
    /// The manager's store, for what no API does (standing in for a full disk).
    pub store: corral_store::Store,
    server: ServerTask,
    _dir: tempfile::TempDir,
}

pub struct Reply {
    pub status: StatusCode,
    pub body: Value,
}

impl Manager {
    /// A manager on SQLite, or on PostgreSQL when `pg` names a database URL.
    pub async fn start(database_url: Option<String>) -> Manager {
        let dir = tempfile::tempdir().unwrap();
        let config = Config {
            data_dir: dir.path().join("data"),
            listen: "127.0.0.1:0".parse().unwrap(),
            database_url,
            tick: Duration::from_millis(200),
            min_pass_interval: Duration::from_millis(5),
            ..Config::default()
        };
        Self::start_with(config, dir).await
    }

    async fn start_with(config: Config, dir: tempfile::TempDir) -> Manager {
        let app = start(&config).await.expect("manager starts");
        let store = app.store.clone();
        let listener = tokio::net::TcpListener::bind(config.listen).await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let server = tokio::spawn(async move {
            serve_on(listener, app, std::future::pending())
                .await
                .unwrap();
        });
        let admin = std::fs::read_to_string(config.data_dir.join("admin.token"))
            .unwrap()
            .trim()
            .to_string();
        // reqwest has no crypto provider of its own (it is built for ring, see corral_agent::http).
        let _ = tokio_rustls::rustls::crypto::ring::default_provider().install_default();
        Manager {
            base,
            admin,
            client: reqwest::Client::new(),
            config,
            store,
            server: ServerTask(server),
            _dir: dir,
        }
    }

    /// Stops this manager and starts another on the same data directory and database.
    pub async fn restart(self) -> Manager {
        drop(self.server);
        Self::start_with(self.config, self._dir).await
    }

    pub async fn call(
        &self,
        method: Method,
        path: &str,
        token: Option<&str>,
        body: Option<&str>,
    ) -> Reply {
        let mut req = self.client.request(method, format!("{}{path}", self.base));
        if let Some(t) = token {
            req = req.bearer_auth(t);
        }
        if let Some(b) = body {
            req = req
                .header("content-type", "application/json")
                .body(b.to_string());
        }
        let resp = req.send().await.unwrap();
        let status = resp.status();
        let text = resp.text().await.unwrap();
        let body = if text.is_empty() {
            Value::Null
        } else {
            serde_json::from_str(&text).unwrap_or(Value::String(text))
        };
        Reply { status, body }
    }

    pub async fn get(&self, path: &str) -> Reply {
        self.call(Method::GET, path, Some(&self.admin.clone()), None)
            .await
    }

    pub async fn post(&self, path: &str, body: &str) -> Reply {
        self.call(Method::POST, path, Some(&self.admin.clone()), Some(body))
            .await
    }

    pub async fn put(&self, path: &str, body: &str) -> Reply {
        self.call(Method::PUT, path, Some(&self.admin.clone()), Some(body))
            .await
    }

    /// Waits (10 s at most) until the session `id` is as `done` wants it; what it read.
    pub async fn wait_session(&self, id: &str, done: impl Fn(&Value) -> bool) -> Value {
        let path = format!("/api/v1/sessions/{id}");
        let (path, done) = (&path, &done);
        let what = format!("session {id} to reach the expected state");
        corral_testkit::eventually_async(&what, Duration::from_secs(10), move || async move {
            let body = self.get(path).await.body;
            if done(&body) {
                Ok(body)
            } else {
                Err(body)
            }
        })
        .await
    }

    /// A user token for `user`.
    pub async fn user_token(&self, user: &str) -> String {
        let r = self
            .post("/api/v1/tokens", &format!(r#"{{"user": "{user}"}}"#))
            .await;
        assert_eq!(r.status, StatusCode::CREATED, "{}", r.body);
        r.body["token"].as_str().unwrap().to_string()
    }
}

/// A group `g` with a hand-registered agent `a1` (a test may speak for it, with the admin's
/// token) and one session scheduled on it; the session's id.
pub async fn scheduled_session(m: &Manager) -> String {
    let r = m
        .post(
            "/api/v1/groups",
            r#"{"name": "g", "templates": [{"name": "small", "slots": "cpu=2"}]}"#,
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.body);
    let r = m
        .post(
            "/api/v1/agents",
            r#"{"id": "a1", "group": "g", "capacity": "cpu=4"}"#,
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.body);
    let r = m
        .post(
            "/api/v1/sessions",
            r#"{"group": "g", "command": ["true"], "request": "cpu=1"}"#,
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.body);
    let id = r.body["id"].as_str().unwrap().to_string();
    m.wait_session(&id, |s| s["state"] == "scheduled").await;
    id
}

/// Agent `a1` (as the admin) writes "hello\n" at the start of session `id`'s stdout.
pub async fn hello_in_the_log(m: &Manager, id: &str) {
    let r = m
        .client
        .post(format!(
            "{}/api/v1/agents/a1/sessions/{id}/logs/stdout?offset=0",
            m.base
        ))
        .bearer_auth(&m.admin)
        .body("hello\n")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::NO_CONTENT);
}

/// Stops the HTTP server when the test lets go of it.
struct ServerTask(tokio::task::JoinHandle<()>);

impl Drop for ServerTask {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// A fresh PostgreSQL database named after the test, when `CORRAL_TEST_DATABASE_URL` is set;
/// otherwise `None`, and the test is skipped, saying so (it fails instead under `CI=true`).
pub async fn postgres(test: &str) -> Option<String> {
    let admin = corral_testkit::postgres_admin_url()?;
    Some(
        corral_store::testing::fresh_database(&admin, &format!("manager_{test}"))
            .await
            .expect("fresh test database"),
    )
}

/// Runs a test body on SQLite and, where configured, on PostgreSQL.
#[macro_export]
macro_rules! on_both {
    ($name:ident, $body:expr) => {
        mod $name {
            use super::*;
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn sqlite() {
                let m = Manager::start(None).await;
                ($body)(m).await;
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn postgres() {
                let Some(url) = common::postgres(stringify!($name)).await else {
                    return;
                };
                let m = Manager::start(Some(url)).await;
                ($body)(m).await;
            }
        }
    };
}
