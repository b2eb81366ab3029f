//! The aws provider against a real moto server (`pip install 'moto[server]'`), checked the way an
//! operator would: with an SDK client of the test's own, looking at the instances, their tags
//! and user data, and the Auto Scaling group.
#![cfg(feature = "aws")]

use std::collections::BTreeMap;
use std::path::PathBuf;

use aws_sdk_autoscaling::types::LaunchTemplateSpecification;
use aws_sdk_ec2::types::{
    Filter, HttpTokensState, InstanceAttributeName, InstanceStateName,
    LaunchTemplateInstanceMetadataOptionsRequest, LaunchTemplateInstanceMetadataTagsState,
    RequestLaunchTemplateData,
};
use corral_core::InstanceTemplate;
use corral_provider::aws::testing::Moto;
use corral_provider::aws::{SERVER_TAG, TOKEN_TAG};
use corral_provider::ProviderSettings as _;
use corral_provider::{
    Context, ErrorClass, Instance, InstanceState, LaunchRequest, Provider, ProviderConfig,
    ProviderError, AGENT_TAG, GROUP_TAG, TEMPLATE_TAG,
};
use serde_json::{json, Map, Value};

const GROUP: &str = "gpu-pool";
const MANAGER: &str = "http://10.0.0.5:7700";

fn context(templates: &[&str]) -> Context {
    Context {
        group: GROUP.into(),
        manager_url: MANAGER.into(),
        templates: templates
            .iter()
            .map(|name| InstanceTemplate {
                name: name.to_string(),
                slots: "cpu=2,mem=4GiB".parse().unwrap(),
                price_per_hour: 0.1,
                max: 10,
                labels: BTreeMap::new(),
                devices: Vec::new(),
            })
            .collect(),
        corral_binary: PathBuf::from("corral"),
        state_dir: PathBuf::from("/nonexistent"),
    }
}

fn requests(ids: &[&str]) -> Vec<LaunchRequest> {
    ids.iter()
        .map(|id| LaunchRequest {
            agent_id: id.to_string(),
            token: format!("tok-{id}-s3cret"),
        })
        .collect()
}

/// The moto options with `extra` merged in.
fn options(moto: &Moto, extra: Value) -> Map<String, Value> {
    let mut options = moto.options();
    options.extend(extra.as_object().unwrap().clone());
    options
}

async fn connect(
    options: Map<String, Value>,
    context: Context,
) -> Result<Box<dyn Provider>, ProviderError> {
    let config = ProviderConfig {
        name: "aws".into(),
        options,
        launch: Default::default(),
    };
    corral_provider::connect(&config, context).await
}

/// An AMI moto knows (its default images), so AMI validation passes.
async fn some_ami(ec2: &aws_sdk_ec2::Client) -> String {
    let images = ec2.describe_images().send().await.unwrap();
    images.images()[0].image_id().unwrap().to_string()
}

/// The group's instances as EC2 sees them, by instance id.
async fn group_instances(
    ec2: &aws_sdk_ec2::Client,
) -> BTreeMap<String, aws_sdk_ec2::types::Instance> {
    let output = ec2
        .describe_instances()
        .filters(
            Filter::builder()
                .name(format!("tag:{GROUP_TAG}"))
                .values(GROUP)
                .build(),
        )
        .send()
        .await
        .unwrap();
    output
        .reservations()
        .iter()
        .flat_map(|r| r.instances())
        .map(|i| (i.instance_id().unwrap().to_string(), i.clone()))
        .collect()
}

fn tag<'a>(instance: &'a aws_sdk_ec2::types::Instance, key: &str) -> Option<&'a str> {
    instance
        .tags()
        .iter()
        .find(|t| t.key() == Some(key))
        .and_then(|t| t.value())
}

fn state(instance: &aws_sdk_ec2::types::Instance) -> &InstanceStateName {
    instance.state().unwrap().name().unwrap()
}

async fn user_data(ec2: &aws_sdk_ec2::Client, id: &str) -> String {
    let attribute = ec2
        .describe_instance_attribute()
        .instance_id(id)
        .attribute(InstanceAttributeName::UserData)
        .send()
        .await
        .unwrap();
    let encoded = attribute.user_data().unwrap().value().unwrap();
    String::from_utf8(aws_smithy_types::base64::decode(encoded).unwrap()).unwrap()
}

fn by_agent(instances: &[Instance]) -> BTreeMap<String, Instance> {
    instances
        .iter()
        .map(|i| (i.agent_id.clone().unwrap_or_default(), i.clone()))
        .collect()
}

#[tokio::test]
async fn ec2_launches_tags_lists_and_terminates_instances() {
    let Some(moto) = Moto::start().await else {
        return;
    };
    let ec2 = aws_sdk_ec2::Client::new(&moto.sdk_config().await);
    let ami = some_ami(&ec2).await;
    let provider = connect(
        options(
            &moto,
            json!({
                "image_id": ami,
                "templates": {"big": {"instance_type": "m5.large"}},
                "tags": {"team": "ml"},
                "user_data": "corral agent --metadata aws",
            }),
        ),
        context(&["t3.micro", "big"]),
    )
    .await
    .unwrap();

    let launched = provider
        .launch("t3.micro", &requests(&["a-1", "a-2"]))
        .await
        .unwrap();
    assert_eq!(launched.len(), 2, "{launched:?}");
    let in_ec2 = group_instances(&ec2).await;
    assert_eq!(in_ec2.len(), 2, "{in_ec2:?}");
    for instance in &launched {
        let agent = instance.agent_id.as_deref().unwrap();
        let seen = &in_ec2[&instance.id];
        assert_eq!(state(seen), &InstanceStateName::Running);
        assert_eq!(seen.instance_type().unwrap().as_str(), "t3.micro");
        assert_eq!(seen.image_id(), Some(ami.as_str()));
        let imds = seen.metadata_options().unwrap();
        assert_eq!(imds.http_tokens(), Some(&HttpTokensState::Required));
        assert_eq!(tag(seen, GROUP_TAG), Some(GROUP));
        assert_eq!(tag(seen, AGENT_TAG), Some(agent));
        assert_eq!(tag(seen, TEMPLATE_TAG), Some("t3.micro"));
        assert_eq!(tag(seen, "team"), Some("ml"));
        let text = user_data(&ec2, &instance.id).await;
        assert!(text.starts_with("#!/bin/sh\n"), "{text}");
        let lines: Vec<&str> = text.lines().collect();
        for line in [
            format!("CORRAL_SERVER={MANAGER}"),
            format!("CORRAL_TOKEN=tok-{agent}-s3cret"),
            format!("CORRAL_AGENT_GROUP={GROUP}"),
            format!("CORRAL_AGENT_ID={agent}"),
        ] {
            assert!(lines.contains(&line.as_str()), "{line} not in {text}");
        }
        assert_eq!(lines.last(), Some(&"corral agent --metadata aws"));
    }

    // A template with its own entry: its instance type, not its name.
    let big = provider.launch("big", &requests(&["b-1"])).await.unwrap();
    let seen = &group_instances(&ec2).await[&big[0].id];
    assert_eq!(seen.instance_type().unwrap().as_str(), "m5.large");
    assert_eq!(tag(seen, TEMPLATE_TAG), Some("big"));

    let listed = by_agent(&provider.list().await.unwrap());
    assert_eq!(
        listed.keys().collect::<Vec<_>>(),
        ["a-1", "a-2", "b-1"],
        "{listed:?}"
    );
    assert_eq!(listed["a-1"].template.as_deref(), Some("t3.micro"));
    assert_eq!(listed["b-1"].template.as_deref(), Some("big"));
    assert!(listed.values().all(|i| i.state == InstanceState::Running));

    // Terminating includes an id already gone (never existed): not an error.
    let doomed = listed["a-1"].id.clone();
    provider
        .terminate(&[doomed.clone(), "i-0123456789abcdef0".into()])
        .await
        .unwrap();
    let in_ec2 = group_instances(&ec2).await;
    assert_eq!(state(&in_ec2[&doomed]), &InstanceStateName::Terminated);
    assert_eq!(
        state(&in_ec2[&listed["a-2"].id]),
        &InstanceStateName::Running
    );
    let listed = by_agent(&provider.list().await.unwrap());
    assert_eq!(listed["a-1"].state, InstanceState::Gone);
    // Again, now that it is terminated.
    provider.terminate(&[doomed]).await.unwrap();
}

#[tokio::test]
async fn unknown_instance_type_is_a_capacity_error_naming_the_type() {
    let Some(moto) = Moto::start().await else {
        return;
    };
    let ec2 = aws_sdk_ec2::Client::new(&moto.sdk_config().await);
    let ami = some_ami(&ec2).await;
    let provider = connect(
        options(&moto, json!({"image_id": ami})),
        context(&["x9.mega"]),
    )
    .await
    .unwrap();
    let error = provider
        .launch("x9.mega", &requests(&["a-1"]))
        .await
        .unwrap_err();
    assert_eq!(error.class, ErrorClass::Capacity, "{error}");
    assert!(
        error
            .message
            .starts_with("RunInstances x9.mega: InvalidInstanceType.NotFound: "),
        "{error}"
    );
    assert!(group_instances(&ec2).await.is_empty());
}

#[tokio::test]
async fn bad_ami_and_unknown_template_are_fatal() {
    let Some(moto) = Moto::start().await else {
        return;
    };
    let ec2 = aws_sdk_ec2::Client::new(&moto.sdk_config().await);
    let provider = connect(
        options(&moto, json!({"image_id": "ami-0000000000000dead"})),
        context(&["t3.micro"]),
    )
    .await
    .unwrap();
    let error = provider
        .launch("t3.micro", &requests(&["a-1"]))
        .await
        .unwrap_err();
    assert_eq!(error.class, ErrorClass::Fatal, "{error}");
    assert!(
        error
            .message
            .starts_with("RunInstances t3.micro: InvalidAMIID.NotFound: "),
        "{error}"
    );
    assert!(error.message.contains("ami-0000000000000dead"), "{error}");

    let error = provider
        .launch("m5.large", &requests(&["a-1"]))
        .await
        .unwrap_err();
    assert_eq!(error.class, ErrorClass::Fatal, "{error}");
    assert!(error.message.contains("\"m5.large\""), "{error}");
    assert!(group_instances(&ec2).await.is_empty());
}

#[tokio::test]
async fn an_unreachable_endpoint_is_transient() {
    // A port nobody listens on: bound, then released.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut options = Map::new();
    for (key, value) in [
        ("endpoint_url", format!("http://127.0.0.1:{port}")),
        ("region", "us-east-1".into()),
        ("access_key_id", "testing".into()),
        ("secret_access_key", "testing".into()),
        ("image_id", "ami-12345678".into()),
    ] {
        options.insert(key.into(), value.into());
    }
    let provider = connect(options, context(&["t3.micro"])).await.unwrap();
    let error = provider.list().await.unwrap_err();
    assert_eq!(error.class, ErrorClass::Transient, "{error}");
    assert!(error.message.starts_with("DescribeInstances: "), "{error}");
}

/// A launch template and an Auto Scaling group (MinSize 0, MaxSize 3, empty) in moto.
async fn create_asg(moto: &Moto, name: &str) -> aws_sdk_autoscaling::Client {
    let config = moto.sdk_config().await;
    let ec2 = aws_sdk_ec2::Client::new(&config);
    let ami = some_ami(&ec2).await;
    ec2.create_launch_template()
        .launch_template_name("corral-agents")
        .launch_template_data(
            RequestLaunchTemplateData::builder()
                .image_id(ami)
                .instance_type("t3.micro".into())
                // What the module doc asks of the operator: tags readable from IMDS.
                .metadata_options(
                    LaunchTemplateInstanceMetadataOptionsRequest::builder()
                        .instance_metadata_tags(LaunchTemplateInstanceMetadataTagsState::Enabled)
                        .build(),
                )
                .build(),
        )
        .send()
        .await
        .unwrap();
    let autoscaling = aws_sdk_autoscaling::Client::new(&config);
    autoscaling
        .create_auto_scaling_group()
        .auto_scaling_group_name(name)
        .launch_template(
            LaunchTemplateSpecification::builder()
                .launch_template_name("corral-agents")
                .build(),
        )
        .min_size(0)
        .max_size(3)
        .desired_capacity(0)
        .availability_zones("us-east-1a")
        .send()
        .await
        .unwrap();
    autoscaling
}

async fn desired_capacity(autoscaling: &aws_sdk_autoscaling::Client, name: &str) -> i32 {
    let output = autoscaling
        .describe_auto_scaling_groups()
        .auto_scaling_group_names(name)
        .send()
        .await
        .unwrap();
    output.auto_scaling_groups()[0].desired_capacity().unwrap()
}

#[tokio::test]
async fn asg_grows_tags_and_shrinks_the_group() {
    let Some(moto) = Moto::start().await else {
        return;
    };
    let autoscaling = create_asg(&moto, "agents").await;
    let ec2 = aws_sdk_ec2::Client::new(&moto.sdk_config().await);
    let provider = connect(
        options(
            &moto,
            json!({"mode": "asg", "asg_name": "agents", "tags": {"team": "ml"}}),
        ),
        context(&["std"]),
    )
    .await
    .unwrap();

    let launched = provider
        .launch("std", &requests(&["a-1", "a-2"]))
        .await
        .unwrap();
    assert_eq!(launched.len(), 2, "{launched:?}");
    assert_eq!(desired_capacity(&autoscaling, "agents").await, 2);
    let in_ec2 = group_instances(&ec2).await;
    assert_eq!(in_ec2.len(), 2, "{in_ec2:?}");
    for instance in &launched {
        let agent = instance.agent_id.as_deref().unwrap();
        let seen = &in_ec2[&instance.id];
        assert_eq!(tag(seen, AGENT_TAG), Some(agent));
        assert_eq!(tag(seen, TEMPLATE_TAG), Some("std"));
        assert_eq!(
            tag(seen, TOKEN_TAG),
            Some(format!("tok-{agent}-s3cret").as_str())
        );
        assert_eq!(tag(seen, SERVER_TAG), Some(MANAGER));
        assert_eq!(tag(seen, "team"), Some("ml"));
        assert_eq!(tag(seen, "aws:autoscaling:groupName"), Some("agents"));
    }
    let listed = by_agent(&provider.list().await.unwrap());
    assert_eq!(
        listed.keys().collect::<Vec<_>>(),
        ["a-1", "a-2"],
        "{listed:?}"
    );
    assert!(listed.values().all(|i| i.state == InstanceState::Running));

    let doomed = listed["a-1"].id.clone();
    provider
        .terminate(&[doomed.clone(), "i-0123456789abcdef0".into()])
        .await
        .unwrap();
    assert_eq!(desired_capacity(&autoscaling, "agents").await, 1);
    assert_eq!(
        state(&group_instances(&ec2).await[&doomed]),
        &InstanceStateName::Terminated
    );
    let listed = by_agent(&provider.list().await.unwrap());
    assert_eq!(listed.keys().collect::<Vec<_>>(), ["a-2"], "{listed:?}");

    // 1 + 3 > MaxSize 3: refused whole, the group unchanged.
    let error = provider
        .launch("std", &requests(&["b-1", "b-2", "b-3"]))
        .await
        .unwrap_err();
    assert_eq!(error.class, ErrorClass::Capacity, "{error}");
    assert!(error.message.contains("MaxSize 3"), "{error}");
    assert_eq!(desired_capacity(&autoscaling, "agents").await, 1);
    // What fits still launches.
    let launched = provider
        .launch("std", &requests(&["b-1", "b-2"]))
        .await
        .unwrap();
    assert_eq!(launched.len(), 2);
    assert_eq!(desired_capacity(&autoscaling, "agents").await, 3);
}

#[tokio::test]
async fn asg_missing_group_is_fatal() {
    let Some(moto) = Moto::start().await else {
        return;
    };
    let provider = connect(
        options(&moto, json!({"mode": "asg", "asg_name": "nowhere"})),
        context(&["std"]),
    )
    .await
    .unwrap();
    let error = provider
        .launch("std", &requests(&["a-1"]))
        .await
        .unwrap_err();
    assert_eq!(error.class, ErrorClass::Fatal, "{error}");
    assert!(error.message.contains("\"nowhere\""), "{error}");
}

fn validation_error(options: Value) -> corral_provider::ConfigError {
    let config = ProviderConfig {
        name: "aws".into(),
        options: options.as_object().unwrap().clone(),
        launch: Default::default(),
    };
    config.validate().unwrap_err()
}

#[test]
fn options_errors_name_the_field() {
    let cases = [
        (json!({}), "provider.options.image_id"),
        (json!({"mode": "asg"}), "provider.options.asg_name"),
        (
            json!({"image_id": "ami-1", "zone": "a"}),
            "provider.options.zone",
        ),
        (
            json!({"mode": "spot", "image_id": "ami-1"}),
            "provider.options.mode",
        ),
        (
            json!({"image_id": "ami-1", "templates": {"big": {"instance_typ": "m5.large"}}}),
            "provider.options.templates.big.instance_typ",
        ),
        (
            json!({"image_id": "ami-1", "access_key_id": "AKIA"}),
            "provider.options.secret_access_key",
        ),
        (
            json!({"image_id": "ami-1", "endpoint_url": "localhost:5000"}),
            "provider.options.endpoint_url",
        ),
        (
            json!({"image_id": "ami-1", "tags": {"corral-agent": "x"}}),
            "provider.options.tags.corral-agent",
        ),
        (
            json!({"mode": "asg", "asg_name": "agents", "image_id": "ami-1"}),
            "provider.options.image_id",
        ),
        (
            json!({"image_id": "ami-1", "asg_name": "agents"}),
            "provider.options.asg_name",
        ),
        (
            json!({"image_id": "ami-1", "user_data": "x".repeat(16 * 1024)}),
            "provider.options.user_data",
        ),
    ];
    for (options, field) in cases {
        let error = validation_error(options.clone());
        assert_eq!(error.field, field, "{options}: {error}");
    }
    // serde names the unknown field in the message.
    let error = validation_error(json!({"image_id": "ami-1", "zone": "a"}));
    assert!(error.message.contains("zone"), "{error}");
    // Valid configurations pass.
    for options in [
        json!({"image_id": "ami-1", "templates": {"big": {"instance_type": "m5.large",
            "security_group_ids": ["sg-1"], "iam_instance_profile": "agents"}}}),
        json!({"mode": "asg", "asg_name": "agents", "tags": {"team": "ml"}}),
    ] {
        let config = ProviderConfig {
            name: "aws".into(),
            options: options.as_object().unwrap().clone(),
            launch: Default::default(),
        };
        config.validate().unwrap();
    }
}

#[test]
fn secrets_are_redacted() {
    let config = ProviderConfig {
        name: "aws".into(),
        options:
            json!({"image_id": "ami-1", "access_key_id": "AKIA", "secret_access_key": "s3cret",
            "session_token": "t0ken"})
            .as_object()
            .unwrap()
            .clone(),
        launch: Default::default(),
    };
    let shown = serde_json::to_string(&config.redacted()).unwrap();
    assert!(
        !shown.contains("s3cret") && !shown.contains("t0ken"),
        "{shown}"
    );
    let options: corral_provider::aws::Options =
        corral_provider::options::parse(&config.options).unwrap();
    let debug = format!("{options:?}");
    assert!(
        !debug.contains("s3cret") && !debug.contains("t0ken"),
        "{debug}"
    );
}
