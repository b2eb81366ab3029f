//! Several managers on one database: a lease per group names the manager that runs the group's
//! passes and scaling driver. Its `epoch` grows with every change of owner, and a store
//! [`Store::fenced`] with it checks it in every write transaction, so a manager that lost the
//! lease (paused, cut off) writes nothing more for the group.

use std::sync::Arc;

use corral_core::Timestamp;

use crate::codec::Fields;
use crate::error::{Result, StoreError};
use crate::{Store, Tx};

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

/// [`Store::take_lease`]'s statements, in its transaction.
async fn take_in(
    tx: &mut Tx,
    group: &str,
    owner: &str,
    now: Timestamp,
    expires_at: Timestamp,
    force: bool,
) -> Result<Option<Lease>> {
    // `WHERE` in the SELECT also keeps SQLite's parser from reading ON CONFLICT as a join.
    let created = sqlx::query(
        "INSERT INTO group_leases (group_name, owner, epoch, expires_at) \
         SELECT name, $2, 1, $3 FROM groups WHERE name = $1 \
         ON CONFLICT (group_name) DO NOTHING",
    )
    .bind(group)
    .bind(owner)
    .bind(expires_at.0)
    .execute(&mut **tx)
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
        .execute(&mut **tx)
        .await?
        .rows_affected()
            > 0;
    if !taken {
        return Ok(None);
    }
    sqlx::query(
        "SELECT group_name, owner, epoch, expires_at FROM group_leases WHERE group_name = $1",
    )
    .bind(group)
    .fetch_optional(&mut **tx)
    .await?
    .as_ref()
    .map(lease_of)
    .transpose()
}

/// PostgreSQL's `lock_not_available`: a lock waited for past `lock_timeout`.
fn is_lock_timeout(e: &sqlx::Error) -> bool {
    matches!(e, sqlx::Error::Database(db) if db.code().as_deref() == Some("55P03"))
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
        if self.backend == crate::Backend::Postgres {
            // A row locked by the holder's write in progress (perhaps of a paused manager,
            // whose session the server ends after its idle limit) is not waited for: this
            // round passes it by, and a later one takes it.
            sqlx::query("SET LOCAL lock_timeout = 500")
                .execute(&mut *tx)
                .await?;
        }
        match take_in(&mut tx, group, owner, now, expires_at, force).await {
            Ok(lease) => {
                tx.commit().await?;
                Ok(lease)
            }
            Err(StoreError::Database(e)) if is_lock_timeout(&e) => Ok(None),
            Err(e) => Err(e),
        }
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
}
