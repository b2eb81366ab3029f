//! `aws` provider: EC2 instances, started directly (mode `ec2`) or by growing an existing Auto
//! Scaling group (mode `asg`), through the AWS SDK for Rust.
//!
//! # Options
//!
//! | option | type | default | meaning |
//! | --- | --- | --- | --- |
//! | `mode` | `"ec2"` or `"asg"` | `"ec2"` | how instances are started |
//! | `region` | string | standard configuration | AWS region (else `AWS_REGION`, the profile's) |
//! | `endpoint_url` | URL | standard configuration | API endpoint (else `AWS_ENDPOINT_URL`); for emulators |
//! | `access_key_id` | string | standard configuration | static credentials, with `secret_access_key` |
//! | `secret_access_key` | string, **secret** | | |
//! | `session_token` | string, **secret** | | for temporary credentials |
//! | `image_id` | AMI id | required in ec2 mode | the AMI instances boot |
//! | `templates` | map | `{}` | ec2 mode: per template `instance_type` (default: the template's name), `image_id`, `subnet_id`, `security_group_ids`, `key_name`, `iam_instance_profile` (name or ARN) |
//! | `tags` | map | `{}` | extra tags on every instance |
//! | `user_data` | string | `""` | ec2 mode: shell text appended to the bootstrap user data |
//! | `asg_name` | string | required in asg mode | the Auto Scaling group |
//!
//! Without the connection options the SDK's standard configuration applies: environment
//! variables, `~/.aws/config` and `credentials` profiles (`AWS_PROFILE`), web identity, ECS and
//! instance metadata credentials. SSO profiles are not built in (the SDK's `sso` feature is left
//! out to keep the build lean).
//!
//! Every instance carries the tags `corral-group`, `corral-agent` and `corral-template`;
//! [`Provider::list`] finds the group's instances by `corral-group` (ec2 mode) or lists the Auto
//! Scaling group's (asg mode).
//!
//! # Bootstrap channel
//!
//! **ec2 mode**: each instance is its own RunInstances call, so each gets its own user data:
//!
//! ```text
//! #!/bin/sh
//! # corral bootstrap: `corral agent --metadata aws` reads these lines from instance metadata.
//! CORRAL_SERVER=<manager url>
//! CORRAL_TOKEN=<one-time token>
//! CORRAL_AGENT_GROUP=<group>
//! CORRAL_AGENT_ID=<agent id>
//! <option user_data>
//! ```
//!
//! Instances require IMDSv2 (session tokens), which the agent uses.
//! The values are checked to be shell-safe, so cloud-init can run the text as a script: the
//! operator's `user_data` starts the agent (`corral agent --metadata aws`, which reads the lines
//! back from IMDS, or `export CORRAL_SERVER CORRAL_TOKEN CORRAL_AGENT_GROUP CORRAL_AGENT_ID`
//! then `corral agent`). User data is readable by anyone on the instance who can reach IMDS and
//! by principals allowed `ec2:DescribeInstanceAttribute`; the token is one-time and expires.
//!
//! **asg mode**: the group's launch template is fixed, so instances cannot get their own user
//! data. Launch raises the desired capacity by the number of requests (refusing with a capacity
//! error beyond the group's MaxSize), waits briefly (bounded) for the new instances to appear,
//! and tags each with `corral-group`, `corral-agent`, `corral-template`,
//! `corral-bootstrap-token` and `corral-server` (the manager's URL). The launch template must
//! enable instance metadata tags (`InstanceMetadataTags: enabled`), and its user data must run
//! `corral agent --metadata aws` (a `CORRAL_SERVER=<url>` line there is read only where the tag
//! is missing). The tags are set a moment
//! after the instance starts, so the agent has to retry until IMDS shows them. Caveat: the token tag
//! is readable by every principal allowed `ec2:DescribeTags` or `ec2:DescribeInstances` in the
//! account; it is one-time and expires, which bounds the exposure. Instances that appear after the
//! wait stay untagged; the manager sees them without an agent id and terminates them. Terminate
//! uses TerminateInstanceInAutoScalingGroup with ShouldDecrementDesiredCapacity, so the group does
//! not replace them; the group's MinSize should be 0.
//!
//! # Errors
//!
//! AWS error codes decide the class (see [`errors::class_of`]): capacity and quota errors, and
//! instance types unknown or not offered (so the template backs off and the policy picks
//! another), are `Capacity`; throttling, 5xx and network failures `Transient`; the rest (bad AMI,
//! parameters, credentials, permissions) `Fatal`. Messages name the call, its subject, the code
//! and AWS's message: `RunInstances g4dn.xlarge: InsufficientInstanceCapacity: ...`.
//!
//! # Tests
//!
//! `tests/aws.rs` runs the provider against a real moto server (`testing::Moto`, behind the `testing` feature), started with
//! instance type and AMI validation on, and checks what an operator would with its own SDK
//! client: the instances, their tags and user data, the Auto Scaling group's desired capacity.

mod asg;
mod ec2;
pub mod errors;
mod settings;
/// A local moto server, for tests of this crate and its users (the `testing` feature).
#[cfg(any(test, feature = "testing"))]
pub mod testing;

use std::time::Duration;

use async_trait::async_trait;
use aws_config::{BehaviorVersion, Region, SdkConfig};
use aws_sdk_ec2::config::Credentials;
use aws_smithy_http_client::tls::{rustls_provider::CryptoMode, Provider as TlsProvider};

pub use ec2::{shell_safe, user_data};
pub use settings::{Mode, Options, TemplateOptions, EXTRA_TAGS_MAX, USER_DATA_MAX};

use crate::{Context, Instance, LaunchRequest, Provider, ProviderError, TemplateOffer};

pub use corral_api::identity::{SERVER_TAG, TOKEN_TAG};

/// A hung connection fails the attempt (and the SDK retries) instead of waiting for the
/// manager's own timeout.
const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(30);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

pub struct Aws {
    mode: ModeImpl,
    context: Context,
}

enum ModeImpl {
    Ec2(ec2::Ec2Mode),
    Asg(asg::AsgMode),
}

pub async fn connect(options: Options, context: Context) -> Result<Aws, ProviderError> {
    options
        .check()
        .map_err(|e| ProviderError::fatal(e.to_string()))?;
    let config = sdk_config(&options).await;
    if config.region().is_none() {
        return Err(ProviderError::fatal(
            "no AWS region: set provider.options.region, AWS_REGION or a profile's region",
        ));
    }
    let ec2 = aws_sdk_ec2::Client::new(&config);
    let mode = match options.mode {
        Mode::Ec2 => {
            shell_safe("the manager URL", &context.manager_url)?;
            shell_safe("the group name", &context.group)?;
            ModeImpl::Ec2(ec2::Ec2Mode {
                ec2,
                options,
                context: context.clone(),
            })
        }
        Mode::Asg => ModeImpl::Asg(asg::AsgMode {
            ec2,
            autoscaling: aws_sdk_autoscaling::Client::new(&config),
            name: options.asg_name.clone().unwrap_or_default(),
            extra_tags: options.tags,
            context: context.clone(),
            resize: Default::default(),
        }),
    };
    Ok(Aws { mode, context })
}

/// The SDK configuration: standard configuration, overridden by the options that are set.
pub async fn sdk_config(options: &Options) -> SdkConfig {
    let http = aws_smithy_http_client::Builder::new()
        .tls_provider(TlsProvider::Rustls(CryptoMode::Ring))
        .build_https();
    let timeouts = aws_config::timeout::TimeoutConfig::builder()
        .connect_timeout(CONNECT_TIMEOUT)
        .operation_attempt_timeout(ATTEMPT_TIMEOUT)
        .build();
    let mut loader = aws_config::defaults(BehaviorVersion::latest())
        .http_client(http)
        .timeout_config(timeouts);
    if let Some(region) = &options.region {
        loader = loader.region(Region::new(region.clone()));
    }
    if let Some(url) = &options.endpoint_url {
        loader = loader.endpoint_url(url);
    }
    if let (Some(id), Some(secret)) = (&options.access_key_id, &options.secret_access_key) {
        loader = loader.credentials_provider(Credentials::new(
            id,
            secret,
            options.session_token.clone(),
            None,
            "corral-provider-options",
        ));
    }
    loader.load().await
}

#[async_trait]
impl Provider for Aws {
    async fn templates(&self) -> Result<Vec<TemplateOffer>, ProviderError> {
        Ok(self
            .context
            .templates
            .iter()
            .map(|t| TemplateOffer {
                name: t.name.clone(),
                slots: t.slots.to_string(),
                price_per_hour: Some(t.price_per_hour).filter(|p| *p > 0.0),
            })
            .collect())
    }

    async fn launch(
        &self,
        template: &str,
        requests: &[LaunchRequest],
    ) -> Result<Vec<Instance>, ProviderError> {
        match &self.mode {
            ModeImpl::Ec2(m) => m.launch(template, requests).await,
            ModeImpl::Asg(m) => m.launch(template, requests).await,
        }
    }

    async fn terminate(&self, ids: &[String]) -> Result<(), ProviderError> {
        match &self.mode {
            ModeImpl::Ec2(m) => m.terminate(ids).await,
            ModeImpl::Asg(m) => m.terminate(ids).await,
        }
    }

    async fn list(&self) -> Result<Vec<Instance>, ProviderError> {
        match &self.mode {
            ModeImpl::Ec2(m) => m.list().await,
            ModeImpl::Asg(m) => m.list().await,
        }
    }
}
