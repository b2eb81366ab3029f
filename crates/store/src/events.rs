//! Events (what happened and why, for people) and API tokens.

use serde::Serialize;
use sqlx::any::AnyRow;

use corral_core::Timestamp;

use crate::codec::{name_of, Arg, Fields, Where};
use crate::error::{Result, StoreError};
use crate::{Store, Tx};

/// An event to record. `kind` is a short word (`placed`, `rejected`, `launch`, `mark`,
/// `unmark`, `terminate`, `cancelled`...); `message` says why, for people.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct NewEvent {
    pub at: Timestamp,
    pub group: Option<String>,
    pub session: Option<String>,
    pub agent: Option<String>,
    pub kind: String,
    pub message: String,
}

impl NewEvent {
    /// An event of a group itself (its policy, its keys...).
    pub fn of_group(at: Timestamp, group: &str, kind: &str, message: String) -> NewEvent {
        NewEvent {
            at,
            group: Some(group.to_string()),
            kind: kind.to_string(),
            message,
            ..NewEvent::default()
        }
    }

    /// An event of agent `agent` of `group`.
    pub fn of_agent(
        at: Timestamp,
        group: &str,
        agent: &str,
        kind: &str,
        message: String,
    ) -> NewEvent {
        NewEvent {
            agent: Some(agent.to_string()),
            ..NewEvent::of_group(at, group, kind, message)
        }
    }
}

pub use corral_api::events::Event;
pub use corral_api::tokens::Role;

/// Which events `list_events` returns, newest first: every given field must match;
/// `before_id` continues below that id; `after_id` returns those above it, oldest first.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EventFilter {
    pub group: Option<String>,
    pub session: Option<String>,
    pub agent: Option<String>,
    pub before_id: Option<i64>,
    pub after_id: Option<i64>,
    /// At most this many; `None`: all.
    pub limit: Option<u32>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TokenRecord {
    pub id: String,
    /// What the manager derived from the secret (a SHA-256 hex); the store only compares it.
    pub hash: String,
    pub role: Role,
    pub user: String,
    pub created_at: Timestamp,
    /// An agent's token from a join, not used yet: its first use revokes the agent's older
    /// tokens ([`Store::supersede_agent_tokens`]).
    pub supersedes: bool,
}

pub(crate) fn event_from_row(row: &AnyRow) -> Result<Event> {
    let f = Fields::numbered(row, "event", "id")?;
    Ok(Event {
        id: f.int("id")?,
        at: f.time("at")?,
        group: f.opt_text("group_name")?,
        session: f.opt_text("session")?,
        agent: f.opt_text("agent")?,
        kind: f.text("kind")?,
        message: f.text("message")?,
    })
}

fn token_from_row(row: &AnyRow) -> Result<TokenRecord> {
    let f = Fields::new(row, "token", "id")?;
    Ok(TokenRecord {
        id: f.text("id")?,
        hash: f.text("hash")?,
        role: f.name("role")?,
        user: f.text("user_name")?,
        created_at: f.time("created_at")?,
        supersedes: f.flag("supersedes")?,
    })
}

/// Records an event inside a transaction, so it commits (or not) with the change it explains.
pub(crate) async fn insert_event(tx: &mut Tx, event: &NewEvent) -> Result<i64> {
    Ok(sqlx::query_scalar(
        "INSERT INTO events (at, group_name, session, agent, kind, message) \
         VALUES ($1, $2, $3, $4, $5, $6) RETURNING id",
    )
    .bind(event.at.0)
    .bind(event.group.as_deref())
    .bind(event.session.as_deref())
    .bind(event.agent.as_deref())
    .bind(&event.kind)
    .bind(&event.message)
    .fetch_one(&mut **tx)
    .await?)
}

/// Many events, a few statements.
pub(crate) async fn insert_events_many(tx: &mut Tx, events: &[NewEvent]) -> Result<()> {
    for chunk in events.chunks(crate::sessions::ROWS_PER_STATEMENT) {
        let sql = format!(
            "INSERT INTO events (at, group_name, session, agent, kind, message) VALUES {}",
            crate::sessions::value_rows(chunk.len(), 6, 1)
        );
        let mut q = sqlx::query(sqlx::AssertSqlSafe(sql));
        for e in chunk {
            q = q
                .bind(e.at.0)
                .bind(e.group.as_deref())
                .bind(e.session.as_deref())
                .bind(e.agent.as_deref())
                .bind(e.kind.as_str())
                .bind(e.message.as_str());
        }
        q.execute(&mut **tx).await?;
    }
    Ok(())
}

impl Store {
    /// Stores a one-time bootstrap token for `group`, good until `expires_at`; with `agent`, it
    /// joins that agent id only (a launched instance's).
    pub async fn insert_bootstrap_token(
        &self,
        id: &str,
        hash: &str,
        group: &str,
        agent: Option<&str>,
        expires_at: Timestamp,
        now: Timestamp,
    ) -> Result<()> {
        let mut tx = self.write_tx().await?;
        let done = sqlx::query(
            "INSERT INTO tokens (id, hash, role, user_name, created_at, expires_at, agent_id) \
             VALUES ($1, $2, 'bootstrap', $3, $4, $5, $6) ON CONFLICT DO NOTHING",
        )
        .bind(id)
        .bind(hash)
        .bind(group)
        .bind(now.0)
        .bind(expires_at.0)
        .bind(agent)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        if done.rows_affected() == 0 {
            return Err(StoreError::conflict("token", id));
        }
        Ok(())
    }

    /// Uses up a bootstrap token for agent `agent`: returns its group if it was unused,
    /// unexpired and not made for another agent, and marks it used in the same statement, so it
    /// works exactly once.
    pub async fn consume_bootstrap_token(
        &self,
        hash: &str,
        agent: &str,
        now: Timestamp,
    ) -> Result<Option<String>> {
        let group: Option<String> = sqlx::query_scalar(
            "UPDATE tokens SET used_at = $2 WHERE hash = $1 AND role = 'bootstrap' \
             AND used_at IS NULL AND expires_at > $2 AND (agent_id IS NULL OR agent_id = $3) \
             RETURNING user_name",
        )
        .bind(hash)
        .bind(now.0)
        .bind(agent)
        .fetch_optional(&self.write)
        .await?;
        Ok(group)
    }

    /// Records an event; returns its id.
    pub async fn record_event(&self, event: &NewEvent) -> Result<i64> {
        let mut tx = self.write_tx().await?;
        let id = insert_event(&mut tx, event).await?;
        tx.commit().await?;
        Ok(id)
    }

    /// Events matching the filter, newest first.
    pub async fn list_events(&self, filter: &EventFilter) -> Result<Vec<Event>> {
        let mut w = Where::default();
        if let Some(group) = &filter.group {
            w.and("group_name = ?", [Arg::Text(group.clone())]);
        }
        if let Some(session) = &filter.session {
            w.and("session = ?", [Arg::Text(session.clone())]);
        }
        if let Some(agent) = &filter.agent {
            w.and("agent = ?", [Arg::Text(agent.clone())]);
        }
        if let Some(before) = filter.before_id {
            w.and("id < ?", [Arg::Int(before)]);
        }
        if let Some(after) = filter.after_id {
            w.and("id > ?", [Arg::Int(after)]);
        }
        let order = if filter.after_id.is_some() {
            "ASC"
        } else {
            "DESC"
        };
        let mut sql = format!(
            "SELECT id, at, group_name, session, agent, kind, message FROM events{} \
             ORDER BY id {order}",
            w.sql()
        );
        if let Some(limit) = filter.limit {
            sql.push_str(&format!(" LIMIT {limit}"));
        }
        w.query(sql)
            .fetch_all(&self.read)
            .await?
            .iter()
            .map(event_from_row)
            .collect()
    }

    /// Stores an API token. `Conflict` if its id or its hash is taken.
    pub async fn insert_token(
        &self,
        id: &str,
        hash: &str,
        role: Role,
        user: &str,
        now: Timestamp,
    ) -> Result<()> {
        self.insert_token_row(id, hash, &role, user, false, now)
            .await
    }

    /// Stores agent `agent`'s token from a join: once first used, it supersedes the agent's
    /// older tokens ([`Store::supersede_agent_tokens`]). `Conflict` if its id or hash is taken.
    pub async fn insert_successor_token(
        &self,
        id: &str,
        hash: &str,
        agent: &str,
        now: Timestamp,
    ) -> Result<()> {
        self.insert_token_row(id, hash, &Role::Agent, agent, true, now)
            .await
    }

    async fn insert_token_row(
        &self,
        id: &str,
        hash: &str,
        role: &Role,
        user: &str,
        supersedes: bool,
        now: Timestamp,
    ) -> Result<()> {
        let done = sqlx::query(
            "INSERT INTO tokens (id, hash, role, user_name, created_at, supersedes) \
             VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT DO NOTHING",
        )
        .bind(id)
        .bind(hash)
        .bind(name_of(role))
        .bind(user)
        .bind(now.0)
        .bind(supersedes)
        .execute(&self.write)
        .await?;
        if done.rows_affected() == 0 {
            return Err(StoreError::conflict("token", id));
        }
        Ok(())
    }

    /// The first use of agent `agent`'s token `id` from a join: the agent's other tokens go,
    /// but those made after it that are still unused (a later join's, which supersede this one
    /// in turn once used). Returns the hashes revoked (for caches to drop); none if `id` was
    /// used before (another manager got there first, or it supersedes nothing).
    pub async fn supersede_agent_tokens(&self, id: &str, agent: &str) -> Result<Vec<String>> {
        let mut tx = self.write_tx().await?;
        // One statement flips the mark: of two managers seeing the first use at once, one
        // revokes.
        let created: Option<i64> = sqlx::query_scalar(
            "UPDATE tokens SET supersedes = FALSE WHERE id = $1 AND role = 'agent' \
             AND user_name = $2 AND supersedes RETURNING created_at",
        )
        .bind(id)
        .bind(agent)
        .fetch_optional(&mut *tx)
        .await?;
        let Some(created) = created else {
            return Ok(Vec::new());
        };
        let hashes = sqlx::query_scalar(
            "DELETE FROM tokens WHERE role = 'agent' AND user_name = $1 AND id <> $2 \
             AND (NOT supersedes OR created_at <= $3) RETURNING hash",
        )
        .bind(agent)
        .bind(id)
        .bind(created)
        .fetch_all(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(hashes)
    }

    /// The token with this hash, if it may still be used at `now`: a bootstrap token that was
    /// used up or has expired is no credential at all.
    pub async fn find_token_by_hash(
        &self,
        hash: &str,
        now: Timestamp,
    ) -> Result<Option<TokenRecord>> {
        sqlx::query(
            "SELECT id, hash, role, user_name, created_at, supersedes FROM tokens WHERE hash = $1 \
             AND used_at IS NULL AND (expires_at IS NULL OR expires_at > $2)",
        )
        .bind(hash)
        .bind(now.0)
        .fetch_optional(&self.read)
        .await?
        .as_ref()
        .map(token_from_row)
        .transpose()
    }

    /// How many tokens exist (the manager creates the first admin token when there are none).
    pub async fn count_tokens(&self) -> Result<u64> {
        let n: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM tokens")
            .fetch_one(&self.read)
            .await?;
        u64::try_from(n).map_err(|_| StoreError::Corrupt(format!("token count {n}")))
    }
}
