//! Events: what happened and why, for people.

use serde::{Deserialize, Serialize};

use corral_core::Timestamp;

/// A recorded event; `id` grows with each event and pages the list.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Event {
    pub id: i64,
    pub at: Timestamp,
    pub group: Option<String>,
    pub session: Option<String>,
    pub agent: Option<String>,
    /// A short word: `placed`, `rejected`, `launch`, `launch_failed`, `mark`, `cancelled`...
    pub kind: String,
    pub message: String,
}

/// `GET /events`: newest first; every given field must match; `before` pages down.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::IntoParams), into_params(parameter_in = Query))]
#[serde(deny_unknown_fields)]
pub struct EventQuery {
    pub group: Option<String>,
    pub session: Option<String>,
    pub agent: Option<String>,
    /// An event id: continue below it.
    pub before: Option<i64>,
    /// An event id: only the events above it, oldest first (for following).
    pub after: Option<i64>,
    /// Clamped to 1..=1000; default 100.
    pub limit: Option<u32>,
    /// With `after`: when there is no newer event yet, wait for one for at most this many ms
    /// (0 to 30,000; default 0: answer at once).
    #[cfg_attr(feature = "openapi", param(maximum = 30_000))]
    pub wait_ms: Option<u64>,
}
