//! Agents removed by hand, remembered with their shape until the retention prunes them, so that
//! a session only such an agent could hold waits for it instead of being refused.

use corral_core::expected::Removed;
use corral_core::Timestamp;

use crate::codec::Fields;
use crate::error::Result;
use crate::{Store, Tx};

/// An agent's shape as its row stores it (capacity text, devices JSON).
pub(crate) struct Shape {
    pub capacity: String,
    pub devices: String,
}

/// Remembers agent `id` of `group`, removed at `now`.
pub(crate) async fn remember(
    tx: &mut Tx,
    id: &str,
    group: &str,
    shape: &Shape,
    now: Timestamp,
) -> Result<()> {
    sqlx::query(
        "INSERT INTO removed_agents (id, group_name, capacity, devices, removed_at) \
         VALUES ($1, $2, $3, $4, $5) \
         ON CONFLICT (id) DO UPDATE SET group_name = excluded.group_name, \
         capacity = excluded.capacity, devices = excluded.devices, \
         removed_at = excluded.removed_at",
    )
    .bind(id)
    .bind(group)
    .bind(&shape.capacity)
    .bind(&shape.devices)
    .bind(now.0)
    .execute(&mut **tx)
    .await?;
    Ok(())
}

/// Agent `id` joined again: it is no longer awaited.
pub(crate) async fn forget(tx: &mut Tx, id: &str) -> Result<()> {
    sqlx::query("DELETE FROM removed_agents WHERE id = $1")
        .bind(id)
        .execute(&mut **tx)
        .await?;
    Ok(())
}

/// The agents of `group` removed by hand and not joined since, oldest removal first.
pub(crate) async fn of_group(tx: &mut Tx, group: &str) -> Result<Vec<Removed>> {
    sqlx::query(
        "SELECT id, capacity, devices, removed_at FROM removed_agents \
         WHERE group_name = $1 ORDER BY removed_at, id",
    )
    .bind(group)
    .fetch_all(&mut **tx)
    .await?
    .iter()
    .map(|row| {
        let f = Fields::new(row, "removed agent", "id")?;
        Ok(Removed {
            id: f.text("id")?,
            capacity: f.slots("capacity")?,
            devices: f.json("devices")?,
            removed_at: f.time("removed_at")?,
        })
    })
    .collect()
}

impl Store {
    /// [`of_group`] in a read of its own (admission at submit).
    pub async fn removed_agents(&self, group: &str) -> Result<Vec<Removed>> {
        let mut tx = self.read_tx().await?;
        let removed = of_group(&mut tx, group).await?;
        tx.commit().await?;
        Ok(removed)
    }
}
