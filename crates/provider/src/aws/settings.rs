//! The aws provider's options and their cross-field checks.

use std::collections::BTreeMap;
use std::fmt;

use serde::Deserialize;

use super::{SERVER_TAG, TOKEN_TAG};
use crate::options::invalid_option as error;
use crate::options::ConfigError;
use crate::{AGENT_TAG, GROUP_TAG, REDACTED, TEMPLATE_TAG};

/// EC2 takes at most 16 KiB of user data (before base64); the bootstrap lines need the rest.
pub const USER_DATA_MAX: usize = 15 * 1024;
/// EC2 allows 50 tags per resource; corral sets up to five of its own.
pub const EXTRA_TAGS_MAX: usize = 45;

/// How instances are started.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema), schema(as = AwsMode))]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// RunInstances, one instance per launch request.
    #[default]
    Ec2,
    /// Grow and shrink an existing Auto Scaling group.
    Asg,
}

#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema), schema(as = OptionsAws))]
#[derive(Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Options {
    #[cfg_attr(feature = "openapi", schema(inline))]
    #[serde(default)]
    pub mode: Mode,
    /// Overrides AWS_REGION / the profile's region.
    pub region: Option<String>,
    /// Overrides AWS_ENDPOINT_URL (a local emulator, a VPC endpoint).
    pub endpoint_url: Option<String>,
    /// Static credentials; without them the SDK's default chain applies (env, profile, IMDS...).
    pub access_key_id: Option<String>,
    /// Secret.
    pub secret_access_key: Option<String>,
    /// Secret.
    pub session_token: Option<String>,
    /// ec2 mode: the AMI every template uses unless its entry names another. Required there.
    pub image_id: Option<String>,
    /// ec2 mode: per-template launch settings, keyed by template name.
    #[cfg_attr(feature = "openapi", schema(inline))]
    #[serde(default)]
    pub templates: BTreeMap<String, TemplateOptions>,
    /// Extra tags on every instance.
    #[serde(default)]
    pub tags: BTreeMap<String, String>,
    /// ec2 mode: shell text appended to the bootstrap user data (e.g. starting `corral agent`).
    #[serde(default)]
    pub user_data: String,
    /// asg mode: the Auto Scaling group to grow and shrink. Required there.
    pub asg_name: Option<String>,
}

/// ec2 mode: how one template's instances are launched.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema), schema(as = AwsTemplateOptions))]
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TemplateOptions {
    /// Defaults to the template's name.
    pub instance_type: Option<String>,
    /// Overrides the top-level `image_id`.
    pub image_id: Option<String>,
    pub subnet_id: Option<String>,
    #[serde(default)]
    pub security_group_ids: Vec<String>,
    pub key_name: Option<String>,
    /// An instance profile name, or its ARN (`arn:...`).
    pub iam_instance_profile: Option<String>,
}

// By hand, so that secrets never reach a log line.
impl fmt::Debug for Options {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let hidden = |s: &Option<String>| s.as_ref().map(|_| REDACTED);
        f.debug_struct("Options")
            .field("mode", &self.mode)
            .field("region", &self.region)
            .field("endpoint_url", &self.endpoint_url)
            .field("access_key_id", &self.access_key_id)
            .field("secret_access_key", &hidden(&self.secret_access_key))
            .field("session_token", &hidden(&self.session_token))
            .field("image_id", &self.image_id)
            .field("templates", &self.templates)
            .field("tags", &self.tags)
            .field("user_data", &self.user_data)
            .field("asg_name", &self.asg_name)
            .finish()
    }
}

fn not_empty(field: &str, value: &Option<String>) -> Result<(), ConfigError> {
    match value {
        Some(v) if v.trim().is_empty() => Err(error(field, "must not be empty")),
        _ => Ok(()),
    }
}

impl Options {
    /// Checks what serde cannot (values that depend on each other).
    pub fn check(&self) -> Result<(), ConfigError> {
        for (field, value) in [
            ("region", &self.region),
            ("access_key_id", &self.access_key_id),
            ("secret_access_key", &self.secret_access_key),
            ("session_token", &self.session_token),
            ("image_id", &self.image_id),
            ("asg_name", &self.asg_name),
        ] {
            not_empty(field, value)?;
        }
        self.check_connection()?;
        self.check_tags()?;
        match self.mode {
            Mode::Ec2 => self.check_ec2(),
            Mode::Asg => self.check_asg(),
        }
    }

    fn check_connection(&self) -> Result<(), ConfigError> {
        if let Some(region) = &self.region {
            if !region
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
            {
                return Err(error("region", format!("{region:?} is not a region name")));
            }
        }
        if let Some(url) = &self.endpoint_url {
            if !(url.starts_with("http://") || url.starts_with("https://")) {
                return Err(error(
                    "endpoint_url",
                    format!("{url:?} is not an http:// or https:// URL"),
                ));
            }
        }
        match (&self.access_key_id, &self.secret_access_key) {
            (Some(_), None) => Err(error("secret_access_key", "is required with access_key_id")),
            (None, Some(_)) => Err(error("access_key_id", "is required with secret_access_key")),
            (None, None) if self.session_token.is_some() => Err(error(
                "session_token",
                "needs access_key_id and secret_access_key",
            )),
            _ => Ok(()),
        }
    }

    fn check_tags(&self) -> Result<(), ConfigError> {
        if self.tags.len() > EXTRA_TAGS_MAX {
            return Err(error(
                "tags",
                format!(
                    "at most {EXTRA_TAGS_MAX} tags (EC2 allows 50 per instance, corral sets 5)"
                ),
            ));
        }
        let ours = [GROUP_TAG, AGENT_TAG, TEMPLATE_TAG, TOKEN_TAG, SERVER_TAG];
        for (key, value) in &self.tags {
            let field = format!("tags.{key}");
            if key.is_empty() || key.chars().count() > 128 {
                return Err(error(&field, "a tag key has 1 to 128 characters"));
            }
            if key.to_ascii_lowercase().starts_with("aws:") {
                return Err(error(&field, "the aws: prefix is reserved by AWS"));
            }
            if ours.contains(&key.as_str()) {
                return Err(error(&field, "corral sets this tag itself"));
            }
            if value.chars().count() > 256 {
                return Err(error(&field, "a tag value has at most 256 characters"));
            }
        }
        Ok(())
    }

    fn check_ec2(&self) -> Result<(), ConfigError> {
        if self.image_id.is_none() {
            return Err(error("image_id", "is required in ec2 mode (an AMI id)"));
        }
        if self.asg_name.is_some() {
            return Err(error("asg_name", "is only used with mode \"asg\""));
        }
        if self.user_data.len() > USER_DATA_MAX {
            return Err(error(
                "user_data",
                format!(
                    "{} bytes; at most {USER_DATA_MAX} (EC2 takes 16 KiB with corral's lines)",
                    self.user_data.len()
                ),
            ));
        }
        for (name, template) in &self.templates {
            template.check(&format!("templates.{name}"))?;
        }
        Ok(())
    }

    fn check_asg(&self) -> Result<(), ConfigError> {
        if self.asg_name.is_none() {
            return Err(error(
                "asg_name",
                "is required in asg mode (the Auto Scaling group's name)",
            ));
        }
        // The group's launch template decides these; accepting them would silently ignore them.
        let ec2_only = [
            ("image_id", self.image_id.is_some()),
            ("templates", !self.templates.is_empty()),
            ("user_data", !self.user_data.is_empty()),
        ];
        match ec2_only.iter().find(|(_, set)| *set) {
            Some((field, _)) => Err(error(
                field,
                "is only used in ec2 mode; in asg mode the group's launch template decides",
            )),
            None => Ok(()),
        }
    }
}

impl TemplateOptions {
    fn check(&self, field: &str) -> Result<(), ConfigError> {
        for (name, value) in [
            ("instance_type", &self.instance_type),
            ("image_id", &self.image_id),
            ("subnet_id", &self.subnet_id),
            ("key_name", &self.key_name),
            ("iam_instance_profile", &self.iam_instance_profile),
        ] {
            not_empty(&format!("{field}.{name}"), value)?;
        }
        if self
            .security_group_ids
            .iter()
            .any(|id| id.trim().is_empty())
        {
            return Err(error(
                &format!("{field}.security_group_ids"),
                "must not hold empty ids",
            ));
        }
        Ok(())
    }
}
