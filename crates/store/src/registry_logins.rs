//! The registry accounts of a group's agents (image auto-update), their passwords as the
//! manager sealed them: the store never sees one in the clear.

use corral_core::Timestamp;

use crate::codec::Fields;
use crate::error::{Result, StoreError};
use crate::Store;

/// A group's account on a registry, its password sealed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredLogin {
    pub registry: String,
    pub username: String,
    pub sealed_password: String,
    pub updated_at: Timestamp,
}

impl Store {
    /// Sets the group's account on `registry` (replacing one there was). `NotFound` without
    /// the group.
    pub async fn put_registry_login(&self, group: &str, login: &StoredLogin) -> Result<()> {
        let mut tx = self.write_tx().await?;
        let found = sqlx::query("SELECT name FROM groups WHERE name = $1")
            .bind(group)
            .fetch_optional(&mut *tx)
            .await?;
        if found.is_none() {
            return Err(StoreError::not_found("group", group));
        }
        sqlx::query("DELETE FROM registry_logins WHERE group_name = $1 AND registry = $2")
            .bind(group)
            .bind(&login.registry)
            .execute(&mut *tx)
            .await?;
        sqlx::query(
            "INSERT INTO registry_logins (group_name, registry, username, password, updated_at) \
             VALUES ($1, $2, $3, $4, $5)",
        )
        .bind(group)
        .bind(&login.registry)
        .bind(&login.username)
        .bind(&login.sealed_password)
        .bind(login.updated_at.0)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(())
    }

    /// The group's accounts, by registry.
    pub async fn list_registry_logins(&self, group: &str) -> Result<Vec<StoredLogin>> {
        sqlx::query(
            "SELECT registry, username, password, updated_at FROM registry_logins \
             WHERE group_name = $1 ORDER BY registry",
        )
        .bind(group)
        .fetch_all(&self.read)
        .await?
        .iter()
        .map(login_of)
        .collect()
    }

    /// The group's account on `registry`, if it has one.
    pub async fn registry_login(&self, group: &str, registry: &str) -> Result<Option<StoredLogin>> {
        sqlx::query(
            "SELECT registry, username, password, updated_at FROM registry_logins \
             WHERE group_name = $1 AND registry = $2",
        )
        .bind(group)
        .bind(registry)
        .fetch_optional(&self.read)
        .await?
        .as_ref()
        .map(login_of)
        .transpose()
    }

    /// Forgets the group's account on `registry`; `NotFound` without it.
    pub async fn delete_registry_login(&self, group: &str, registry: &str) -> Result<()> {
        let done =
            sqlx::query("DELETE FROM registry_logins WHERE group_name = $1 AND registry = $2")
                .bind(group)
                .bind(registry)
                .execute(&self.write)
                .await?;
        if done.rows_affected() == 0 {
            return Err(StoreError::not_found(
                "registry login",
                format!("{registry} of group {group}"),
            ));
        }
        Ok(())
    }
}

fn login_of(row: &sqlx::any::AnyRow) -> Result<StoredLogin> {
    let f = Fields::new(row, "registry login", "registry")?;
    Ok(StoredLogin {
        registry: f.text("registry")?,
        username: f.text("username")?,
        sealed_password: f.text("password")?,
        updated_at: f.time("updated_at")?,
    })
}
