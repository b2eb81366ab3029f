//! Each group's launch governor (backoff per template, launches in the budget window), kept
//! by the group's owner at each change so that the next owner goes on from it.

use corral_core::{Governor, Timestamp};

use crate::codec::to_json;
use crate::error::{Result, StoreError};
use crate::Store;

impl Store {
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
}
