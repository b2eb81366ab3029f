//! Instances asked of a group's provider, from the pass that decided the launch to their end.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use corral_core::{LaunchLimit, Timestamp};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum InstancePhase {
    /// Decided by a pass; the provider has not been asked yet.
    Requested,
    /// A manager's driver claimed it and is asking the provider to start it (claimed first,
    /// so that no two drivers launch it).
    Launching,
    /// The provider started it; its agent has not joined yet.
    Provisioning,
    /// Its agent joined.
    Joined,
    /// Its agent was let go; the provider is to terminate it.
    Terminating,
    Terminated,
    /// The launch failed, or it never joined in time.
    Failed,
}

impl InstancePhase {
    /// Counts as capacity on its way.
    pub const IN_FLIGHT: [InstancePhase; 3] = [
        InstancePhase::Requested,
        InstancePhase::Launching,
        InstancePhase::Provisioning,
    ];
    /// The provider may be running it.
    pub const LIVE: [InstancePhase; 5] = [
        InstancePhase::Requested,
        InstancePhase::Launching,
        InstancePhase::Provisioning,
        InstancePhase::Joined,
        InstancePhase::Terminating,
    ];
    /// Every phase, live or ended.
    pub const ALL: [InstancePhase; 7] = [
        InstancePhase::Requested,
        InstancePhase::Launching,
        InstancePhase::Provisioning,
        InstancePhase::Joined,
        InstancePhase::Terminating,
        InstancePhase::Terminated,
        InstancePhase::Failed,
    ];
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct InstanceRecord {
    /// The agent id it joins as.
    pub id: String,
    pub group: String,
    pub template: String,
    pub phase: InstancePhase,
    /// The vendor's id, once the provider started it.
    pub provider_id: Option<String>,
    pub requested_at: Timestamp,
    pub updated_at: Timestamp,
    /// Why it is where it is (a failure's message, why it was terminated).
    pub reason: Option<String>,
}

/// `GET /groups/{name}/instances`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::IntoParams), into_params(parameter_in = Query))]
#[serde(deny_unknown_fields)]
pub struct InstancesQuery {
    /// Also ended instances (terminated, failed).
    #[serde(default)]
    pub all: bool,
}

/// The group's instances as the manager tracks them, and the templates held back now.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct InstanceList {
    pub instances: Vec<InstanceRecord>,
    /// Per template the policy holds back now: how many it may launch, and why no more.
    pub held: BTreeMap<String, LaunchLimit>,
}
