//! Sessions: what a user submits, and a session as the API shows it.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use corral_core::{Session, SessionState, SessionType, Slots, Timestamp};

/// `POST /sessions`: what a user submits.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct NewSession {
    #[cfg_attr(feature = "openapi", schema(value_type = corral_core::openapi::Name))]
    pub group: String,
    /// `batch` unless given, or unless the session serves apps (then `interactive`): only an
    /// interactive session may be ended by its group's idle policy.
    #[serde(rename = "type", default)]
    pub kind: Option<SessionType>,
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<corral_core::openapi::ImageName>))]
    pub image: Option<String>,
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(value_type = Vec<crate::openapi::NoNul>))]
    pub command: Vec<String>,
    #[cfg_attr(feature = "openapi", schema(value_type = corral_core::openapi::RequiredSlots))]
    pub request: Slots,
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(minimum = -1000, maximum = 1000))]
    pub priority: i32,
    /// Files the user uploads before it may start, relative to its working directory.
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(value_type = Vec<crate::openapi::SessionPath>, max_items = 1000))]
    pub inputs: Vec<String>,
    /// Paths collected when it ends, relative to its working directory.
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(value_type = Vec<crate::openapi::SessionPath>, max_items = 1000))]
    pub outputs: Vec<String>,
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(value_type = crate::openapi::Environment))]
    pub environment: BTreeMap<String, String>,
    /// Which devices of a kind it accepts: a model pattern, a least device memory.
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(max_items = 8))]
    pub constraints: Vec<corral_core::DeviceConstraint>,
    /// The ports it serves by name: `http` apps the manager serves under
    /// `/apps/{session}/{app}/`, `tcp` apps for `session port-forward`. At most 16.
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(value_type = crate::openapi::AppsByName))]
    pub apps: crate::apps::Apps,
    /// Submits an array: one session per index of the range (`{"first": 0, "last": 9999,
    /// "step": 2, "max_running": 100}` is `0-9999:2%100`), all or none, each with
    /// `CORRAL_ARRAY_ID` and `CORRAL_ARRAY_INDEX` in its environment and `{index}` replaced by
    /// its index in its command, inputs and outputs. At most 1,000,000 sessions; a range that
    /// is not one is a 400 naming `array`. Not on a group whose sessions run as batch jobs
    /// (422).
    #[serde(default)]
    pub array: Option<corral_core::ArrayRange>,
    /// Its time limit in seconds (`corral session submit --time 2h`): its agent stops it this
    /// long after it started (SIGTERM, then SIGKILL after the agent's grace), and it fails with
    /// the reason `time limit`. Null takes the group's default
    /// (`policy.termination.default_time_limit_secs`); more than the group's
    /// `max_lifetime_secs` is refused (400 naming `time_limit_secs`).
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(minimum = 1, maximum = 31_622_400))]
    pub time_limit_secs: Option<u64>,
}

/// The longest time limit a session may ask for: 366 days.
pub const MAX_TIME_LIMIT_SECS: u64 = 31_622_400;

/// The answer to `POST /sessions`: the new session's id and state (pending; or rejected is
/// refused with 422 instead), or of an array, the array's id and what it made.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Submitted {
    pub id: String,
    #[cfg_attr(feature = "openapi", schema(value_type = crate::openapi::Pending))]
    pub state: SessionState,
    /// What the session needs: its request, raised to its image's minimums.
    pub required: Slots,
    /// The array made, when the submission named one (`id` is then the array's id); null
    /// otherwise.
    #[serde(default)]
    pub array: Option<crate::arrays::SubmittedArray>,
}

impl NewSession {
    /// The session's type: as given, else `interactive` for a session that serves apps (a
    /// notebook is used, and left, as a terminal is), else `batch`.
    pub fn session_type(&self) -> SessionType {
        self.kind.unwrap_or(if self.apps.is_empty() {
            SessionType::Batch
        } else {
            SessionType::Interactive
        })
    }
}

/// The submitted fields the cycle does not read, kept with the session. Only its owner and
/// admins see them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Spec {
    #[serde(default)]
    pub command: Vec<String>,
    #[serde(default)]
    pub inputs: Vec<String>,
    #[serde(default)]
    pub outputs: Vec<String>,
    #[serde(default)]
    pub environment: BTreeMap<String, String>,
    /// The ports it serves by name (`corral session run --app jupyter=8888`).
    #[serde(default)]
    pub apps: crate::apps::Apps,
    /// Its time limit in seconds, as given or the group's default when it was submitted; null
    /// for none.
    #[serde(default)]
    pub time_limit_secs: Option<u64>,
}

/// A session as the API shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SessionView {
    #[serde(flatten)]
    pub session: Session,
    #[serde(flatten)]
    pub spec: Spec,
    /// What it holds on its agent while scheduled or running.
    pub allocation: Option<Slots>,
    /// Why it waits, from the last pass that left it pending.
    pub wait_reason: Option<String>,
    /// Why it ended (rejected, cancelled, failed...).
    pub end_reason: Option<String>,
    /// The exit code its command ended with, once it ran.
    pub exit_code: Option<i32>,
    /// When it started running.
    #[serde(default)]
    pub started_at: Option<Timestamp>,
    /// When its state last changed.
    pub updated_at: Timestamp,
    /// The scheduler's job that runs it, on a group whose sessions run as batch jobs.
    #[serde(default)]
    pub batch_job: Option<String>,
    /// Its index in its array (`array` names the array); null for a session of no array.
    #[serde(default)]
    pub array_index: Option<u32>,
    /// Its state changes, oldest first; in `GET /sessions/{id}` only.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub history: Vec<HistoryEntry>,
}

impl SessionView {
    /// Why it is where it is: what it waits for, or how it ended.
    pub fn reason(&self) -> Option<&str> {
        self.wait_reason.as_deref().or(self.end_reason.as_deref())
    }
}

/// One state change of a session.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct HistoryEntry {
    pub at: Timestamp,
    pub state: SessionState,
    pub reason: String,
}

/// `GET /sessions`: every given field must match; `after` continues after that session id.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::IntoParams), into_params(parameter_in = Query))]
#[serde(deny_unknown_fields)]
pub struct SessionQuery {
    pub group: Option<String>,
    pub owner: Option<String>,
    pub state: Option<SessionState>,
    /// Clamped to 1..=1000; default 100.
    pub limit: Option<u32>,
    /// A session id: continue after it.
    pub after: Option<String>,
    /// By submission: `oldest` first [default] or `newest` first.
    pub order: Option<Order>,
    /// Only sessions not ended (pending, scheduled, running) with `true`; only ended ones with
    /// `false`.
    pub active: Option<bool>,
    /// Only the sessions of this array (by index), or with `none`, only sessions of no array
    /// (with `GET /arrays`, what a listing that folds arrays reads). An unknown array is a 404.
    pub array: Option<String>,
}

/// Which sessions a listing shows first.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum Order {
    #[default]
    Oldest,
    Newest,
}

/// One file of a session's outputs (`GET /sessions/{id}/outputs`), `path` relative to its
/// output directory.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct OutputFile {
    pub path: String,
    /// Bytes.
    pub size: u64,
}
