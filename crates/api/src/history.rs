//! A group's history: nodes by template and sessions by state, sampled over a window, with the
//! scaling events in it (`GET /groups/{name}/history`).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use corral_core::Timestamp;

use crate::events::Event;

/// Samples one answer holds at most; a longer window needs a longer step.
pub const MAX_SAMPLES: u64 = 1000;
/// Scaling events one answer holds at most (the newest are kept).
pub const MAX_EVENTS: u32 = 500;

/// `GET /groups/{name}/history`: the window and the step between samples.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::IntoParams), into_params(parameter_in = Query))]
#[serde(deny_unknown_fields)]
pub struct HistoryQuery {
    /// Where the window starts: ms since the epoch, an RFC 3339 time, or a duration before now
    /// (`6h`, `90m`, `1d`). Default (or empty): 6 hours before now.
    #[cfg_attr(
        feature = "openapi",
        param(
            pattern = r"^(|-?[0-9]{1,15}|[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|1[0-9]|2[0-8])T([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9]Z|[1-9][0-9]{0,5}[smhd])$"
        )
    )]
    pub since: Option<String>,
    /// Where it ends, in the same forms. Default (or empty): now.
    #[cfg_attr(
        feature = "openapi",
        param(
            pattern = r"^(|-?[0-9]{1,15}|[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|1[0-9]|2[0-8])T([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9]Z|[1-9][0-9]{0,5}[smhd])$"
        )
    )]
    pub until: Option<String>,
    /// Between samples: a duration (`30s`, `5m`) or a number of seconds. Default: the window in
    /// 120 steps, at least 1 s. At most 1000 samples.
    #[cfg_attr(feature = "openapi", param(pattern = r"^(|[1-9][0-9]{0,5}[smhd]?)$"))]
    pub step: Option<String>,
}

/// The most of each series over each step (`GroupHistory::peak`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Peaks {
    pub nodes: BTreeMap<String, Vec<u32>>,
    pub pending: Vec<u32>,
    pub running: Vec<u32>,
}

/// The mean of each series over each step (`GroupHistory::mean`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Means {
    pub nodes: BTreeMap<String, Vec<f64>>,
    pub pending: Vec<f64>,
    pub running: Vec<f64>,
}

/// The series of a group over a window: each list has one value per sample time.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct GroupHistory {
    pub group: String,
    pub since: Timestamp,
    pub until: Timestamp,
    pub step_ms: u64,
    /// The sample times: `until`, and every `step_ms` before it back to `since` (oldest first).
    pub times: Vec<Timestamp>,
    /// Nodes (agents that joined and were not yet let go, lost ones included) by template;
    /// `-` for agents of no template (registered by hand). Templates with no node in the
    /// window are left out.
    pub nodes: BTreeMap<String, Vec<u32>>,
    /// Sessions waiting in the queue.
    pub pending: Vec<u32>,
    /// Sessions on an agent (scheduled or running).
    pub running: Vec<u32>,
    /// The most of each series at any time of each step (the step that ends at the sample
    /// time): a burst between two samples shows here, not in the counts at sample times.
    pub peak: Peaks,
    /// The time-weighted mean of each series over each step, to a hundredth.
    pub mean: Means,
    /// What the scaler and the agents did in the window, oldest first: launches, marks,
    /// terminations, joins, losses.
    pub events: Vec<Event>,
    /// More events happened in the window than `events` holds (the newest are kept).
    pub events_truncated: bool,
}
