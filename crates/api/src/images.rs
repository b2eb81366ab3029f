//! The image catalog: what an image needs at least, wherever it runs.

use serde::{Deserialize, Serialize};

use corral_core::Slots;

/// `PUT /images/{name}` (admin).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct ImageUpdate {
    #[serde(default)]
    pub min_slots: Slots,
}

/// An image an agent holds: the digest it starts new sessions of the image on, and what the
/// registry offered when the agent last asked.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct HeldImage {
    /// The image as the catalog names it (`registry/name:tag`).
    #[cfg_attr(feature = "openapi", schema(value_type = corral_core::openapi::ImageName))]
    pub image: String,
    /// `sha256:...`
    #[cfg_attr(feature = "openapi", schema(value_type = corral_core::openapi::Digest))]
    pub digest: String,
    /// The digest the registry's tag named at the agent's last check, if it checked.
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<corral_core::openapi::Digest>))]
    pub offered: Option<String>,
}

/// An image an agent could not check or pull, with the reason (told once per try).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct ImageProblem {
    #[cfg_attr(feature = "openapi", schema(value_type = corral_core::openapi::ImageName))]
    pub image: String,
    pub reason: String,
    /// When the agent tries again, in seconds from now.
    pub retry_secs: u64,
}

/// The image auto-update policy as an agent is told it in its sync's answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct ImageCheck {
    /// Check each held image every this long.
    pub interval_secs: u64,
    /// The group's registry accounts (never told to an external agent).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub logins: Vec<RegistryLogin>,
}

/// What an answer shows instead of a registry password.
pub const REDACTED_PASSWORD: &str = "<redacted>";

/// A group's account on a registry. `Debug` never shows the password.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct RegistryLogin {
    /// `host[:port]` as image references name it (`docker.io` for Docker Hub).
    pub registry: String,
    pub username: String,
    /// Redacted (`<redacted>`) in every answer but an agent's sync.
    pub password: String,
}

impl std::fmt::Debug for RegistryLogin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RegistryLogin")
            .field("registry", &self.registry)
            .field("username", &self.username)
            .field("password", &REDACTED_PASSWORD)
            .finish()
    }
}

/// `PUT /groups/{name}/registry-logins/{registry}` (admin).
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct RegistryLoginUpdate {
    #[cfg_attr(feature = "openapi", schema(value_type = corral_core::openapi::Credential))]
    pub username: String,
    #[cfg_attr(feature = "openapi", schema(value_type = corral_core::openapi::Credential))]
    pub password: String,
}

impl std::fmt::Debug for RegistryLoginUpdate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RegistryLoginUpdate")
            .field("username", &self.username)
            .field("password", &REDACTED_PASSWORD)
            .finish()
    }
}

/// Which agent holds which digest of an image.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct ImageHolding {
    pub agent: String,
    pub group: String,
    /// The digest new sessions of the image start on, on this agent.
    pub digest: String,
    /// The digest the registry offered at the agent's last check.
    pub offered: Option<String>,
    /// When the agent last reported it.
    pub reported_at: corral_core::Timestamp,
}

/// An image of the catalog, with the agents that hold it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ImageView {
    pub name: String,
    pub min_slots: Slots,
    /// By agent.
    pub agents: Vec<ImageHolding>,
}
