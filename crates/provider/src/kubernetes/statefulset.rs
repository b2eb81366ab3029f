//! StatefulSet mode: instances are the replicas of an existing StatefulSet. Scaling up adds the
//! highest ordinals, whose pods then receive their bootstrap as labels and an annotation;
//! scaling down can only remove the highest ordinals (see the module doc of `kubernetes`).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use k8s_openapi::api::apps::v1::StatefulSet as StatefulSetObject;
use k8s_openapi::api::autoscaling::v1::{Scale, ScaleSpec};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::Client;
use serde_json::json;
use tokio::time::Instant;

use super::errors::classify;
use super::{pod, BOOTSTRAP_ANNOTATION, SERVER_ANNOTATION};
use crate::{Context, Instance, LaunchRequest, ProviderError};

/// How often a launch looks for the StatefulSet's new pods.
const POLL: Duration = Duration::from_millis(500);

pub struct StatefulSet {
    sets: Api<StatefulSetObject>,
    pods: Api<Pod>,
    name: String,
    namespace: String,
    /// How long a launch waits for its pods to appear.
    wait: Duration,
}

/// What a launch or terminate needs of the StatefulSet: its scale and the version it was read at.
struct Current {
    replicas: i32,
    resource_version: Option<String>,
}

impl StatefulSet {
    pub fn new(client: Client, namespace: &str, name: &str, wait: Duration) -> Self {
        StatefulSet {
            sets: Api::namespaced(client.clone(), namespace),
            pods: Api::namespaced(client, namespace),
            name: name.to_string(),
            namespace: namespace.to_string(),
            wait,
        }
    }

    fn on_set(&self, call: &str) -> String {
        format!(
            "{call} statefulset {:?} in namespace {:?}",
            self.name, self.namespace
        )
    }

    fn on_pod(&self, call: &str, name: &str) -> String {
        format!("{call} pod {name:?} in namespace {:?}", self.namespace)
    }

    fn pod_name(&self, ordinal: i32) -> String {
        format!("{}-{ordinal}", self.name)
    }

    /// The ordinal of one of this StatefulSet's pods (`<name>-<ordinal>`).
    fn ordinal(&self, pod: &str) -> Option<i32> {
        let suffix = pod.strip_prefix(&self.name)?.strip_prefix('-')?;
        let ordinal: i32 = suffix.parse().ok()?;
        (ordinal.to_string() == suffix).then_some(ordinal)
    }

    /// Reads the StatefulSet; a launch also needs its pods created in parallel.
    async fn read(&self, for_launch: bool) -> Result<Current, ProviderError> {
        let set = self
            .sets
            .get(&self.name)
            .await
            .map_err(|e| classify(&self.on_set("get"), &e))?;
        let spec = set.spec.unwrap_or_default();
        let policy = spec
            .pod_management_policy
            .as_deref()
            .unwrap_or("OrderedReady");
        if for_launch && policy != "Parallel" {
            return Err(ProviderError::fatal(format!(
                "{}: podManagementPolicy is {policy}; corral needs Parallel so that new pods \
                 appear at once and can be handed their bootstrap",
                self.on_set("launch through")
            )));
        }
        Ok(Current {
            replicas: spec.replicas.unwrap_or(1),
            resource_version: set.metadata.resource_version,
        })
    }

    /// Sets the scale, on the condition that the StatefulSet is still at the version read.
    async fn set_scale(&self, replicas: i32, current: &Current) -> Result<(), ProviderError> {
        let scale = Scale {
            metadata: ObjectMeta {
                name: Some(self.name.clone()),
                namespace: Some(self.namespace.clone()),
                resource_version: current.resource_version.clone(),
                ..ObjectMeta::default()
            },
            spec: Some(ScaleSpec {
                replicas: Some(replicas),
            }),
            status: None,
        };
        self.sets
            .replace_scale(&self.name, &PostParams::default(), &scale)
            .await
            .map_err(|e| {
                classify(
                    &self.on_set(&format!("scale from {} to {replicas}", current.replicas)),
                    &e,
                )
            })?;
        Ok(())
    }

    pub async fn launch(
        &self,
        context: &Context,
        extra_labels: &BTreeMap<String, String>,
        template: &str,
        requests: &[LaunchRequest],
    ) -> Result<Vec<Instance>, ProviderError> {
        let current = self.read(true).await?;
        let added = i32::try_from(requests.len()).unwrap_or(i32::MAX);
        let target = current.replicas.saturating_add(added);
        self.set_scale(target, &current).await?;

        let deadline = Instant::now() + self.wait;
        let mut started = Vec::new();
        for (ordinal, request) in (current.replicas..target).zip(requests) {
            let name = self.pod_name(ordinal);
            let mut labels = extra_labels.clone();
            labels.extend(context.labels(&request.agent_id, template));
            let result = match self.appeared(&name, deadline).await {
                Ok(true) => {
                    self.hand_bootstrap(&name, &labels, &context.manager_url, &request.token)
                        .await
                }
                Ok(false) => Err(ProviderError::transient(format!(
                    "{}: did not appear within {}s",
                    self.on_pod("wait for", &name),
                    self.wait.as_secs()
                ))),
                Err(e) => Err(e),
            };
            match result {
                Ok(instance) => started.push(instance),
                Err(e) if started.is_empty() => return Err(e),
                Err(e) => {
                    tracing::warn!(
                        statefulset = %self.name,
                        launched = started.len(),
                        requested = requests.len(),
                        "kubernetes launch stopped early: {e}"
                    );
                    break;
                }
            }
        }
        Ok(started)
    }

    /// Waits (until `deadline`) for the pod to exist and not be on its way out (a pod of the
    /// same name from an earlier scale-down may still be terminating).
    async fn appeared(&self, name: &str, deadline: Instant) -> Result<bool, ProviderError> {
        loop {
            let found = self
                .pods
                .get_opt(name)
                .await
                .map_err(|e| classify(&self.on_pod("get", name), &e))?;
            if found.is_some_and(|p| p.metadata.deletion_timestamp.is_none()) {
                return Ok(true);
            }
            if Instant::now() + POLL > deadline {
                return Ok(false);
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// The StatefulSet's bootstrap channel: corral's labels, the manager and token annotations.
    async fn hand_bootstrap(
        &self,
        name: &str,
        labels: &BTreeMap<String, String>,
        server: &str,
        token: &str,
    ) -> Result<Instance, ProviderError> {
        let patch = json!({
            "metadata": {
                "labels": labels,
                "annotations": { SERVER_ANNOTATION: server, BOOTSTRAP_ANNOTATION: token },
            }
        });
        let labelled = self
            .pods
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map_err(|e| classify(&self.on_pod("label", name), &e))?;
        Ok(pod::instance(&labelled))
    }

    /// Scales down by the highest ordinals among `ids`; returns the pods that scaling cannot
    /// remove (lower ordinals, or not this StatefulSet's), which the caller deletes.
    pub async fn scale_down(&self, ids: &[String]) -> Result<Vec<String>, ProviderError> {
        let current = self.read(false).await?;
        let leaving: BTreeSet<i32> = ids.iter().filter_map(|id| self.ordinal(id)).collect();
        let keep = remaining(current.replicas, &leaving);
        if keep < current.replicas {
            self.set_scale(keep, &current).await?;
        }
        // Ordinals at or above the old scale are already being removed by the controller.
        let strays: Vec<String> = ids
            .iter()
            .filter(|id| self.ordinal(id).is_none_or(|o| o < keep))
            .cloned()
            .collect();
        for stray in strays.iter().filter(|id| self.ordinal(id).is_some()) {
            tracing::warn!(
                statefulset = %self.name,
                pod = %stray,
                "deleting pod {stray}: only the highest ordinals can be scaled away, so the \
                 StatefulSet will recreate it, without corral's labels"
            );
        }
        Ok(strays)
    }
}

/// The scale after removing `leaving`: only a run of the highest ordinals can be scaled away.
fn remaining(replicas: i32, leaving: &BTreeSet<i32>) -> i32 {
    let mut keep = replicas;
    while keep > 0 && leaving.contains(&(keep - 1)) {
        keep -= 1;
    }
    keep
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_highest_ordinals_scale_away() {
        let set = |o: &[i32]| o.iter().copied().collect::<BTreeSet<i32>>();
        assert_eq!(remaining(3, &set(&[2, 1])), 1);
        assert_eq!(remaining(3, &set(&[0, 1, 2])), 0);
        assert_eq!(remaining(3, &set(&[0, 2])), 2);
        assert_eq!(remaining(3, &set(&[0, 1])), 3);
        // Ordinals past the scale are already going.
        assert_eq!(remaining(2, &set(&[5])), 2);
        assert_eq!(remaining(0, &set(&[])), 0);
    }
}
