//! `corral agent`: list agents, register one by hand, drain, unmark and remove; write an
//! external agent's key pair.

use std::collections::BTreeMap;

use anyhow::{Context, Result};
use clap::Subcommand;
use corral_api::agents::RegisterAgent;
use corral_core::{Agent, AgentState, Slots};
use serde_json::json;

use super::http::{json, parse, Api, Reply};
use super::render::{self, fields, opt_time, or_dash, pairs, slots, table, word};
use super::{api_name, key_value, Out};

#[derive(Subcommand)]
pub enum Command {
    /// List agents.
    Ls {
        /// Only agents of this group.
        #[arg(long, value_name = "G")]
        group: Option<String>,
        /// Only agents in this state.
        #[arg(long, value_enum)]
        state: Option<StateArg>,
        #[command(flatten)]
        out: Out,
    },
    /// Show an agent: capacity, what is allocated and free, state.
    Get {
        /// The agent's id.
        id: String,
        #[command(flatten)]
        out: Out,
    },
    /// Register an agent by hand (a static machine) in a group (admin).
    Register {
        /// The agent's id: 1-64 letters, digits, '.', '_', '-', ':' or '/'.
        id: String,
        /// The scaling group it serves.
        #[arg(long, value_name = "G")]
        group: String,
        /// What it offers, e.g. cpu=16,mem=64GiB,gpu=2.
        #[arg(long, value_name = "SLOTS")]
        capacity: Slots,
        /// A label of the agent; repeat for more.
        #[arg(long = "label", value_name = "K=V", value_parser = key_value)]
        labels: Vec<(String, String)>,
        /// The group's template this machine corresponds to.
        #[arg(long, value_name = "T")]
        template: Option<String>,
        #[command(flatten)]
        out: Out,
    },
    /// Drain an agent by hand (admin): it takes nothing new, and the policy never unmarks it.
    Drain {
        /// The agent's id.
        id: String,
        #[command(flatten)]
        out: Out,
    },
    /// Unmark an agent (admin): it takes sessions again.
    Unmark {
        /// The agent's id.
        id: String,
        #[command(flatten)]
        out: Out,
    },
    /// Write a key pair an external agent joins with (`corral agent --key FILE`): the private
    /// key to FILE (PEM, readable by its owner only; an existing file is never overwritten) and
    /// the public key to FILE.pub, which an admin registers with `corral group key add`.
    Keygen {
        /// Where the private key goes.
        #[arg(long, value_name = "FILE", default_value = "corral-agent.key")]
        out: std::path::PathBuf,
    },
    /// Remove an agent and revoke its tokens (admin): a lost or terminated one, or any that
    /// runs no session.
    Rm {
        /// The agent's id.
        id: String,
        /// Gone for good: by default its shape is remembered for the manager's retention, and
        /// sessions only it could hold wait for it to come back rather than being refused.
        #[arg(long)]
        forget: bool,
        #[command(flatten)]
        out: Out,
    },
}

#[derive(Clone, Copy, Debug, clap::ValueEnum)]
pub enum StateArg {
    Alive,
    Marked,
    Lost,
    Terminated,
}

pub async fn run(api: &Api, command: Command) -> Result<()> {
    match command {
        Command::Ls { group, state, out } => {
            let state = state.map(|s| api_name(&s));
            let reply = api
                .get(&["agents"], &[("group", group), ("state", state)])
                .await?;
            if !render::json(out.output, &reply) {
                print_agents(&parse::<Vec<_>>(&reply)?);
            }
        }
        Command::Get { id, out } => show(api.get(&["agents", &id], &[]).await?, out)?,
        Command::Register {
            id,
            group,
            capacity,
            labels,
            template,
            out,
        } => {
            let labels: BTreeMap<String, String> = labels.into_iter().collect();
            let body = RegisterAgent {
                id,
                group,
                capacity,
                labels,
                template,
                devices: Vec::new(),
            };
            show(api.post(&["agents"], Some(&json(&body)?)).await?, out)?;
        }
        Command::Drain { id, out } => show(api.post(&["agents", &id, "drain"], None).await?, out)?,
        Command::Unmark { id, out } => {
            show(api.post(&["agents", &id, "unmark"], None).await?, out)?
        }
        Command::Keygen { out } => keygen(&out)?,
        Command::Rm { id, forget, out } => {
            let reply = if forget {
                let query = [("forget", Some("true".to_string()))];
                api.call(reqwest::Method::DELETE, &["agents", &id], &query, None)
                    .await?
            } else {
                api.delete(&["agents", &id]).await?
            };
            if !render::json_or(out.output, &reply, || json!({"deleted": "agent", "id": id})) {
                println!("agent {id} removed");
            }
        }
    }
    Ok(())
}

/// Writes a new key pair: the private key to `path` (created 0600, never over a file), the
/// public key to `path`.pub.
pub fn keygen(path: &std::path::Path) -> Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let key = corral_api::agent_keys::AgentKey::generate()?;
    let public = key.public();
    let mut public_path = path.as_os_str().to_owned();
    public_path.push(".pub");
    let public_path = std::path::PathBuf::from(public_path);
    let create = |p: &std::path::Path, mode: u32| {
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .open(p)
            .with_context(|| {
                format!(
                    "creating {} (an existing key is never overwritten)",
                    p.display()
                )
            })
    };
    let mut private = create(path, 0o600)?;
    let mut public_file = match create(&public_path, 0o644) {
        Ok(f) => f,
        Err(e) => {
            // Nothing half-written: no private key without its public half.
            let _ = std::fs::remove_file(path);
            return Err(e);
        }
    };
    let written = private
        .write_all(key.to_pem().as_bytes())
        .and_then(|()| private.sync_all())
        .and_then(|()| writeln!(public_file, "{public}"))
        .and_then(|()| public_file.sync_all());
    if let Err(e) = written {
        let _ = std::fs::remove_file(path);
        let _ = std::fs::remove_file(&public_path);
        return Err(e).with_context(|| format!("writing {}", path.display()));
    }
    println!("{public}");
    eprintln!(
        "private key: {} (keep it secret); public key: {} ({})",
        path.display(),
        public_path.display(),
        public.fingerprint()
    );
    Ok(())
}

fn show(reply: Reply, out: Out) -> Result<()> {
    if !render::json(out.output, &reply) {
        print_agent(&parse(&reply)?);
    }
    Ok(())
}

/// `marked (drained)` when an operator drained it: the policy will not unmark it.
fn state(a: &Agent) -> String {
    if let (Some(target), AgentState::Marked) = (&a.updating, a.state) {
        format!("marked (updating to {target})")
    } else if a.drained_by_hand && a.state == AgentState::Marked {
        "marked (drained)".to_string()
    } else {
        word(&a.state)
    }
}

fn free(a: &Agent) -> Slots {
    a.capacity.checked_sub(&a.allocated).unwrap_or_default()
}

fn print_agents(agents: &[Agent]) {
    let rows: Vec<Vec<String>> = agents
        .iter()
        .map(|a| {
            vec![
                a.id.0.clone(),
                a.group.clone(),
                state(a),
                slots(&a.capacity),
                slots(&a.allocated),
                or_dash(a.template.as_deref()),
                pairs(&a.labels),
                or_dash(a.version.as_deref()),
            ]
        })
        .collect();
    table(
        "agents",
        &[
            "ID",
            "GROUP",
            "STATE",
            "CAPACITY",
            "ALLOCATED",
            "TEMPLATE",
            "LABELS",
            "VERSION",
        ],
        &rows,
    );
}

fn print_agent(a: &Agent) {
    let mut rows = vec![
        ("id", a.id.0.clone()),
        ("group", a.group.clone()),
        ("state", state(a)),
        ("capacity", slots(&a.capacity)),
        ("allocated", slots(&a.allocated)),
        ("free", slots(&free(a))),
        ("template", or_dash(a.template.as_deref())),
        ("labels", pairs(&a.labels)),
        (
            "external",
            if a.external { "yes" } else { "no" }.to_string(),
        ),
        ("idle since", opt_time(a.idle_since.map(|t| t.0))),
        ("version", or_dash(a.version.as_deref())),
        ("platform", or_dash(a.platform.as_deref())),
    ];
    // One line a device: its id, model and memory.
    for d in &a.devices {
        let mut line = format!(
            "{} {}",
            d.id,
            or_dash(Some(d.model.as_str()).filter(|m| !m.is_empty()))
        );
        if !d.memory.is_zero() {
            line.push_str(&format!(" {}", corral_core::devices::bytes_text(d.memory)));
        }
        rows.push(("device", line));
    }
    fields(&rows);
}
