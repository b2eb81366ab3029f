//! Batch systems: the one a group is bound to (its configuration as JSON), and the jobs Corral
//! submitted to it with the user each was submitted for.

use corral_core::{Session, SessionState, Timestamp};

use sqlx::Row;

use crate::codec::{Arg, Where};
use crate::sessions::{insert_history, insert_one, record_from_row, session_columns};
use crate::{locked, Result, SessionRecord, Store, StoreError, Tx};

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

    /// Records a job Corral submitted (again: replaces the record).
    pub async fn record_batch_job(
        &self,
        group: &str,
        job: &BatchJobRecord,
        now: Timestamp,
    ) -> Result<()> {
        let mut tx = self.write_tx().await?;
        upsert_job(&mut tx, group, job, now).await?;
        tx.commit().await?;
        Ok(())
    }

    /// Stores a session of a group whose sessions run as batch jobs, with the record of the job
    /// that runs it (`job.session` is set to it), in one transaction. `NotFound` if its group
    /// does not exist, `Conflict` if its id is taken.
    pub async fn insert_batch_session(
        &self,
        session: &Session,
        spec: &serde_json::Value,
        job: &BatchJobRecord,
        now: Timestamp,
    ) -> Result<()> {
        let mut tx = self.write_tx().await?;
        self.hold_group(&mut tx, &session.group).await?;
        insert_one(&mut tx, session, spec, Some(&job.job_id), now).await?;
        let job = BatchJobRecord {
            session: Some(session.id.0.clone()),
            ..job.clone()
        };
        upsert_job(&mut tx, &session.group, &job, now).await?;
        tx.commit().await?;
        Ok(())
    }

    /// The group's sessions that run as batch jobs and have not ended (pending or running),
    /// oldest first.
    pub async fn active_batch_sessions(&self, group: &str) -> Result<Vec<SessionRecord>> {
        sqlx::query(concat!(
            "SELECT ",
            session_columns!(),
            " FROM sessions WHERE group_name = $1 AND batch_job IS NOT NULL \
             AND state IN ('pending', 'running') ORDER BY submitted_at, id"
        ))
        .bind(group)
        .fetch_all(&self.read)
        .await?
        .iter()
        .map(record_from_row)
        .collect()
    }

    /// A pending session's batch job has started. `Conflict` unless it was pending and runs as
    /// a batch job.
    pub async fn start_batch_session(&self, id: &str, now: Timestamp, reason: &str) -> Result<()> {
        let mut tx = self.write_tx().await?;
        let done = sqlx::query(
            "UPDATE sessions SET state = 'running', wait_reason = NULL, updated_at = $2, \
             started_at = $2, last_activity = $2 \
             WHERE id = $1 AND state = 'pending' AND batch_job IS NOT NULL",
        )
        .bind(id)
        .bind(now.0)
        .execute(&mut *tx)
        .await?;
        if done.rows_affected() == 0 {
            return Err(StoreError::conflict("session", id));
        }
        insert_history(&mut tx, id, now, SessionState::Running, reason).await?;
        tx.commit().await?;
        Ok(())
    }

    /// Why a pending session waits (a batch job's: the scheduler's reason); nothing for a
    /// session that is no longer pending.
    pub async fn set_wait_reason(&self, id: &str, reason: Option<&str>) -> Result<()> {
        sqlx::query("UPDATE sessions SET wait_reason = $2 WHERE id = $1 AND state = 'pending'")
            .bind(id)
            .bind(reason)
            .execute(&self.write)
            .await?;
        Ok(())
    }

    /// The groups bound to a batch system, with their bindings (JSON), by name.
    pub async fn bound_groups(&self) -> Result<Vec<(String, String)>> {
        Ok(
            sqlx::query_as("SELECT name, batch FROM groups WHERE batch IS NOT NULL ORDER BY name")
                .fetch_all(&self.read)
                .await?,
        )
    }

    /// Of the jobs `job_ids`, those Corral submitted to the group's batch system, with their
    /// owners: `(job id, owner)`, of `owner` only when given. Looked up by id, so a listing costs
    /// what the scheduler lists, not every job ever submitted.
    pub async fn batch_owners(
        &self,
        group: &str,
        job_ids: &[String],
        owner: Option<&str>,
    ) -> Result<Vec<(String, String)>> {
        // Well under SQLite's limit of bound values per statement.
        const CHUNK: usize = 500;
        let mut owners = Vec::new();
        for ids in job_ids.chunks(CHUNK) {
            let mut w = Where::default();
            w.and("group_name = ?", [Arg::Text(group.to_string())]);
            let marks = vec!["?"; ids.len()].join(", ");
            w.and(
                &format!("job_id IN ({marks})"),
                ids.iter().map(|id| Arg::Text(id.clone())),
            );
            if let Some(owner) = owner {
                w.and("owner = ?", [Arg::Text(owner.to_string())]);
            }
            let sql = format!("SELECT job_id, owner FROM batch_jobs{}", w.sql());
            for row in w.query(sql).fetch_all(&self.read).await? {
                owners.push((row.try_get(0)?, row.try_get(1)?));
            }
        }
        owners.sort();
        Ok(owners)
    }

    /// The record of job `job_id`, if Corral submitted it.
    pub async fn batch_job(&self, group: &str, job_id: &str) -> Result<Option<BatchJobRecord>> {
        let row: Option<BatchRow> = sqlx::query_as(
            "SELECT job_id, owner, directory, awaiting, outputs, release_after_inputs, session \
             FROM batch_jobs WHERE group_name = $1 AND job_id = $2",
        )
        .bind(group)
        .bind(job_id)
        .fetch_optional(&self.read)
        .await?;
        row.map(record).transpose()
    }

    /// Input `path` of job `job_id` has been written: the inputs it still awaits after it, or
    /// `None` if it was not awaiting that one (not an input of it, or uploaded already).
    pub async fn batch_input_received(
        &self,
        group: &str,
        job_id: &str,
        path: &str,
    ) -> Result<Option<Vec<String>>> {
        let mut tx = self.write_tx().await?;
        let awaiting: Option<String> = sqlx::query_scalar(self.locking(locked!(
            "SELECT awaiting FROM batch_jobs WHERE group_name = $1 AND job_id = $2"
        )))
        .bind(group)
        .bind(job_id)
        .fetch_optional(&mut *tx)
        .await?;
        let Some(awaiting) = awaiting else {
            return Ok(None);
        };
        let mut awaiting: Vec<String> = parse(&awaiting, "awaiting")?;
        let Some(at) = awaiting.iter().position(|p| p == path) else {
            return Ok(None);
        };
        awaiting.remove(at);
        sqlx::query("UPDATE batch_jobs SET awaiting = $3 WHERE group_name = $1 AND job_id = $2")
            .bind(group)
            .bind(job_id)
            .bind(json(&awaiting))
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(Some(awaiting))
    }
}

/// A batch job Corral submitted: for whom, and the files it stages and collects.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BatchJobRecord {
    /// The job's key: its leading number (an array's tasks are their array's).
    pub job_id: String,
    pub owner: String,
    /// The directory Corral made for its files.
    pub directory: Option<String>,
    /// Inputs not uploaded yet.
    pub awaiting: Vec<String>,
    pub outputs: Vec<String>,
    /// Held for its inputs (not by its submitter): the last one releases it.
    pub release_after_inputs: bool,
    /// The session it runs, if it runs one.
    pub session: Option<String>,
}

type BatchRow = (
    String,
    String,
    Option<String>,
    String,
    String,
    i64,
    Option<String>,
);

/// Inserts the job's record, or replaces it.
async fn upsert_job(tx: &mut Tx, group: &str, job: &BatchJobRecord, now: Timestamp) -> Result<()> {
    sqlx::query(
        "INSERT INTO batch_jobs (group_name, job_id, owner, submitted_at, directory, \
         awaiting, outputs, release_after_inputs, session) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) \
         ON CONFLICT (group_name, job_id) DO UPDATE SET owner = excluded.owner, \
         submitted_at = excluded.submitted_at, directory = excluded.directory, \
         awaiting = excluded.awaiting, outputs = excluded.outputs, \
         release_after_inputs = excluded.release_after_inputs, session = excluded.session",
    )
    .bind(group)
    .bind(&job.job_id)
    .bind(&job.owner)
    .bind(now.0)
    .bind(&job.directory)
    .bind(json(&job.awaiting))
    .bind(json(&job.outputs))
    .bind(i64::from(job.release_after_inputs))
    .bind(&job.session)
    .execute(&mut **tx)
    .await?;
    Ok(())
}

fn record(
    (job_id, owner, directory, awaiting, outputs, release, session): BatchRow,
) -> Result<BatchJobRecord> {
    Ok(BatchJobRecord {
        awaiting: parse(&awaiting, "awaiting")?,
        outputs: parse(&outputs, "outputs")?,
        job_id,
        owner,
        directory,
        release_after_inputs: release != 0,
        session,
    })
}

fn json(paths: &[String]) -> String {
    serde_json::to_string(paths).expect("strings print")
}

fn parse(text: &str, column: &str) -> Result<Vec<String>> {
    serde_json::from_str(text).map_err(|e| StoreError::Corrupt(format!("batch_jobs.{column}: {e}")))
}
