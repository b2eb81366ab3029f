//! The managers sharing one database: each says that it is at work (groups are spread over
//! those seen lately), and, on PostgreSQL, they tell each other what happened (NOTIFY): to a
//! group's owner, that something happened to the group; to wherever an agent's sync waits,
//! that something was placed on it.

use corral_core::Timestamp;
use sqlx::postgres::PgListener;

use crate::error::Result;
use crate::{Backend, Store};

/// The channel the managers' wakes go out on.
const WAKE_CHANNEL: &str = "corral_wake";

impl Store {
    /// Manager `id` is at work at `now`; managers not seen since `forget_before` are forgotten.
    pub async fn manager_seen(
        &self,
        id: &str,
        now: Timestamp,
        forget_before: Timestamp,
    ) -> Result<()> {
        let mut tx = self.write_tx().await?;
        sqlx::query(
            "INSERT INTO managers (id, seen_at) VALUES ($1, $2) \
             ON CONFLICT (id) DO UPDATE SET seen_at = excluded.seen_at",
        )
        .bind(id)
        .bind(now.0)
        .execute(&mut *tx)
        .await?;
        sqlx::query("DELETE FROM managers WHERE seen_at < $1")
            .bind(forget_before.0)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(())
    }

    /// The time by the database's clock on PostgreSQL, so that managers on several hosts judge
    /// leases and each other by one clock, whatever their own say; `local` on SQLite (one
    /// manager, one clock).
    pub async fn clock(&self, local: Timestamp) -> Result<Timestamp> {
        if self.backend != Backend::Postgres {
            return Ok(local);
        }
        let ms: i64 = sqlx::query_scalar(
            "SELECT CAST(EXTRACT(EPOCH FROM clock_timestamp()) * 1000 AS BIGINT)",
        )
        .fetch_one(&self.read)
        .await?;
        Ok(Timestamp(ms))
    }

    /// The managers seen at or after `since`, by id.
    pub async fn live_managers(&self, since: Timestamp) -> Result<Vec<String>> {
        Ok(
            sqlx::query_scalar("SELECT id FROM managers WHERE seen_at >= $1 ORDER BY id")
                .bind(since.0)
                .fetch_all(&self.read)
                .await?,
        )
    }

    /// Manager `id` stops: it is no longer counted on.
    pub async fn manager_stopped(&self, id: &str) -> Result<()> {
        let mut tx = self.write_tx().await?;
        sqlx::query("DELETE FROM managers WHERE id = $1")
            .bind(id)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(())
    }

    /// Tells the other managers (PostgreSQL's NOTIFY; nothing on SQLite, where one manager
    /// does everything): a group's owner runs a pass, agents' waiting syncs answer.
    pub async fn notify(&self, wake: &Wake) -> Result<()> {
        if self.backend != Backend::Postgres {
            return Ok(());
        }
        for payload in wake.payloads() {
            sqlx::query("SELECT pg_notify($1, $2)")
                .bind(WAKE_CHANNEL)
                .bind(payload)
                .execute(&self.write)
                .await?;
        }
        Ok(())
    }

    /// The wakes other managers send (PostgreSQL), on a connection of its own; `None` on
    /// SQLite.
    pub async fn listen_wakes(&self) -> Result<Option<Wakes>> {
        let Some(url) = &self.url else {
            return Ok(None);
        };
        let mut listener = PgListener::connect(url).await?;
        listener.listen(WAKE_CHANNEL).await?;
        Ok(Some(Wakes(listener)))
    }
}

/// What one manager tells the others.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Wake {
    /// Something happened to the group: its owner runs a pass.
    Group(String),
    /// Something was placed on these agents: a sync of theirs waiting on another manager
    /// answers now rather than at its heartbeat.
    Agents(Vec<String>),
    /// These tokens (their hashes) were revoked: no manager takes them from its cache any more.
    Tokens(Vec<String>),
}

/// PostgreSQL's limit on a notification's payload is 8,000 bytes.
const MAX_PAYLOAD: usize = 7_000;

impl Wake {
    /// As notifications: a kind, then names, one a line (agents split over several).
    fn payloads(&self) -> Vec<String> {
        match self {
            Wake::Group(group) => vec![format!("group\n{group}")],
            Wake::Agents(agents) => split("agents", agents),
            Wake::Tokens(hashes) => split("tokens", hashes),
        }
    }

    fn parse(payload: &str) -> Option<Wake> {
        let mut lines = payload.lines();
        match lines.next()? {
            "group" => Some(Wake::Group(lines.next()?.to_string())),
            "agents" => Some(Wake::Agents(lines.map(String::from).collect())),
            "tokens" => Some(Wake::Tokens(lines.map(String::from).collect())),
            _ => None,
        }
    }
}

/// `kind`, then `names` one a line, split over as many notifications as the limit needs.
fn split(kind: &str, names: &[String]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for name in names {
        match out.last_mut() {
            Some(p) if p.len() + name.len() < MAX_PAYLOAD => {
                p.push('\n');
                p.push_str(name);
            }
            _ => out.push(format!("{kind}\n{name}")),
        }
    }
    out
}

/// What other managers tell this one, as it comes.
pub struct Wakes(PgListener);

impl Wakes {
    /// The next wake. The connection, if lost, is made again (wakes sent meanwhile are lost:
    /// owners' periodic passes and agents' heartbeats cover them).
    pub async fn next(&mut self) -> Result<Wake> {
        loop {
            let notification = self.0.recv().await?;
            if let Some(wake) = Wake::parse(notification.payload()) {
                return Ok(wake);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wakes_go_out_and_come_back_within_the_payload_limit() {
        let group = Wake::Group("gpu-a".into());
        assert_eq!(Wake::parse(&group.payloads()[0]), Some(group));
        let agents: Vec<String> = (0..2000).map(|i| format!("agent-{i:06}")).collect();
        let payloads = Wake::Agents(agents.clone()).payloads();
        assert!(payloads.len() > 1 && payloads.iter().all(|p| p.len() < 8000));
        let back: Vec<String> = payloads
            .iter()
            .flat_map(|p| match Wake::parse(p) {
                Some(Wake::Agents(a)) => a,
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(back, agents);
        let tokens = Wake::Tokens(vec!["ab".repeat(32), "cd".repeat(32)]);
        assert_eq!(tokens.payloads().len(), 1);
        assert_eq!(Wake::parse(&tokens.payloads()[0]), Some(tokens));
        assert_eq!(Wake::parse("other\nx"), None);
    }
}
