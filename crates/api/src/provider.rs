//! A group's provider configuration as the API carries it: which provider, its options, and
//! the launch settings the manager applies to it. What the options mean, which of them are
//! secrets and how they are checked is the provider crate's business (`ProviderSettings`).

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use corral_core::LaunchSettings;

/// What an API answer shows in place of a secret; sent back unchanged, it keeps the stored value.
pub const REDACTED: &str = "********";

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct ProviderConfig {
    /// `static`, `process`, `docker`, `aws`, `kubernetes` or `exec`.
    pub name: String,
    /// The provider's own options (see docs/configuration.md).
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(value_type = Object))]
    pub options: Map<String, Value>,
    /// Backoff, launch budget, provisioning timeout and reconciliation.
    #[serde(default)]
    pub launch: LaunchSettings,
}

impl Default for ProviderConfig {
    /// A group without a provider is `static`: agents join by hand.
    fn default() -> Self {
        ProviderConfig {
            name: "static".into(),
            options: Map::new(),
            launch: LaunchSettings::default(),
        }
    }
}
