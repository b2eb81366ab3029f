//! The `docker` provider against the local Docker daemon, with agent images built here by
//! `build_agent_image` (nothing can be pulled). Tests that need the daemon skip with a message
//! when it does not answer, unless CI=true (then they fail, by corral_testkit's skip policy).

mod support;

use std::collections::HashMap;
use std::path::Path;
use std::time::Duration;

use bollard::query_parameters::{LogsOptionsBuilder, RemoveImageOptionsBuilder};
use bollard::Docker;
use corral_provider::docker::{build_agent_image, client};
use corral_provider::ProviderSettings as _;
use corral_provider::{connect, ErrorClass, Instance, InstanceState, Provider, ProviderConfig};
use corral_testkit::{eventually_async, RemoveContainers};
use futures_util::StreamExt;
use serde_json::{json, Value};
use support::*;

/// An agent image whose `corral` is `/usr/bin/env`: dynamically linked, so that running it
/// proves the copied libraries and loader work, and it runs the container's command as a
/// program (`env sh -c ...`), which proves busybox's applets are there.
const TEST_IMAGE: &str = "corral-provider-test-agent:1";
const STAND_IN_CORRAL: &str = "/usr/bin/env";

/// The local daemon, or `None` when it does not answer: the test is skipped, saying so (and
/// fails instead under `CI=true`).
async fn docker_or_skip() -> Option<Docker> {
    let reached = match tokio::time::timeout(Duration::from_secs(10), client(None)).await {
        Ok(Ok(docker)) => Ok(docker),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err("no answer in 10 s".to_string()),
    };
    corral_testkit::require_ok("a Docker daemon", reached)
}

/// Builds [`TEST_IMAGE`] once per test run (tests run in parallel); false, after the skip
/// policy's message, without busybox to build it from.
async fn test_image(docker: &Docker) -> bool {
    if !corral_testkit::require_busybox() {
        return false;
    }
    static BUILT: tokio::sync::OnceCell<()> = tokio::sync::OnceCell::const_new();
    BUILT
        .get_or_init(|| async {
            build_agent_image(docker, TEST_IMAGE, Path::new(STAND_IN_CORRAL))
                .await
                .unwrap();
        })
        .await;
    true
}

/// Removes a group's containers when dropped, also after a failed assertion.
fn cleanup(group: &str) -> RemoveContainers {
    RemoveContainers::new(format!("label=corral.io/group={group}"))
}

async fn provider(group: &str, options: Value) -> Box<dyn Provider> {
    let config: ProviderConfig =
        serde_json::from_value(json!({"name": "docker", "options": options})).unwrap();
    connect(
        &config,
        context(group, Path::new("/tmp/unused"), Path::new("/unused")),
    )
    .await
    .unwrap()
}

async fn logs(docker: &Docker, id: &str) -> String {
    let options = LogsOptionsBuilder::new().stdout(true).stderr(true).build();
    let mut stream = docker.logs(id, Some(options));
    let mut text = String::new();
    while let Some(Ok(chunk)) = stream.next().await {
        text.push_str(&chunk.to_string());
    }
    text
}

/// Lists until `done` holds for the list (containers change state on their own), 15 s at most.
async fn list_until(
    what: &str,
    p: &dyn Provider,
    done: impl Fn(&[Instance]) -> bool,
) -> Vec<Instance> {
    let done = &done;
    eventually_async(what, Duration::from_secs(15), move || async move {
        let listed = p.list().await.unwrap();
        if done(&listed) {
            Ok(listed)
        } else {
            Err(format!("{listed:?}"))
        }
    })
    .await
}

#[tokio::test]
async fn agents_run_in_containers_of_an_image_built_from_a_dynamic_binary() {
    const GROUP: &str = "provider-test-docker-run";
    let Some(docker) = docker_or_skip().await else {
        return;
    };
    let _cleanup = cleanup(GROUP);
    if !test_image(&docker).await {
        return;
    }
    let p = provider(
        GROUP,
        json!({
            "image": TEST_IMAGE,
            "extra_env": {"SITE": "test"},
            "command": ["sh", "-c", "echo \"agent $CORRAL_AGENT_ID of $CORRAL_AGENT_GROUP up\"; exec sleep 600"],
        }),
    )
    .await;
    let launched = p.launch("small", &requests(&["d-1", "d-2"])).await.unwrap();
    assert_eq!(launched.len(), 2);

    for (instance, agent) in launched.iter().zip(["d-1", "d-2"]) {
        assert_eq!(instance.agent_id.as_deref(), Some(agent));
        let info = docker.inspect_container(&instance.id, None).await.unwrap();
        assert_eq!(info.name.as_deref(), Some(&*format!("/corral-{agent}")));
        let config = info.config.unwrap();
        let labels = config.labels.unwrap();
        assert_eq!(labels["corral.io/group"], GROUP);
        assert_eq!(labels["corral.io/agent"], agent);
        assert_eq!(labels["corral.io/template"], "small");
        let env: HashMap<&str, &str> = config
            .env
            .as_ref()
            .unwrap()
            .iter()
            .filter_map(|kv| kv.split_once('='))
            .collect();
        assert_eq!(env["CORRAL_SERVER"], MANAGER);
        assert_eq!(env["CORRAL_TOKEN"], format!("token-of-{agent}"));
        assert_eq!(env["CORRAL_AGENT_GROUP"], GROUP);
        assert_eq!(env["CORRAL_AGENT_ID"], agent);
        assert_eq!(env["CORRAL_AGENT_CAPACITY"], "cpu=1,mem=1GiB");
        assert_eq!(env["SITE"], "test");
        let host = info.host_config.unwrap();
        assert_eq!(host.network_mode.as_deref(), Some("host"));
        assert_eq!(config.entrypoint.unwrap(), ["/usr/local/bin/corral"]);
    }

    // The dynamic `corral` ran and started busybox's shell, which saw the settings.
    let first = &launched[0].id;
    let docker = &docker;
    let output = eventually_async(
        "the agent's output",
        Duration::from_secs(10),
        || async move {
            let output = logs(docker, first).await;
            (!output.is_empty()).then_some(output)
        },
    )
    .await;
    assert_eq!(output.trim(), format!("agent d-1 of {GROUP} up"));

    let listed = list_until("both agents running", &*p, |l| l.len() == 2).await;
    let mut seen: Vec<_> = listed
        .iter()
        .map(|i| (i.agent_id.clone().unwrap(), i.template.clone(), i.state))
        .collect();
    seen.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(
        seen,
        [
            (
                "d-1".to_string(),
                Some("small".to_string()),
                InstanceState::Running
            ),
            (
                "d-2".to_string(),
                Some("small".to_string()),
                InstanceState::Running
            )
        ]
    );
    // Another group's provider does not see them.
    assert!(
        provider("provider-test-other", json!({"image": TEST_IMAGE}))
            .await
            .list()
            .await
            .unwrap()
            .is_empty()
    );

    // A restarted manager's provider finds and removes them; ids already gone are fine.
    let restarted = provider(GROUP, json!({"image": TEST_IMAGE})).await;
    let mut ids: Vec<String> = launched.iter().map(|i| i.id.clone()).collect();
    ids.push("0123456789ab".into());
    restarted.terminate(&ids).await.unwrap();
    assert!(restarted.list().await.unwrap().is_empty());
    assert!(docker.inspect_container(first, None).await.is_err());
    restarted.terminate(&ids).await.unwrap();
}

#[tokio::test]
async fn the_default_command_starts_the_agent_and_exited_containers_are_gone() {
    const GROUP: &str = "provider-test-docker-default";
    let Some(docker) = docker_or_skip().await else {
        return;
    };
    let _cleanup = cleanup(GROUP);
    if !test_image(&docker).await {
        return;
    }
    let p = provider(GROUP, json!({"image": TEST_IMAGE})).await;
    let launched = p.launch("large", &requests(&["d-3"])).await.unwrap();
    let info = docker
        .inspect_container(&launched[0].id, None)
        .await
        .unwrap();
    assert_eq!(
        info.config.unwrap().cmd.unwrap(),
        [
            "agent",
            "--runtime",
            "process",
            "--work-dir",
            "/var/lib/corral-agent",
            "--label",
            "corral.io/template=large"
        ]
    );
    // `env agent ...` finds no program `agent`: the container exits and is listed as gone.
    let listed = list_until("the exited container listed gone", &*p, |l| {
        l.iter().all(|i| i.state == InstanceState::Gone)
    })
    .await;
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].state, InstanceState::Gone);
    assert_eq!(listed[0].agent_id.as_deref(), Some("d-3"));
    p.terminate(&[listed[0].id.clone()]).await.unwrap();
    assert!(p.list().await.unwrap().is_empty());
}

#[tokio::test]
async fn a_missing_image_is_fatal_and_names_the_image() {
    const GROUP: &str = "provider-test-docker-missing";
    let Some(docker) = docker_or_skip().await else {
        return;
    };
    let _cleanup = cleanup(GROUP);
    let image = "corral-provider-test-missing:0";
    let _ = docker
        .remove_image(image, Some(RemoveImageOptionsBuilder::new().build()), None)
        .await;
    let p = provider(GROUP, json!({"image": image})).await;
    let e = p.launch("small", &requests(&["m-1"])).await.unwrap_err();
    assert_eq!(e.class, ErrorClass::Fatal);
    assert!(
        e.message.contains(image) && e.message.contains("build"),
        "{e}"
    );
    assert!(p.list().await.unwrap().is_empty());
}

#[tokio::test]
async fn containers_of_other_groups_are_not_terminated() {
    const GROUP: &str = "provider-test-docker-mine";
    let Some(docker) = docker_or_skip().await else {
        return;
    };
    let _cleanup = cleanup(GROUP);
    if !test_image(&docker).await {
        return;
    }
    let mine = provider(
        GROUP,
        json!({"image": TEST_IMAGE, "command": ["sleep", "600"]}),
    )
    .await;
    let launched = mine.launch("small", &requests(&["o-1"])).await.unwrap();
    let theirs = provider("provider-test-docker-theirs", json!({"image": TEST_IMAGE})).await;
    let e = theirs
        .terminate(&[launched[0].id.clone()])
        .await
        .unwrap_err();
    assert_eq!(e.class, ErrorClass::Fatal);
    assert!(docker
        .inspect_container(&launched[0].id, None)
        .await
        .is_ok());
    mine.terminate(&[launched[0].id.clone()]).await.unwrap();
}

#[tokio::test]
async fn an_unreachable_daemon_is_transient() {
    let p = provider(
        "provider-test-docker-nowhere",
        json!({"docker_host": "unix:///nonexistent/docker.sock"}),
    )
    .await;
    for e in [
        p.list().await.unwrap_err(),
        p.launch("small", &requests(&["u-1"])).await.unwrap_err(),
    ] {
        assert_eq!(e.class, ErrorClass::Transient, "{e}");
        assert!(e.message.contains("/nonexistent/docker.sock"), "{e}");
    }
}

#[test]
fn options_are_checked_and_named() {
    for (options, field) in [
        (json!({"image": ""}), "provider.options.image"),
        (json!({"runtime": "docker"}), "provider.options.runtime"),
        (
            json!({"extra_env": {"CORRAL_TOKEN": "x"}}),
            "provider.options.extra_env",
        ),
        (
            json!({"extra_env": {"1X": "x"}}),
            "provider.options.extra_env",
        ),
        (
            json!({"docker_host": "docker.example:2375"}),
            "provider.options.docker_host",
        ),
        (json!({"command": []}), "provider.options.command"),
        (json!({"pull": true}), "provider.options"),
    ] {
        let config: ProviderConfig =
            serde_json::from_value(json!({"name": "docker", "options": options})).unwrap();
        let e = config.validate().unwrap_err();
        assert!(e.field.starts_with(field), "{options}: {e}");
    }
}
