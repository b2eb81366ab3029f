//! Scaling groups and images: the configuration the cycle reads.

use sqlx::any::AnyRow;

use corral_core::{Image, ScalingGroup, Timestamp};

use crate::array_tail::{HAS_TAIL, TAIL_LEN};
use crate::codec::{to_json, Fields};
use crate::error::{Result, StoreError};
use crate::{locked, Store};

pub(crate) fn group_from_row(row: &AnyRow) -> Result<ScalingGroup> {
    let f = Fields::new(row, "group", "name")?;
    Ok(ScalingGroup {
        name: f.text("name")?,
        policy: f.json("policy")?,
        scheduler: f.json("scheduler")?,
        templates: f.json("templates")?,
    })
}

pub(crate) fn image_from_row(row: &AnyRow) -> Result<Image> {
    let f = Fields::new(row, "image", "name")?;
    Ok(Image {
        name: f.text("name")?,
        min_slots: f.slots("min_slots")?,
    })
}

impl Store {
    /// Creates a group with the static provider; `Conflict` if one of that name exists.
    pub async fn create_group(&self, group: &ScalingGroup, now: Timestamp) -> Result<()> {
        self.create_group_with_provider(group, None, now).await
    }

    /// Creates a group with its provider configuration (JSON; `None` is the static provider).
    pub async fn create_group_with_provider(
        &self,
        group: &ScalingGroup,
        provider: Option<&str>,
        now: Timestamp,
    ) -> Result<()> {
        let done = sqlx::query(
            "INSERT INTO groups (name, policy, scheduler, templates, last_scale_out, created_at, \
             updated_at, provider) VALUES ($1, $2, $3, $4, NULL, $5, $5, $6) \
             ON CONFLICT (name) DO NOTHING",
        )
        .bind(&group.name)
        .bind(to_json(&group.policy)?)
        .bind(to_json(&group.scheduler)?)
        .bind(to_json(&group.templates)?)
        .bind(now.0)
        .bind(provider)
        .execute(&self.write)
        .await?;
        if done.rows_affected() == 0 {
            return Err(StoreError::conflict("group", &group.name));
        }
        Ok(())
    }

    pub async fn get_group(&self, name: &str) -> Result<Option<ScalingGroup>> {
        sqlx::query("SELECT name, policy, scheduler, templates FROM groups WHERE name = $1")
            .bind(name)
            .fetch_optional(&self.read)
            .await?
            .as_ref()
            .map(group_from_row)
            .transpose()
    }

    /// All groups, by name.
    pub async fn list_groups(&self) -> Result<Vec<ScalingGroup>> {
        sqlx::query("SELECT name, policy, scheduler, templates FROM groups ORDER BY name")
            .fetch_all(&self.read)
            .await?
            .iter()
            .map(group_from_row)
            .collect()
    }

    /// The groups' names, in order: what a round of leases needs, without parsing each group.
    pub async fn group_names(&self) -> Result<Vec<String>> {
        Ok(sqlx::query_scalar("SELECT name FROM groups ORDER BY name")
            .fetch_all(&self.read)
            .await?)
    }

    /// Replaces a group's policy, scheduler and templates; `NotFound` if it does not exist.
    pub async fn update_group(&self, group: &ScalingGroup, now: Timestamp) -> Result<()> {
        let done = sqlx::query(
            "UPDATE groups SET policy = $2, scheduler = $3, templates = $4, updated_at = $5 \
             WHERE name = $1",
        )
        .bind(&group.name)
        .bind(to_json(&group.policy)?)
        .bind(to_json(&group.scheduler)?)
        .bind(to_json(&group.templates)?)
        .bind(now.0)
        .execute(&self.write)
        .await?;
        if done.rows_affected() == 0 {
            return Err(StoreError::not_found("group", &group.name));
        }
        Ok(())
    }

    /// The group's provider configuration (JSON), `None` for the static provider; `NotFound`
    /// if the group does not exist.
    pub async fn get_group_provider(&self, name: &str) -> Result<Option<String>> {
        let row: Option<Option<String>> =
            sqlx::query_scalar("SELECT provider FROM groups WHERE name = $1")
                .bind(name)
                .fetch_optional(&self.read)
                .await?;
        row.ok_or_else(|| StoreError::not_found("group", name))
    }

    /// Replaces a group's provider configuration (JSON; `None` is the static provider).
    pub async fn set_group_provider(
        &self,
        name: &str,
        provider: Option<&str>,
        now: Timestamp,
    ) -> Result<()> {
        let done = sqlx::query("UPDATE groups SET provider = $2, updated_at = $3 WHERE name = $1")
            .bind(name)
            .bind(provider)
            .bind(now.0)
            .execute(&self.write)
            .await?;
        if done.rows_affected() == 0 {
            return Err(StoreError::not_found("group", name));
        }
        Ok(())
    }

    /// Replaces a group's provider configuration only if it is still `expected`, for rewrites
    /// that must not undo a change made meanwhile (sealing stored secrets). False when it was
    /// not (or the group is gone).
    pub async fn replace_group_provider(
        &self,
        name: &str,
        expected: &str,
        provider: &str,
    ) -> Result<bool> {
        let done = sqlx::query("UPDATE groups SET provider = $3 WHERE name = $1 AND provider = $2")
            .bind(name)
            .bind(expected)
            .bind(provider)
            .execute(&self.write)
            .await?;
        Ok(done.rows_affected() == 1)
    }

    /// Deletes a group. `Refused` while it has agents that are not terminated, sessions that are
    /// pending, scheduled or running, or launches in flight (their instances would be orphaned).
    /// Its ended sessions, terminated agents and events stay, as history.
    pub async fn delete_group(&self, name: &str) -> Result<()> {
        let mut tx = self.write_tx().await?;
        // Locks the group row on PostgreSQL, so no session or agent is added to it meanwhile.
        let found = sqlx::query(self.locking(locked!("SELECT name FROM groups WHERE name = $1")))
            .bind(name)
            .fetch_optional(&mut *tx)
            .await?;
        if found.is_none() {
            return Err(StoreError::not_found("group", name));
        }
        let agents: i64 = sqlx::query_scalar(
            "SELECT COUNT(*) FROM agents WHERE group_name = $1 AND state <> 'terminated'",
        )
        .bind(name)
        .fetch_one(&mut *tx)
        .await?;
        let sessions: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
            "SELECT CAST((SELECT COUNT(*) FROM sessions WHERE group_name = $1 \
             AND state IN ('pending', 'scheduled', 'running')) \
             + (SELECT COALESCE(SUM({TAIL_LEN}), 0) FROM arrays WHERE group_name = $1 \
             AND {HAS_TAIL}) AS BIGINT)"
        )))
        .bind(name)
        .fetch_one(&mut *tx)
        .await?;
        let launches: i64 = sqlx::query_scalar(
            "SELECT COUNT(*) FROM instances WHERE group_name = $1 \
                 AND state IN ('requested', 'launching', 'provisioning', 'joined', 'terminating')",
        )
        .bind(name)
        .fetch_one(&mut *tx)
        .await?;
        if agents + sessions + launches > 0 {
            return Err(StoreError::Refused(format!(
                "group {name:?} is in use: {agents} agent(s) not terminated, {sessions} \
                 session(s) pending, scheduled or running, {launches} instance(s) launched and not terminated"
            )));
        }
        sqlx::query("DELETE FROM groups WHERE name = $1")
            .bind(name)
            .execute(&mut *tx)
            .await?;
        sqlx::query("DELETE FROM removed_agents WHERE group_name = $1")
            .bind(name)
            .execute(&mut *tx)
            .await?;
        // Whose jobs these were, its registry accounts, its lease and its governor are nothing to a group of the same
        // name made later.
        for table in [
            "DELETE FROM batch_jobs WHERE group_name = $1",
            "DELETE FROM registry_logins WHERE group_name = $1",
            "DELETE FROM group_leases WHERE group_name = $1",
            "DELETE FROM launch_governors WHERE group_name = $1",
        ] {
            sqlx::query(table).bind(name).execute(&mut *tx).await?;
        }
        tx.commit().await?;
        Ok(())
    }

    /// Creates or replaces an image.
    pub async fn put_image(&self, image: &Image) -> Result<()> {
        sqlx::query(
            "INSERT INTO images (name, min_slots) VALUES ($1, $2) \
             ON CONFLICT (name) DO UPDATE SET min_slots = excluded.min_slots",
        )
        .bind(&image.name)
        .bind(image.min_slots.to_string())
        .execute(&self.write)
        .await?;
        Ok(())
    }

    pub async fn get_image(&self, name: &str) -> Result<Option<Image>> {
        sqlx::query("SELECT name, min_slots FROM images WHERE name = $1")
            .bind(name)
            .fetch_optional(&self.read)
            .await?
            .as_ref()
            .map(image_from_row)
            .transpose()
    }

    /// All images, by name.
    pub async fn list_images(&self) -> Result<Vec<Image>> {
        sqlx::query("SELECT name, min_slots FROM images ORDER BY name")
            .fetch_all(&self.read)
            .await?
            .iter()
            .map(image_from_row)
            .collect()
    }

    /// `NotFound` if there is no such image.
    pub async fn delete_image(&self, name: &str) -> Result<()> {
        let done = sqlx::query("DELETE FROM images WHERE name = $1")
            .bind(name)
            .execute(&self.write)
            .await?;
        if done.rows_affected() == 0 {
            return Err(StoreError::not_found("image", name));
        }
        Ok(())
    }
}
