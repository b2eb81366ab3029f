//! What ended long ago is forgotten: terminated agents (with their tokens), agents removed by
//! hand, ended instances, and bootstrap tokens used or expired, once they are older than the
//! manager's retention.

use corral_core::Timestamp;

use crate::error::Result;
use crate::Store;

/// What one [`Store::prune`] removed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Pruned {
    pub agents: u64,
    pub instances: u64,
    pub tokens: u64,
}

impl Store {
    /// Removes, in one transaction, terminated agents last seen before `before` and their
    /// agent tokens, instances terminated or failed before `before`, and bootstrap tokens used
    /// or expired before `before`.
    pub async fn prune(&self, before: Timestamp) -> Result<Pruned> {
        let mut tx = self.write_tx().await?;
        let agent_tokens = sqlx::query(
            "DELETE FROM tokens WHERE role = 'agent' AND user_name IN \
             (SELECT id FROM agents WHERE state = 'terminated' AND last_seen < $1)",
        )
        .bind(before.0)
        .execute(&mut *tx)
        .await?
        .rows_affected();
        sqlx::query(
            "DELETE FROM agent_images WHERE agent IN \
             (SELECT id FROM agents WHERE state = 'terminated' AND last_seen < $1)",
        )
        .bind(before.0)
        .execute(&mut *tx)
        .await?;
        let agents =
            sqlx::query("DELETE FROM agents WHERE state = 'terminated' AND last_seen < $1")
                .bind(before.0)
                .execute(&mut *tx)
                .await?
                .rows_affected();
        sqlx::query("DELETE FROM removed_agents WHERE removed_at < $1")
            .bind(before.0)
            .execute(&mut *tx)
            .await?;
        let instances = sqlx::query(
            "DELETE FROM instances WHERE state IN ('terminated', 'failed') AND updated_at < $1",
        )
        .bind(before.0)
        .execute(&mut *tx)
        .await?
        .rows_affected();
        let bootstrap = sqlx::query(
            "DELETE FROM tokens WHERE role = 'bootstrap' \
             AND (used_at < $1 OR (used_at IS NULL AND expires_at < $1))",
        )
        .bind(before.0)
        .execute(&mut *tx)
        .await?
        .rows_affected();
        tx.commit().await?;
        Ok(Pruned {
            agents,
            instances,
            tokens: agent_tokens + bootstrap,
        })
    }
}
