//! The Pod an instance runs as (pods mode), and how any corral pod reads back as an [`Instance`].

use std::collections::BTreeMap;

use corral_core::{InstanceTemplate, Slots};
use k8s_openapi::api::core::v1::{Container, EnvVar, Pod, PodSpec, ResourceRequirements};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::options::Options;
use corral_api::identity::{ENV_CAPACITY, ENV_GROUP, ENV_ID, ENV_SERVER, ENV_TOKEN};

use crate::{Context, Instance, InstanceState, LaunchRequest, AGENT_LABEL, TEMPLATE_LABEL};

/// The agent container's name.
pub const CONTAINER: &str = "agent";
/// Kubernetes' extended resource for NVIDIA GPUs (the device plugin's name).
pub const GPU_RESOURCE: &str = "nvidia.com/gpu";

/// The Pod for one launch request: named after the agent id (already an RFC 1123 label), labelled
/// with group, agent and template, and handed its bootstrap in the environment.
pub fn build(
    options: &Options,
    context: &Context,
    template: &InstanceTemplate,
    request: &LaunchRequest,
) -> Pod {
    let overrides = options.templates.get(&template.name);
    let image = overrides
        .and_then(|o| o.image.clone())
        .or_else(|| options.image.clone());
    let mut node_selector = options.node_selector.clone();
    if let Some(o) = overrides {
        node_selector.extend(o.node_selector.clone());
    }
    let mut labels = options.labels.clone();
    labels.extend(context.labels(&request.agent_id, &template.name));

    let container = Container {
        name: CONTAINER.into(),
        image,
        image_pull_policy: options.image_pull_policy.map(|p| p.as_str().into()),
        command: Some(options.command()),
        env: Some(environment(context, template, request)),
        resources: options
            .set_resources()
            .then(|| resources(&template.slots))
            .flatten(),
        ..Container::default()
    };
    Pod {
        metadata: ObjectMeta {
            name: Some(request.agent_id.clone()),
            labels: Some(labels),
            ..ObjectMeta::default()
        },
        spec: Some(PodSpec {
            containers: vec![container],
            restart_policy: Some("Never".into()),
            node_selector: (!node_selector.is_empty()).then_some(node_selector),
            service_account_name: options.service_account.clone(),
            ..PodSpec::default()
        }),
        status: None,
    }
}

/// What `corral agent` reads: manager, group, id, capacity and the one-time token.
fn environment(
    context: &Context,
    template: &InstanceTemplate,
    request: &LaunchRequest,
) -> Vec<EnvVar> {
    let mut vars = vec![
        (ENV_SERVER, context.manager_url.clone()),
        (ENV_GROUP, context.group.clone()),
        (ENV_ID, request.agent_id.clone()),
    ];
    // Without slots the agent detects its capacity itself.
    if !template.slots.is_empty() {
        vars.push((ENV_CAPACITY, template.slots.to_string()));
    }
    vars.push((ENV_TOKEN, request.token.clone()));
    vars.into_iter()
        .map(|(name, value)| EnvVar {
            name: name.into(),
            value: Some(value),
            value_from: None,
        })
        .collect()
}

/// Requests and limits (equal, so the pod gets exactly the template's slots) for cpu, mem and
/// gpu; other slots have no Kubernetes resource. `None` when the template names none of them.
pub fn resources(slots: &Slots) -> Option<ResourceRequirements> {
    let mut amounts = BTreeMap::new();
    let cpu = slots.get("cpu").milli();
    if cpu > 0 {
        amounts.insert("cpu".to_string(), Quantity(format!("{cpu}m")));
    }
    // Slot amounts are thousandths: of a byte for mem, of a device for gpu. Round up.
    let mem = slots.get("mem").milli().div_ceil(1000);
    if mem > 0 {
        amounts.insert("memory".to_string(), Quantity(mem.to_string()));
    }
    let gpu = slots.get("gpu").milli().div_ceil(1000);
    if gpu > 0 {
        amounts.insert(GPU_RESOURCE.to_string(), Quantity(gpu.to_string()));
    }
    (!amounts.is_empty()).then(|| ResourceRequirements {
        requests: Some(amounts.clone()),
        limits: Some(amounts),
        ..ResourceRequirements::default()
    })
}

/// A pod as the manager sees it: its name, the agent and template labels, and its state.
pub fn instance(pod: &Pod) -> Instance {
    let label = |key: &str| {
        pod.metadata
            .labels
            .as_ref()
            .and_then(|labels| labels.get(key))
            .cloned()
    };
    Instance {
        id: pod.metadata.name.clone().unwrap_or_default(),
        agent_id: label(AGENT_LABEL),
        template: label(TEMPLATE_LABEL),
        state: state(pod),
    }
}

fn state(pod: &Pod) -> InstanceState {
    if pod.metadata.deletion_timestamp.is_some() {
        return InstanceState::Stopping;
    }
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    match phase {
        Some("Running") => InstanceState::Running,
        Some("Succeeded" | "Failed") => InstanceState::Gone,
        // "Unknown" means the node stopped reporting: the pod may still run, so it is not gone.
        Some("Unknown") => InstanceState::Running,
        _ => InstanceState::Pending,
    }
}

/// The agent label a pod carries, if any.
pub fn agent_of(pod: &Pod) -> Option<&str> {
    pod.metadata
        .labels
        .as_ref()
        .and_then(|labels| labels.get(AGENT_LABEL))
        .map(String::as_str)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::str::FromStr;

    fn amounts(slots: &str) -> BTreeMap<String, String> {
        let r = resources(&Slots::from_str(slots).unwrap()).unwrap();
        assert_eq!(r.requests, r.limits);
        r.requests
            .unwrap()
            .into_iter()
            .map(|(k, v)| (k, v.0))
            .collect()
    }

    #[test]
    fn slots_become_requests_and_limits() {
        let got = amounts("cpu=2.5,mem=4GiB,gpu=1");
        assert_eq!(got["cpu"], "2500m");
        assert_eq!(got["memory"], "4294967296");
        assert_eq!(got[GPU_RESOURCE], "1");
        // A fractional GPU cannot be requested: round up to a whole device.
        assert_eq!(amounts("gpu=0.5")[GPU_RESOURCE], "1");
        assert_eq!(amounts("cpu=250m,disk=10GiB").len(), 1);
        assert!(resources(&Slots::from_str("disk=1GiB").unwrap()).is_none());
    }
}
