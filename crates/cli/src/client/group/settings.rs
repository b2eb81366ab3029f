//! The settings of `corral group create` and `set-policy`: their flags, and the request bodies
//! built from the flags and a JSON file (templates too): `set-policy` sends a JSON merge patch
//! of only what was given, which the manager merges into the group's current settings.

use anyhow::{bail, Context, Result};
use clap::{Args, ValueEnum};
use serde_json::{json, Map, Value};

use super::super::{api_name, read_json};

/// The settings flags of `create` and `set-policy`; each maps to one field of the API's group.
#[derive(Args, Debug, Default)]
pub struct Settings {
    /// Scaling policy.
    #[arg(long, value_enum)]
    policy: Option<PolicyKind>,
    /// Agents the policy never scales below.
    #[arg(long, value_name = "N")]
    min_nodes: Option<u32>,
    /// Agents (alive, marked, lost or launching) the group never exceeds.
    #[arg(long, value_name = "N")]
    max_nodes: Option<u32>,
    /// Free capacity the group keeps so that sessions start at once, e.g. cpu=4,mem=8GiB.
    #[arg(long, value_name = "SLOTS")]
    headroom: Option<String>,
    /// A node the group expects though it has not joined (or was removed), with its shape:
    /// sessions only it could hold wait for it instead of being refused. Repeatable;
    /// `NAME=` takes a node off the list.
    #[arg(long, value_name = "NAME=SLOTS", value_parser = expected_node)]
    expected_node: Vec<(String, String)>,
    /// Seconds an agent stays idle before scale-in marks it.
    #[arg(long, value_name = "N")]
    idle_wait_secs: Option<u64>,
    /// Seconds after a launch during which nothing more is launched (default 0).
    #[arg(long, value_name = "N")]
    cooldown_secs: Option<u64>,
    /// Scale-out waits until no session arrived for this many milliseconds (default 1000).
    #[arg(long, value_name = "MS")]
    batch_idle_ms: Option<u64>,
    /// ...or until the first session of the burst waited this many milliseconds (default 10000).
    #[arg(long, value_name = "MS")]
    batch_max_ms: Option<u64>,
    /// The order in which pending sessions are considered.
    #[arg(long, value_enum)]
    scheduler: Option<Sequencer>,
    /// Where a session goes among the agents it fits on.
    #[arg(long, value_enum)]
    placement: Option<Placement>,
    /// What a blocked session at the head of the queue does to those behind it.
    #[arg(long, value_enum)]
    head_of_line: Option<HeadOfLine>,
    /// With backfill: passes a blocked session holds back those behind it.
    #[arg(long, value_name = "N")]
    skip_after: Option<u32>,
    /// Whether external agents may join with a registered key (`corral group key add`); off
    /// tells those in the group to leave.
    #[arg(long, value_name = "on|off", value_parser = on_off)]
    external: Option<bool>,
    /// External agents taking part at once, at most (default 10).
    #[arg(long, value_name = "N")]
    external_limit: Option<u32>,
    /// Whether idle agents update themselves to --agent-update-target (an uploaded
    /// `corral agent-build`).
    #[arg(long, value_name = "on|off", value_parser = on_off)]
    agent_update: Option<bool>,
    /// The version the group's agents are to run.
    #[arg(long, value_name = "VERSION")]
    agent_update_target: Option<String>,
    /// How long an agent holds nothing before it updates (default 60).
    #[arg(long, value_name = "SECS")]
    agent_update_idle_secs: Option<u64>,
    /// Whether the group's agents keep the images they hold current with their registry
    /// (pulling new digests in the background; running sessions keep theirs).
    #[arg(long, value_name = "on|off", value_parser = on_off)]
    image_update: Option<bool>,
    /// How often agents ask the registry about each image they hold (default 300).
    #[arg(long, value_name = "SECS")]
    image_update_interval_secs: Option<u64>,
    /// What becomes of a lost agent's sessions: back in the queue, or failed.
    #[arg(long, value_enum)]
    on_agent_lost: Option<OnAgentLost>,
    /// Whether an agent cut off from the manager for --lost-after-secs stops its sessions
    /// (they are then given to other agents, never running twice at once) or keeps them
    /// running (they stay its own until it is back or gone for good).
    #[arg(long, value_enum)]
    on_disconnect: Option<OnDisconnect>,
}

/// `fields[key]`, made an object if it is not one.
fn object<'a>(fields: &'a mut Map<String, Value>, key: &str) -> &'a mut Map<String, Value> {
    let value = fields.entry(key).or_insert_with(|| json!({}));
    if !value.is_object() {
        *value = json!({});
    }
    value.as_object_mut().expect("made an object above")
}

fn on_off(s: &str) -> Result<bool, String> {
    match s {
        "on" => Ok(true),
        "off" => Ok(false),
        other => Err(format!("{other:?}: say on or off")),
    }
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum PolicyKind {
    /// Never launches or terminates (on-premise).
    Fixed,
    /// Launches for unmet demand and headroom, scales in idle agents.
    Demand,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum OnAgentLost {
    /// Back in the queue, to run elsewhere.
    Requeue,
    /// Failed, with the reason.
    Fail,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum OnDisconnect {
    /// The agent stops them.
    Stop,
    /// They run on.
    Keep,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum Sequencer {
    /// Oldest first.
    Fifo,
    /// Newest first.
    Lifo,
    /// Highest priority first.
    Priority,
    /// Dominant resource fairness between owners.
    Drf,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum Placement {
    /// The fullest agent that fits.
    Binpack,
    /// The emptiest agent.
    Spread,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum HeadOfLine {
    /// Nothing behind a blocked session is placed.
    Strict,
    /// Sessions behind a blocked one go after --skip-after passes.
    Backfill,
}

impl Settings {
    /// Writes the given flags into the policy and scheduler objects.
    fn apply(&self, policy: &mut Map<String, Value>, scheduler: &mut Map<String, Value>) {
        let set = |map: &mut Map<String, Value>, key: &str, value: Option<Value>| {
            if let Some(v) = value {
                map.insert(key.to_string(), v);
            }
        };
        set(policy, "kind", self.policy.map(|p| api_name(&p).into()));
        set(policy, "min_nodes", self.min_nodes.map(Value::from));
        set(policy, "max_nodes", self.max_nodes.map(Value::from));
        set(policy, "headroom", self.headroom.clone().map(Value::from));
        if !self.expected_node.is_empty() {
            let nodes = (self.expected_node.iter())
                .map(|(name, slots)| {
                    let slots = (!slots.is_empty()).then(|| Value::from(slots.as_str()));
                    (name.clone(), slots.unwrap_or(Value::Null))
                })
                .collect();
            set(policy, "expected_nodes", Some(Value::Object(nodes)));
        }
        set(
            policy,
            "idle_wait_secs",
            self.idle_wait_secs.map(Value::from),
        );
        set(policy, "cooldown_secs", self.cooldown_secs.map(Value::from));
        set(policy, "batch_idle_ms", self.batch_idle_ms.map(Value::from));
        set(policy, "batch_max_ms", self.batch_max_ms.map(Value::from));
        set(
            policy,
            "on_agent_lost",
            self.on_agent_lost.map(|o| api_name(&o).into()),
        );
        set(
            policy,
            "on_disconnect",
            self.on_disconnect.map(|o| api_name(&o).into()),
        );
        set(
            scheduler,
            "sequencer",
            self.scheduler.map(|s| api_name(&s).into()),
        );
        set(
            scheduler,
            "placement",
            self.placement.map(|p| api_name(&p).into()),
        );
        set(
            scheduler,
            "head_of_line",
            self.head_of_line.map(|h| api_name(&h).into()),
        );
        set(scheduler, "skip_after", self.skip_after.map(Value::from));
        if self.external.is_some() || self.external_limit.is_some() {
            let external = object(policy, "external");
            set(external, "enabled", self.external.map(Value::from));
            set(external, "limit", self.external_limit.map(Value::from));
        }
        if self.image_update.is_some() || self.image_update_interval_secs.is_some() {
            let update = object(policy, "image_update");
            set(update, "enabled", self.image_update.map(Value::from));
            set(
                update,
                "interval_secs",
                self.image_update_interval_secs.map(Value::from),
            );
        }
        if self.agent_update.is_some()
            || self.agent_update_target.is_some()
            || self.agent_update_idle_secs.is_some()
        {
            let update = object(policy, "agent_update");
            set(update, "enabled", self.agent_update.map(Value::from));
            set(
                update,
                "target",
                self.agent_update_target.clone().map(Value::from),
            );
            set(
                update,
                "idle_wait_secs",
                self.agent_update_idle_secs.map(Value::from),
            );
        }
    }
}

/// The body of `POST /groups`: the file's group (if any), its name checked, then the flags.
pub(super) fn create_body(
    name: &str,
    settings: &Settings,
    file: Option<&std::path::Path>,
) -> Result<Value> {
    let mut body = match file {
        Some(path) => read_json(path)?,
        None => json!({}),
    };
    let what = file.map_or("the group".to_string(), |p| p.display().to_string());
    let group = body
        .as_object_mut()
        .with_context(|| format!("{what}: a group is a JSON object"))?;
    if let Some(other) = group.get("name").filter(|n| n.as_str() != Some(name)) {
        bail!("{what}: names the group {other}, not {name:?}");
    }
    group.insert("name".into(), name.into());
    let mut policy = section(group, "policy", &what)?;
    let mut scheduler = section(group, "scheduler", &what)?;
    settings.apply(&mut policy, &mut scheduler);
    for (key, map) in [("policy", policy), ("scheduler", scheduler)] {
        if !map.is_empty() {
            group.insert(key.into(), Value::Object(map));
        }
    }
    Ok(body)
}

/// The body of `PATCH /groups/NAME` for `set-policy`: a JSON merge patch naming only the
/// fields the file's `policy` and `scheduler` objects and the flags give (the flags win); the
/// manager merges it into the group's current settings.
pub(super) fn policy_patch(
    name: &str,
    settings: &Settings,
    file: Option<&std::path::Path>,
) -> Result<Value> {
    let mut policy = Map::new();
    let mut scheduler = Map::new();
    if let Some(path) = file {
        let what = path.display().to_string();
        let value = read_json(path)?;
        let given = value
            .as_object()
            .with_context(|| format!("{what}: must hold a JSON object"))?;
        for key in given.keys() {
            match key.as_str() {
                "policy" | "scheduler" => {}
                "name" if given.get("name").and_then(Value::as_str) == Some(name) => {}
                "name" => bail!("{what}: names another group, {}", given["name"]),
                "templates" => bail!("{what}: set-policy does not change templates; use `corral group templates NAME --file`"),
                other => bail!("{what}: unknown field {other:?}; expected policy and scheduler"),
            }
        }
        policy = section(given, "policy", &what)?;
        scheduler = section(given, "scheduler", &what)?;
    }
    settings.apply(&mut policy, &mut scheduler);
    let mut patch = Map::new();
    for (key, fields) in [("policy", policy), ("scheduler", scheduler)] {
        if !fields.is_empty() {
            patch.insert(key.into(), Value::Object(fields));
        }
    }
    if patch.is_empty() {
        bail!("nothing to change: give --policy, --min-nodes, --max-nodes, --headroom, --expected-node, --idle-wait-secs, --cooldown-secs, --batch-idle-ms, --batch-max-ms, --scheduler, --placement, --head-of-line, --skip-after, --external, --external-limit, --agent-update, --agent-update-target, --agent-update-idle-secs, --image-update, --image-update-interval-secs, --on-agent-lost, --on-disconnect or --file");
    }
    Ok(Value::Object(patch))
}

/// An object-valued field of a JSON object (absent: empty).
fn section(object: &Map<String, Value>, key: &str, what: &str) -> Result<Map<String, Value>> {
    match object.get(key) {
        None | Some(Value::Null) => Ok(Map::new()),
        Some(Value::Object(map)) => Ok(map.clone()),
        Some(_) => bail!("{what}: `{key}` must be a JSON object"),
    }
}

/// Templates are an array; a group object lends its `templates`.
pub(super) fn templates_body(value: Value) -> Result<Value> {
    match value {
        Value::Array(_) => Ok(value),
        Value::Object(mut group) => match group.remove("templates") {
            Some(t @ Value::Array(_)) => Ok(t),
            _ => bail!("expected a JSON array of templates, or an object with a `templates` array"),
        },
        _ => bail!("expected a JSON array of templates"),
    }
}

/// `NAME=SLOTS` of `--expected-node` (the slots may be empty: the node is taken off).
fn expected_node(text: &str) -> Result<(String, String), String> {
    match text.split_once('=') {
        Some((name, slots)) if !name.trim().is_empty() => {
            Ok((name.trim().to_string(), slots.trim().to_string()))
        }
        _ => Err(format!(
            "{text:?} is not NAME=SLOTS (node7=cpu=8,mem=32GiB)"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn create_merges_the_file_then_the_flags() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("g.json");
        std::fs::write(
            &file,
            r#"{"name": "g", "policy": {"kind": "demand", "max_nodes": 3}, "templates": []}"#,
        )
        .unwrap();
        let settings = Settings {
            max_nodes: Some(5),
            head_of_line: Some(HeadOfLine::Strict),
            ..Default::default()
        };
        let body = create_body("g", &settings, Some(&file)).unwrap();
        assert_eq!(
            body,
            json!({"name": "g", "policy": {"kind": "demand", "max_nodes": 5}, "scheduler": {"head_of_line": "strict"}, "templates": []})
        );
        assert!(create_body("other", &settings, Some(&file))
            .unwrap_err()
            .to_string()
            .contains("names the group"));
        assert_eq!(
            create_body("h", &Settings::default(), None).unwrap(),
            json!({"name": "h"})
        );
    }

    #[test]
    fn set_policy_sends_only_what_is_given() {
        let settings = Settings {
            min_nodes: Some(2),
            scheduler: Some(Sequencer::Drf),
            ..Default::default()
        };
        assert_eq!(
            policy_patch("g", &settings, None).unwrap(),
            json!({"policy": {"min_nodes": 2}, "scheduler": {"sequencer": "drf"}})
        );
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("g.json");
        std::fs::write(
            &file,
            r#"{"name": "g", "policy": {"kind": "demand", "min_nodes": 1}, "scheduler": null}"#,
        )
        .unwrap();
        assert_eq!(
            policy_patch("g", &settings, Some(&file)).unwrap(),
            json!({"policy": {"kind": "demand", "min_nodes": 2}, "scheduler": {"sequencer": "drf"}})
        );
        assert!(policy_patch("h", &settings, Some(&file))
            .unwrap_err()
            .to_string()
            .contains("names another group"));
        assert!(policy_patch("g", &Settings::default(), None)
            .unwrap_err()
            .to_string()
            .contains("nothing to change"));
    }

    #[test]
    fn templates_come_from_an_array_or_a_group() {
        assert_eq!(templates_body(json!([])).unwrap(), json!([]));
        assert_eq!(
            templates_body(json!({"name": "g", "templates": [1]})).unwrap(),
            json!([1])
        );
        assert!(templates_body(json!({"name": "g"})).is_err());
    }
}
