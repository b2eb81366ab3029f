//! Providers: the vendor half of a scaling driver. The core's policy decides when and how much to
//! launch; a provider knows how: it launches instances of a template, terminates them, and lists
//! those it runs for a group. Every instance it launches receives a one-time bootstrap token and
//! its group through the vendor's own channel (arguments locally, user data and tags on AWS,
//! labels and environment on Kubernetes, a file only the job's account reads for batch pilots), and joins the manager as an agent whose id the manager
//! chose before launching.
//!
//! The manager never calls a provider from the pure core: failures are classified here
//! ([`ErrorClass`]) and the core's launch governor turns them into backoff.

use std::collections::BTreeMap;
use std::path::PathBuf;

use async_trait::async_trait;
use corral_core::InstanceTemplate;
use serde::{Deserialize, Serialize};

#[cfg(feature = "aws")]
pub mod aws;
pub mod batch;
pub mod docker;
pub mod exec;
#[cfg(feature = "kubernetes")]
pub mod kubernetes;
mod local;
#[cfg(feature = "openapi")]
pub mod openapi;
pub mod options;
pub mod process;
pub mod static_provider;

pub use options::{ConfigError, ProviderConfig, ProviderSettings, REDACTED};

pub use corral_api::identity::{
    AGENT_LABEL, AGENT_TAG, GROUP_LABEL, GROUP_TAG, TEMPLATE_LABEL, TEMPLATE_TAG,
};

/// How a provider call failed, which decides what the manager does next.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorClass {
    /// The vendor has no room or the account hit a quota: back off this template, try others.
    Capacity,
    /// Network trouble, throttling, a vendor hiccup: back off briefly and retry.
    Transient,
    /// Bad configuration or credentials, an unknown template: retrying will not help until an
    /// operator changes something (the template backs off at the longest interval).
    Fatal,
}

impl std::fmt::Display for ErrorClass {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ErrorClass::Capacity => "out of capacity",
            ErrorClass::Transient => "transient",
            ErrorClass::Fatal => "fatal",
        })
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{class}: {message}")]
pub struct ProviderError {
    pub class: ErrorClass,
    pub message: String,
}

impl ProviderError {
    pub fn capacity(message: impl Into<String>) -> Self {
        ProviderError {
            class: ErrorClass::Capacity,
            message: message.into(),
        }
    }
    pub fn transient(message: impl Into<String>) -> Self {
        ProviderError {
            class: ErrorClass::Transient,
            message: message.into(),
        }
    }
    pub fn fatal(message: impl Into<String>) -> Self {
        ProviderError {
            class: ErrorClass::Fatal,
            message: message.into(),
        }
    }
}

/// What a provider knows how to launch. Providers that take templates from the group's
/// configuration return those; plugins and vendors may offer their own.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TemplateOffer {
    pub name: String,
    /// Slots in the canonical form (`cpu=4,mem=16GiB,gpu=1`); empty when the provider does not say.
    #[serde(default)]
    pub slots: String,
    #[serde(default)]
    pub price_per_hour: Option<f64>,
}

/// One instance to launch: the agent id it joins as and its one-time bootstrap token.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LaunchRequest {
    pub agent_id: String,
    pub token: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum InstanceState {
    /// Asked for, booting.
    Pending,
    Running,
    /// Being terminated.
    Stopping,
    /// Terminated or vanished (some vendors list terminated instances for a while).
    Gone,
}

/// An instance as the provider sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Instance {
    /// The vendor's id: EC2 instance id, pod name, container id, process id.
    pub id: String,
    /// The agent id it joins as (from its tag, label or arguments), when known.
    #[serde(default)]
    pub agent_id: Option<String>,
    #[serde(default)]
    pub template: Option<String>,
    pub state: InstanceState,
}

/// What every provider is told about the group it serves.
#[derive(Debug, Clone, PartialEq)]
pub struct Context {
    pub group: String,
    /// Where launched agents reach the manager.
    pub manager_url: String,
    /// The group's templates (slots, labels): local providers pass a template's slots as the
    /// agent's capacity.
    pub templates: Vec<InstanceTemplate>,
    /// The `corral` executable local providers start (process provider).
    pub corral_binary: PathBuf,
    /// Where a provider may keep files (the process provider's agents' work dirs and logs).
    pub state_dir: PathBuf,
}

impl Context {
    pub fn template(&self, name: &str) -> Result<&InstanceTemplate, ProviderError> {
        self.templates
            .iter()
            .find(|t| t.name == name)
            .ok_or_else(|| ProviderError::fatal(format!("template {name:?} is not in the group")))
    }

    /// The labels every instance of this group carries (tags on AWS, labels on Kubernetes).
    pub fn labels(&self, agent_id: &str, template: &str) -> BTreeMap<String, String> {
        BTreeMap::from([
            (GROUP_LABEL.to_string(), self.group.clone()),
            (AGENT_LABEL.to_string(), agent_id.to_string()),
            (TEMPLATE_LABEL.to_string(), template.to_string()),
        ])
    }
}

/// The provider contract. Calls may take a while (a cloud API); the manager calls them outside
/// its scheduling pass and bounds each with a timeout.
#[async_trait]
pub trait Provider: Send + Sync {
    /// The templates this provider can launch.
    async fn templates(&self) -> Result<Vec<TemplateOffer>, ProviderError>;

    /// Launches one instance per request, of `template`. Returns the instances it started;
    /// requests missing from the answer failed (a partial launch is not an error).
    async fn launch(
        &self,
        template: &str,
        requests: &[LaunchRequest],
    ) -> Result<Vec<Instance>, ProviderError>;

    /// Terminates instances by their vendor ids. Ids already gone are not an error.
    async fn terminate(&self, ids: &[String]) -> Result<(), ProviderError>;

    /// The group's instances (those carrying its tag or label), whatever their state.
    async fn list(&self) -> Result<Vec<Instance>, ProviderError>;

    /// Whether an instance [`Provider::list`] answers can only be one launched for the group
    /// (a cloud's tags, which only the manager's credentials set). Where anyone sharing the
    /// account can give an instance the tag (a batch job's name), this is false, and the
    /// manager trusts only the ids it recorded at launch: it adopts no other by its agent id
    /// and terminates none.
    fn lists_only_its_own(&self) -> bool {
        true
    }
}

/// A provider's options, read and checked by the provider a name picks: the one place where
/// a provider's name chooses its code.
enum Options {
    Static,
    Process(process::Options),
    Docker(docker::Options),
    Exec(exec::Options),
    Batch(batch::Options),
    #[cfg(feature = "aws")]
    Aws(aws::Options),
    #[cfg(feature = "kubernetes")]
    Kubernetes(kubernetes::Options),
}

/// Reads `options` as the options of the provider `name`, naming the offending field on error.
fn read_options(
    name: &str,
    options: &serde_json::Map<String, serde_json::Value>,
) -> Result<Options, ConfigError> {
    use options::parse;
    Ok(match name {
        "static" => parse::<static_provider::Options>(options).map(|_| Options::Static)?,
        "process" => Options::Process(parse(options)?),
        "docker" => Options::Docker(parse(options)?),
        "exec" => {
            let o: exec::Options = parse(options)?;
            o.check()?;
            Options::Exec(o)
        }
        "batch" => {
            let o: batch::Options = parse(options)?;
            o.check()?;
            Options::Batch(o)
        }
        #[cfg(feature = "aws")]
        "aws" => {
            let o: aws::Options = parse(options)?;
            o.check()?;
            Options::Aws(o)
        }
        #[cfg(feature = "kubernetes")]
        "kubernetes" => {
            let o: kubernetes::Options = parse(options)?;
            o.check()?;
            Options::Kubernetes(o)
        }
        other => {
            return Err(ConfigError::new(
                "provider.name",
                format!("provider {other:?} is not built into this corral (cargo feature)"),
            ))
        }
    })
}

/// Builds the provider a configuration names, for one group. Each provider module has an
/// `Options` type (its options, validated by serde) and `connect(options, context)`.
pub async fn connect(
    config: &ProviderConfig,
    context: Context,
) -> Result<Box<dyn Provider>, ProviderError> {
    config
        .validate()
        .map_err(|e| ProviderError::fatal(e.to_string()))?;
    let options = read_options(&config.name, &config.options)
        .map_err(|e| ProviderError::fatal(e.to_string()))?;
    Ok(match options {
        Options::Static => Box::new(static_provider::Static),
        Options::Process(o) => Box::new(process::connect(o, context).await?),
        Options::Docker(o) => Box::new(docker::connect(o, context).await?),
        Options::Exec(o) => Box::new(exec::connect(o, context).await?),
        Options::Batch(o) => Box::new(batch::connect(o, context).await?),
        #[cfg(feature = "aws")]
        Options::Aws(o) => Box::new(aws::connect(o, context).await?),
        #[cfg(feature = "kubernetes")]
        Options::Kubernetes(o) => Box::new(kubernetes::connect(o, context).await?),
    })
}
