//! Agent auto-update: the builds the manager serves (their files are the manager's to keep),
//! and each agent's update, from its mark to its end.

use corral_api::agent_builds::AgentBuild;
use corral_core::{Agent, AgentUpdate, ScalingPolicy};
use sqlx::any::AnyRow;

use crate::agents::{agent_columns, agent_from_row};
use crate::codec::Fields;
use crate::error::{Result, StoreError};
use crate::events::{insert_event, NewEvent};
use crate::Store;

/// What the manager judges an idle agent's update by.
#[derive(Debug, Clone, PartialEq)]
pub struct UpdateStanding {
    pub agent: Agent,
    /// Its group's agent auto-update policy now.
    pub policy: AgentUpdate,
    /// The target of its last update that failed.
    pub failed: Option<String>,
}

fn build_from_row(row: &AnyRow) -> Result<AgentBuild> {
    let f = Fields::new(row, "agent build", "version")?;
    Ok(AgentBuild {
        version: f.text("version")?,
        platform: f.text("platform")?,
        sha256: f.text("sha256")?,
        size: u64::try_from(f.int("size")?)
            .map_err(|_| StoreError::Corrupt("agent build: a negative size".into()))?,
        uploaded_at: f.time("uploaded_at")?,
    })
}

macro_rules! build_columns {
    () => {
        "version, platform, sha256, size, uploaded_at"
    };
}

async fn file_held<'e>(
    db: impl sqlx::Executor<'e, Database = sqlx::Any>,
    sha256: &str,
) -> Result<bool> {
    let builds: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM agent_builds WHERE sha256 = $1")
        .bind(sha256)
        .fetch_one(db)
        .await?;
    Ok(builds > 0)
}

impl Store {
    /// Records `build`. Uploading the same file again is a no-op; another file under the same
    /// version and platform is `Refused` (a version names one build for good).
    pub async fn put_agent_build(&self, build: &AgentBuild) -> Result<AgentBuild> {
        let mut tx = self.write_tx().await?;
        let held = sqlx::query(concat!(
            "SELECT ",
            build_columns!(),
            " FROM agent_builds WHERE version = $1 AND platform = $2"
        ))
        .bind(&build.version)
        .bind(&build.platform)
        .fetch_optional(&mut *tx)
        .await?
        .as_ref()
        .map(build_from_row)
        .transpose()?;
        if let Some(held) = held {
            if held.sha256 == build.sha256 {
                return Ok(held);
            }
            return Err(StoreError::Refused(format!(
                "version {} for {} is held already, as another file (SHA-256 {}): a version \
                 names one build; upload this one under a new version",
                held.version, held.platform, held.sha256
            )));
        }
        sqlx::query(
            "INSERT INTO agent_builds (version, platform, sha256, size, uploaded_at) \
             VALUES ($1, $2, $3, $4, $5)",
        )
        .bind(&build.version)
        .bind(&build.platform)
        .bind(&build.sha256)
        .bind(i64::try_from(build.size).unwrap_or(i64::MAX))
        .bind(build.uploaded_at.0)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(build.clone())
    }

    /// Every build, by version and platform.
    pub async fn list_agent_builds(&self) -> Result<Vec<AgentBuild>> {
        sqlx::query(concat!(
            "SELECT ",
            build_columns!(),
            " FROM agent_builds ORDER BY version, platform"
        ))
        .fetch_all(&self.read)
        .await?
        .iter()
        .map(build_from_row)
        .collect()
    }

    pub async fn get_agent_build(
        &self,
        version: &str,
        platform: &str,
    ) -> Result<Option<AgentBuild>> {
        sqlx::query(concat!(
            "SELECT ",
            build_columns!(),
            " FROM agent_builds WHERE version = $1 AND platform = $2"
        ))
        .bind(version)
        .bind(platform)
        .fetch_optional(&self.read)
        .await?
        .as_ref()
        .map(build_from_row)
        .transpose()
    }

    /// Forgets a build; whether another build still has its file (the same SHA-256).
    /// `NotFound` without it.
    pub async fn delete_agent_build(
        &self,
        version: &str,
        platform: &str,
    ) -> Result<(AgentBuild, bool)> {
        let mut tx = self.write_tx().await?;
        let build = sqlx::query(concat!(
            "DELETE FROM agent_builds WHERE version = $1 AND platform = $2 RETURNING ",
            build_columns!()
        ))
        .bind(version)
        .bind(platform)
        .fetch_optional(&mut *tx)
        .await?
        .as_ref()
        .map(build_from_row)
        .transpose()?
        .ok_or_else(|| StoreError::not_found("agent build", format!("{version} {platform}")))?;
        let shared = file_held(&mut *tx, &build.sha256).await?;
        tx.commit().await?;
        Ok((build, shared))
    }

    /// Whether a build names the file of digest `sha256`.
    pub async fn agent_build_file_held(&self, sha256: &str) -> Result<bool> {
        file_held(&self.read, sha256).await
    }

    /// Agent `id`, its group's update policy and its last failed target; `None` without it.
    pub async fn update_standing(&self, id: &str) -> Result<Option<UpdateStanding>> {
        // No column of groups shares a name with one of agents.
        let row = sqlx::query(concat!(
            "SELECT ",
            agent_columns!(),
            ", update_failed, policy FROM agents \
             JOIN groups ON groups.name = agents.group_name WHERE agents.id = $1"
        ))
        .bind(id)
        .fetch_optional(&self.read)
        .await?;
        let Some(row) = row else { return Ok(None) };
        let agent = agent_from_row(&row)?;
        let f = Fields::new(&row, "agent", "id")?;
        let policy: ScalingPolicy = f.json("policy")?;
        Ok(Some(UpdateStanding {
            agent,
            policy: policy.agent_update,
            failed: f.opt_text("update_failed")?,
        }))
    }

    /// Marks agent `id` to update itself to `target`, with `event`, if it is still alive and
    /// holds nothing; whether it was.
    pub async fn mark_for_update(&self, id: &str, target: &str, event: &NewEvent) -> Result<bool> {
        let mark = sqlx::query(
            "UPDATE agents SET state = 'marked', updating = $2 \
             WHERE id = $1 AND state = 'alive' AND allocated = ''",
        )
        .bind(id)
        .bind(target);
        self.change_with_event(mark, event).await
    }

    /// Ends agent `id`'s update to `target`, with `event`: its mark is lifted (not a drain by
    /// hand), and when it `failed` the target is not tried again until it changes. Whether it
    /// was updating to `target`.
    pub async fn end_update(
        &self,
        id: &str,
        target: &str,
        failed: bool,
        event: &NewEvent,
    ) -> Result<bool> {
        let end = sqlx::query(
            "UPDATE agents SET \
             state = CASE WHEN state = 'marked' AND NOT drained_by_hand THEN 'alive' ELSE state END, \
             updating = NULL, update_failed = CASE WHEN $3 THEN updating ELSE update_failed END \
             WHERE id = $1 AND updating = $2",
        )
        .bind(id)
        .bind(target)
        .bind(failed);
        self.change_with_event(end, event).await
    }

    /// Runs `change` and, when it changed a row, records `event` with it; whether it did.
    async fn change_with_event<'q>(
        &self,
        change: sqlx::query::Query<'q, sqlx::Any, sqlx::any::AnyArguments>,
        event: &NewEvent,
    ) -> Result<bool> {
        let mut tx = self.write_tx().await?;
        if change.execute(&mut *tx).await?.rows_affected() == 0 {
            return Ok(false);
        }
        insert_event(&mut tx, event).await?;
        tx.commit().await?;
        Ok(true)
    }
}
