//! The simulated group: a TOML file with the keys of a group's API (policy, scheduler,
//! templates), the agents it starts with, and what the real world would add (how long an
//! instance takes to join, how often a launch fails). See docs/simulate.md.

use serde::Deserialize;

use corral_core::{InstanceTemplate, LaunchSettings, ScalingGroup, ScalingPolicy, SchedulerConfig};
use corral_core::{SlotName, Slots};

/// A group to replay a trace on.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SimConfig {
    /// What reports call it [default: the file's stem].
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub policy: ScalingPolicy,
    #[serde(default)]
    pub scheduler: SchedulerConfig,
    #[serde(default)]
    pub templates: Vec<InstanceTemplate>,
    /// Agents present from the start (an on-premise machine, a reserved pool).
    #[serde(default)]
    pub agents: Vec<AgentSpec>,
    #[serde(default)]
    pub provisioning: Provisioning,
    /// The launch governor's backoff and budget, as a group's `launch` settings.
    #[serde(default)]
    pub launch: LaunchSettings,
    #[serde(default)]
    pub simulation: Settings,
}

/// `count` identical agents present from the start.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentSpec {
    #[serde(default = "one")]
    pub count: u32,
    pub slots: Slots,
    /// What one of them costs per hour (an on-premise machine's amortised price), for the cost.
    #[serde(default, alias = "price")]
    pub price_per_hour: f64,
    /// Never marked or terminated by the scaler (as an agent that joined with its own key):
    /// machines the policy does not own.
    #[serde(default)]
    pub external: bool,
}

fn one() -> u32 {
    1
}

/// What the simulated provider does with a launch.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Provisioning {
    /// From the launch until the new agent takes sessions.
    pub delay_secs: u64,
    /// Share of launches the provider refuses (0 to below 1), drawn from `seed`.
    pub failure_rate: f64,
    pub seed: u64,
}

impl Default for Provisioning {
    fn default() -> Self {
        Provisioning {
            delay_secs: 60,
            failure_rate: 0.0,
            seed: 1,
        }
    }
}

/// How the replay itself runs.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Settings {
    /// Least time between two passes, as the manager's (events in between are coalesced).
    pub pass_interval_ms: u64,
    /// Time between two samples of the time series (queue, nodes, utilisation) [default: the
    /// trace's span in 500 samples].
    pub sample_secs: Option<u64>,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            pass_interval_ms: 20,
            sample_secs: None,
        }
    }
}

/// A configuration that cannot be simulated, naming the key at fault.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("{0}")]
    Toml(#[from] toml::de::Error),
    #[error("{key}: {message}")]
    Invalid { key: String, message: String },
    #[error("--sweep {0}: expected KEY=V1,V2,... with a dotted key such as policy.idle_wait_secs")]
    BadSweep(String),
}

fn invalid(key: impl Into<String>, message: impl Into<String>) -> ConfigError {
    ConfigError::Invalid {
        key: key.into(),
        message: message.into(),
    }
}

impl SimConfig {
    /// Reads and checks a configuration; `overrides` set dotted keys first (`--sweep`), each
    /// value read as TOML (`600`, `"demand"`, `true`), or as a string when it is not TOML.
    pub fn parse(text: &str, overrides: &[(String, String)]) -> Result<SimConfig, ConfigError> {
        let mut doc: toml::Table = text.parse()?;
        for (key, value) in overrides {
            set(&mut doc, key, value)?;
        }
        let mut config: SimConfig = doc.try_into()?;
        for (i, t) in config.templates.iter_mut().enumerate() {
            corral_core::devices::complete_template_slots(&mut t.slots, &t.devices)
                .map_err(|e| invalid(format!("templates[{i}].devices"), e.to_string()))?;
        }
        config.validate()?;
        Ok(config)
    }

    /// What the types alone cannot check.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.group("check")
            .validate()
            .map_err(|e| invalid("group", e.to_string()))?;
        self.launch
            .validate()
            .map_err(|(field, why)| invalid(format!("launch.{field}"), why))?;
        let rate = self.provisioning.failure_rate;
        if !(0.0..1.0).contains(&rate) {
            return Err(invalid(
                "provisioning.failure_rate",
                format!("{rate} is not a share from 0 to below 1"),
            ));
        }
        if self.simulation.pass_interval_ms == 0 {
            return Err(invalid("simulation.pass_interval_ms", "must be at least 1"));
        }
        if self.simulation.sample_secs == Some(0) {
            return Err(invalid("simulation.sample_secs", "must be at least 1"));
        }
        for (i, t) in self.templates.iter().enumerate() {
            if t.max == 0 {
                return Err(invalid(
                    format!("templates[{i}].max"),
                    format!(
                        "template {}: say how many instances of it may run at once (at least 1)",
                        t.name
                    ),
                ));
            }
        }
        for (i, a) in self.agents.iter().enumerate() {
            if a.count == 0 || a.slots.is_empty() {
                return Err(invalid(
                    format!("agents[{i}]"),
                    "needs a count of at least 1 and some slots",
                ));
            }
            if !(a.price_per_hour.is_finite() && a.price_per_hour >= 0.0) {
                return Err(invalid(
                    format!("agents[{i}].price_per_hour"),
                    "must be a finite number ≥ 0",
                ));
            }
        }
        if self.agents.is_empty() && self.templates.is_empty() {
            return Err(invalid(
                "agents",
                "the group has no agents and no templates: nothing could run",
            ));
        }
        Ok(())
    }

    /// The scaling group this configuration describes.
    pub fn group(&self, name: &str) -> ScalingGroup {
        ScalingGroup {
            name: name.to_string(),
            policy: self.policy.clone(),
            scheduler: self.scheduler,
            templates: self.templates.clone(),
        }
    }

    /// Every slot the group's agents and templates offer.
    pub fn slot_names(&self) -> Vec<SlotName> {
        let mut names: Vec<SlotName> = (self.agents.iter().map(|a| &a.slots))
            .chain(self.templates.iter().map(|t| &t.slots))
            .flat_map(|s| s.names().cloned())
            .collect();
        names.sort();
        names.dedup();
        names
    }
}

/// Sets `a.b.c = value` in a TOML document, making the tables on the way.
fn set(doc: &mut toml::Table, key: &str, value: &str) -> Result<(), ConfigError> {
    let parts: Vec<&str> = key.split('.').collect();
    if parts.iter().any(|p| p.is_empty()) {
        return Err(ConfigError::BadSweep(format!("{key}={value}")));
    }
    let value = format!("v = {value}")
        .parse::<toml::Table>()
        .ok()
        .and_then(|mut t| t.remove("v"))
        .unwrap_or_else(|| toml::Value::String(value.to_string()));
    let (last, path) = parts.split_last().expect("split gives one part at least");
    let mut table = doc;
    for part in path {
        let entry = table
            .entry(part.to_string())
            .or_insert_with(|| toml::Value::Table(toml::Table::new()));
        table = entry
            .as_table_mut()
            .ok_or_else(|| invalid(key, format!("{part} is not a table")))?;
    }
    table.insert(last.to_string(), value);
    Ok(())
}

/// Reads `KEY=V1,V2,...` into one override per value.
pub fn sweep(spec: &str) -> Result<(String, Vec<String>), ConfigError> {
    let (key, values) = spec
        .split_once('=')
        .ok_or_else(|| ConfigError::BadSweep(spec.to_string()))?;
    let values: Vec<String> = values.split(',').map(|v| v.trim().to_string()).collect();
    if key.trim().is_empty() || values.iter().any(String::is_empty) {
        return Err(ConfigError::BadSweep(spec.to_string()));
    }
    Ok((key.trim().to_string(), values))
}

#[cfg(test)]
mod tests {
    use super::*;

    const DEMAND: &str = r#"
        [policy]
        kind = "demand"
        max_nodes = 8

        [[templates]]
        name = "c8"
        slots = { cpu = 8, mem = "32GiB" }
        price_per_hour = 0.4
        max = 8
    "#;

    #[test]
    fn reads_a_group_with_defaults_for_what_is_not_said() {
        let c = SimConfig::parse(DEMAND, &[]).expect("valid");
        assert_eq!(c.policy.max_nodes, 8);
        assert_eq!(c.policy.idle_wait_secs, 600, "the group's default");
        assert_eq!(c.provisioning, Provisioning::default());
        assert_eq!(c.templates[0].slots.to_string(), "cpu=8,mem=32GiB");
    }

    #[test]
    fn overrides_set_dotted_keys_as_toml_values() {
        let overrides = [
            ("policy.idle_wait_secs".to_string(), "30".to_string()),
            ("scheduler.sequencer".to_string(), "lifo".to_string()),
            ("provisioning.failure_rate".to_string(), "0.25".to_string()),
        ];
        let c = SimConfig::parse(DEMAND, &overrides).expect("valid");
        assert_eq!(c.policy.idle_wait_secs, 30);
        assert_eq!(c.scheduler.sequencer, corral_core::Sequencer::Lifo);
        assert_eq!(c.provisioning.failure_rate, 0.25);
    }

    #[test]
    fn refuses_what_cannot_be_simulated_naming_the_key() {
        let err = |text: &str, overrides: &[(String, String)]| {
            SimConfig::parse(text, overrides)
                .expect_err("refused")
                .to_string()
        };
        let rate = [("provisioning.failure_rate".into(), "1".into())];
        assert!(err(DEMAND, &rate).starts_with("provisioning.failure_rate:"));
        let typo = [("policy.idle_wait".into(), "3".into())];
        assert!(
            err(DEMAND, &typo).contains("idle_wait"),
            "{}",
            err(DEMAND, &typo)
        );
        assert!(err("", &[]).starts_with("agents:"));
        let min = [("policy.min_nodes".into(), "9".into())];
        assert!(err(DEMAND, &min).contains("min_nodes (9) is above max_nodes (8)"));
        let no_max = DEMAND.replace("max = 8\n", "");
        assert!(err(&no_max, &[]).starts_with("templates[0].max:"));
        assert!(err("[[agents]]\ncount = 0\nslots = \"cpu=1\"", &[]).starts_with("agents[0]:"));
    }

    #[test]
    fn sweep_specs_name_a_key_and_values() {
        assert_eq!(
            sweep("policy.idle_wait_secs=60, 600").expect("valid"),
            (
                "policy.idle_wait_secs".to_string(),
                vec!["60".to_string(), "600".to_string()]
            )
        );
        assert!(sweep("policy.idle_wait_secs").is_err());
        assert!(sweep("=1,2").is_err());
        assert!(sweep("k=1,,2").is_err());
    }
}
