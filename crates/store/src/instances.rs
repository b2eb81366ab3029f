//! Instances asked of a group's provider, one row each, from the pass that decided the launch
//! to their end. Rows `requested`, `launching` or `provisioning` are the launches in flight the
//! cycle counts as capacity; the agent that joins with an instance's id makes it `joined`.

use sqlx::any::AnyRow;

use corral_core::Timestamp;

use crate::codec::{name_of, Fields};
use crate::error::Result;
use crate::events::{insert_event, NewEvent};
use crate::{Store, Tx};

pub use corral_api::instances::{InstancePhase, InstanceRecord};

const COLUMNS: &str =
    "id, group_name, template, state, provider_id, requested_at, updated_at, reason";

fn instance_from_row(row: &AnyRow) -> Result<InstanceRecord> {
    let f = Fields::new(row, "instance", "id")?;
    Ok(InstanceRecord {
        id: f.text("id")?,
        group: f.text("group_name")?,
        template: f.text("template")?,
        phase: f.name("state")?,
        provider_id: f.opt_text("provider_id")?,
        requested_at: f.time("requested_at")?,
        updated_at: f.time("updated_at")?,
        reason: f.opt_text("reason")?,
    })
}

fn phase_list(phases: &[InstancePhase]) -> String {
    phases
        .iter()
        .map(|p| format!("'{}'", name_of(p)))
        .collect::<Vec<_>>()
        .join(", ")
}

/// A new instance's agent id: the group's name made DNS-safe (lowercase letters, digits and
/// '-', as pod and container names need), then 10 random hex digits.
pub(crate) fn new_instance_id(group: &str) -> String {
    let mut prefix: String = group
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '-'
            }
        })
        .take(40)
        .collect();
    while prefix.ends_with('-') {
        prefix.pop();
    }
    if prefix.is_empty() {
        prefix.push_str("agent");
    }
    let mut bytes = [0u8; 5];
    getrandom::fill(&mut bytes).expect("the system's random source works");
    format!("{prefix}-{}", hex::encode(bytes))
}

pub(crate) async fn insert_requested(
    tx: &mut Tx,
    group: &str,
    template: &str,
    count: u32,
    now: Timestamp,
) -> Result<()> {
    for _ in 0..count {
        sqlx::query(
            "INSERT INTO instances (id, group_name, template, state, requested_at, updated_at) \
             VALUES ($1, $2, $3, 'requested', $4, $4)",
        )
        .bind(new_instance_id(group))
        .bind(group)
        .bind(template)
        .bind(now.0)
        .execute(&mut **tx)
        .await?;
    }
    Ok(())
}

/// The instances of agents the cycle let go are to be terminated by the provider.
pub(crate) async fn terminate_for_agents(
    tx: &mut Tx,
    agents: &[&str],
    now: Timestamp,
) -> Result<()> {
    for agent in agents {
        sqlx::query(
            "UPDATE instances SET state = 'terminating', updated_at = $2, \
             reason = 'its agent was let go' WHERE id = $1 AND state = 'joined'",
        )
        .bind(*agent)
        .bind(now.0)
        .execute(&mut **tx)
        .await?;
    }
    Ok(())
}

pub(crate) async fn fetch(
    tx: &mut Tx,
    group: &str,
    phases: &[InstancePhase],
) -> Result<Vec<InstanceRecord>> {
    let sql = format!(
        "SELECT {COLUMNS} FROM instances WHERE group_name = $1 AND state IN ({}) \
         ORDER BY requested_at, id",
        phase_list(phases)
    );
    sqlx::query(sqlx::AssertSqlSafe(sql))
        .bind(group)
        .fetch_all(&mut **tx)
        .await?
        .iter()
        .map(instance_from_row)
        .collect()
}

impl Store {
    /// The group's instances in any of `phases`, oldest first.
    pub async fn list_instances(
        &self,
        group: &str,
        phases: &[InstancePhase],
    ) -> Result<Vec<InstanceRecord>> {
        let mut tx = self.read_tx().await?;
        let rows = fetch(&mut tx, group, phases).await?;
        tx.commit().await?;
        Ok(rows)
    }

    /// How many instances each group has in each phase (`requested`, `joined`...), in one
    /// query: what the metrics show.
    pub async fn count_instances(&self) -> Result<Vec<(String, String, i64)>> {
        let rows: Vec<(String, String, i64)> = sqlx::query_as(
            "SELECT i.group_name, i.state, COUNT(*) FROM instances i \
             JOIN groups g ON g.name = i.group_name \
             GROUP BY i.group_name, i.state ORDER BY i.group_name, i.state",
        )
        .fetch_all(&self.read)
        .await?;
        Ok(rows)
    }

    pub async fn get_instance(&self, id: &str) -> Result<Option<InstanceRecord>> {
        let sql = format!("SELECT {COLUMNS} FROM instances WHERE id = $1");
        sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(id)
            .fetch_optional(&self.read)
            .await?
            .as_ref()
            .map(instance_from_row)
            .transpose()
    }

    /// Records the vendor's id of an instance that has none yet, whatever its phase (its agent
    /// may join before the provider's launch call returns). Returns whether it was recorded.
    pub async fn record_provider_id(&self, id: &str, provider_id: &str) -> Result<bool> {
        let mut tx = self.write_tx().await?;
        let done = sqlx::query(
            "UPDATE instances SET provider_id = $2 WHERE id = $1 AND provider_id IS NULL",
        )
        .bind(id)
        .bind(provider_id)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(done.rows_affected() > 0)
    }

    /// The templates of the group's instances whose agents joined after `since`, with when,
    /// oldest first (the driver's successes, wherever the join was handled).
    pub async fn joined_since(
        &self,
        group: &str,
        since: Timestamp,
    ) -> Result<Vec<(String, Timestamp)>> {
        let rows: Vec<(String, i64)> = sqlx::query_as(
            "SELECT template, updated_at FROM instances WHERE group_name = $1 \
             AND state = 'joined' AND updated_at > $2 ORDER BY updated_at",
        )
        .bind(group)
        .bind(since.0)
        .fetch_all(&self.read)
        .await?;
        Ok(rows.into_iter().map(|(t, at)| (t, Timestamp(at))).collect())
    }

    /// Claims requested instances for launching (`requested` → `launching`), in one
    /// transaction, before the provider is asked: of several drivers that read the same rows,
    /// one claims each, so none is launched twice. The ids claimed, in the order given.
    pub async fn claim_launches(&self, ids: &[&str], now: Timestamp) -> Result<Vec<String>> {
        let mut tx = self.write_tx().await?;
        let mut claimed = Vec::with_capacity(ids.len());
        for id in ids {
            let done = sqlx::query(
                "UPDATE instances SET state = 'launching', updated_at = $2, \
                 reason = 'claimed for launch' WHERE id = $1 AND state = 'requested'",
            )
            .bind(*id)
            .bind(now.0)
            .execute(&mut *tx)
            .await?;
            if done.rows_affected() > 0 {
                claimed.push(id.to_string());
            }
        }
        tx.commit().await?;
        Ok(claimed)
    }

    /// Moves an instance to `to` if it is in one of `from`; returns whether it moved. A
    /// `provider_id` given is recorded; `None` keeps the one stored.
    pub async fn move_instance(
        &self,
        id: &str,
        from: &[InstancePhase],
        to: InstancePhase,
        provider_id: Option<&str>,
        reason: &str,
        now: Timestamp,
    ) -> Result<bool> {
        self.move_instance_noting(id, from, to, provider_id, reason, None, now)
            .await
    }

    /// [`Store::move_instance`], writing `event` in the same transaction if it moved, so that
    /// what the events say and the instance's phase never disagree.
    #[allow(clippy::too_many_arguments)]
    pub async fn move_instance_noting(
        &self,
        id: &str,
        from: &[InstancePhase],
        to: InstancePhase,
        provider_id: Option<&str>,
        reason: &str,
        event: Option<&NewEvent>,
        now: Timestamp,
    ) -> Result<bool> {
        let sql = format!(
            "UPDATE instances SET state = $2, provider_id = COALESCE($3, provider_id), \
             reason = $4, updated_at = $5 WHERE id = $1 AND state IN ({})",
            phase_list(from)
        );
        let mut tx = self.write_tx().await?;
        let done = sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(id)
            .bind(name_of(&to))
            .bind(provider_id)
            .bind(reason)
            .bind(now.0)
            .execute(&mut *tx)
            .await?;
        let moved = done.rows_affected() > 0;
        if let (true, Some(event)) = (moved, event) {
            insert_event(&mut tx, event).await?;
        }
        tx.commit().await?;
        Ok(moved)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn instance_ids_are_dns_labels_that_name_their_group() {
        let id = new_instance_id("GPU_a100/east-");
        assert!(id.starts_with("gpu-a100-east-"), "{id}");
        assert_eq!(id.len(), "gpu-a100-east-".len() + 10);
        assert!(id
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-'));
        assert_ne!(new_instance_id("g"), new_instance_id("g"));
        assert!(new_instance_id("___").starts_with("agent-"));
        assert!(new_instance_id(&"x".repeat(64)).len() <= 51);
    }
}
