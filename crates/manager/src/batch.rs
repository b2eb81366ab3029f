//! Groups' batch systems: each group's adaptor, connected once per configuration and kept
//! (Slurm's is asked where it keeps finished jobs when it connects), and what their errors mean
//! to an API caller.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::http::StatusCode;
use corral_batch::{BatchConfig, BatchError, BatchSystem};
use serde_json::json;

use crate::error::ApiError;
use crate::App;

/// A group's batch system: its adaptor and the binding it was made from.
pub struct Bound {
    pub system: Box<dyn BatchSystem>,
    pub config: BatchConfig,
}

/// A group's bound system and the binding (JSON) as stored.
type Connected = (String, Arc<Bound>);

/// How long a group known to run its sessions on agents is taken to still do so: submits read
/// no binding meanwhile (a binding changed through another manager reaches this one's submits
/// within this time; through this one, at once).
const ON_AGENTS_FOR: Duration = Duration::from_secs(5);

/// The connected adaptor of each group.
#[derive(Default)]
pub struct Batches {
    connected: Mutex<HashMap<String, Connected>>,
    /// Groups whose sessions run on agents, and since when that is known.
    on_agents: Mutex<HashMap<String, Instant>>,
}

impl Batches {
    /// The group's batch system; 409 when the group is bound to none (the group is there; it
    /// is not in a state to answer).
    pub async fn of(&self, app: &App, group: &str) -> Result<Arc<Bound>, ApiError> {
        let stored = app.store.get_group_batch(group).await?.ok_or_else(|| {
            ApiError::new(
                StatusCode::CONFLICT,
                "not_bound",
                format!(
                    "group {group:?} has no batch system; an admin binds one with \
                     `corral batch bind --group {group} SYSTEM`"
                ),
            )
        })?;
        if let Some((json, system)) = self.lock().get(group) {
            if *json == stored {
                return Ok(system.clone());
            }
        }
        let config: BatchConfig = serde_json::from_str(&stored).map_err(|e| {
            tracing::error!(group, error = %e, "stored batch configuration does not parse");
            ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "internal",
                format!(
                    "group {group:?}: the stored batch configuration does not parse; bind it again"
                ),
            )
        })?;
        let bound = Arc::new(Bound {
            system: config.connect().await?,
            config,
        });
        self.lock()
            .insert(group.to_string(), (stored, bound.clone()));
        Ok(bound)
    }

    /// The group's batch system if its sessions run as its jobs (binding option `sessions`);
    /// `None` for any other group, or one that does not exist (its submit says so). A group
    /// found running its sessions on agents is taken to go on doing so for `ON_AGENTS_FOR`, so
    /// that its submits read no binding.
    pub async fn for_sessions(
        &self,
        app: &App,
        group: &str,
    ) -> Result<Option<Arc<Bound>>, ApiError> {
        if !self.runs_sessions(app, group).await? {
            return Ok(None);
        }
        self.of(app, group).await.map(Some)
    }

    /// Whether the group runs its sessions as batch jobs (binding option `sessions`), read
    /// from its binding without connecting its adaptor; as [`Batches::for_sessions`] reads it.
    pub async fn runs_sessions(&self, app: &App, group: &str) -> Result<bool, ApiError> {
        let known = self.on_agents().get(group).copied();
        if known.is_some_and(|since| since.elapsed() < ON_AGENTS_FOR) {
            return Ok(false);
        }
        let stored = match app.store.get_group_batch(group).await {
            Ok(Some(stored)) => Some(stored),
            Ok(None) => None,
            Err(corral_store::StoreError::NotFound { .. }) => return Ok(false),
            Err(e) => return Err(e.into()),
        };
        let sessions = stored.as_deref().is_some_and(|stored| {
            serde_json::from_str::<BatchConfig>(stored).is_ok_and(|c| c.options.sessions)
        });
        if !sessions {
            self.on_agents().insert(group.to_string(), Instant::now());
        }
        Ok(sessions)
    }

    /// Forgets the group's adaptor and how its sessions run (its binding changed or went).
    pub fn forget(&self, group: &str) {
        self.lock().remove(group);
        self.on_agents().remove(group);
    }

    fn on_agents(&self) -> std::sync::MutexGuard<'_, HashMap<String, Instant>> {
        self.on_agents.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Connected>> {
        self.connected.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The job a scheduler's id belongs to, as Corral records whose it is: its leading number
/// (`123` of Slurm's task `123_4`, Grid Engine's `123.4`, LSF's `123[4]`, PBS's `123.server`).
pub fn job_key(id: &str) -> &str {
    let end = id.find(|c: char| !c.is_ascii_digit()).unwrap_or(id.len());
    &id[..end]
}

impl From<BatchError> for ApiError {
    fn from(e: BatchError) -> Self {
        let message = e.to_string();
        match e {
            BatchError::InvalidSpec { field, message } => ApiError::invalid(&field, message),
            BatchError::Refused { scheduler, .. } => {
                ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, "refused", message)
                    .with_details(json!({"scheduler": scheduler}))
            }
            BatchError::NoSuchJob { id } => ApiError::not_found("job", &id),
            BatchError::Unsupported { scheduler, .. } => {
                ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, "unsupported", message)
                    .with_details(json!({"scheduler": scheduler}))
            }
            // The scheduler, not the request: the operator's to fix.
            BatchError::CommandMissing { .. } => {
                tracing::warn!(error = %message, "batch system unavailable");
                ApiError::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "batch_unavailable",
                    message,
                )
            }
            BatchError::Timeout { .. } => {
                tracing::warn!(error = %message, "batch system timed out");
                ApiError::new(StatusCode::GATEWAY_TIMEOUT, "batch_timeout", message)
            }
            BatchError::Parse { .. } | BatchError::Io { .. } | BatchError::Staging { .. } => {
                tracing::warn!(error = %message, "batch system failed");
                ApiError::new(StatusCode::BAD_GATEWAY, "batch_failed", message)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::job_key;

    #[test]
    fn tasks_belong_to_their_job() {
        for (id, key) in [
            ("123", "123"),
            ("123_4", "123"),
            ("123.4", "123"),
            ("123[4]", "123"),
            ("123.server", "123"),
            ("x", ""),
        ] {
            assert_eq!(job_key(id), key, "{id}");
        }
    }
}
