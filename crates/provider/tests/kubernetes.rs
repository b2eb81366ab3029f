//! The kubernetes provider against a stand-in API server: a local HTTP/1.1 server that expects a
//! script of requests (method and path), records what it receives (query, Authorization, body)
//! and answers each with a response from `tests/recorded/kubernetes/` (see the README there).
//! No real API server runs on our machines; the recorded answers follow the API server's format.
#![cfg(feature = "kubernetes")]

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::path::PathBuf;
use std::str::FromStr;
use std::sync::{Arc, Mutex};

use axum::body::Bytes;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use corral_core::{InstanceTemplate, Slots};
use corral_provider::ProviderSettings as _;
use corral_provider::{
    connect, Context, ErrorClass, Instance, InstanceState, LaunchRequest, Provider, ProviderConfig,
    ProviderError,
};
use serde_json::{json, Value};

const API_TOKEN: &str = "test-api-token";
const PODS: &str = "/api/v1/namespaces/corral/pods";
const STATEFULSET: &str = "/apis/apps/v1/namespaces/corral/statefulsets/web";

/// One expected request and the recorded answer to it.
struct Exchange {
    method: Method,
    path: String,
    status: u16,
    file: &'static str,
}

fn expect(method: Method, path: &str, status: u16, file: &'static str) -> Exchange {
    Exchange {
        method,
        path: path.to_string(),
        status,
        file,
    }
}

/// A request as the stand-in received it.
#[derive(Debug, Clone)]
struct Seen {
    method: Method,
    path: String,
    query: HashMap<String, String>,
    authorization: Option<String>,
    content_type: Option<String>,
    body: Option<Value>,
}

#[derive(Default)]
struct Script {
    expected: VecDeque<Exchange>,
    seen: Vec<Seen>,
    /// Requests that did not match the script (answered 418 so the provider fails loudly).
    unexpected: Vec<String>,
}

type Shared = Arc<Mutex<Script>>;

struct StandIn {
    url: String,
    script: Shared,
}

impl StandIn {
    async fn start(expected: Vec<Exchange>) -> StandIn {
        let script: Shared = Arc::new(Mutex::new(Script {
            expected: expected.into(),
            ..Script::default()
        }));
        let app = axum::Router::new()
            .fallback(answer)
            .with_state(script.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        StandIn { url, script }
    }

    /// Every scripted request came, in order, and nothing else did; returns what was received.
    fn finish(&self) -> Vec<Seen> {
        let script = self.script.lock().unwrap();
        assert!(
            script.unexpected.is_empty(),
            "unexpected requests: {:?}",
            script.unexpected
        );
        let left: Vec<String> = script
            .expected
            .iter()
            .map(|e| format!("{} {}", e.method, e.path))
            .collect();
        assert!(left.is_empty(), "requests never made: {left:?}");
        for seen in &script.seen {
            assert_eq!(
                seen.authorization.as_deref(),
                Some(format!("Bearer {API_TOKEN}").as_str()),
                "{} {} did not carry the token",
                seen.method,
                seen.path
            );
        }
        script.seen.clone()
    }
}

async fn answer(
    State(script): State<Shared>,
    method: Method,
    uri: Uri,
    Query(query): Query<HashMap<String, String>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
    };
    let seen = Seen {
        method: method.clone(),
        path: uri.path().to_string(),
        query,
        authorization: header("authorization"),
        content_type: header("content-type"),
        body: serde_json::from_slice(&body).ok(),
    };
    let mut script = script.lock().unwrap();
    let next = script.expected.pop_front();
    let matches = next
        .as_ref()
        .is_some_and(|e| e.method == method && e.path == seen.path);
    script.seen.push(seen);
    match next {
        Some(exchange) if matches => recorded(exchange.status, exchange.file),
        other => {
            let wanted = other.map(|e| format!("{} {}", e.method, e.path));
            script
                .unexpected
                .push(format!("{method} {} (expected {wanted:?})", uri.path()));
            StatusCode::IM_A_TEAPOT.into_response()
        }
    }
}

fn recorded(status: u16, file: &str) -> Response {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/recorded/kubernetes")
        .join(file);
    let body = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    (
        StatusCode::from_u16(status).unwrap(),
        [("content-type", "application/json")],
        body,
    )
        .into_response()
}

fn context() -> Context {
    Context {
        group: "ci".into(),
        manager_url: "https://corral.example.com:8470".into(),
        templates: vec![InstanceTemplate {
            name: "gpu".into(),
            slots: Slots::from_str("cpu=2.5,mem=4GiB,gpu=1").unwrap(),
            price_per_hour: 0.0,
            max: 0,
            labels: BTreeMap::new(),
            devices: Vec::new(),
        }],
        corral_binary: "corral".into(),
        state_dir: std::env::temp_dir(),
    }
}

fn pods_options(url: &str) -> Value {
    json!({
        "api_server": url,
        "token": API_TOKEN,
        "namespace": "corral",
        "image": "registry.example.com/corral:0.1",
        "image_pull_policy": "IfNotPresent",
        "labels": {"team": "ml"},
        "node_selector": {"pool": "gpu"},
        "templates": {"gpu": {"node_selector": {"accelerator": "a100"}}},
    })
}

fn statefulset_options(url: &str) -> Value {
    json!({
        "mode": "statefulset",
        "statefulset": "web",
        "api_server": url,
        "token": API_TOKEN,
        "namespace": "corral",
        "labels": {"team": "ml"},
        "pod_wait_secs": 5,
    })
}

fn config(options: Value) -> ProviderConfig {
    serde_json::from_value(json!({"name": "kubernetes", "options": options})).unwrap()
}

async fn provider(options: Value) -> Box<dyn Provider> {
    match connect(&config(options), context()).await {
        Ok(p) => p,
        Err(e) => panic!("connect: {e}"),
    }
}

fn request(agent: &str) -> LaunchRequest {
    LaunchRequest {
        agent_id: agent.into(),
        token: format!("bootstrap-{}", agent.trim_start_matches("gpu-")),
    }
}

fn instance(id: &str, agent: &str, state: InstanceState) -> Instance {
    Instance {
        id: id.into(),
        agent_id: Some(agent.into()),
        template: Some("gpu".into()),
        state,
    }
}

/// `spec.containers[0].env` as a map.
fn env_of(pod: &Value) -> BTreeMap<String, String> {
    pod["spec"]["containers"][0]["env"]
        .as_array()
        .expect("env")
        .iter()
        .map(|v| {
            (
                v["name"].as_str().unwrap().to_string(),
                v["value"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

#[tokio::test]
async fn launch_creates_one_labelled_pod_per_request_with_its_bootstrap() {
    let api = StandIn::start(vec![
        expect(Method::POST, PODS, 201, "pod-created-gpu-a1.json"),
        expect(Method::POST, PODS, 201, "pod-created-gpu-a2.json"),
    ])
    .await;
    let k8s = provider(pods_options(&api.url)).await;
    let started = k8s
        .launch("gpu", &[request("gpu-a1"), request("gpu-a2")])
        .await
        .unwrap();
    assert_eq!(
        started,
        vec![
            instance("gpu-a1", "gpu-a1", InstanceState::Pending),
            instance("gpu-a2", "gpu-a2", InstanceState::Pending),
        ]
    );

    let seen = api.finish();
    for (seen, agent) in seen.iter().zip(["gpu-a1", "gpu-a2"]) {
        let pod = seen.body.as_ref().expect("a pod body");
        assert_eq!(pod["metadata"]["name"], agent);
        assert_eq!(
            pod["metadata"]["labels"],
            json!({"corral.io/group": "ci", "corral.io/agent": agent,
                   "corral.io/template": "gpu", "team": "ml"})
        );
        let spec = &pod["spec"];
        assert_eq!(spec["restartPolicy"], "Never");
        assert_eq!(
            spec["nodeSelector"],
            json!({"pool": "gpu", "accelerator": "a100"})
        );
        let container = &spec["containers"][0];
        assert_eq!(container["name"], "agent");
        assert_eq!(container["image"], "registry.example.com/corral:0.1");
        assert_eq!(container["imagePullPolicy"], "IfNotPresent");
        assert_eq!(container["command"], json!(["corral", "agent"]));
        let token = format!("bootstrap-{}", &agent[4..]);
        let env = env_of(pod);
        assert_eq!(env["CORRAL_SERVER"], "https://corral.example.com:8470");
        assert_eq!(env["CORRAL_AGENT_GROUP"], "ci");
        assert_eq!(env["CORRAL_AGENT_ID"], agent);
        assert_eq!(env["CORRAL_AGENT_CAPACITY"], "cpu=2.5,gpu=1,mem=4GiB");
        assert_eq!(env["CORRAL_TOKEN"], token);
        // The token travels in the environment only, never in argv (world-readable in `ps`).
        assert!(container.get("args").is_none(), "{container}");
        let amounts = json!({"cpu": "2500m", "memory": "4294967296", "nvidia.com/gpu": "1"});
        assert_eq!(container["resources"]["requests"], amounts);
        assert_eq!(container["resources"]["limits"], amounts);
    }
}

#[tokio::test]
async fn set_resources_false_and_template_image_override() {
    let api = StandIn::start(vec![expect(
        Method::POST,
        PODS,
        201,
        "pod-created-gpu-a1.json",
    )])
    .await;
    let mut options = pods_options(&api.url);
    options["set_resources"] = json!(false);
    options["templates"] = json!({"gpu": {"image": "registry.example.com/corral-cuda:0.1"}});
    options["command"] = json!(["/usr/local/bin/corral", "agent", "--runtime", "docker"]);
    let k8s = provider(options).await;
    k8s.launch("gpu", &[request("gpu-a1")]).await.unwrap();
    let seen = api.finish();
    let container = &seen[0].body.as_ref().unwrap()["spec"]["containers"][0];
    assert!(container.get("resources").is_none(), "{container}");
    assert_eq!(container["image"], "registry.example.com/corral-cuda:0.1");
    assert_eq!(
        container["command"],
        json!(["/usr/local/bin/corral", "agent", "--runtime", "docker"])
    );
}

#[tokio::test]
async fn list_finds_the_group_by_label_and_maps_phases() {
    let api = StandIn::start(vec![expect(Method::GET, PODS, 200, "pod-list.json")]).await;
    let k8s = provider(pods_options(&api.url)).await;
    let listed = k8s.list().await.unwrap();
    assert_eq!(
        listed,
        vec![
            instance("gpu-a1", "gpu-a1", InstanceState::Running),
            instance("gpu-a2", "gpu-a2", InstanceState::Pending),
            instance("gpu-a3", "gpu-a3", InstanceState::Gone),
            instance("gpu-a4", "gpu-a4", InstanceState::Gone),
            instance("gpu-a5", "gpu-a5", InstanceState::Stopping),
        ]
    );
    let seen = api.finish();
    assert_eq!(
        seen[0].query.get("labelSelector").map(String::as_str),
        Some("corral.io/group=ci")
    );
}

/// The standard configuration: a kubeconfig (`KUBECONFIG`), with `context` choosing the entry
/// (its cluster, user token and namespace) over the current context, which points nowhere.
/// No other test reads `KUBECONFIG`.
#[tokio::test]
async fn the_kubeconfig_context_option_picks_cluster_user_and_namespace() {
    let api = StandIn::start(vec![expect(Method::GET, PODS, 200, "pod-list.json")]).await;
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("config");
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1
kind: Config
current-context: elsewhere
clusters:
- name: stand-in
  cluster:
    server: {}
- name: nowhere
  cluster:
    server: http://127.0.0.1:9
contexts:
- name: ci
  context: {{cluster: stand-in, user: corral, namespace: corral}}
- name: elsewhere
  context: {{cluster: nowhere, user: nobody, namespace: other}}
users:
- name: corral
  user: {{token: {API_TOKEN}}}
- name: nobody
  user: {{token: wrong}}
",
            api.url
        ),
    )
    .unwrap();
    std::env::set_var("KUBECONFIG", &kubeconfig);
    let k8s = provider(json!({"context": "ci", "image": "registry.example.com/corral:0.1"})).await;
    assert_eq!(k8s.list().await.unwrap().len(), 5);
    api.finish();
}

#[tokio::test]
async fn terminate_deletes_pods_and_pods_already_gone_are_fine() {
    let api = StandIn::start(vec![
        expect(
            Method::DELETE,
            &format!("{PODS}/gpu-a1"),
            200,
            "pod-deleted-gpu-a1.json",
        ),
        expect(
            Method::DELETE,
            &format!("{PODS}/gpu-a9"),
            404,
            "status-404-pod-gpu-a9.json",
        ),
    ])
    .await;
    let k8s = provider(pods_options(&api.url)).await;
    k8s.terminate(&["gpu-a1".into(), "gpu-a9".into()])
        .await
        .unwrap();
    api.finish();
}

/// A create the API server refuses with `status` and the recorded `file`.
async fn refused_create(status: u16, file: &'static str) -> ProviderError {
    let api = StandIn::start(vec![expect(Method::POST, PODS, status, file)]).await;
    let k8s = provider(pods_options(&api.url)).await;
    let err = k8s.launch("gpu", &[request("gpu-a1")]).await.unwrap_err();
    api.finish();
    assert!(
        err.message
            .starts_with("create pod \"gpu-a1\" in namespace \"corral\": HTTP "),
        "{err}"
    );
    err
}

#[tokio::test]
async fn exceeded_quota_is_out_of_capacity() {
    let err = refused_create(403, "status-403-exceeded-quota.json").await;
    assert_eq!(err.class, ErrorClass::Capacity, "{err}");
    assert!(err.message.contains("HTTP 403 Forbidden"), "{err}");
    assert!(
        err.message.contains("exceeded quota: compute-resources"),
        "{err}"
    );
}

#[tokio::test]
async fn invalid_spec_rbac_and_missing_namespace_are_fatal() {
    for (status, file, says) in [
        (
            422,
            "status-422-invalid.json",
            "HTTP 422 Invalid: Pod \"gpu-a1\" is invalid",
        ),
        (
            403,
            "status-403-rbac.json",
            "cannot create resource \"pods\"",
        ),
        (
            404,
            "status-404-namespace.json",
            "namespaces \"corral\" not found",
        ),
    ] {
        let err = refused_create(status, file).await;
        assert_eq!(err.class, ErrorClass::Fatal, "{err}");
        assert!(err.message.contains(says), "{err}");
    }
}

#[tokio::test]
async fn server_errors_are_transient() {
    let err = refused_create(500, "status-500-internal-error.json").await;
    assert_eq!(err.class, ErrorClass::Transient, "{err}");
    assert!(
        err.message
            .contains("HTTP 500 InternalError: Internal error occurred"),
        "{err}"
    );
}

#[tokio::test]
async fn an_unreachable_api_server_is_transient() {
    // A port that was just free: nothing listens there.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    drop(listener);
    let k8s = provider(pods_options(&url)).await;
    let err = k8s.list().await.unwrap_err();
    assert_eq!(err.class, ErrorClass::Transient, "{err}");
    assert!(
        err.message.contains("list pods \"corral.io/group=ci\""),
        "{err}"
    );
    assert!(err.message.contains("cannot reach the API server"), "{err}");
}

#[tokio::test]
async fn a_partial_launch_returns_the_pods_it_made() {
    let api = StandIn::start(vec![
        expect(Method::POST, PODS, 201, "pod-created-gpu-a1.json"),
        expect(Method::POST, PODS, 403, "status-403-exceeded-quota.json"),
    ])
    .await;
    let k8s = provider(pods_options(&api.url)).await;
    let started = k8s
        .launch(
            "gpu",
            &[request("gpu-a1"), request("gpu-a2"), request("gpu-a3")],
        )
        .await
        .unwrap();
    assert_eq!(
        started,
        vec![instance("gpu-a1", "gpu-a1", InstanceState::Pending)]
    );
    // It stops at the quota rather than trying the third.
    api.finish();
}

#[tokio::test]
async fn an_existing_pod_of_the_same_agent_counts_as_launched() {
    let api = StandIn::start(vec![
        expect(Method::POST, PODS, 409, "status-409-already-exists.json"),
        expect(
            Method::GET,
            &format!("{PODS}/gpu-a1"),
            200,
            "pod-created-gpu-a1.json",
        ),
    ])
    .await;
    let k8s = provider(pods_options(&api.url)).await;
    let started = k8s.launch("gpu", &[request("gpu-a1")]).await.unwrap();
    assert_eq!(
        started,
        vec![instance("gpu-a1", "gpu-a1", InstanceState::Pending)]
    );
    api.finish();
}

#[tokio::test]
async fn an_existing_pod_of_someone_else_is_fatal() {
    let api = StandIn::start(vec![
        expect(Method::POST, PODS, 409, "status-409-already-exists.json"),
        expect(
            Method::GET,
            &format!("{PODS}/gpu-a1"),
            200,
            "pod-gpu-a1-not-corral.json",
        ),
    ])
    .await;
    let k8s = provider(pods_options(&api.url)).await;
    let err = k8s.launch("gpu", &[request("gpu-a1")]).await.unwrap_err();
    assert_eq!(err.class, ErrorClass::Fatal, "{err}");
    assert!(err.message.contains("AlreadyExists"), "{err}");
    assert!(err.message.contains("something other than corral"), "{err}");
    api.finish();
}

#[tokio::test]
async fn an_unknown_template_is_fatal_before_any_call() {
    let api = StandIn::start(vec![]).await;
    let k8s = provider(pods_options(&api.url)).await;
    let err = k8s.launch("cpu", &[request("cpu-b1")]).await.unwrap_err();
    assert_eq!(err.class, ErrorClass::Fatal, "{err}");
    assert!(err.message.contains("\"cpu\""), "{err}");
    api.finish();
}

#[tokio::test]
async fn statefulset_scales_up_then_hands_each_new_pod_its_bootstrap() {
    let api = StandIn::start(vec![
        expect(Method::GET, STATEFULSET, 200, "statefulset-web.json"),
        expect(
            Method::PUT,
            &format!("{STATEFULSET}/scale"),
            200,
            "scale-web-3.json",
        ),
        // The controller has not made web-1 yet at the first look.
        expect(
            Method::GET,
            &format!("{PODS}/web-1"),
            404,
            "status-404-pod-web-1.json",
        ),
        expect(Method::GET, &format!("{PODS}/web-1"), 200, "pod-web-1.json"),
        expect(
            Method::PATCH,
            &format!("{PODS}/web-1"),
            200,
            "pod-web-1-labelled.json",
        ),
        expect(Method::GET, &format!("{PODS}/web-2"), 200, "pod-web-2.json"),
        expect(
            Method::PATCH,
            &format!("{PODS}/web-2"),
            200,
            "pod-web-2-labelled.json",
        ),
    ])
    .await;
    let k8s = provider(statefulset_options(&api.url)).await;
    let started = k8s
        .launch("gpu", &[request("gpu-s1"), request("gpu-s2")])
        .await
        .unwrap();
    assert_eq!(
        started,
        vec![
            instance("web-1", "gpu-s1", InstanceState::Pending),
            instance("web-2", "gpu-s2", InstanceState::Pending),
        ]
    );
    let seen = api.finish();
    let scale = seen[1].body.as_ref().unwrap();
    assert_eq!(scale["kind"], "Scale");
    assert_eq!(scale["spec"]["replicas"], 3);
    // Conditional on the version read, so a concurrent change fails rather than being lost.
    assert_eq!(scale["metadata"]["resourceVersion"], "51007");
    for (patch, agent) in [(&seen[4], "gpu-s1"), (&seen[6], "gpu-s2")] {
        assert_eq!(
            patch.content_type.as_deref(),
            Some("application/merge-patch+json")
        );
        let token = format!("bootstrap-{}", &agent[4..]);
        assert_eq!(
            patch.body.as_ref().unwrap(),
            &json!({"metadata": {
                "labels": {"corral.io/group": "ci", "corral.io/agent": agent,
                           "corral.io/template": "gpu", "team": "ml"},
                "annotations": {"corral.io/bootstrap-token": token,
                                "corral.io/server": "https://corral.example.com:8470"},
            }})
        );
    }
}

#[tokio::test]
async fn statefulset_needs_parallel_pod_management() {
    let api = StandIn::start(vec![expect(
        Method::GET,
        STATEFULSET,
        200,
        "statefulset-web-ordered-ready.json",
    )])
    .await;
    let k8s = provider(statefulset_options(&api.url)).await;
    let err = k8s.launch("gpu", &[request("gpu-s1")]).await.unwrap_err();
    assert_eq!(err.class, ErrorClass::Fatal, "{err}");
    assert!(
        err.message.contains("podManagementPolicy is OrderedReady"),
        "{err}"
    );
    // Nothing was scaled.
    api.finish();
}

#[tokio::test]
async fn statefulset_scales_down_when_the_highest_ordinals_go() {
    let api = StandIn::start(vec![
        expect(Method::GET, STATEFULSET, 200, "statefulset-web-scaled.json"),
        expect(
            Method::PUT,
            &format!("{STATEFULSET}/scale"),
            200,
            "scale-web-1.json",
        ),
    ])
    .await;
    let k8s = provider(statefulset_options(&api.url)).await;
    k8s.terminate(&["web-2".into(), "web-1".into()])
        .await
        .unwrap();
    let seen = api.finish();
    let scale = seen[1].body.as_ref().unwrap();
    assert_eq!(scale["spec"]["replicas"], 1);
    assert_eq!(scale["metadata"]["resourceVersion"], "51240");
}

#[tokio::test]
async fn statefulset_deletes_a_lower_ordinal_it_cannot_scale_away() {
    let api = StandIn::start(vec![
        expect(Method::GET, STATEFULSET, 200, "statefulset-web-scaled.json"),
        expect(
            Method::PUT,
            &format!("{STATEFULSET}/scale"),
            200,
            "scale-web-2.json",
        ),
        // The StatefulSet will recreate web-0 (a warning says so).
        expect(
            Method::DELETE,
            &format!("{PODS}/web-0"),
            200,
            "pod-web-0-deleted.json",
        ),
    ])
    .await;
    let k8s = provider(statefulset_options(&api.url)).await;
    k8s.terminate(&["web-0".into(), "web-2".into()])
        .await
        .unwrap();
    let seen = api.finish();
    assert_eq!(seen[1].body.as_ref().unwrap()["spec"]["replicas"], 2);
}

fn invalid(options: Value) -> corral_provider::ConfigError {
    config(options).validate().unwrap_err()
}

#[test]
fn options_are_validated_and_the_offending_field_named() {
    let e = invalid(json!({"namespace": "corral"}));
    assert_eq!(e.field, "provider.options.image", "{e}");
    assert!(e.message.contains("required"), "{e}");

    let e = invalid(json!({"mode": "statefulset"}));
    assert_eq!(e.field, "provider.options.statefulset", "{e}");

    let e = invalid(json!({"image": "corral:0.1", "replicas": 3}));
    assert_eq!(e.field, "provider.options.replicas", "{e}");
    assert!(e.message.contains("unknown field `replicas`"), "{e}");

    let e = invalid(json!({"image": "corral:0.1", "templates": {"gpu": {"cpu": 2}}}));
    assert_eq!(e.field, "provider.options.templates.gpu.cpu", "{e}");

    let e = invalid(json!({"mode": "statefulset", "statefulset": "web", "image": "corral:0.1"}));
    assert_eq!(e.field, "provider.options.image", "{e}");
    assert!(e.message.contains("only used with mode \"pods\""), "{e}");

    let e = invalid(json!({"image": "corral:0.1", "statefulset": "web"}));
    assert_eq!(e.field, "provider.options.statefulset", "{e}");

    let e = invalid(json!({"image": "corral:0.1", "mode": "deployment"}));
    assert_eq!(e.field, "provider.options.mode", "{e}");

    let e = invalid(json!({"image": "corral:0.1", "labels": {"corral.io/group": "x"}}));
    assert_eq!(e.field, "provider.options.labels.corral.io/group", "{e}");

    let e = invalid(json!({"image": "corral:0.1", "node_selector": {"pool": "gpu pool"}}));
    assert_eq!(e.field, "provider.options.node_selector.pool", "{e}");

    let e = invalid(json!({"image": "corral:0.1", "namespace": "Corral"}));
    assert_eq!(e.field, "provider.options.namespace", "{e}");

    let e = invalid(json!({"image": "corral:0.1", "api_server": "10.0.0.1:6443"}));
    assert_eq!(e.field, "provider.options.api_server", "{e}");

    let e = invalid(
        json!({"image": "corral:0.1", "api_server": "https://10.0.0.1:6443",
                           "context": "prod"}),
    );
    assert_eq!(e.field, "provider.options.context", "{e}");

    let e = invalid(json!({"mode": "statefulset", "statefulset": "web", "pod_wait_secs": 0}));
    assert_eq!(e.field, "provider.options.pod_wait_secs", "{e}");

    let e = invalid(json!({"image": "corral:0.1", "command": []}));
    assert_eq!(e.field, "provider.options.command", "{e}");

    let e = invalid(json!({"image": "corral:0.1", "insecure_skip_tls_verify": "yes"}));
    assert_eq!(e.field, "provider.options.insecure_skip_tls_verify", "{e}");

    config(json!({"image": "corral:0.1", "context": "prod", "namespace": "ci"}))
        .validate()
        .unwrap();
    config(json!({"mode": "statefulset", "statefulset": "web", "labels": {"team": "ml"}}))
        .validate()
        .unwrap();
}

#[test]
fn the_api_token_is_redacted() {
    let shown = config(
        json!({"image": "corral:0.1", "api_server": "https://k8s:6443",
                              "token": "s3cret"}),
    )
    .redacted();
    assert!(!serde_json::to_string(&shown).unwrap().contains("s3cret"));
}
