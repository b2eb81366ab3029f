//! `corral agent`: list agents, register one by hand, drain, unmark and remove.

use std::collections::BTreeMap;

use anyhow::Result;
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
    /// Remove an agent and revoke its tokens (admin): a lost or terminated one, or any that
    /// runs no session.
    Rm {
        /// The agent's id.
        id: String,
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
        Command::Rm { id, out } => {
            let reply = api.delete(&["agents", &id]).await?;
            if !render::json_or(out.output, &reply, || json!({"deleted": "agent", "id": id})) {
                println!("agent {id} removed");
            }
        }
    }
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
    if a.drained_by_hand && a.state == AgentState::Marked {
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
