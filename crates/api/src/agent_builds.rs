//! Agent builds the manager serves to agents that update themselves: what a build is (version,
//! platform, SHA-256), what a sync tells an agent to update to and what it answers when it
//! could not, and this build's own version and platform.

use corral_core::Timestamp;
use serde::{Deserialize, Serialize};

/// A build of `corral` the manager holds, for agents of `platform` to update to `version`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct AgentBuild {
    pub version: String,
    /// `linux-x86_64`: the operating system and architecture, as Rust names them.
    pub platform: String,
    /// The SHA-256 of the file, in lower-case hex: the agent checks what it downloads by it.
    pub sha256: String,
    pub size: u64,
    pub uploaded_at: Timestamp,
}

/// The sync's order to update: download the build (`GET /agent-builds/{version}/{platform}`),
/// check its size and digest, replace the agent's binary with it and start it again.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct UpdateOrder {
    pub version: String,
    pub platform: String,
    pub sha256: String,
    pub size: u64,
}

/// An agent's report that it could not update to `version`: it runs the version it ran.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct UpdateFailure {
    pub version: String,
    pub reason: String,
    /// The version the agent runs on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runs: Option<String>,
}

/// Comes right before the version in a built binary. The version a build reports can be
/// written there after it is built (at most [`STAMP_LEN`] bytes, the rest zeros): the agent
/// update tests make two versions of one build so.
pub const STAMP_MARK: &[u8] = b"corral-version-stamp:";
pub const STAMP_LEN: usize = 64;

/// Atomics, so that the bytes live in writable data and every read happens at run time: the
/// compiler cannot fold a value it must assume may change.
static STAMP: [std::sync::atomic::AtomicU8; STAMP_MARK.len() + STAMP_LEN] = blank_stamp();

const fn blank_stamp() -> [std::sync::atomic::AtomicU8; STAMP_MARK.len() + STAMP_LEN] {
    use std::sync::atomic::AtomicU8;
    let mut stamp = [const { AtomicU8::new(0) }; STAMP_MARK.len() + STAMP_LEN];
    let mut i = 0;
    while i < STAMP_MARK.len() {
        stamp[i] = AtomicU8::new(STAMP_MARK[i]);
        i += 1;
    }
    stamp
}

/// This build's version: the one stamped into it, if any, else the crate's.
pub fn version() -> &'static str {
    static VERSION: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    VERSION.get_or_init(|| {
        let stamped: Vec<u8> = STAMP[STAMP_MARK.len()..]
            .iter()
            .map(|b| b.load(std::sync::atomic::Ordering::Relaxed))
            .take_while(|&b| b != 0)
            .collect();
        match String::from_utf8(stamped) {
            Ok(v) if !v.is_empty() => v,
            _ => env!("CARGO_PKG_VERSION").to_string(),
        }
    })
}

/// The platform this build runs on: `linux-x86_64`.
pub fn platform() -> String {
    format!("{}-{}", std::env::consts::OS, std::env::consts::ARCH)
}

#[cfg(feature = "client")]
impl crate::Client {
    /// Starts downloading the build of `version` for `platform`; read it piece by piece.
    pub async fn download_agent_build(
        &self,
        version: &str,
        platform: &str,
    ) -> Result<crate::client::Download, crate::ClientError> {
        self.download(&["agent-builds", version, platform]).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unstamped_build_reports_the_crate_version() {
        assert_eq!(version(), env!("CARGO_PKG_VERSION"));
        assert_eq!(platform().split('-').count(), 2, "{}", platform());
    }
}
