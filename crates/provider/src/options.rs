//! A group's provider configuration: which provider, its options, and the launch settings the
//! manager applies to it. Options are validated by the provider they belong to; secrets (keys a
//! provider declares) are never echoed back.

use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

pub use corral_api::{ProviderConfig, REDACTED};

/// The providers Corral knows, with the option keys that hold secrets.
pub(crate) const PROVIDERS: &[(&str, &[&str])] = &[
    ("static", &[]),
    ("process", &[]),
    ("docker", &[]),
    ("aws", &["secret_access_key", "session_token"]),
    ("kubernetes", &["token"]),
    // A plugin's `secret_env` holds what it needs to reach its vendor.
    ("exec", &["secret_env"]),
    // Pilot jobs: the batch system's commands act as a Unix account; no option is a secret.
    ("batch", &[]),
];

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct ConfigError {
    /// Where the problem is, e.g. `provider.options.region`.
    pub field: String,
    pub message: String,
}

impl ConfigError {
    pub fn new(field: impl Into<String>, message: impl Into<String>) -> Self {
        ConfigError {
            field: field.into(),
            message: message.into(),
        }
    }
}

/// A provider option that does not hold: `field` is its path under `provider.options`.
pub(crate) fn invalid_option(field: &str, message: impl Into<String>) -> ConfigError {
    ConfigError::new(format!("provider.options.{field}"), message)
}

/// What the provider crate knows of a provider configuration: whether it holds, which of its
/// options are secrets, and how they are hidden in answers and kept when sent back.
pub trait ProviderSettings: Sized {
    /// Checks the provider is known, its options are what it takes, and the launch settings hold.
    fn validate(&self) -> Result<(), ConfigError>;
    /// The configuration as an API answer shows it: every secret replaced by [`REDACTED`].
    fn redacted(&self) -> ProviderConfig;
    /// A configuration sent back after reading: [`REDACTED`] values keep what `stored` holds (for
    /// the same provider). Any that stay redacted make [`ProviderSettings::validate`] fail.
    fn keep_secrets_of(self, stored: &ProviderConfig) -> ProviderConfig;
    /// The secret values, each with its name (`secret_access_key`, `secret_env.API_KEY`), for
    /// the manager to seal at rest and open again.
    fn secrets_mut(&mut self) -> Vec<(String, &mut String)>;
}

impl ProviderSettings for ProviderConfig {
    /// Checks the provider is known, its options are what it takes, and the launch settings hold.
    fn validate(&self) -> Result<(), ConfigError> {
        if secrets_of(&self.name).is_none() {
            let known: Vec<&str> = PROVIDERS.iter().map(|(n, _)| *n).collect();
            return Err(ConfigError::new(
                "provider.name",
                format!(
                    "unknown provider {:?}; known: {}",
                    self.name,
                    known.join(", ")
                ),
            ));
        }
        self.launch.validate().map_err(|(field, message)| {
            ConfigError::new(format!("provider.launch.{field}"), message)
        })?;
        let redacted = |v: &Value| match v {
            Value::Object(map) => map.values().any(|v| v == REDACTED),
            v => v == REDACTED,
        };
        if self.options.values().any(redacted) {
            return Err(ConfigError::new(
                "provider.options",
                format!("{REDACTED} stands for a stored secret; this group has none to keep"),
            ));
        }
        crate::read_options(&self.name, &self.options).map(drop)
    }

    /// The configuration as an API answer shows it: every secret replaced by [`REDACTED`].
    fn redacted(&self) -> ProviderConfig {
        let mut shown = self.clone();
        for key in secrets_of(&self.name).unwrap_or_default() {
            if let Some(value) = shown.options.get_mut(*key) {
                *value = match value {
                    // No secret is there: saying "********" would claim one.
                    Value::Null => Value::Null,
                    Value::Object(map) => Value::Object(
                        map.keys()
                            .map(|k| (k.clone(), Value::String(REDACTED.into())))
                            .collect(),
                    ),
                    _ => Value::String(REDACTED.into()),
                };
            }
        }
        shown
    }

    /// A configuration sent back after reading: [`REDACTED`] values keep what `stored` holds (for
    /// the same provider). Any that stay redacted make [`ProviderConfig::validate`] fail.
    fn keep_secrets_of(mut self, stored: &ProviderConfig) -> ProviderConfig {
        if stored.name != self.name {
            return self;
        }
        for key in secrets_of(&self.name).unwrap_or_default() {
            let (Some(new), Some(old)) = (self.options.get_mut(*key), stored.options.get(*key))
            else {
                continue;
            };
            match (new, old) {
                (Value::Object(new), Value::Object(old)) => {
                    for (k, v) in new.iter_mut() {
                        if v == REDACTED {
                            if let Some(kept) = old.get(k) {
                                *v = kept.clone();
                            }
                        }
                    }
                }
                (new, old) if *new == REDACTED => *new = old.clone(),
                _ => {}
            }
        }
        self
    }
    /// The secret values, each with its name (`secret_access_key`, `secret_env.API_KEY`), for
    /// the manager to seal at rest and open again. Values that are not strings are no secret a
    /// provider takes ([`ProviderConfig::validate`] refuses them) and are left out.
    fn secrets_mut(&mut self) -> Vec<(String, &mut String)> {
        let secrets = secrets_of(&self.name).unwrap_or_default();
        let mut found = Vec::new();
        for (key, value) in self.options.iter_mut() {
            if !secrets.contains(&key.as_str()) {
                continue;
            }
            match value {
                Value::String(s) => found.push((key.clone(), s)),
                Value::Object(map) => {
                    for (name, v) in map.iter_mut() {
                        if let Value::String(s) = v {
                            found.push((format!("{key}.{name}"), s));
                        }
                    }
                }
                _ => {}
            }
        }
        found
    }
}

pub(crate) fn secrets_of(name: &str) -> Option<&'static [&'static str]> {
    PROVIDERS.iter().find(|(n, _)| *n == name).map(|(_, s)| *s)
}

/// Reads a provider's options into its own type, naming the offending field on error.
pub fn parse<T: DeserializeOwned>(options: &Map<String, Value>) -> Result<T, ConfigError> {
    let value = Value::Object(options.clone());
    serde_path_to_error::deserialize(value).map_err(|e| {
        let path = e.path().to_string();
        let field = if path == "." {
            "provider.options".to_string()
        } else {
            format!("provider.options.{path}")
        };
        ConfigError::new(field, e.into_inner().to_string())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn config(value: Value) -> ProviderConfig {
        serde_json::from_value(value).unwrap()
    }

    #[test]
    fn unknown_providers_and_bad_settings_are_named() {
        let e = config(json!({"name": "azure"})).validate().unwrap_err();
        assert_eq!(e.field, "provider.name");
        assert!(e.message.contains("aws"), "{e}");
        let e = config(json!({"name": "static", "options": {"zone": 1}}))
            .validate()
            .unwrap_err();
        assert_eq!(e.field, "provider.options.zone");
        assert!(e.message.contains("zone"), "{e}");
        let e = config(json!({"name": "static", "launch": {"backoff_initial_secs": 0}}))
            .validate()
            .unwrap_err();
        assert_eq!(e.field, "provider.launch.backoff_initial_secs");
    }

    #[test]
    fn secrets_are_redacted_and_kept_when_sent_back() {
        let stored = config(json!({"name": "exec", "options": {
            "command": "/opt/plugin", "secret_env": {"API_KEY": "s3cret"}}}));
        let shown = stored.redacted();
        assert_eq!(shown.options["secret_env"], json!({"API_KEY": REDACTED}));
        assert!(!serde_json::to_string(&shown).unwrap().contains("s3cret"));
        let back = shown.clone().keep_secrets_of(&stored);
        assert_eq!(back, stored);
        // A new value replaces the stored one; a redacted one with nothing stored stays redacted.
        let mut changed = shown.clone();
        changed.options["secret_env"] = json!({"API_KEY": "new", "OTHER": REDACTED});
        let back = changed.keep_secrets_of(&stored);
        assert_eq!(
            back.options["secret_env"],
            json!({"API_KEY": "new", "OTHER": REDACTED})
        );
    }

    #[test]
    fn a_secret_that_is_null_is_shown_null_not_as_one_hidden() {
        let stored = config(json!({"name": "aws", "options": {
            "region": "us-east-1", "secret_access_key": "s3cret", "session_token": null}}));
        let shown = stored.redacted();
        assert_eq!(shown.options["secret_access_key"], REDACTED);
        assert_eq!(shown.options["session_token"], Value::Null);
    }
}
