//! Scaling groups: creating and changing them, and what the API shows of them and their queue.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use corral_core::{InstanceTemplate, ScalingGroup, ScalingPolicy, SchedulerConfig, Slots};

use crate::ProviderConfig;

/// `POST /groups` and `PUT /groups/{name}`: the whole group.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct NewGroup {
    #[cfg_attr(feature = "openapi", schema(value_type = corral_core::openapi::Name))]
    pub name: String,
    #[serde(default)]
    pub policy: ScalingPolicy,
    #[serde(default)]
    pub scheduler: SchedulerConfig,
    #[serde(default)]
    pub templates: Vec<InstanceTemplate>,
    /// The provider; absent means static on create and unchanged on replace.
    #[serde(default)]
    pub provider: Option<ProviderConfig>,
}

/// A group as the API shows it: its configuration, with its provider's secrets redacted.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct GroupView {
    #[serde(flatten)]
    pub group: ScalingGroup,
    pub provider: ProviderConfig,
}

/// `PUT /groups/{name}/policy`: the sections given replace the group's.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct PolicyUpdate {
    #[serde(default)]
    pub policy: Option<ScalingPolicy>,
    #[serde(default)]
    pub scheduler: Option<SchedulerConfig>,
}

/// `GET /groups/{name}/shares`: what each agent has free and the least any agent offers,
/// as required shares.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Shares {
    pub available: BTreeMap<String, Slots>,
    pub minimum: Slots,
}

/// `POST /groups/{name}/required`: what a request would need in this group.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct RequiredQuestion {
    pub request: Slots,
    #[serde(default)]
    pub image: Option<String>,
    /// Which devices of a kind it accepts, as a session's constraints.
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(max_items = 8))]
    pub constraints: Vec<corral_core::DeviceConstraint>,
}

/// The answer: the request as required shares, and whether the group could ever hold it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Required {
    pub required: Slots,
    pub feasible: bool,
    /// Why not, when it could not.
    pub reason: Option<String>,
}
