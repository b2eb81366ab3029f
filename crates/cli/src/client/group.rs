//! `corral group`: scaling groups, their policy, scheduler and templates, and their state now.

use std::collections::BTreeMap;
use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand, ValueEnum};
use corral_core::Slots;
use serde::Deserialize;
use serde_json::{json, Map, Value};

use super::http::{parse, Api};
use super::render::{self, fields, or_dash, pairs, slots, table};
use super::session::{print_pending, SessionView};
use super::{api_name, read_json, Out};

#[derive(Subcommand)]
pub enum Command {
    /// List the scaling groups.
    Ls {
        #[command(flatten)]
        out: Out,
    },
    /// Show a group: its policy, scheduler and templates.
    Get {
        /// The group's name.
        name: String,
        #[command(flatten)]
        out: Out,
    },
    /// Create a group (admin). Flags override what --file says.
    Create {
        /// The group's name.
        name: String,
        #[command(flatten)]
        settings: Settings,
        /// A group as JSON (name, policy, scheduler, templates), as `group get -o json` prints it; `-` reads standard input.
        #[arg(long, value_name = "GROUP.json")]
        file: Option<PathBuf>,
        #[command(flatten)]
        out: Out,
    },
    /// Change a group's policy and scheduler (admin): only the settings given change.
    SetPolicy {
        /// The group's name.
        name: String,
        #[command(flatten)]
        settings: Settings,
        /// JSON whose `policy` and `scheduler` objects are merged in, field by field, before the flags.
        #[arg(long, value_name = "GROUP.json")]
        file: Option<PathBuf>,
        #[command(flatten)]
        out: Out,
    },
    /// Show a group's instance templates, or replace them all with --file (admin).
    Templates {
        /// The group's name.
        name: String,
        /// A JSON array of templates (or a group object with `templates`) to replace the current ones; `-` reads standard input.
        #[arg(long, value_name = "TEMPLATES.json")]
        file: Option<PathBuf>,
        #[command(flatten)]
        out: Out,
    },
    /// Delete a group (admin); refused while it has agents or live sessions.
    Delete {
        /// The group's name.
        name: String,
        #[command(flatten)]
        out: Out,
    },
    /// Pending sessions of a group and why each waits.
    Pending {
        /// The group's name.
        name: String,
        #[command(flatten)]
        out: Out,
    },
    /// Free capacity per agent, and the minimum shares the group keeps free (headroom).
    Shares {
        /// The group's name.
        name: String,
        #[command(flatten)]
        out: Out,
    },
    /// What a request would take on this group (image minimums included), and whether it could ever run.
    Required {
        /// The group's name.
        name: String,
        /// The request, e.g. cpu=2,mem=4GiB,gpu=0.5.
        #[arg(long, value_name = "SLOTS")]
        request: String,
        /// Image whose minimum slots apply.
        #[arg(long, value_name = "IMG")]
        image: Option<String>,
        #[command(flatten)]
        out: Out,
    },
    /// Dry-run one pass of the cycle on the group as it is now (admin).
    Plan {
        /// The group's name.
        name: String,
        #[command(flatten)]
        out: Out,
    },
    /// Show a group's provider (secrets redacted), or change it (admin): --file replaces it,
    /// --provider, --option and --launch change single fields of the current one.
    Provider {
        /// The group's name.
        name: String,
        /// A provider as JSON ({"name", "options", "launch"}); `-` reads standard input.
        #[arg(long, value_name = "PROVIDER.json")]
        file: Option<PathBuf>,
        /// The provider: static, process, docker, aws, kubernetes or exec.
        #[arg(long = "provider", value_name = "NAME")]
        provider: Option<String>,
        /// A provider option, KEY=VALUE (VALUE is read as JSON when it parses, else as text);
        /// KEY= removes it. Repeat for more.
        #[arg(long = "option", value_name = "KEY=VALUE")]
        options: Vec<String>,
        /// A launch setting, KEY=SECONDS or budget=N (backoff_initial_secs, backoff_max_secs,
        /// budget, budget_window_secs, max_provisioning_secs, orphan_grace_secs, reconcile_secs,
        /// call_timeout_secs). Repeat for more.
        #[arg(long = "launch", value_name = "KEY=N")]
        launch: Vec<String>,
        #[command(flatten)]
        out: Out,
    },
    /// Instances the group's provider launched, their state, and templates held back by
    /// backoff or launch budget.
    Instances {
        /// The group's name.
        name: String,
        /// Also terminated and failed instances.
        #[arg(long)]
        all: bool,
        #[command(flatten)]
        out: Out,
    },
    /// Create a one-time token an agent joins this group with (`corral agent --token`); it
    /// expires unused after --ttl-secs (admin). Prints the token only.
    BootstrapToken {
        /// The group's name.
        name: String,
        /// Seconds it may be used in (once).
        #[arg(long, value_name = "S", default_value_t = 3600)]
        ttl_secs: u64,
        #[command(flatten)]
        out: Out,
    },
}

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
    /// Seconds an agent stays idle before scale-in marks it.
    #[arg(long, value_name = "N")]
    idle_wait_secs: Option<u64>,
    /// Seconds after a launch during which nothing more is launched.
    #[arg(long, value_name = "N")]
    cooldown_secs: Option<u64>,
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
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum PolicyKind {
    /// Never launches or terminates (on-premise).
    Fixed,
    /// Launches for unmet demand and headroom, scales in idle agents.
    Demand,
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
        set(
            policy,
            "idle_wait_secs",
            self.idle_wait_secs.map(Value::from),
        );
        set(policy, "cooldown_secs", self.cooldown_secs.map(Value::from));
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
    }

    /// Whether any setting flag was given.
    fn any(&self) -> bool {
        let Settings {
            policy,
            min_nodes,
            max_nodes,
            headroom,
            idle_wait_secs,
            cooldown_secs,
            scheduler,
            placement,
            head_of_line,
            skip_after,
        } = self;
        policy.is_some()
            || min_nodes.is_some()
            || max_nodes.is_some()
            || headroom.is_some()
            || idle_wait_secs.is_some()
            || cooldown_secs.is_some()
            || scheduler.is_some()
            || placement.is_some()
            || head_of_line.is_some()
            || skip_after.is_some()
    }
}

pub async fn run(api: &Api, command: Command) -> Result<()> {
    match command {
        Command::Ls { out } => {
            let reply = api.get(&["groups"], &[]).await?;
            if !render::json(out.output, &reply) {
                print_groups(&parse::<Vec<_>>(&reply)?);
            }
        }
        Command::Get { name, out } => {
            let reply = api.get(&["groups", &name], &[]).await?;
            if !render::json(out.output, &reply) {
                print_group(&parse(&reply)?);
            }
        }
        Command::Create {
            name,
            settings,
            file,
            out,
        } => {
            let body = create_body(&name, &settings, file.as_deref())?;
            let reply = api.post(&["groups"], Some(&body)).await?;
            if !render::json(out.output, &reply) {
                print_group(&parse(&reply)?);
            }
        }
        Command::SetPolicy {
            name,
            settings,
            file,
            out,
        } => {
            let current = api.get(&["groups", &name], &[]).await?;
            let body = policy_body(&current.value, &settings, file.as_deref())?;
            let reply = api.put(&["groups", &name, "policy"], &body).await?;
            if !render::json(out.output, &reply) {
                print_group(&parse(&reply)?);
            }
        }
        Command::Templates { name, file, out } => {
            let reply = match file {
                Some(path) => {
                    let body = templates_body(read_json(&path)?)
                        .with_context(|| format!("{}: not a list of templates", path.display()))?;
                    api.put(&["groups", &name, "templates"], &body).await?
                }
                None => api.get(&["groups", &name, "templates"], &[]).await?,
            };
            if !render::json(out.output, &reply) {
                print_templates(&parse::<Vec<_>>(&reply)?);
            }
        }
        Command::Delete { name, out } => {
            let reply = api.delete(&["groups", &name]).await?;
            if !render::json(out.output, &reply) {
                println!("deleted group {name}");
            }
        }
        Command::Pending { name, out } => {
            let reply = api.get(&["groups", &name, "pending"], &[]).await?;
            if !render::json(out.output, &reply) {
                print_pending(&parse::<Vec<SessionView>>(&reply)?);
            }
        }
        Command::Shares { name, out } => {
            let reply = api.get(&["groups", &name, "shares"], &[]).await?;
            if !render::json(out.output, &reply) {
                let shares: Shares = parse(&reply)?;
                let rows: Vec<Vec<String>> = shares
                    .available
                    .iter()
                    .map(|(agent, free)| vec![agent.clone(), slots(free)])
                    .collect();
                table("agents taking sessions", &["AGENT", "AVAILABLE"], &rows);
                println!("\nminimum shares (headroom): {}", slots(&shares.minimum));
            }
        }
        Command::Required {
            name,
            request,
            image,
            out,
        } => {
            let body = json!({"request": request, "image": image});
            let reply = api
                .post(&["groups", &name, "required"], Some(&body))
                .await?;
            if !render::json(out.output, &reply) {
                let r: Required = parse(&reply)?;
                fields(&[
                    ("required", slots(&r.required)),
                    (
                        "feasible",
                        if r.feasible { "yes" } else { "no" }.to_string(),
                    ),
                    ("reason", or_dash(r.reason.as_deref())),
                ]);
            }
        }
        Command::Plan { name, out } => {
            let reply = api.get(&["groups", &name, "plan"], &[]).await?;
            if !render::json(out.output, &reply) {
                print_plan(&parse(&reply)?);
            }
        }
        Command::Provider {
            name,
            file,
            provider,
            options,
            launch,
            out,
        } => {
            let changes =
                file.is_some() || provider.is_some() || !options.is_empty() || !launch.is_empty();
            let reply = if changes {
                let current = api.get(&["groups", &name, "provider"], &[]).await?;
                let body =
                    provider_body(&current.value, file.as_deref(), provider, &options, &launch)?;
                api.put(&["groups", &name, "provider"], &body).await?
            } else {
                api.get(&["groups", &name, "provider"], &[]).await?
            };
            if !render::json(out.output, &reply) {
                print_provider(&reply.value);
            }
        }
        Command::Instances { name, all, out } => {
            let query = [("all", all.then(|| "true".to_string()))];
            let reply = api.get(&["groups", &name, "instances"], &query).await?;
            if !render::json(out.output, &reply) {
                print_instances(&parse(&reply)?);
            }
        }
        Command::BootstrapToken {
            name,
            ttl_secs,
            out,
        } => {
            let body = serde_json::json!({"ttl_secs": ttl_secs});
            let reply = api
                .post(&["groups", &name, "bootstrap-tokens"], Some(&body))
                .await?;
            if !render::json(out.output, &reply) {
                println!("{}", reply.value["token"].as_str().unwrap_or_default());
                eprintln!(
                    "works once, until {}",
                    render::time(reply.value["expires_at"].as_i64().unwrap_or_default())
                );
            }
        }
    }
    Ok(())
}

/// The body of `POST /groups`: the file's group (if any), its name checked, then the flags.
fn create_body(name: &str, settings: &Settings, file: Option<&std::path::Path>) -> Result<Value> {
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

/// The body of `PUT /groups/NAME/provider`: the file's provider or the current one, with the
/// flags applied. Secrets come back from the manager redacted, and sent so they stay as stored.
fn provider_body(
    current: &Value,
    file: Option<&std::path::Path>,
    name: Option<String>,
    options: &[String],
    launch: &[String],
) -> Result<Value> {
    let mut body = match file {
        Some(path) => read_json(path)?,
        None => current.clone(),
    };
    let what = file.map_or("the provider".to_string(), |p| p.display().to_string());
    let provider = body
        .as_object_mut()
        .with_context(|| format!("{what}: a provider is a JSON object"))?;
    if let Some(name) = name {
        if provider.get("name").and_then(Value::as_str) != Some(name.as_str()) {
            // Another provider's options mean nothing to this one.
            provider.remove("options");
        }
        provider.insert("name".into(), name.into());
    }
    let mut section = |key: &str, pairs: &[String], numeric: bool| -> Result<()> {
        if pairs.is_empty() {
            return Ok(());
        }
        let map = provider
            .entry(key)
            .or_insert_with(|| json!({}))
            .as_object_mut()
            .with_context(|| format!("{what}: {key} is not an object"))?;
        for pair in pairs {
            let (k, v) = pair.split_once('=').with_context(|| {
                format!("--{}: {pair:?} is not KEY=VALUE", key.trim_end_matches('s'))
            })?;
            if v.is_empty() && !numeric {
                map.remove(k);
                continue;
            }
            let value = if numeric {
                Value::from(
                    v.parse::<u64>()
                        .with_context(|| format!("--launch {k}: {v:?} is not a whole number"))?,
                )
            } else {
                serde_json::from_str(v).unwrap_or_else(|_| Value::from(v))
            };
            map.insert(k.to_string(), value);
        }
        Ok(())
    };
    section("options", options, false)?;
    section("launch", launch, true)?;
    Ok(body)
}

fn print_provider(p: &Value) {
    let text = |v: &Value| match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    let mut rows = vec![("provider", text(&p["name"]))];
    let options: Vec<(String, String)> = p["options"]
        .as_object()
        .map(|m| {
            m.iter()
                .map(|(k, v)| (format!("option {k}"), text(v)))
                .collect()
        })
        .unwrap_or_default();
    let launch: Vec<(String, String)> = p["launch"]
        .as_object()
        .map(|m| m.iter().map(|(k, v)| (k.clone(), text(v))).collect())
        .unwrap_or_default();
    let owned: Vec<(&str, String)> = options
        .iter()
        .chain(&launch)
        .map(|(k, v)| (k.as_str(), v.clone()))
        .collect();
    rows.extend(owned);
    fields(&rows);
}

#[derive(Deserialize)]
struct Instances {
    instances: Vec<InstanceRow>,
    #[serde(default)]
    held: BTreeMap<String, Held>,
}

#[derive(Deserialize)]
struct InstanceRow {
    id: String,
    template: String,
    phase: String,
    provider_id: Option<String>,
    requested_at: i64,
    reason: Option<String>,
}

#[derive(Deserialize)]
struct Held {
    allowed: u32,
    reason: String,
}

fn print_instances(list: &Instances) {
    let rows: Vec<Vec<String>> = list
        .instances
        .iter()
        .map(|i| {
            vec![
                i.id.clone(),
                i.template.clone(),
                i.phase.clone(),
                or_dash(i.provider_id.as_deref()),
                render::time(i.requested_at),
                or_dash(i.reason.as_deref()),
            ]
        })
        .collect();
    table(
        "instances",
        &[
            "AGENT",
            "TEMPLATE",
            "STATE",
            "INSTANCE",
            "REQUESTED",
            "REASON",
        ],
        &rows,
    );
    for (template, h) in &list.held {
        println!("held: {template}: {} more now; {}", h.allowed, h.reason);
    }
}

/// The body of `PUT /groups/NAME/policy`. The API replaces the policy and scheduler whole (a
/// field left out takes its default), so the client merges into the current ones.
fn policy_body(
    current: &Value,
    settings: &Settings,
    file: Option<&std::path::Path>,
) -> Result<Value> {
    let current = current
        .as_object()
        .context("unexpected answer from the manager: a group is an object")?;
    let mut policy = section(current, "policy", "the manager's group")?;
    let mut scheduler = section(current, "scheduler", "the manager's group")?;
    let mut changed = false;
    if let Some(path) = file {
        let what = path.display().to_string();
        let value = read_json(path)?;
        let given = value
            .as_object()
            .with_context(|| format!("{what}: must hold a JSON object"))?;
        for key in given.keys() {
            match key.as_str() {
                "policy" | "scheduler" => {}
                "name" if given.get("name") == current.get("name") => {}
                "name" => bail!("{what}: names another group, {}", given["name"]),
                "templates" => bail!("{what}: set-policy does not change templates; use `corral group templates NAME --file`"),
                other => bail!("{what}: unknown field {other:?}; expected policy and scheduler"),
            }
        }
        for (key, target) in [("policy", &mut policy), ("scheduler", &mut scheduler)] {
            let fields = section(given, key, &what)?;
            changed |= !fields.is_empty();
            target.extend(fields);
        }
    }
    settings.apply(&mut policy, &mut scheduler);
    changed |= settings.any();
    if !changed {
        bail!("nothing to change: give --policy, --min-nodes, --max-nodes, --headroom, --idle-wait-secs, --cooldown-secs, --scheduler, --placement, --head-of-line, --skip-after or --file");
    }
    Ok(json!({"policy": policy, "scheduler": scheduler}))
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
fn templates_body(value: Value) -> Result<Value> {
    match value {
        Value::Array(_) => Ok(value),
        Value::Object(mut group) => match group.remove("templates") {
            Some(t @ Value::Array(_)) => Ok(t),
            _ => bail!("expected a JSON array of templates, or an object with a `templates` array"),
        },
        _ => bail!("expected a JSON array of templates"),
    }
}

#[derive(Deserialize)]
struct Group {
    /// The group's name.
    name: String,
    #[serde(default)]
    policy: Policy,
    #[serde(default)]
    scheduler: Scheduler,
    #[serde(default)]
    templates: Vec<Template>,
    #[serde(default)]
    provider: ProviderName,
}

#[derive(Deserialize)]
struct ProviderName {
    name: String,
}

impl Default for ProviderName {
    fn default() -> Self {
        ProviderName {
            name: "static".into(),
        }
    }
}

#[derive(Default, Deserialize)]
#[serde(default)]
struct Policy {
    kind: String,
    min_nodes: u64,
    max_nodes: u64,
    headroom: Slots,
    idle_wait_secs: u64,
    cooldown_secs: u64,
    max_launches_per_pass: u64,
}

#[derive(Default, Deserialize)]
#[serde(default)]
struct Scheduler {
    sequencer: String,
    placement: String,
    head_of_line: String,
    skip_after: u64,
}

#[derive(Deserialize)]
struct Template {
    /// The group's name.
    name: String,
    slots: Slots,
    #[serde(default, alias = "price")]
    price_per_hour: f64,
    #[serde(default)]
    max: u64,
    #[serde(default)]
    labels: BTreeMap<String, String>,
}

#[derive(Deserialize)]
struct Shares {
    #[serde(default)]
    available: BTreeMap<String, Slots>,
    #[serde(default)]
    minimum: Slots,
}

#[derive(Deserialize)]
struct Required {
    required: Slots,
    feasible: bool,
    #[serde(default)]
    reason: Option<String>,
}

fn print_groups(groups: &[Group]) {
    let rows: Vec<Vec<String>> = groups
        .iter()
        .map(|g| {
            vec![
                g.name.clone(),
                g.policy.kind.clone(),
                format!("{}-{}", g.policy.min_nodes, g.policy.max_nodes),
                g.scheduler.sequencer.clone(),
                g.scheduler.placement.clone(),
                g.scheduler.head_of_line.clone(),
                g.templates.len().to_string(),
                g.provider.name.clone(),
            ]
        })
        .collect();
    table(
        "groups",
        &[
            "NAME",
            "POLICY",
            "NODES",
            "SCHEDULER",
            "PLACEMENT",
            "HEAD-OF-LINE",
            "TEMPLATES",
            "PROVIDER",
        ],
        &rows,
    );
}

fn print_group(g: &Group) {
    let (p, s) = (&g.policy, &g.scheduler);
    let head_of_line = if s.head_of_line == "backfill" {
        format!("backfill (after {} blocked passes)", s.skip_after)
    } else {
        s.head_of_line.clone()
    };
    fields(&[
        ("name", g.name.clone()),
        ("policy", p.kind.clone()),
        ("nodes", format!("{} to {}", p.min_nodes, p.max_nodes)),
        ("headroom", slots(&p.headroom)),
        ("idle wait", format!("{}s", p.idle_wait_secs)),
        ("cooldown", format!("{}s", p.cooldown_secs)),
        ("launches/pass", p.max_launches_per_pass.to_string()),
        ("scheduler", s.sequencer.clone()),
        ("placement", s.placement.clone()),
        ("head of line", head_of_line),
        ("provider", g.provider.name.clone()),
    ]);
    if !g.templates.is_empty() {
        println!("\nTEMPLATES");
        print_templates(&g.templates);
    }
}

fn print_templates(templates: &[Template]) {
    let rows: Vec<Vec<String>> = templates
        .iter()
        .map(|t| {
            vec![
                t.name.clone(),
                slots(&t.slots),
                format!("{:.3}", t.price_per_hour),
                t.max.to_string(),
                pairs(&t.labels),
            ]
        })
        .collect();
    table(
        "templates",
        &["NAME", "SLOTS", "PRICE/H", "MAX", "LABELS"],
        &rows,
    );
}

/// `GET /groups/NAME/plan`: the same figures `corral plan` prints, read back from JSON.
#[derive(Deserialize)]
pub(crate) struct Plan {
    summary: Summary,
    #[serde(default)]
    decisions: Decisions,
}

#[derive(Deserialize)]
struct Summary {
    #[serde(default)]
    nodes: BTreeMap<String, u64>,
    node_count: u64,
    cost_per_hour: f64,
    lower_bound_cost: Option<f64>,
    placed: u64,
    rejected: u64,
    unplaced: u64,
    marked: u64,
    unmarked: u64,
    terminated: u64,
}

#[derive(Default, Deserialize)]
#[serde(default)]
struct Decisions {
    rejections: Vec<SessionReason>,
    launches: Vec<Launch>,
    marks: Vec<AgentReason>,
    unmarks: Vec<AgentReason>,
    terminations: Vec<AgentReason>,
    placements: Vec<PlacementView>,
    waiting: Vec<SessionReason>,
}

#[derive(Deserialize)]
struct SessionReason {
    session: String,
    reason: String,
}

#[derive(Deserialize)]
struct AgentReason {
    agent: String,
    reason: String,
}

#[derive(Deserialize)]
struct Launch {
    template: String,
    count: u64,
    reason: String,
}

#[derive(Deserialize)]
struct PlacementView {
    session: String,
    agent: String,
    slots: Slots,
}

/// Prints a plan (`corral plan`'s and the API's JSON form) as people read it.
pub(crate) fn print_plan(plan: &Plan) {
    let (s, d) = (&plan.summary, &plan.decisions);
    let nodes = if s.nodes.is_empty() {
        "none".to_string()
    } else {
        s.nodes
            .iter()
            .map(|(t, n)| format!("{n} x {t}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let bound = s
        .lower_bound_cost
        .map_or("none (a demanded slot is on no template)".into(), |b| {
            format!("{b:.3}/h")
        });
    fields(&[
        (
            "launch",
            format!(
                "{nodes} ({} nodes, {:.3}/h; lower bound {bound})",
                s.node_count, s.cost_per_hour
            ),
        ),
        (
            "sessions",
            format!(
                "{} placed, {} rejected, {} pending",
                s.placed, s.rejected, s.unplaced
            ),
        ),
        (
            "agents",
            format!(
                "{} marked, {} unmarked, {} terminated",
                s.marked, s.unmarked, s.terminated
            ),
        ),
    ]);
    let section = |title: &str, header: &[&str], rows: Vec<Vec<String>>| {
        if !rows.is_empty() {
            println!("\n{title}");
            crate::table::print(header, &rows);
        }
    };
    let launches = d
        .launches
        .iter()
        .map(|l| vec![l.template.clone(), l.count.to_string(), l.reason.clone()]);
    section(
        "LAUNCHES",
        &["TEMPLATE", "COUNT", "REASON"],
        launches.collect(),
    );
    for (title, list) in [
        ("MARKS", &d.marks),
        ("UNMARKS", &d.unmarks),
        ("TERMINATIONS", &d.terminations),
    ] {
        let rows = list.iter().map(|a| vec![a.agent.clone(), a.reason.clone()]);
        section(title, &["AGENT", "REASON"], rows.collect());
    }
    let placements = d
        .placements
        .iter()
        .map(|p| vec![p.session.clone(), p.agent.clone(), slots(&p.slots)]);
    section(
        "PLACEMENTS",
        &["SESSION", "AGENT", "SLOTS"],
        placements.collect(),
    );
    for (title, list) in [("REJECTIONS", &d.rejections), ("WAITING", &d.waiting)] {
        let rows = list
            .iter()
            .map(|r| vec![r.session.clone(), r.reason.clone()]);
        section(title, &["SESSION", "REASON"], rows.collect());
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
    fn set_policy_changes_only_what_is_given() {
        let current = json!({"name": "g", "policy": {"kind": "fixed", "max_nodes": 100, "min_nodes": 0},
                             "scheduler": {"sequencer": "fifo", "placement": "spread"}, "templates": []});
        let settings = Settings {
            min_nodes: Some(2),
            scheduler: Some(Sequencer::Drf),
            ..Default::default()
        };
        assert_eq!(
            policy_body(&current, &settings, None).unwrap(),
            json!({"policy": {"kind": "fixed", "max_nodes": 100, "min_nodes": 2},
                   "scheduler": {"sequencer": "drf", "placement": "spread"}})
        );
        assert!(policy_body(&current, &Settings::default(), None)
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
