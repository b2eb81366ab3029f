//! Agents as operators manage them (the agent daemon's own calls are in `protocol`).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use corral_core::Slots;

/// `POST /agents` (admin): an agent registered by hand, the static provider's way to join.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct RegisterAgent {
    #[cfg_attr(feature = "openapi", schema(value_type = corral_core::openapi::Name))]
    pub id: String,
    #[cfg_attr(feature = "openapi", schema(value_type = corral_core::openapi::Name))]
    pub group: String,
    #[cfg_attr(feature = "openapi", schema(value_type = corral_core::openapi::RequiredSlots))]
    pub capacity: Slots,
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    #[serde(default)]
    pub template: Option<String>,
    /// Its devices one by one, as an agent joining lists them; a device kind in `capacity`
    /// without a list here is that many devices of an unknown model.
    #[serde(default)]
    pub devices: Vec<corral_core::Device>,
}

/// `GET /agents`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::IntoParams), into_params(parameter_in = Query))]
#[serde(deny_unknown_fields)]
pub struct AgentQuery {
    /// Only agents of this group (404 if there is no such group).
    pub group: Option<String>,
    /// Only agents in this state.
    pub state: Option<corral_core::AgentState>,
}

/// `DELETE /agents/{id}`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::IntoParams), into_params(parameter_in = Query))]
#[serde(deny_unknown_fields)]
pub struct RemoveAgent {
    /// Gone for good: the group no longer counts on it. By default a removed agent's shape is
    /// remembered for the manager's retention, and sessions only it could hold wait for it
    /// rather than being refused.
    #[serde(default)]
    pub forget: bool,
}
