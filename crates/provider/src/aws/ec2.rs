//! ec2 mode: one RunInstances call per launch request, each instance with its own user data.

use std::collections::BTreeMap;

use aws_sdk_ec2::types::{
    Filter, HttpTokensState, IamInstanceProfileSpecification, InstanceMetadataOptionsRequest,
    InstanceStateName, InstanceType, ResourceType, Tag, TagSpecification,
};
use futures_util::{stream, StreamExt};

use super::errors::{code_of, sdk_error};
use super::settings::{Options, TemplateOptions};
use crate::{
    Context, Instance, InstanceState, LaunchRequest, ProviderError, AGENT_TAG, GROUP_TAG,
    TEMPLATE_TAG,
};

/// RunInstances calls in flight at once: enough to launch a batch quickly, few enough to stay
/// clear of EC2's request rate limits.
const LAUNCH_CONCURRENCY: usize = 8;
/// Values per DescribeInstances filter and ids per TerminateInstances call.
const IDS_PER_CALL: usize = 200;

/// What RunInstances needs for one template, resolved from the options.
#[derive(Debug)]
struct LaunchSpec<'a> {
    template: &'a str,
    instance_type: &'a str,
    image_id: &'a str,
    settings: &'a TemplateOptions,
}

impl LaunchSpec<'_> {
    /// Names the call in errors: the instance type, and the template when it differs.
    fn what(&self) -> String {
        if self.template == self.instance_type {
            format!("RunInstances {}", self.instance_type)
        } else {
            format!(
                "RunInstances {} (template {})",
                self.instance_type, self.template
            )
        }
    }
}

/// The bootstrap text every instance receives as user data. KEY=VALUE lines the agent reads
/// back from instance metadata; the values are shell-safe (see [`shell_safe`]), so the text is
/// also a valid `sh` script that cloud-init runs, ending with the operator's `extra` text.
pub fn user_data(server: &str, group: &str, request: &LaunchRequest, extra: &str) -> String {
    let mut text = format!(
        "#!/bin/sh\n\
         # corral bootstrap: `corral agent --metadata aws` reads these lines from instance metadata.\n\
         CORRAL_SERVER={server}\n\
         CORRAL_TOKEN={token}\n\
         CORRAL_AGENT_GROUP={group}\n\
         CORRAL_AGENT_ID={agent}\n",
        token = request.token,
        agent = request.agent_id,
    );
    if !extra.is_empty() {
        text.push_str(extra);
        if !extra.ends_with('\n') {
            text.push('\n');
        }
    }
    text
}

/// Checks a bootstrap value can stand unquoted in the user data script: no spaces, quotes,
/// `$`, backquotes, `;`, `&`, `|`, `<`, `>`, parentheses, `~` or newlines.
pub fn shell_safe(what: &str, value: &str) -> Result<(), ProviderError> {
    let safe = |c: char| c.is_ascii_alphanumeric() || "-_.:/%@+=,[]".contains(c);
    if !value.is_empty() && value.chars().all(safe) {
        Ok(())
    } else {
        Err(ProviderError::fatal(format!(
            "{what} {value:?} cannot go into EC2 user data: only letters, digits and -_.:/%@+=,[] are allowed"
        )))
    }
}

pub struct Ec2Mode {
    pub ec2: aws_sdk_ec2::Client,
    pub options: Options,
    pub context: Context,
}

impl Ec2Mode {
    pub async fn launch(
        &self,
        template: &str,
        requests: &[LaunchRequest],
    ) -> Result<Vec<Instance>, ProviderError> {
        let spec = self.spec(template)?;
        for request in requests {
            shell_safe("the bootstrap token", &request.token)?;
            shell_safe("the agent id", &request.agent_id)?;
        }
        // The futures are built first: a closure stored in the stream trips the compiler's
        // higher-ranked lifetime check of async_trait's boxed (Send) future.
        let calls: Vec<_> = requests.iter().map(|r| self.run_one(&spec, r)).collect();
        let results: Vec<_> = stream::iter(calls)
            .buffer_unordered(LAUNCH_CONCURRENCY)
            .collect()
            .await;
        partial(results)
    }

    fn spec<'a>(&'a self, template: &'a str) -> Result<LaunchSpec<'a>, ProviderError> {
        self.context.template(template)?;
        static NO_SETTINGS: TemplateOptions = TemplateOptions {
            instance_type: None,
            image_id: None,
            subnet_id: None,
            security_group_ids: Vec::new(),
            key_name: None,
            iam_instance_profile: None,
        };
        let settings = self.options.templates.get(template).unwrap_or(&NO_SETTINGS);
        let image_id = settings
            .image_id
            .as_deref()
            .or(self.options.image_id.as_deref())
            .ok_or_else(|| ProviderError::fatal("provider.options.image_id is not set"))?;
        Ok(LaunchSpec {
            template,
            instance_type: settings.instance_type.as_deref().unwrap_or(template),
            image_id,
            settings,
        })
    }

    async fn run_one(
        &self,
        spec: &LaunchSpec<'_>,
        request: &LaunchRequest,
    ) -> Result<Instance, ProviderError> {
        let text = user_data(
            &self.context.manager_url,
            &self.context.group,
            request,
            &self.options.user_data,
        );
        let tags = TagSpecification::builder()
            .resource_type(ResourceType::Instance)
            .set_tags(Some(tags(
                &self.context.group,
                &request.agent_id,
                spec.template,
                &self.options.tags,
            )))
            .build();
        let settings = spec.settings;
        let output = self
            .ec2
            .run_instances()
            .image_id(spec.image_id)
            .instance_type(InstanceType::from(spec.instance_type))
            .min_count(1)
            .max_count(1)
            .user_data(aws_smithy_types::base64::encode(text))
            .tag_specifications(tags)
            .set_subnet_id(settings.subnet_id.clone())
            .set_security_group_ids(
                Some(settings.security_group_ids.clone()).filter(|ids| !ids.is_empty()),
            )
            .set_key_name(settings.key_name.clone())
            .set_iam_instance_profile(settings.iam_instance_profile.as_deref().map(profile))
            // IMDSv2 only: the user data holds a token, which IMDSv1 would hand to any SSRF.
            .metadata_options(
                InstanceMetadataOptionsRequest::builder()
                    .http_tokens(HttpTokensState::Required)
                    .build(),
            )
            .send()
            .await
            .map_err(|e| sdk_error(&spec.what(), e))?;
        let id = output
            .instances()
            .first()
            .and_then(|i| i.instance_id())
            .ok_or_else(|| {
                ProviderError::transient(format!("{}: the answer holds no instance", spec.what()))
            })?;
        Ok(Instance {
            id: id.to_string(),
            agent_id: Some(request.agent_id.clone()),
            template: Some(spec.template.to_string()),
            state: InstanceState::Pending,
        })
    }

    pub async fn list(&self) -> Result<Vec<Instance>, ProviderError> {
        describe_instances(&self.ec2, vec![group_filter(&self.context.group)]).await
    }

    /// Terminates those of `ids` that are this group's and not terminated yet: TerminateInstances
    /// fails whole on an unknown id, so ids already gone are looked up first and left out.
    pub async fn terminate(&self, ids: &[String]) -> Result<(), ProviderError> {
        for chunk in ids.chunks(IDS_PER_CALL) {
            let live: Vec<String> = describe_instances(
                &self.ec2,
                vec![id_filter(chunk), group_filter(&self.context.group)],
            )
            .await?
            .into_iter()
            .filter(|i| i.state != InstanceState::Gone)
            .map(|i| i.id)
            .collect();
            if live.len() < chunk.len() {
                tracing::debug!(
                    asked = chunk.len(),
                    live = live.len(),
                    "some instances to terminate are gone or not in the group"
                );
            }
            if live.is_empty() {
                continue;
            }
            let result = self
                .ec2
                .terminate_instances()
                .set_instance_ids(Some(live))
                .send()
                .await;
            match result {
                Ok(_) => {}
                // Gone between the look-up and the call.
                Err(e) if code_of(&e) == Some("InvalidInstanceID.NotFound") => {}
                Err(e) => return Err(sdk_error("TerminateInstances", e)),
            }
        }
        Ok(())
    }
}

/// The tags every instance carries: the group, its agent id and template, then the operator's.
pub fn tags(
    group: &str,
    agent_id: &str,
    template: &str,
    extra: &BTreeMap<String, String>,
) -> Vec<Tag> {
    let ours = [
        (GROUP_TAG, group),
        (AGENT_TAG, agent_id),
        (TEMPLATE_TAG, template),
    ];
    ours.into_iter()
        .chain(extra.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .map(|(key, value)| Tag::builder().key(key).value(value).build())
        .collect()
}

fn profile(name_or_arn: &str) -> IamInstanceProfileSpecification {
    let builder = IamInstanceProfileSpecification::builder();
    if name_or_arn.starts_with("arn:") {
        builder.arn(name_or_arn).build()
    } else {
        builder.name(name_or_arn).build()
    }
}

pub fn group_filter(group: &str) -> Filter {
    Filter::builder()
        .name(format!("tag:{GROUP_TAG}"))
        .values(group)
        .build()
}

pub fn id_filter(ids: &[String]) -> Filter {
    Filter::builder()
        .name("instance-id")
        .set_values(Some(ids.to_vec()))
        .build()
}

/// All instances matching `filters`, every page.
pub async fn describe_instances(
    ec2: &aws_sdk_ec2::Client,
    filters: Vec<Filter>,
) -> Result<Vec<Instance>, ProviderError> {
    let pages = ec2
        .describe_instances()
        .set_filters(Some(filters))
        .into_paginator()
        .send()
        .try_collect()
        .await
        .map_err(|e| sdk_error("DescribeInstances", e))?;
    Ok(pages
        .iter()
        .flat_map(|page| page.reservations())
        .flat_map(|reservation| reservation.instances())
        .filter_map(to_instance)
        .collect())
}

fn to_instance(instance: &aws_sdk_ec2::types::Instance) -> Option<Instance> {
    let tag = |key: &str| {
        instance
            .tags()
            .iter()
            .find(|t| t.key() == Some(key))
            .and_then(|t| t.value())
            .map(str::to_string)
    };
    Some(Instance {
        id: instance.instance_id()?.to_string(),
        agent_id: tag(AGENT_TAG),
        template: tag(TEMPLATE_TAG),
        state: state_of(instance.state().and_then(|s| s.name())),
    })
}

/// EC2's instance state as the manager's: stopped instances count as stopping, since corral
/// never restarts them and the manager should replace them.
pub fn state_of(name: Option<&InstanceStateName>) -> InstanceState {
    match name {
        Some(InstanceStateName::Running) => InstanceState::Running,
        Some(
            InstanceStateName::ShuttingDown
            | InstanceStateName::Stopping
            | InstanceStateName::Stopped,
        ) => InstanceState::Stopping,
        Some(InstanceStateName::Terminated) => InstanceState::Gone,
        _ => InstanceState::Pending,
    }
}

/// The launched instances; the first error when none launched. Later failures only leave
/// their requests out (the manager counts those as failed), and are logged.
pub fn partial(
    results: Vec<Result<Instance, ProviderError>>,
) -> Result<Vec<Instance>, ProviderError> {
    let (launched, failed): (Vec<_>, Vec<_>) = results.into_iter().partition(Result::is_ok);
    let mut failed = failed.into_iter().filter_map(Result::err);
    if launched.is_empty() {
        if let Some(first) = failed.next() {
            return Err(first);
        }
    }
    for error in failed {
        tracing::warn!(%error, "aws launch: one instance of the batch failed");
    }
    Ok(launched.into_iter().filter_map(Result::ok).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn user_data_holds_the_bootstrap_lines_then_the_operators_text() {
        let request = LaunchRequest {
            agent_id: "gpu-7f3a".into(),
            token: "c29tZS10b2tlbg".into(),
        };
        let text = user_data(
            "https://corral.example:7700",
            "gpu",
            &request,
            "corral agent --metadata aws",
        );
        assert_eq!(
            text,
            "#!/bin/sh\n\
             # corral bootstrap: `corral agent --metadata aws` reads these lines from instance metadata.\n\
             CORRAL_SERVER=https://corral.example:7700\n\
             CORRAL_TOKEN=c29tZS10b2tlbg\n\
             CORRAL_AGENT_GROUP=gpu\n\
             CORRAL_AGENT_ID=gpu-7f3a\n\
             corral agent --metadata aws\n"
        );
        // Without operator text, the bootstrap lines alone.
        let bare = user_data("http://m:1", "g", &request, "");
        assert!(bare.ends_with("CORRAL_AGENT_ID=gpu-7f3a\n"), "{bare}");
    }

    #[test]
    fn only_shell_safe_values_go_into_user_data() {
        for ok in ["http://[::1]:7700/corral", "abc-DEF_0.9+/=", "gpu-pool"] {
            shell_safe("value", ok).unwrap();
        }
        for bad in [
            "", "a b", "x;reboot", "$(id)", "`id`", "a'b", "a\nb", "~root", "a&b",
        ] {
            let error = shell_safe("the token", bad).unwrap_err();
            assert_eq!(error.class, crate::ErrorClass::Fatal);
            assert!(error.message.starts_with("the token"), "{error}");
        }
    }

    #[test]
    fn ec2_states_map_to_the_managers() {
        use InstanceStateName as S;
        let cases = [
            (S::Pending, InstanceState::Pending),
            (S::Running, InstanceState::Running),
            (S::ShuttingDown, InstanceState::Stopping),
            (S::Stopping, InstanceState::Stopping),
            (S::Stopped, InstanceState::Stopping),
            (S::Terminated, InstanceState::Gone),
        ];
        for (ec2, ours) in cases {
            assert_eq!(state_of(Some(&ec2)), ours, "{ec2:?}");
        }
    }
}
