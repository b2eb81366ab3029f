//! The provider's options, and the checks serde cannot make (Kubernetes name syntax, options
//! that only make sense in one mode).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::options::invalid_option as invalid;
use crate::{ConfigError, AGENT_LABEL, GROUP_LABEL, TEMPLATE_LABEL};

/// Default for `pod_wait_secs`: how long a StatefulSet launch waits for its new pods to appear.
const DEFAULT_POD_WAIT_SECS: u64 = 20;
/// Upper bound for `pod_wait_secs`: the manager bounds every call, so this stays well below it.
pub const MAX_POD_WAIT_SECS: u64 = 300;

/// A secret option: deserialized like a string, never shown by `Debug`.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema), schema(as = KubernetesSecret))]
#[derive(Clone, PartialEq, Eq, Deserialize)]
#[serde(transparent)]
pub struct Secret(pub String);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(crate::REDACTED)
    }
}

/// How instances are made.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema), schema(as = KubernetesMode))]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// One Pod per instance, built from these options.
    #[default]
    Pods,
    /// Replicas of an existing StatefulSet, scaled up and down.
    Statefulset,
}

/// The container's `imagePullPolicy`, spelled as Kubernetes spells it.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema), schema(as = KubernetesPullPolicy))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum PullPolicy {
    Always,
    IfNotPresent,
    Never,
}

impl PullPolicy {
    pub fn as_str(self) -> &'static str {
        match self {
            PullPolicy::Always => "Always",
            PullPolicy::IfNotPresent => "IfNotPresent",
            PullPolicy::Never => "Never",
        }
    }
}

/// What one template changes in the pods of its instances.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema), schema(as = KubernetesTemplateOverride))]
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TemplateOverride {
    /// Merged over the top-level `node_selector` (the template's keys win).
    #[serde(default)]
    pub node_selector: BTreeMap<String, String>,
    /// Replaces the top-level `image`.
    pub image: Option<String>,
}

#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema), schema(as = OptionsKubernetes))]
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Options {
    #[cfg_attr(feature = "openapi", schema(inline))]
    #[serde(default)]
    pub mode: Mode,
    /// Where pods live [default: the kubeconfig context's namespace, or the pod's own in-cluster].
    pub namespace: Option<String>,
    /// The kubeconfig context to use [default: the current context].
    pub context: Option<String>,
    /// The API server's URL; replaces the kubeconfig and in-cluster configuration.
    pub api_server: Option<String>,
    /// A bearer token for the API server (a secret).
    #[cfg_attr(feature = "openapi", schema(inline))]
    pub token: Option<Secret>,
    #[serde(default)]
    pub insecure_skip_tls_verify: bool,
    /// Extra labels on every pod.
    #[serde(default)]
    pub labels: BTreeMap<String, String>,

    // Pods mode.
    pub image: Option<String>,
    #[cfg_attr(feature = "openapi", schema(inline))]
    pub image_pull_policy: Option<PullPolicy>,
    /// The container's command [default: `["corral", "agent"]`].
    pub command: Option<Vec<String>>,
    /// Request (and limit) the template's cpu, mem and gpu slots [default: true].
    pub set_resources: Option<bool>,
    #[serde(default)]
    pub node_selector: BTreeMap<String, String>,
    pub service_account: Option<String>,
    /// Per-template changes, by template name.
    #[cfg_attr(feature = "openapi", schema(inline))]
    #[serde(default)]
    pub templates: BTreeMap<String, TemplateOverride>,

    // StatefulSet mode.
    pub statefulset: Option<String>,
    /// How long a launch waits for the StatefulSet's new pods to appear [default: 20].
    pub pod_wait_secs: Option<u64>,
}

impl Options {
    /// Checks what serde cannot (values that depend on each other, Kubernetes name syntax).
    pub fn check(&self) -> Result<(), ConfigError> {
        self.check_connection()?;
        check_labels("labels", &self.labels)?;
        if let Some(key) = self.labels.keys().find(|k| is_corral_label(k)) {
            return Err(invalid(
                &format!("labels.{key}"),
                "corral sets this label itself",
            ));
        }
        match self.mode {
            Mode::Pods => self.check_pods_mode(),
            Mode::Statefulset => self.check_statefulset_mode(),
        }
    }

    /// The command the agent container runs.
    pub fn command(&self) -> Vec<String> {
        self.command
            .clone()
            .unwrap_or_else(|| vec!["corral".into(), "agent".into()])
    }

    pub fn set_resources(&self) -> bool {
        self.set_resources.unwrap_or(true)
    }

    pub fn pod_wait(&self) -> std::time::Duration {
        std::time::Duration::from_secs(self.pod_wait_secs.unwrap_or(DEFAULT_POD_WAIT_SECS))
    }

    fn check_connection(&self) -> Result<(), ConfigError> {
        if let Some(namespace) = &self.namespace {
            if !is_dns_label(namespace) {
                return Err(invalid(
                    "namespace",
                    format!("{namespace:?} is not a namespace name (lowercase letters, digits and '-', at most 63)"),
                ));
            }
        }
        if let Some(url) = &self.api_server {
            check_api_server(url)?;
            if self.context.is_some() {
                return Err(invalid(
                    "context",
                    "a kubeconfig context cannot be used with api_server, which replaces the kubeconfig",
                ));
            }
        }
        if self.context.as_deref() == Some("") {
            return Err(invalid("context", "is empty"));
        }
        if self.token.as_ref().is_some_and(|t| t.0.is_empty()) {
            return Err(invalid("token", "is empty"));
        }
        Ok(())
    }

    fn check_pods_mode(&self) -> Result<(), ConfigError> {
        let statefulset_options = [
            ("statefulset", self.statefulset.is_some()),
            ("pod_wait_secs", self.pod_wait_secs.is_some()),
        ];
        if let Some((key, _)) = statefulset_options.iter().find(|(_, set)| *set) {
            return Err(invalid(key, "only used with mode \"statefulset\""));
        }
        match &self.image {
            None => {
                return Err(invalid(
                    "image",
                    "required with mode \"pods\": the agent's container image",
                ))
            }
            Some(image) => check_image("image", image)?,
        }
        if let Some(command) = &self.command {
            if command.first().is_none_or(|c| c.is_empty()) {
                return Err(invalid("command", "needs at least a program to run"));
            }
        }
        check_labels("node_selector", &self.node_selector)?;
        if let Some(account) = &self.service_account {
            if !is_dns_subdomain(account) {
                return Err(invalid(
                    "service_account",
                    format!("{account:?} is not a service account name"),
                ));
            }
        }
        for (name, o) in &self.templates {
            check_labels(&format!("templates.{name}.node_selector"), &o.node_selector)?;
            if let Some(image) = &o.image {
                check_image(&format!("templates.{name}.image"), image)?;
            }
        }
        Ok(())
    }

    fn check_statefulset_mode(&self) -> Result<(), ConfigError> {
        let name = self.statefulset.as_deref().ok_or_else(|| {
            invalid(
                "statefulset",
                "required with mode \"statefulset\": the StatefulSet to scale",
            )
        })?;
        if !is_dns_label(name) {
            return Err(invalid(
                "statefulset",
                format!("{name:?} is not a StatefulSet name (lowercase letters, digits and '-', at most 63)"),
            ));
        }
        if let Some(secs) = self.pod_wait_secs {
            if !(1..=MAX_POD_WAIT_SECS).contains(&secs) {
                return Err(invalid(
                    "pod_wait_secs",
                    format!("{secs} is out of range 1..={MAX_POD_WAIT_SECS}"),
                ));
            }
        }
        // The StatefulSet's pod template decides these; accepting them would silently ignore them.
        let pod_options = [
            ("image", self.image.is_some()),
            ("image_pull_policy", self.image_pull_policy.is_some()),
            ("command", self.command.is_some()),
            ("set_resources", self.set_resources.is_some()),
            ("node_selector", !self.node_selector.is_empty()),
            ("service_account", self.service_account.is_some()),
            ("templates", !self.templates.is_empty()),
        ];
        if let Some((key, _)) = pod_options.iter().find(|(_, set)| *set) {
            return Err(invalid(
                key,
                "only used with mode \"pods\"; in mode \"statefulset\" the StatefulSet's pod template decides",
            ));
        }
        Ok(())
    }
}

fn is_corral_label(key: &str) -> bool {
    [GROUP_LABEL, AGENT_LABEL, TEMPLATE_LABEL].contains(&key)
}

fn check_api_server(url: &str) -> Result<(), ConfigError> {
    let rest = url
        .strip_prefix("https://")
        .or_else(|| url.strip_prefix("http://"));
    match rest {
        Some(host) if !host.is_empty() && !host.starts_with('/') => Ok(()),
        _ => Err(invalid(
            "api_server",
            format!("{url:?} is not an http(s) URL such as https://10.0.0.1:6443"),
        )),
    }
}

fn check_image(field: &str, image: &str) -> Result<(), ConfigError> {
    if image.is_empty() || image.chars().any(char::is_whitespace) {
        return Err(invalid(
            field,
            format!("{image:?} is not an image reference"),
        ));
    }
    Ok(())
}

fn check_labels(field: &str, labels: &BTreeMap<String, String>) -> Result<(), ConfigError> {
    for (key, value) in labels {
        if !is_label_key(key) {
            return Err(invalid(
                &format!("{field}.{key}"),
                "not a label key ([prefix/]name: name of at most 63 letters, digits, '-', '_', '.')",
            ));
        }
        if !is_label_value(value) {
            return Err(invalid(
                &format!("{field}.{key}"),
                format!("{value:?} is not a label value (at most 63 letters, digits, '-', '_', '.', starting and ending with a letter or digit)"),
            ));
        }
    }
    Ok(())
}

/// A label value: empty, or up to 63 alphanumerics with `-_.` inside.
pub fn is_label_value(value: &str) -> bool {
    value.is_empty() || is_label_name(value)
}

/// The name part of a label key: 1..=63 alphanumerics with `-_.` inside.
fn is_label_name(name: &str) -> bool {
    let alnum = |c: char| c.is_ascii_alphanumeric();
    name.len() <= 63
        && name.starts_with(alnum)
        && name.ends_with(alnum)
        && name.chars().all(|c| alnum(c) || "-_.".contains(c))
}

fn is_label_key(key: &str) -> bool {
    match key.rsplit_once('/') {
        Some((prefix, name)) => is_dns_subdomain(prefix) && is_label_name(name),
        None => is_label_name(key),
    }
}

/// RFC 1123 label: 1..=63 lowercase alphanumerics and `-`, alphanumeric at both ends.
pub fn is_dns_label(name: &str) -> bool {
    let alnum = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit();
    name.len() <= 63
        && name.starts_with(alnum)
        && name.ends_with(alnum)
        && name.chars().all(|c| alnum(c) || c == '-')
}

/// RFC 1123 subdomain: dot-separated labels, at most 253 characters.
fn is_dns_subdomain(name: &str) -> bool {
    name.len() <= 253 && name.split('.').all(is_dns_label)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kubernetes_name_rules() {
        assert!(is_dns_label("gpu-pool-1"));
        assert!(!is_dns_label("-gpu") && !is_dns_label("Gpu") && !is_dns_label(""));
        assert!(!is_dns_label(&"a".repeat(64)));
        assert!(is_label_key("corral.io/group") && is_label_key("team"));
        assert!(!is_label_key("corral.io/") && !is_label_key("/x") && !is_label_key("a b"));
        assert!(is_label_value("") && is_label_value("A_b.c-1"));
        assert!(!is_label_value("-x") && !is_label_value("x/y"));
    }

    #[test]
    fn the_token_stays_out_of_debug_output() {
        let options: Options = serde_json::from_value(serde_json::json!({
            "image": "corral:0.1", "token": "s3cret"}))
        .unwrap();
        assert!(!format!("{options:?}").contains("s3cret"));
        assert_eq!(options.token.unwrap().0, "s3cret");
    }
}
