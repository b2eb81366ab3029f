//! External agents: the keys admins register per group, the nonces joins used (each joins
//! once), the join itself (within the group's limit, counted in the join's transaction), and
//! the dismissal of a revoked key's agents.

use corral_api::agent_keys::{AgentKeyInfo, PublicKey};
use corral_core::{Agent, ExternalAgents, ScalingPolicy, Timestamp};
use sqlx::any::AnyRow;

use crate::codec::Fields;
use crate::error::{Result, StoreError};
use crate::events::{insert_event, NewEvent};
use crate::{locked, Store, Tx};

/// The group's ($1) external ($2: true) agents taking part (alive or marked, as counted toward
/// its limit) but one ($3).
const COUNT_OTHERS: &str = "SELECT COUNT(*) FROM agents WHERE group_name = $1 AND external = $2 \
     AND id <> $3 AND state IN ('alive', 'marked')";

/// What the manager judges an external agent's syncs by.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Standing {
    pub group: String,
    /// The key it joined with, and when that key was revoked.
    pub key: Option<String>,
    pub key_revoked: Option<Timestamp>,
    /// The group's policy for external agents now.
    pub policy: ExternalAgents,
}

fn key_from_row(row: &AnyRow) -> Result<AgentKeyInfo> {
    let f = Fields::new(row, "agent key", "name")?;
    let public_key: PublicKey = f
        .text("public_key")?
        .parse()
        .map_err(|e| StoreError::Corrupt(format!("agent key {:?}: {e}", f.text("name"))))?;
    Ok(AgentKeyInfo {
        group: f.text("group_name")?,
        name: f.text("name")?,
        public_key,
        fingerprint: f.text("fingerprint")?,
        created_at: f.time("created_at")?,
        revoked_at: f.opt_time("revoked_at")?,
        agents: Vec::new(),
    })
}

macro_rules! key_columns {
    () => {
        "group_name, name, public_key, fingerprint, created_at, revoked_at"
    };
}

impl Store {
    /// Registers `key` as `name` for `group`. `NotFound` without the group; `Conflict` when the
    /// name is taken or the key is registered already (revoked or not) in the group.
    pub async fn add_agent_key(
        &self,
        group: &str,
        name: &str,
        key: &PublicKey,
        now: Timestamp,
    ) -> Result<AgentKeyInfo> {
        let mut tx = self.write_tx().await?;
        let exists = sqlx::query(self.locking(locked!("SELECT name FROM groups WHERE name = $1")))
            .bind(group)
            .fetch_optional(&mut *tx)
            .await?;
        if exists.is_none() {
            return Err(StoreError::not_found("group", group));
        }
        let taken: Option<(String, Option<i64>)> = sqlx::query_as(
            "SELECT name, revoked_at FROM agent_keys \
             WHERE group_name = $1 AND (name = $2 OR public_key = $3)",
        )
        .bind(group)
        .bind(name)
        .bind(key.to_string())
        .fetch_optional(&mut *tx)
        .await?;
        if let Some((other, revoked)) = taken {
            return Err(StoreError::Refused(match revoked {
                Some(_) if other != name => format!(
                    "this key was registered as {other:?} and revoked; a revoked key is never \
                     taken again: make a new key pair"
                ),
                None if other != name => format!("this key is registered already, as {other:?}"),
                _ => format!("group {group:?} has a key named {name:?} already"),
            }));
        }
        sqlx::query(
            "INSERT INTO agent_keys (group_name, name, public_key, fingerprint, created_at) \
             VALUES ($1, $2, $3, $4, $5)",
        )
        .bind(group)
        .bind(name)
        .bind(key.to_string())
        .bind(key.fingerprint())
        .bind(now.0)
        .execute(&mut *tx)
        .await?;
        let message = format!(
            "key {name} ({}) may join external agents",
            key.fingerprint()
        );
        insert_event(&mut tx, &event(group, None, "key_added", message, now)).await?;
        tx.commit().await?;
        Ok(AgentKeyInfo {
            group: group.into(),
            name: name.into(),
            public_key: key.clone(),
            fingerprint: key.fingerprint(),
            created_at: now,
            revoked_at: None,
            agents: Vec::new(),
        })
    }

    /// The group's keys, revoked ones too, by name, each with its agents taking part or lost.
    pub async fn list_agent_keys(&self, group: &str) -> Result<Vec<AgentKeyInfo>> {
        let mut keys = sqlx::query(concat!(
            "SELECT ",
            key_columns!(),
            " FROM agent_keys WHERE group_name = $1 ORDER BY name"
        ))
        .bind(group)
        .fetch_all(&self.read)
        .await?
        .iter()
        .map(key_from_row)
        .collect::<Result<Vec<_>>>()?;
        let agents: Vec<(String, String)> = sqlx::query_as(
            "SELECT id, agent_key FROM agents WHERE group_name = $1 AND agent_key IS NOT NULL \
             AND state IN ('alive', 'marked', 'lost') ORDER BY id",
        )
        .bind(group)
        .fetch_all(&self.read)
        .await?;
        for (agent, key) in agents {
            if let Some(k) = keys.iter_mut().find(|k| k.name == key) {
                k.agents.push(agent);
            }
        }
        Ok(keys)
    }

    /// The group's key with these bytes, if registered.
    pub async fn find_agent_key(
        &self,
        group: &str,
        key: &PublicKey,
    ) -> Result<Option<AgentKeyInfo>> {
        sqlx::query(concat!(
            "SELECT ",
            key_columns!(),
            " FROM agent_keys WHERE group_name = $1 AND public_key = $2"
        ))
        .bind(group)
        .bind(key.to_string())
        .fetch_optional(&self.read)
        .await?
        .as_ref()
        .map(key_from_row)
        .transpose()
    }

    /// Revokes the group's key `name`: it joins nothing more, and its agents taking part are
    /// marked by hand (nothing new lands on them) until they hear, at their next sync, that
    /// they must leave; the answer's `agents` are those. Revoking a revoked key changes
    /// nothing. `NotFound` without the key.
    pub async fn revoke_agent_key(
        &self,
        group: &str,
        name: &str,
        now: Timestamp,
    ) -> Result<AgentKeyInfo> {
        let mut tx = self.write_tx().await?;
        let row = sqlx::query(self.locking(locked!(
            "SELECT ",
            key_columns!(),
            " FROM agent_keys WHERE group_name = $1 AND name = $2"
        )))
        .bind(group)
        .bind(name)
        .fetch_optional(&mut *tx)
        .await?
        .ok_or_else(|| StoreError::not_found("agent key", name))?;
        let mut key = key_from_row(&row)?;
        if key.revoked_at.is_none() {
            sqlx::query(
                "UPDATE agent_keys SET revoked_at = $3 WHERE group_name = $1 AND name = $2",
            )
            .bind(group)
            .bind(name)
            .bind(now.0)
            .execute(&mut *tx)
            .await?;
            key.revoked_at = Some(now);
            let message = format!("key {name} ({}) was revoked", key.fingerprint);
            insert_event(&mut tx, &event(group, None, "key_revoked", message, now)).await?;
            let reason = format!("its key {name} was revoked");
            key.agents = dismiss(&mut tx, group, Some(name), &reason, now).await?;
        }
        tx.commit().await?;
        Ok(key)
    }

    /// The group no longer takes external agents: those taking part are marked by hand until
    /// they hear, at their next sync, that they must leave. Their ids.
    pub async fn dismiss_external_agents(
        &self,
        group: &str,
        reason: &str,
        now: Timestamp,
    ) -> Result<Vec<String>> {
        let mut tx = self.write_tx().await?;
        let ids = dismiss(&mut tx, group, None, reason, now).await?;
        tx.commit().await?;
        Ok(ids)
    }

    /// Records that a join used `nonce`, good until `expires`: true the first time, false
    /// when it was used already. Challenges themselves are not stored (the manager checks a
    /// nonce by its MAC), so only used nonces are, and those expired by `now` are dropped here.
    pub async fn use_nonce(&self, nonce: &str, expires: Timestamp, now: Timestamp) -> Result<bool> {
        let mut tx = self.write_tx().await?;
        sqlx::query("DELETE FROM used_nonces WHERE expires_at <= $1")
            .bind(now.0)
            .execute(&mut *tx)
            .await?;
        let done = sqlx::query(
            "INSERT INTO used_nonces (nonce, expires_at) VALUES ($1, $2) ON CONFLICT DO NOTHING",
        )
        .bind(nonce)
        .bind(expires.0)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(done.rows_affected() == 1)
    }

    /// Joins `agent` (external) with the group's key `key`, with its `joined` event, unless
    /// the group has `limit` other external agents taking part: then nothing is written and
    /// their number comes back. Counted and written in one transaction that locks the group,
    /// so two joins at once cannot both take the last place.
    pub async fn join_external_agent(
        &self,
        agent: &Agent,
        key: &str,
        limit: u32,
        joined: &NewEvent,
        now: Timestamp,
    ) -> Result<Result<(), u32>> {
        let mut tx = self.write_tx().await?;
        sqlx::query(self.locking(locked!("SELECT name FROM groups WHERE name = $1")))
            .bind(&agent.group)
            .fetch_optional(&mut *tx)
            .await?
            .ok_or_else(|| StoreError::not_found("group", &agent.group))?;
        let others = count_others(&mut tx, &agent.group, &agent.id.0).await?;
        if others >= limit {
            return Ok(Err(others));
        }
        self.upsert_agent_in(&mut tx, agent, Some(joined), now)
            .await?;
        sqlx::query("UPDATE agents SET agent_key = $2 WHERE id = $1")
            .bind(&agent.id.0)
            .bind(key)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(Ok(()))
    }

    /// The key external agent `id` joined with, if it did.
    pub async fn agent_key_of(&self, id: &str) -> Result<Option<String>> {
        let key: Option<Option<String>> =
            sqlx::query_scalar("SELECT agent_key FROM agents WHERE id = $1")
                .bind(id)
                .fetch_optional(&self.read)
                .await?;
        Ok(key.flatten())
    }

    /// How external agent `id` stands now; `None` if it is unknown or not external.
    pub async fn external_standing(&self, id: &str) -> Result<Option<Standing>> {
        let row: Option<(String, Option<String>, Option<i64>, String)> = sqlx::query_as(
            "SELECT a.group_name, a.agent_key, k.revoked_at, g.policy FROM agents a \
             JOIN groups g ON g.name = a.group_name \
             LEFT JOIN agent_keys k ON k.group_name = a.group_name AND k.name = a.agent_key \
             WHERE a.id = $1 AND a.external = $2",
        )
        .bind(id)
        .bind(true)
        .fetch_optional(&self.read)
        .await?;
        let Some((group, key, revoked, policy)) = row else {
            return Ok(None);
        };
        let policy: ScalingPolicy = serde_json::from_str(&policy)
            .map_err(|e| StoreError::Corrupt(format!("group {group:?} policy: {e}")))?;
        Ok(Some(Standing {
            group,
            key,
            key_revoked: revoked.map(Timestamp),
            policy: policy.external,
        }))
    }

    /// The external agents of `group` taking part (alive or marked), but `agent`.
    pub async fn external_agents_besides(&self, group: &str, agent: &str) -> Result<u32> {
        let n: i64 = sqlx::query_scalar(COUNT_OTHERS)
            .bind(group)
            .bind(true)
            .bind(agent)
            .fetch_one(&self.read)
            .await?;
        Ok(u32::try_from(n).unwrap_or(u32::MAX))
    }
}

/// The group's external agents taking part, but `agent`.
async fn count_others(tx: &mut Tx, group: &str, agent: &str) -> Result<u32> {
    let n: i64 = sqlx::query_scalar(COUNT_OTHERS)
        .bind(group)
        .bind(true)
        .bind(agent)
        .fetch_one(&mut **tx)
        .await?;
    Ok(u32::try_from(n).unwrap_or(u32::MAX))
}

/// Marks by hand the group's external agents (of key `key`, or all) taking part,
/// with a `dismissed` event each; their ids.
async fn dismiss(
    tx: &mut Tx,
    group: &str,
    key: Option<&str>,
    reason: &str,
    now: Timestamp,
) -> Result<Vec<String>> {
    // Lost ones stay lost: they are told when they come back.
    const ALL: &str = "UPDATE agents SET state = 'marked', drained_by_hand = $2 \
         WHERE group_name = $1 AND external = $2 AND state IN ('alive', 'marked') RETURNING id";
    const OF_KEY: &str = "UPDATE agents SET state = 'marked', drained_by_hand = $2 \
         WHERE group_name = $1 AND external = $2 AND state IN ('alive', 'marked') \
         AND agent_key = $3 RETURNING id";
    let ids: Vec<String> = match key {
        Some(key) => sqlx::query_scalar(OF_KEY).bind(group).bind(true).bind(key),
        None => sqlx::query_scalar(ALL).bind(group).bind(true),
    }
    .fetch_all(&mut **tx)
    .await?;
    let mut ids = ids;
    ids.sort();
    for id in &ids {
        let message =
            format!("external agent {id} is told to stop its sessions and leave: {reason}");
        insert_event(tx, &event(group, Some(id), "dismissed", message, now)).await?;
    }
    Ok(ids)
}

/// An event of the group (and of one of its agents).
fn event(
    group: &str,
    agent: Option<&str>,
    kind: &str,
    message: String,
    now: Timestamp,
) -> NewEvent {
    NewEvent {
        at: now,
        group: Some(group.into()),
        session: None,
        agent: agent.map(Into::into),
        kind: kind.into(),
        message,
    }
}
