//! Test harness: every test body runs on SQLite (a temporary directory) and, when
//! `CORRAL_TEST_DATABASE_URL` names a PostgreSQL server (an admin URL such as
//! `postgres://postgres@127.0.0.1:5432/postgres`), on a fresh database of its own there, named
//! after the test, so tests run in parallel.

#![allow(dead_code)]

use std::collections::BTreeMap;

use sqlx::{AnyConnection, Connection, Executor};

use corral_core::*;
use corral_store::Store;

/// A store under test, with what it takes to reopen it or reach its tables directly.
pub struct Db {
    pub store: Store,
    pub url: String,
    _dir: Option<tempfile::TempDir>,
}

impl Db {
    pub async fn sqlite() -> Db {
        let dir = tempfile::tempdir().expect("temp dir");
        let store = Store::open_sqlite_dir(dir.path())
            .await
            .expect("open sqlite store");
        let url = format!("sqlite://{}", dir.path().join("corral.db").display());
        Db {
            store,
            url,
            _dir: Some(dir),
        }
    }

    /// `None` when no PostgreSQL server is configured: the test is skipped, saying so (and
    /// fails instead under `CI=true`).
    pub async fn postgres(test: &str) -> Option<Db> {
        let admin = corral_testkit::postgres_admin_url()?;
        let url = corral_store::testing::fresh_database(&admin, test)
            .await
            .expect("create test database");
        let store = Store::open(&url).await.expect("open postgres store");
        Some(Db {
            store,
            url,
            _dir: None,
        })
    }

    /// Closes the store and opens it again on the same database.
    pub async fn reopen(&mut self) {
        self.store.close().await;
        self.store = Store::open(&self.url).await.expect("reopen store");
    }

    /// Runs SQL on the database directly, around the store (to corrupt a row, say).
    pub async fn exec(&self, sql: &'static str) {
        let mut conn = AnyConnection::connect(&self.url).await.expect("connect");
        conn.execute(sql).await.expect("exec");
        conn.close().await.ok();
    }
}

/// Defines `mod $name { sqlite; postgres }`: one body, run on each database.
#[macro_export]
macro_rules! on_both {
    ($name:ident, |$db:ident| $body:block) => {
        mod $name {
            #[allow(unused_imports)]
            use super::*;

            #[tokio::test]
            async fn sqlite() {
                #[allow(unused_mut)]
                let mut $db = common::Db::sqlite().await;
                $body
            }

            #[tokio::test]
            async fn postgres() {
                #[allow(unused_mut)]
                let Some(mut $db) = common::Db::postgres(stringify!($name)).await
                else {
                    return;
                };
                $body
            }
        }
    };
}

// ---- fixtures ----

pub fn slots(text: &str) -> Slots {
    text.parse().expect("slots")
}

pub fn t(ms: i64) -> Timestamp {
    Timestamp(ms)
}

pub fn group(name: &str) -> ScalingGroup {
    ScalingGroup {
        name: name.to_string(),
        policy: ScalingPolicy {
            kind: PolicyKind::Demand,
            max_nodes: 10,
            idle_wait_secs: 60,
            cooldown_secs: 30,
            ..ScalingPolicy::default()
        },
        scheduler: SchedulerConfig::default(),
        templates: vec![InstanceTemplate {
            name: "small".into(),
            slots: slots("cpu=4,mem=8GiB"),
            price_per_hour: 0.1,
            max: 5,
            labels: BTreeMap::new(),
            devices: Vec::new(),
        }],
    }
}

pub fn agent(id: &str, group: &str, capacity: &str) -> Agent {
    Agent {
        id: AgentId(id.into()),
        group: group.into(),
        template: Some("small".into()),
        capacity: slots(capacity),
        allocated: Slots::new(),
        state: AgentState::Alive,
        labels: BTreeMap::from([("zone".to_string(), "a".to_string())]),
        external: false,
        drained_by_hand: false,
        version: None,
        platform: None,
        updating: None,
        idle_since: None,
        devices: Vec::new(),
    }
}

pub fn session(id: &str, group: &str, owner: &str, request: &str, at: i64) -> Session {
    Session {
        id: SessionId(id.into()),
        group: group.into(),
        owner: owner.into(),
        priority: 0,
        request: slots(request),
        image: None,
        kind: SessionType::Batch,
        submitted_at: Timestamp(at),
        state: SessionState::Pending,
        agent: None,
        blocked_passes: 0,
        constraints: Vec::new(),
        devices: Vec::new(),
        array: None,
    }
}

pub fn spec() -> serde_json::Value {
    serde_json::json!({"command": ["sleep", "1"], "env": {"A": "1"}})
}

/// Ids of the sessions, in order.
pub fn ids(records: &[corral_store::SessionRecord]) -> Vec<String> {
    records.iter().map(|r| r.session.id.0.clone()).collect()
}
