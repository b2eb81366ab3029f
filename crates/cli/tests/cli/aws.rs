//! The `aws` provider driven by the manager against a local moto server (PyPI `moto[server]`):
//! the group scales out and back in, a template whose instance type is unavailable backs off and
//! the policy launches another, and moto never holds more than the group's maximum. Moto runs no
//! machines, so the test boots each instance itself the way an image's start-up script would:
//! it reads the instance's user data and starts `corral agent` with what it says.
#![cfg(feature = "aws")]
use crate::common;

use std::collections::BTreeMap;

use aws_sdk_ec2::types::Filter;
use serde_json::{json, Value};

use common::*;
use corral_provider::aws::testing::Moto;

/// What the test's own EC2 client sees of the group's instances.
struct Ec2 {
    rt: tokio::runtime::Runtime,
    client: aws_sdk_ec2::Client,
}

struct Seen {
    state: String,
    instance_type: String,
}

impl Ec2 {
    fn instances(&self) -> BTreeMap<String, Seen> {
        self.rt.block_on(async {
            let out = self
                .client
                .describe_instances()
                .filters(
                    Filter::builder()
                        .name("tag:corral-group")
                        .values("cloud")
                        .build(),
                )
                .send()
                .await
                .unwrap();
            out.reservations()
                .iter()
                .flat_map(|r| r.instances())
                .map(|i| {
                    let seen = Seen {
                        state: i
                            .state()
                            .and_then(|s| s.name())
                            .unwrap()
                            .as_str()
                            .to_string(),
                        instance_type: i.instance_type().unwrap().as_str().to_string(),
                    };
                    (i.instance_id().unwrap().to_string(), seen)
                })
                .collect()
        })
    }

    /// The instance's user data as KEY=VALUE pairs.
    fn user_data(&self, id: &str) -> BTreeMap<String, String> {
        let encoded = self.rt.block_on(async {
            let out = self
                .client
                .describe_instance_attribute()
                .instance_id(id)
                .attribute(aws_sdk_ec2::types::InstanceAttributeName::UserData)
                .send()
                .await
                .unwrap();
            out.user_data().and_then(|u| u.value()).unwrap().to_string()
        });
        let text = aws_smithy_types::base64::decode(encoded).unwrap();
        String::from_utf8(text)
            .unwrap()
            .lines()
            .filter_map(|l| l.split_once('='))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }
}

#[test]
fn aws_scales_out_and_in_and_an_unavailable_type_backs_off_for_another() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let Some(moto) = rt.block_on(Moto::start()) else {
        return;
    };
    let config = rt.block_on(moto.sdk_config());
    let ec2 = Ec2 {
        client: aws_sdk_ec2::Client::new(&config),
        rt,
    };
    let ami = ec2.rt.block_on(async {
        let images = ec2.client.describe_images().send().await.unwrap();
        images.images()[0].image_id().unwrap().to_string()
    });

    let c = Cluster::start(5);
    let mut options = moto.options();
    options.insert("image_id".into(), ami.into());
    options.insert(
        "templates".into(),
        json!({"cheap": {"instance_type": "x9.mega"}, "std": {"instance_type": "t3.micro"}}),
    );
    let group = json!({
        "name": "cloud",
        "policy": {"kind": "demand", "min_nodes": 0, "max_nodes": 3, "idle_wait_secs": 2,
                   "cooldown_secs": 0},
        // The cheaper template's instance type does not exist: its launch fails.
        "templates": [
            {"name": "cheap", "slots": "cpu=1,mem=1GiB", "price_per_hour": 0.01, "max": 3},
            {"name": "std", "slots": "cpu=1,mem=1GiB", "price_per_hour": 0.10, "max": 3},
        ],
        "provider": {"name": "aws", "options": options,
                     "launch": {"max_provisioning_secs": 60, "reconcile_secs": 2,
                                "backoff_initial_secs": 120}},
    });
    let file = c.dir.path().join("group.json");
    std::fs::write(&file, group.to_string()).unwrap();
    let out = c.cli(&["group", "create", "cloud", "--file", file.to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let shown = c.json(&["group", "provider", "cloud", "-o", "json"]);
    assert_eq!(shown["options"]["secret_access_key"], "********");

    let ids: Vec<String> = (0..5)
        .map(|i| {
            c.submit(&[
                "--group",
                "cloud",
                "--request",
                "cpu=1",
                "--type",
                "batch",
                "--",
                "sh",
                "-c",
                &format!("sleep 1; echo job {i}"),
            ])
        })
        .collect();

    // Boot what moto runs, stop what it terminated; count what it holds at each look.
    let mut booted: BTreeMap<String, Proc> = BTreeMap::new();
    let mut most = 0;
    let mut step = |c: &Cluster| {
        let instances = ec2.instances();
        let live = instances
            .values()
            .filter(|s| s.state != "terminated")
            .count();
        most = most.max(live);
        for (id, seen) in &instances {
            if seen.state == "running" && !booted.contains_key(id) {
                let data = ec2.user_data(id);
                let child = std::process::Command::new(CORRAL)
                    .args(["agent", "--server", &data["CORRAL_SERVER"]])
                    .args(["--group", &data["CORRAL_AGENT_GROUP"]])
                    .args([
                        "--id",
                        &data["CORRAL_AGENT_ID"],
                        "--capacity",
                        "cpu=1,mem=1GiB",
                    ])
                    .arg("--work-dir")
                    .arg(c.dir.path().join(id))
                    .env("CORRAL_TOKEN", &data["CORRAL_TOKEN"])
                    .env("CORRAL_CONFIG", c.dir.path().join("none.toml"))
                    .stdout(std::process::Stdio::null())
                    .stderr(std::process::Stdio::null())
                    .spawn()
                    .unwrap();
                booted.insert(id.clone(), Proc(child));
            }
            if seen.state == "terminated" {
                booted.remove(id);
            }
        }
        instances
    };
    c.until_for(180, "all sessions succeed", || {
        step(&c);
        let list = c.json(&["session", "ls", "--group", "cloud", "-o", "json"]);
        let done = list
            .as_array()?
            .iter()
            .filter(|s| ids.iter().any(|id| s["id"] == id.as_str()) && s["state"] == "succeeded")
            .count();
        (done == ids.len()).then_some(())
    });
    let instances = c.until_for(120, "every instance is terminated in moto", || {
        let instances = step(&c);
        instances
            .values()
            .all(|s| s.state == "terminated")
            .then_some(instances)
    });
    assert!(
        most <= 3,
        "moto held {most} live instances; the group's max is 3"
    );
    assert!(!instances.is_empty());
    assert!(
        instances.values().all(|s| s.instance_type == "t3.micro"),
        "only the available type was ever started"
    );

    // The events: the cheap template failed and backed off, the other one was launched, and
    // the instances were terminated (the event follows moto's answer by a moment).
    let events: Vec<Value> = c.until_for(20, "the terminations are recorded", || {
        let events = c
            .json(&[
                "events", "--group", "cloud", "--limit", "1000", "-o", "json",
            ])
            .as_array()
            .cloned()?;
        let terminated = events.iter().filter(|e| e["kind"] == "terminated").count();
        (terminated == instances.len()).then_some(events)
    });
    let says = |kind: &str, words: &[&str]| {
        events.iter().any(|e| {
            let m = e["message"].as_str().unwrap_or_default();
            e["kind"] == kind && words.iter().all(|w| m.contains(w))
        })
    };
    assert!(says(
        "launch_failed",
        &["cheap", "x9.mega", "InvalidInstanceType", "backs off"]
    ));
    assert!(says("launched", &["std"]));
    assert!(says("terminated", &["i-"]));
    assert!(!says("launched", &["cheap"]));
}
