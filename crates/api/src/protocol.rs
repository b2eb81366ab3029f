//! What the agent daemon and the manager say to each other (JSON over HTTP, always opened by
//! the agent, so agents behind NAT can join). Each sync is also the agent's heartbeat.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use corral_core::model::SessionType;
use corral_core::slots::Slots;

/// `POST /api/v1/agents/join`, with a bootstrap (admin or agent) token.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct JoinRequest {
    #[cfg_attr(feature = "openapi", schema(value_type = corral_core::openapi::Name))]
    pub id: String,
    #[cfg_attr(feature = "openapi", schema(value_type = corral_core::openapi::Name))]
    pub group: String,
    #[cfg_attr(feature = "openapi", schema(value_type = corral_core::openapi::RequiredSlots))]
    pub capacity: Slots,
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// Its devices one by one (as `nvidia-smi` lists them); a device kind in `capacity`
    /// without a list here is that many devices of an unknown model.
    #[serde(default)]
    pub devices: Vec<corral_core::Device>,
    /// The version of Corral it runs, and its platform (`linux-x86_64`): what agent
    /// auto-update compares with its group's target.
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<corral_core::openapi::Version>))]
    pub version: Option<String>,
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<corral_core::openapi::Platform>))]
    pub platform: Option<String>,
    /// A pilot's batch job, as its scheduler gave the job its id: a bootstrap token minted
    /// for a pilot joins only from its job, while the scheduler says that job runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<corral_batch::openapi::JobId>))]
    pub batch_job: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct JoinResponse {
    /// The agent's own credential for every later call.
    pub token: String,
    /// How often to sync when nothing happens.
    pub heartbeat_secs: u64,
    /// Silence after which the manager marks the agent lost; an agent whose group says
    /// `on_disconnect: stop` stops its sessions once it has not synced for this long.
    pub lost_after_secs: u64,
    /// The longest the agent's stop of its sessions may take when it stops them so (SIGTERM,
    /// then SIGKILL); the manager gives them to other agents only after it. Absent from older
    /// managers: the agent then uses its own stop grace.
    #[serde(default)]
    pub fence_grace_secs: Option<u64>,
}

/// `POST /api/v1/agents/{id}/sync`: what the agent runs and what ended since the last sync.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct SyncRequest {
    #[serde(default)]
    pub sessions: Vec<SessionReport>,
    /// Hold the answer up to this long while there is nothing to do (long poll).
    #[serde(default)]
    pub wait_secs: u64,
    /// The agent asks to take nothing new: it is about to go (e.g. its pilot job nears its
    /// walltime). The manager marks it by hand, so no policy unmarks it; what it runs goes on,
    /// and once empty the `demand` policy lets it go as any marked agent. There is no asking
    /// back.
    #[serde(default)]
    pub draining: bool,
    /// It could not update to the build the manager named: it runs on as it was.
    #[serde(default)]
    pub update_failed: Option<crate::agent_builds::UpdateFailure>,
    /// Every image it holds, sent when that changed since its last sync (a pull, a first
    /// session of an image) and after it joins.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub images: Option<Vec<crate::images::HeldImage>>,
    /// Images it could not check or pull since its last sync.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub image_problems: Vec<crate::images::ImageProblem>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
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
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum ReportedState {
    Running,
    Succeeded,
    Failed,
    /// Taken, not started yet: a session it is stopping still holds the devices granted to
    /// this one; it starts once they are free.
    Starting,
    /// Not run: its devices cannot hold what the manager granted (a device it does not have,
    /// or one its other sessions fill); `reason` says which. The manager puts it back in the
    /// queue.
    Refused,
    /// Stopped by the agent itself, as it had not reached the manager for `lost_after` (its
    /// group's `on_disconnect` is `stop`): the manager follows the group's `on_agent_lost`, as
    /// for a lost agent.
    Disconnected,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SyncResponse {
    /// Sessions placed on this agent that it does not run yet.
    pub start: Vec<Assignment>,
    /// Sessions it runs that the manager no longer wants there.
    pub stop: Vec<String>,
    /// Set when the agent is dismissed, with the reason (an external agent whose key was
    /// revoked, or whose group no longer takes external agents): it stops every session
    /// (`stop` names them) and leaves; the manager marks it lost once it falls silent.
    #[serde(default)]
    pub leave: Option<String>,
    /// Set when the agent is to update itself (it is idle, and marked so that nothing new
    /// lands on it): the build to download, check and run instead of itself.
    #[serde(default)]
    pub update: Option<crate::agent_builds::UpdateOrder>,
    /// Set while its group's image auto-update policy is on: how often it checks the images
    /// it holds. Unset, it pulls nothing by itself.
    #[serde(default)]
    pub images: Option<crate::images::ImageCheck>,
    /// Whether the agent stops its sessions once it has not synced for `lost_after` (its
    /// group's policy, as it is now).
    #[serde(default)]
    pub on_disconnect: corral_core::OnDisconnect,
}

/// A session to start, with everything the agent needs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
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
    /// The devices it is given there, by id.
    #[serde(default)]
    pub devices: Vec<corral_core::DeviceGrant>,
    /// The agent stops it this long after it started (`time limit`); none when null.
    #[serde(default)]
    pub time_limit_secs: Option<u64>,
}

/// The agent's calls, each on its route.
#[cfg(feature = "client")]
impl crate::Client {
    /// Joins (or joins again) with this client's token: a bootstrap token, or the agent's own.
    pub async fn join(&self, request: &JoinRequest) -> Result<JoinResponse, crate::ClientError> {
        self.post(&["agents", "join"], Some(request)).await?.body()
    }

    /// Reports what `agent` runs and what ended; the answer says what to start and stop.
    pub async fn sync(
        &self,
        agent: &str,
        request: &SyncRequest,
    ) -> Result<SyncResponse, crate::ClientError> {
        self.post(&["agents", agent, "sync"], Some(request))
            .await?
            .body()
    }

    /// Appends `chunk` to a session's log `stream` (`stdout`, `stderr`) at `offset`; a refusal
    /// with status 409 carries the size the manager holds in `details.size`.
    pub async fn append_log(
        &self,
        agent: &str,
        session: &str,
        stream: &str,
        offset: u64,
        chunk: Vec<u8>,
    ) -> Result<(), crate::ClientError> {
        let url = self.url(
            &["agents", agent, "sessions", session, "logs", stream],
            &[("offset", Some(offset.to_string()))],
        );
        self.send_bytes::<serde_json::Value>(reqwest::Method::POST, url, chunk)
            .await
            .map(drop)
    }

    /// Uploads one file of a session's outputs, `path` relative to its output directory.
    pub async fn put_output(
        &self,
        agent: &str,
        session: &str,
        path: &str,
        data: Vec<u8>,
    ) -> Result<(), crate::ClientError> {
        let segments = ["agents", agent, "sessions", session, "outputs"]
            .into_iter()
            .chain(path.split('/'))
            .collect::<Vec<_>>();
        let url = self.url(&segments, &[]);
        self.send_bytes::<serde_json::Value>(reqwest::Method::PUT, url, data)
            .await
            .map(drop)
    }

    /// Downloads one of a session's inputs.
    pub async fn get_input(
        &self,
        agent: &str,
        session: &str,
        path: &str,
    ) -> Result<Vec<u8>, crate::ClientError> {
        let segments = ["agents", agent, "sessions", session, "inputs"]
            .into_iter()
            .chain(path.split('/'))
            .collect::<Vec<_>>();
        self.get_bytes(&segments, &[]).await
    }
}
