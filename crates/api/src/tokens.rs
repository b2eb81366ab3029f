//! Tokens: who calls, with which role; a user's token and a group's one-time bootstrap token.

use serde::{Deserialize, Serialize};

use corral_core::Timestamp;

/// What a token may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum Role {
    Admin,
    User,
    /// An agent daemon: its token acts for the agent named by the token's user.
    Agent,
    /// A one-time, expiring token an agent joins the group named by the token's user with.
    Bootstrap,
}

/// `POST /tokens` (admin): a token for a user.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct NewToken {
    #[cfg_attr(feature = "openapi", schema(value_type = corral_core::openapi::Name))]
    pub user: String,
    #[serde(default = "user_role")]
    pub role: Role,
}

fn user_role() -> Role {
    Role::User
}

/// The answer to `POST /tokens`: the secret, shown this once.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct TokenCreated {
    pub id: String,
    pub user: String,
    pub role: Role,
    pub token: String,
}

/// `POST /groups/{name}/bootstrap-tokens` (admin).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct NewBootstrapToken {
    /// How long the token may be used (once), in seconds.
    #[serde(default = "default_bootstrap_ttl")]
    #[cfg_attr(feature = "openapi", schema(minimum = 1, maximum = 604_800))]
    pub ttl_secs: u64,
}

impl Default for NewBootstrapToken {
    fn default() -> Self {
        NewBootstrapToken {
            ttl_secs: default_bootstrap_ttl(),
        }
    }
}

fn default_bootstrap_ttl() -> u64 {
    3600
}

/// The answer to `POST /groups/{name}/bootstrap-tokens`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct BootstrapTokenCreated {
    pub token: String,
    pub group: String,
    pub expires_at: Timestamp,
}

/// A token as `GET /tokens` lists it (admin): who it is for and what it may do, never its
/// secret nor its hash.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct TokenInfo {
    pub id: String,
    pub role: Role,
    /// The user; an agent token's agent; a bootstrap token's group.
    pub user: String,
    pub created_at: Timestamp,
    /// A bootstrap token's end.
    #[serde(default)]
    pub expires_at: Option<Timestamp>,
    /// When a bootstrap token was used.
    #[serde(default)]
    pub used_at: Option<Timestamp>,
    /// The one agent id a bootstrap token may join as.
    #[serde(default)]
    pub agent: Option<String>,
}
