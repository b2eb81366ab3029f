//! Several managers on one database: a lease per group names the manager that runs the group's
//! passes and scaling driver. Its `epoch` grows with every change of owner, and a store
//! [`Store::fenced`] with it checks it in every write transaction, so a manager that lost the
//! lease (paused, cut off) writes nothing more for the group. Managers also say that they are
//! at work (groups are spread over those seen lately) and, on PostgreSQL, tell each other what
//! happened (NOTIFY): to a group's owner, that something happened to the group; to wherever an
//! agent's sync waits, that something was placed on it. The owner keeps the group's launch
//! governor here too, so that the next owner goes on from it.

use std::sync::Arc;

use corral_core::{Governor, Timestamp};
use sqlx::postgres::PgListener;

use crate::codec::{to_json, Fields};
use crate::error::{Result, StoreError};
use crate::{Backend, Store, Tx};

/// The channel a manager's wakes of groups it does not own go out on.
const WAKE_CHANNEL: &str = "corral_wake";

/// Who runs a group's passes and driver, since which change of owner, until when.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    pub group: String,
    pub owner: String,
    pub epoch: i64,
    pub expires_at: Timestamp,
}

/// What a fenced store checks before every write: the group's lease is still at `epoch`, held
/// by `owner`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fence {
    pub group: String,
    pub owner: String,
    pub epoch: i64,
}

impl From<&Lease> for Fence {
    fn from(lease: &Lease) -> Self {
        Fence {
            group: lease.group.clone(),
            owner: lease.owner.clone(),
            epoch: lease.epoch,
        }
    }
}

/// The fence check, first in a fenced write transaction. An UPDATE rather than a SELECT: on
/// PostgreSQL it locks the lease's row until the transaction ends, so a takeover (an UPDATE of
/// that row) either waits for this write to commit or has already moved the epoch on, and
/// then this finds no row.
pub(crate) async fn check(tx: &mut Tx, fence: &Fence) -> Result<()> {
    let done = sqlx::query(
        "UPDATE group_leases SET epoch = epoch \
         WHERE group_name = $1 AND owner = $2 AND epoch = $3",
    )
    .bind(&fence.group)
    .bind(&fence.owner)
    .bind(fence.epoch)
    .execute(&mut **tx)
    .await?;
    if done.rows_affected() == 0 {
        return Err(StoreError::Fenced {
            group: fence.group.clone(),
            epoch: fence.epoch,
        });
    }
    Ok(())
}

fn lease_of(row: &sqlx::any::AnyRow) -> Result<Lease> {
    let f = Fields::new(row, "lease", "group_name")?;
    Ok(Lease {
        group: f.text("group_name")?,
        owner: f.text("owner")?,
        epoch: f.int("epoch")?,
        expires_at: f.time("expires_at")?,
    })
}

impl Store {
    /// This store with every write transaction fenced by `fence`: refused with
    /// [`StoreError::Fenced`] once the group's lease has moved on.
    pub fn fenced(&self, fence: Fence) -> Store {
        Store {
            fence: Some(Arc::new(fence)),
            ..self.clone()
        }
    }

    /// Takes the lease of existing `group` for `owner` until `expires_at`, with a new epoch,
    /// if nobody holds it (none yet, or it expired by `now`), or whoever holds it when `force`
    /// (one manager per database: SQLite). `None` when another manager holds it, or the group
    /// is gone.
    pub async fn take_lease(
        &self,
        group: &str,
        owner: &str,
        now: Timestamp,
        expires_at: Timestamp,
        force: bool,
    ) -> Result<Option<Lease>> {
        let mut tx = self.write_tx().await?;
        // `WHERE` in the SELECT also keeps SQLite's parser from reading ON CONFLICT as a join.
        let created = sqlx::query(
            "INSERT INTO group_leases (group_name, owner, epoch, expires_at) \
             SELECT name, $2, 1, $3 FROM groups WHERE name = $1 \
             ON CONFLICT (group_name) DO NOTHING",
        )
        .bind(group)
        .bind(owner)
        .bind(expires_at.0)
        .execute(&mut *tx)
        .await?
        .rows_affected()
            > 0;
        let taken = created
            || sqlx::query(
                "UPDATE group_leases SET owner = $2, epoch = epoch + 1, expires_at = $3 \
                 WHERE group_name = $1 AND (expires_at <= $4 OR $5)",
            )
            .bind(group)
            .bind(owner)
            .bind(expires_at.0)
            .bind(now.0)
            .bind(force)
            .execute(&mut *tx)
            .await?
            .rows_affected()
                > 0;
        let lease = match taken {
            true => sqlx::query(
                "SELECT group_name, owner, epoch, expires_at FROM group_leases \
                 WHERE group_name = $1",
            )
            .bind(group)
            .fetch_optional(&mut *tx)
            .await?
            .as_ref()
            .map(lease_of)
            .transpose()?,
            false => None,
        };
        tx.commit().await?;
        Ok(lease)
    }

    /// Extends every lease `owner` holds to `expires_at`; the leases it holds now (one taken
    /// over meanwhile is not among them).
    pub async fn renew_leases(&self, owner: &str, expires_at: Timestamp) -> Result<Vec<Lease>> {
        let mut tx = self.write_tx().await?;
        sqlx::query("UPDATE group_leases SET expires_at = $2 WHERE owner = $1")
            .bind(owner)
            .bind(expires_at.0)
            .execute(&mut *tx)
            .await?;
        let held = sqlx::query(
            "SELECT group_name, owner, epoch, expires_at FROM group_leases WHERE owner = $1 \
             ORDER BY group_name",
        )
        .bind(owner)
        .fetch_all(&mut *tx)
        .await?
        .iter()
        .map(lease_of)
        .collect::<Result<_>>()?;
        tx.commit().await?;
        Ok(held)
    }

    /// Lets the lease of `group` go (to hand it over, or when stopping), if `owner` holds it:
    /// the next manager to look takes it without waiting for it to expire.
    pub async fn release_lease(&self, group: &str, owner: &str) -> Result<()> {
        let mut tx = self.write_tx().await?;
        sqlx::query("UPDATE group_leases SET expires_at = 0 WHERE group_name = $1 AND owner = $2")
            .bind(group)
            .bind(owner)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(())
    }

    /// Every group's lease.
    pub async fn list_leases(&self) -> Result<Vec<Lease>> {
        sqlx::query(
            "SELECT group_name, owner, epoch, expires_at FROM group_leases ORDER BY group_name",
        )
        .fetch_all(&self.read)
        .await?
        .iter()
        .map(lease_of)
        .collect()
    }

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

    /// The group's launch governor as its last owner left it (a fresh one if none did).
    pub async fn governor(&self, group: &str) -> Result<Governor> {
        let state: Option<String> =
            sqlx::query_scalar("SELECT state FROM launch_governors WHERE group_name = $1")
                .bind(group)
                .fetch_optional(&self.read)
                .await?;
        match state {
            Some(json) => serde_json::from_str(&json)
                .map_err(|e| StoreError::Corrupt(format!("launch governor of group {group}: {e}"))),
            None => Ok(Governor::default()),
        }
    }

    /// Keeps the group's launch governor (fenced, on the owner's store).
    pub async fn put_governor(
        &self,
        group: &str,
        governor: &Governor,
        now: Timestamp,
    ) -> Result<()> {
        let state = to_json(governor)?;
        let mut tx = self.write_tx().await?;
        sqlx::query(
            "INSERT INTO launch_governors (group_name, state, updated_at) VALUES ($1, $2, $3) \
             ON CONFLICT (group_name) DO UPDATE SET state = excluded.state, \
             updated_at = excluded.updated_at",
        )
        .bind(group)
        .bind(state)
        .bind(now.0)
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
}

/// PostgreSQL's limit on a notification's payload is 8,000 bytes.
const MAX_PAYLOAD: usize = 7_000;

impl Wake {
    /// As notifications: a kind, then names, one a line (agents split over several).
    fn payloads(&self) -> Vec<String> {
        match self {
            Wake::Group(group) => vec![format!("group\n{group}")],
            Wake::Agents(agents) => {
                let mut out: Vec<String> = Vec::new();
                for agent in agents {
                    match out.last_mut() {
                        Some(p) if p.len() + agent.len() < MAX_PAYLOAD => {
                            p.push('\n');
                            p.push_str(agent);
                        }
                        _ => out.push(format!("agents\n{agent}")),
                    }
                }
                out
            }
        }
    }

    fn parse(payload: &str) -> Option<Wake> {
        let mut lines = payload.lines();
        match lines.next()? {
            "group" => Some(Wake::Group(lines.next()?.to_string())),
            "agents" => Some(Wake::Agents(lines.map(String::from).collect())),
            _ => None,
        }
    }
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
        assert_eq!(Wake::parse("other\nx"), None);
    }
}
