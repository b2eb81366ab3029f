//! asg mode: grows an existing Auto Scaling group and tags its new instances for bootstrap.

use std::collections::{BTreeMap, HashSet};
use std::time::Duration;

use aws_sdk_autoscaling::types::AutoScalingGroup;
use aws_sdk_ec2::types::Tag;
use tokio::sync::Mutex;
use tokio::time::Instant;

use super::ec2::{describe_instances, id_filter, partial, tags};
use super::errors::sdk_error;
use super::{SERVER_TAG, TOKEN_TAG};
use crate::{Context, Instance, InstanceState, LaunchRequest, ProviderError};

/// How long launch waits for the group's new instances to show up after SetDesiredCapacity
/// (AWS lists them within seconds; moto at once).
const NEW_INSTANCES_WAIT: Duration = Duration::from_secs(20);
const POLL_INTERVAL: Duration = Duration::from_secs(1);
const IDS_PER_CALL: usize = 200;

pub struct AsgMode {
    pub ec2: aws_sdk_ec2::Client,
    pub autoscaling: aws_sdk_autoscaling::Client,
    pub name: String,
    pub extra_tags: BTreeMap<String, String>,
    pub context: Context,
    /// Launches and terminations read the desired capacity, then set it: one at a time.
    pub resize: Mutex<()>,
}

impl AsgMode {
    pub async fn launch(
        &self,
        template: &str,
        requests: &[LaunchRequest],
    ) -> Result<Vec<Instance>, ProviderError> {
        self.context.template(template)?;
        if requests.is_empty() {
            return Ok(Vec::new());
        }
        let _resizing = self.resize.lock().await;
        let group = self.group().await?;
        let desired = group.desired_capacity().unwrap_or(0);
        let max = group.max_size().unwrap_or(0);
        let wanted = desired.saturating_add(i32::try_from(requests.len()).unwrap_or(i32::MAX));
        if wanted > max {
            return Err(ProviderError::capacity(format!(
                "SetDesiredCapacity {}: {} more instances would exceed the group's MaxSize {max} (desired capacity {desired})",
                self.name,
                requests.len()
            )));
        }
        let before: HashSet<String> = instance_ids(&group).collect();
        self.autoscaling
            .set_desired_capacity()
            .auto_scaling_group_name(&self.name)
            .desired_capacity(wanted)
            .honor_cooldown(false)
            .send()
            .await
            .map_err(|e| sdk_error(&format!("SetDesiredCapacity {}", self.name), e))?;
        let new = self.new_instances(&before, requests.len()).await?;
        if new.len() < requests.len() {
            // The rest come up untagged: the manager sees them in list() without an agent id and
            // terminates them after its grace period.
            tracing::warn!(
                group = %self.name,
                asked = requests.len(),
                appeared = new.len(),
                "aws asg: fewer new instances appeared than launched in time"
            );
        }
        let mut results = Vec::with_capacity(new.len());
        for (id, request) in new.into_iter().zip(requests) {
            results.push(self.tag(id, template, request).await);
        }
        partial(results)
    }

    /// The group's instances that were not in `before`, polling until `count` show up or the
    /// wait runs out.
    async fn new_instances(
        &self,
        before: &HashSet<String>,
        count: usize,
    ) -> Result<Vec<String>, ProviderError> {
        let deadline = Instant::now() + NEW_INSTANCES_WAIT;
        loop {
            let group = self.group().await?;
            let mut new: Vec<String> = instance_ids(&group)
                .filter(|id| !before.contains(id))
                .collect();
            new.sort();
            if new.len() >= count || Instant::now() + POLL_INTERVAL > deadline {
                new.truncate(count);
                return Ok(new);
            }
            tokio::time::sleep(POLL_INTERVAL).await;
        }
    }

    /// Tags a new instance with its group, agent id, template and bootstrap token: the agent on
    /// it reads them from instance metadata.
    async fn tag(
        &self,
        id: String,
        template: &str,
        request: &LaunchRequest,
    ) -> Result<Instance, ProviderError> {
        let mut all = tags(
            &self.context.group,
            &request.agent_id,
            template,
            &self.extra_tags,
        );
        all.push(Tag::builder().key(TOKEN_TAG).value(&request.token).build());
        all.push(
            Tag::builder()
                .key(SERVER_TAG)
                .value(&self.context.manager_url)
                .build(),
        );
        self.ec2
            .create_tags()
            .resources(&id)
            .set_tags(Some(all))
            .send()
            .await
            .map_err(|e| sdk_error(&format!("CreateTags {id}"), e))?;
        Ok(Instance {
            id,
            agent_id: Some(request.agent_id.clone()),
            template: Some(template.to_string()),
            state: InstanceState::Pending,
        })
    }

    /// Terminates those of `ids` still in the group, decrementing its desired capacity so the
    /// group does not replace them.
    pub async fn terminate(&self, ids: &[String]) -> Result<(), ProviderError> {
        let _resizing = self.resize.lock().await;
        let members: HashSet<String> = instance_ids(&self.group().await?).collect();
        for id in ids.iter().filter(|id| members.contains(*id)) {
            let result = self
                .autoscaling
                .terminate_instance_in_auto_scaling_group()
                .instance_id(id)
                .should_decrement_desired_capacity(true)
                .send()
                .await;
            if let Err(e) = result {
                let error = sdk_error(&format!("TerminateInstanceInAutoScalingGroup {id}"), e);
                // Left the group since we looked: already gone.
                if !error.message.contains("not found") {
                    return Err(error);
                }
            }
        }
        Ok(())
    }

    /// The group's instances, with their tags and state from EC2. Instances EC2 does not list
    /// yet (just launched) are pending.
    pub async fn list(&self) -> Result<Vec<Instance>, ProviderError> {
        let ids: Vec<String> = instance_ids(&self.group().await?).collect();
        let mut instances = Vec::with_capacity(ids.len());
        for chunk in ids.chunks(IDS_PER_CALL) {
            let mut known = describe_instances(&self.ec2, vec![id_filter(chunk)]).await?;
            for id in chunk {
                if !known.iter().any(|i| &i.id == id) {
                    known.push(Instance {
                        id: id.clone(),
                        agent_id: None,
                        template: None,
                        state: InstanceState::Pending,
                    });
                }
            }
            instances.append(&mut known);
        }
        Ok(instances)
    }

    async fn group(&self) -> Result<AutoScalingGroup, ProviderError> {
        let what = format!("DescribeAutoScalingGroups {}", self.name);
        let output = self
            .autoscaling
            .describe_auto_scaling_groups()
            .auto_scaling_group_names(&self.name)
            .send()
            .await
            .map_err(|e| sdk_error(&what, e))?;
        output
            .auto_scaling_groups()
            .iter()
            .find(|g| g.auto_scaling_group_name() == Some(self.name.as_str()))
            .cloned()
            .ok_or_else(|| {
                ProviderError::fatal(format!(
                    "{what}: no Auto Scaling group named {:?} in this region",
                    self.name
                ))
            })
    }
}

fn instance_ids(group: &AutoScalingGroup) -> impl Iterator<Item = String> + '_ {
    group
        .instances()
        .iter()
        .filter_map(|i| i.instance_id())
        .map(str::to_string)
}
