//! Batch systems: the one a group is bound to (its configuration as JSON), and the jobs Corral
//! submitted to it with the user each was submitted for.

use corral_core::Timestamp;

use crate::{Result, Store, StoreError};

impl Store {
    /// A group's batch system configuration (JSON), `None` when it is bound to none.
    pub async fn get_group_batch(&self, group: &str) -> Result<Option<String>> {
        let row: Option<Option<String>> =
            sqlx::query_scalar("SELECT batch FROM groups WHERE name = $1")
                .bind(group)
                .fetch_optional(&self.read)
                .await?;
        row.ok_or_else(|| StoreError::not_found("group", group))
    }

    /// Binds a group to a batch system (JSON), or unbinds it (`None`).
    pub async fn set_group_batch(
        &self,
        group: &str,
        batch: Option<&str>,
        now: Timestamp,
    ) -> Result<()> {
        let done = sqlx::query("UPDATE groups SET batch = $2, updated_at = $3 WHERE name = $1")
            .bind(group)
            .bind(batch)
            .bind(now.0)
            .execute(&self.write)
            .await?;
        if done.rows_affected() == 0 {
            return Err(StoreError::not_found("group", group));
        }
        Ok(())
    }

    /// Records that Corral submitted job `job_id` for `owner`.
    pub async fn record_batch_job(
        &self,
        group: &str,
        job_id: &str,
        owner: &str,
        now: Timestamp,
    ) -> Result<()> {
        sqlx::query(
            "INSERT INTO batch_jobs (group_name, job_id, owner, submitted_at) \
             VALUES ($1, $2, $3, $4) \
             ON CONFLICT (group_name, job_id) DO UPDATE SET owner = excluded.owner, \
             submitted_at = excluded.submitted_at",
        )
        .bind(group)
        .bind(job_id)
        .bind(owner)
        .bind(now.0)
        .execute(&self.write)
        .await?;
        Ok(())
    }

    /// Every job Corral submitted to the group's batch system, with its owner: `(job id, owner)`,
    /// of `owner` only when given.
    pub async fn batch_jobs(
        &self,
        group: &str,
        owner: Option<&str>,
    ) -> Result<Vec<(String, String)>> {
        let rows: Vec<(String, String)> = sqlx::query_as(
            "SELECT job_id, owner FROM batch_jobs \
             WHERE group_name = $1 AND ($2 IS NULL OR owner = $2) ORDER BY submitted_at, job_id",
        )
        .bind(group)
        .bind(owner)
        .fetch_all(&self.read)
        .await?;
        Ok(rows)
    }

    /// Who Corral submitted job `job_id` for, if it did.
    pub async fn batch_job_owner(&self, group: &str, job_id: &str) -> Result<Option<String>> {
        Ok(
            sqlx::query_scalar(
                "SELECT owner FROM batch_jobs WHERE group_name = $1 AND job_id = $2",
            )
            .bind(group)
            .bind(job_id)
            .fetch_optional(&self.read)
            .await?,
        )
    }
}
