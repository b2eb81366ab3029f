//! What the agent daemon and the manager say to each other (JSON over HTTP, always opened by
//! the agent, so agents behind NAT can join). Each sync is also the agent's heartbeat.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::model::SessionType;
use crate::slots::Slots;

/// `POST /api/v1/agents/join`, with a bootstrap (admin or agent) token.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JoinRequest {
    pub id: String,
    pub group: String,
    pub capacity: Slots,
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JoinResponse {
    /// The agent's own credential for every later call.
    pub token: String,
    /// How often to sync when nothing happens.
    pub heartbeat_secs: u64,
    /// Silence after which the manager marks the agent lost.
    pub lost_after_secs: u64,
}

/// `POST /api/v1/agents/{id}/sync`: what the agent runs and what ended since the last sync.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SyncRequest {
    #[serde(default)]
    pub sessions: Vec<SessionReport>,
    /// Hold the answer up to this long while there is nothing to do (long poll).
    #[serde(default)]
    pub wait_secs: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SessionReport {
    pub id: String,
    pub state: ReportedState,
    #[serde(default)]
    pub exit_code: Option<i32>,
    #[serde(default)]
    pub reason: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReportedState {
    Running,
    Succeeded,
    Failed,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SyncResponse {
    /// Sessions placed on this agent that it does not run yet.
    pub start: Vec<Assignment>,
    /// Sessions it runs that the manager no longer wants there.
    pub stop: Vec<String>,
}

/// A session to start, with everything the agent needs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Assignment {
    pub id: String,
    #[serde(rename = "type")]
    pub kind: SessionType,
    pub image: Option<String>,
    pub command: Vec<String>,
    pub environment: BTreeMap<String, String>,
    /// Files to fetch from the manager into the working directory before it starts.
    #[serde(default)]
    pub inputs: Vec<String>,
    pub outputs: Vec<String>,
    /// What it holds on the agent: its limits.
    pub allocation: Slots,
}
