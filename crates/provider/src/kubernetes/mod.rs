//! `kubernetes`: agents run as pods, created one per instance (`mode = "pods"`, the default) or as
//! the replicas of an existing StatefulSet (`mode = "statefulset"`). Calls go through kube-rs.
//!
//! # Connection
//! The client is configured as `kubectl` would be (`KUBECONFIG` or `~/.kube/config`, else the
//! in-cluster service account), changed by the options:
//! - `namespace` (string): where pods live [default: the kubeconfig context's namespace, the
//!   pod's own in-cluster, `default` with `api_server`];
//! - `context` (string): the kubeconfig context [default: the current one];
//! - `api_server` (URL) and `token` (string, **secret**): an explicit API server, replacing the
//!   kubeconfig and in-cluster configuration, and a bearer token (`token` alone replaces the
//!   kubeconfig user's credentials);
//! - `insecure_skip_tls_verify` (bool, default false): accept any server certificate.
//!
//! kube-rs's own retries are turned off and each request is bounded (connect 10 s, answer 30 s):
//! the manager retries on its own schedule, by the error class.
//!
//! # Pods mode
//! `launch` creates one Pod per request, named after the agent id (it is an RFC 1123 label),
//! labelled `corral.io/group`, `corral.io/agent`, `corral.io/template` plus `labels`
//! (string map), `restartPolicy: Never`, with one container `agent`:
//! - `image` (string, required; `templates.<name>.image` replaces it for one template),
//!   `image_pull_policy` (`Always`, `IfNotPresent` or `Never`), `command` (list of strings,
//!   default `["corral", "agent"]`);
//! - the bootstrap, in the environment (not argv): `CORRAL_SERVER`, `CORRAL_AGENT_GROUP`,
//!   `CORRAL_AGENT_ID`, `CORRAL_AGENT_CAPACITY` (the template's slots) and `CORRAL_TOKEN`. The
//!   token is visible to whoever may read pods in the namespace; it is one-time and expires;
//! - resources: requests = limits = the template's `cpu` (millicores), `mem` (bytes) and `gpu`
//!   (`nvidia.com/gpu`, rounded up to whole devices), unless `set_resources` is false;
//! - `node_selector` (string map; `templates.<name>.node_selector` adds to it and wins) and
//!   `service_account` (string).
//!
//! `terminate` deletes pods (already gone is fine); `list` finds pods by `corral.io/group`:
//! Pending → pending, Running → running, Succeeded/Failed → gone, being deleted → stopping.
//!
//! # StatefulSet mode
//! `statefulset` (string, required) names a StatefulSet in the namespace, which must use
//! `podManagementPolicy: Parallel` (otherwise new pods appear one at a time, after the previous
//! one is ready, and a launch could not hand them their bootstrap). Its pod template decides the
//! image and resources, so the pod options above are refused; it should carry the label
//! `corral.io/group` so that `list` sees pods corral has not labelled yet. One StatefulSet serves
//! one template.
//!
//! `launch` reads the StatefulSet and raises its scale by the number of requests (a replace of
//! the scale subresource at the resourceVersion read, so concurrent changes fail as a conflict).
//! The new pods are `<statefulset>-<ordinal>`. A StatefulSet cannot give each pod its own
//! environment, so the bootstrap goes on the pod once it appears (waiting at most
//! `pod_wait_secs`, default 20, range 1..=300): labels `corral.io/agent`, `corral.io/template`,
//! `corral.io/group`, and the annotations `corral.io/server` (the manager's URL) and
//! `corral.io/bootstrap-token`. The agent reads them through
//! the downward API (`--metadata kubernetes`; the kubelet refreshes downward API volumes within
//! about a minute). Caveats: the token sits in an annotation, readable by whoever may read pods;
//! a pod that appears after the wait keeps no bootstrap and is not returned (the manager counts
//! it as failed, and later terminates it as unknown).
//!
//! `terminate` can only take the highest ordinals away: while the ids include the highest ones,
//! the scale goes down by that many; any other pod is deleted, and the StatefulSet recreates it
//! under the same name without corral's labels (a warning is logged; the manager sees an unknown
//! pod and terminates it again after its grace period).
//!
//! # Errors
//! Quota (403 "exceeded quota") → capacity; 429, 5xx, optimistic-concurrency conflicts,
//! unreachable server, timeouts → transient; 401, other 403, 400/422, 404 (namespace or
//! StatefulSet), a pod name taken by another agent → fatal. A create that finds the pod already
//! there, labelled with the same agent, counts as launched.
//!
//! # Tests
//! `tests/kubernetes.rs` runs the provider against a local HTTP stand-in for the API server
//! (plain http on loopback, reached through `api_server` and `token`) that checks each request
//! (method, path, label selector, Authorization, pod bodies) and answers with the JSON under
//! `tests/recorded/kubernetes/`, written in the API server's documented format.

mod errors;
mod options;
mod pod;
mod statefulset;

use std::time::Duration;

use async_trait::async_trait;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use kube::Client;

pub use options::{Mode, Options, PullPolicy, Secret, TemplateOverride, MAX_POD_WAIT_SECS};

use crate::{
    Context, Instance, LaunchRequest, Provider, ProviderError, TemplateOffer, GROUP_LABEL,
};
use errors::classify;
use statefulset::StatefulSet;

pub use corral_api::identity::{BOOTSTRAP_ANNOTATION, SERVER_ANNOTATION};

const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
const READ_TIMEOUT: Duration = Duration::from_secs(30);

/// A group's pods in one namespace.
pub struct Kubernetes {
    options: Options,
    context: Context,
    namespace: String,
    pods: Api<Pod>,
    /// Set in StatefulSet mode.
    statefulset: Option<StatefulSet>,
}

pub async fn connect(options: Options, context: Context) -> Result<Kubernetes, ProviderError> {
    options
        .check()
        .map_err(|e| ProviderError::fatal(e.to_string()))?;
    if !options::is_label_value(&context.group) {
        return Err(ProviderError::fatal(format!(
            "group {:?} cannot be a Kubernetes label value (at most 63 letters, digits, '-', '_', '.')",
            context.group
        )));
    }
    let config = client_config(&options).await?;
    let namespace = options
        .namespace
        .clone()
        .unwrap_or_else(|| config.default_namespace.clone());
    let client =
        Client::try_from(config).map_err(|e| classify("build the Kubernetes client", &e))?;
    let pods = Api::namespaced(client.clone(), &namespace);
    let statefulset = options
        .statefulset
        .as_ref()
        .map(|name| StatefulSet::new(client, &namespace, name, options.pod_wait()));
    Ok(Kubernetes {
        options,
        context,
        namespace,
        pods,
        statefulset,
    })
}

/// kube-rs's configuration: inferred like kubectl's, or the explicit `api_server`.
async fn client_config(options: &Options) -> Result<kube::Config, ProviderError> {
    let mut config = match (&options.api_server, &options.context) {
        (Some(url), _) => {
            let uri = url.parse().map_err(|e| {
                ProviderError::fatal(format!("provider.options.api_server: {url:?}: {e}"))
            })?;
            kube::Config::new(uri)
        }
        (None, Some(context)) => {
            let choice = kube::config::KubeConfigOptions {
                context: Some(context.clone()),
                ..Default::default()
            };
            kube::Config::from_kubeconfig(&choice)
                .await
                .map_err(|e| ProviderError::fatal(format!("kubeconfig context {context:?}: {e}")))?
        }
        (None, None) => kube::Config::infer().await.map_err(|e| {
            ProviderError::fatal(format!(
                "no Kubernetes configuration (kubeconfig or in-cluster): {e}"
            ))
        })?,
    };
    if let Some(token) = &options.token {
        config.auth_info = kube::config::AuthInfo {
            token: Some(secrecy::SecretString::from(token.0.clone())),
            ..Default::default()
        };
    }
    if options.insecure_skip_tls_verify {
        config.accept_invalid_certs = true;
    }
    config.default_retry = false;
    config.connect_timeout = Some(CONNECT_TIMEOUT);
    config.read_timeout = Some(READ_TIMEOUT);
    config.reset_reader_on_write = true;
    Ok(config)
}

impl Kubernetes {
    fn on_pod(&self, call: &str, name: &str) -> String {
        format!("{call} pod {name:?} in namespace {:?}", self.namespace)
    }

    /// Pods mode: one pod per request, stopping at the first failure.
    async fn launch_pods(
        &self,
        template: &str,
        requests: &[LaunchRequest],
    ) -> Result<Vec<Instance>, ProviderError> {
        let template = self.context.template(template)?;
        let mut started = Vec::new();
        for request in requests {
            let pod = pod::build(&self.options, &self.context, template, request);
            match self.create(&pod, request).await {
                Ok(instance) => started.push(instance),
                Err(e) if started.is_empty() => return Err(e),
                Err(e) => {
                    // A partial launch is no error: the missing requests count as failed.
                    tracing::warn!(
                        template = %template.name,
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

    async fn create(&self, pod: &Pod, request: &LaunchRequest) -> Result<Instance, ProviderError> {
        let name = &request.agent_id;
        match self.pods.create(&PostParams::default(), pod).await {
            Ok(created) => Ok(pod::instance(&created)),
            Err(kube::Error::Api(s)) if s.is_already_exists() => self.adopt(name).await,
            Err(e) => Err(classify(&self.on_pod("create", name), &e)),
        }
    }

    /// A create that found the pod already there: fine if it is this agent's (a retried launch).
    async fn adopt(&self, name: &str) -> Result<Instance, ProviderError> {
        let existing = self
            .pods
            .get(name)
            .await
            .map_err(|e| classify(&self.on_pod("get existing", name), &e))?;
        match pod::agent_of(&existing) {
            Some(agent) if agent == name && self.in_group(&existing) => {
                Ok(pod::instance(&existing))
            }
            other => Err(ProviderError::fatal(format!(
                "{}: HTTP 409 AlreadyExists: the pod belongs to {}",
                self.on_pod("create", name),
                match other {
                    Some(agent) => format!("agent {agent:?} of another group or launch"),
                    None => "something other than corral (no corral.io/agent label)".into(),
                }
            ))),
        }
    }

    fn in_group(&self, pod: &Pod) -> bool {
        pod.metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(GROUP_LABEL))
            .is_some_and(|g| *g == self.context.group)
    }

    /// Deletes pods by name; gone already is fine. Tries them all, reports the first failure.
    async fn delete_pods(&self, names: &[String]) -> Result<(), ProviderError> {
        let mut failures = Vec::new();
        for name in names {
            match self.pods.delete(name, &DeleteParams::default()).await {
                Ok(_) => {}
                Err(kube::Error::Api(s)) if s.is_not_found() => {}
                Err(e) => failures.push(classify(&self.on_pod("delete", name), &e)),
            }
        }
        match failures.len() {
            0 => Ok(()),
            n => {
                let mut first = failures.swap_remove(0);
                if n > 1 {
                    first
                        .message
                        .push_str(&format!(" (and {} more failed)", n - 1));
                }
                Err(first)
            }
        }
    }
}

#[async_trait]
impl Provider for Kubernetes {
    /// The group's templates: Kubernetes has no catalogue of its own.
    async fn templates(&self) -> Result<Vec<TemplateOffer>, ProviderError> {
        Ok(self
            .context
            .templates
            .iter()
            .map(|t| TemplateOffer {
                name: t.name.clone(),
                slots: t.slots.to_string(),
                price_per_hour: (t.price_per_hour > 0.0).then_some(t.price_per_hour),
            })
            .collect())
    }

    async fn launch(
        &self,
        template: &str,
        requests: &[LaunchRequest],
    ) -> Result<Vec<Instance>, ProviderError> {
        if requests.is_empty() {
            return Ok(Vec::new());
        }
        if !options::is_label_value(template) {
            return Err(ProviderError::fatal(format!(
                "template {template:?} cannot be a Kubernetes label value"
            )));
        }
        match &self.statefulset {
            None => self.launch_pods(template, requests).await,
            Some(set) => {
                self.context.template(template)?;
                set.launch(&self.context, &self.options.labels, template, requests)
                    .await
            }
        }
    }

    async fn terminate(&self, ids: &[String]) -> Result<(), ProviderError> {
        match &self.statefulset {
            None => self.delete_pods(ids).await,
            Some(set) => {
                let strays = set.scale_down(ids).await?;
                self.delete_pods(&strays).await
            }
        }
    }

    async fn list(&self) -> Result<Vec<Instance>, ProviderError> {
        let selector = format!("{GROUP_LABEL}={}", self.context.group);
        let pods = self
            .pods
            .list(&ListParams::default().labels(&selector))
            .await
            .map_err(|e| {
                classify(
                    &format!("list pods {selector:?} in namespace {:?}", self.namespace),
                    &e,
                )
            })?;
        Ok(pods.items.iter().map(pod::instance).collect())
    }
}
