//! `corral group key`: the public keys external agents of a group join with (admin).

use anyhow::{Context, Result};
use clap::Subcommand;
use corral_api::agent_keys::{AgentKeyInfo, PublicKey};
use serde_json::json;

use super::super::http::{parse, Api};
use super::super::render::{self, opt_time, table, time};
use super::super::Out;

#[derive(Subcommand)]
pub enum KeyCommand {
    /// Register a public key (`corral agent keygen` writes one) that external agents of the
    /// group may join with.
    Add {
        /// The group's name.
        group: String,
        /// What the key is called in the group (who holds it).
        name: String,
        /// The public key: a file holding it (KEY.pub), or the key itself (ed25519:...).
        #[arg(long, value_name = "FILE|KEY")]
        public_key: String,
        #[command(flatten)]
        out: Out,
    },
    /// List the group's keys, revoked ones too, with the agents that joined with each.
    Ls {
        /// The group's name.
        group: String,
        #[command(flatten)]
        out: Out,
    },
    /// Revoke a key: it joins nothing more, and its agents are told at their next sync to stop
    /// their sessions and leave.
    Revoke {
        /// The group's name.
        group: String,
        /// The key's name.
        name: String,
        #[command(flatten)]
        out: Out,
    },
}

/// The key a flag gives: the key itself, or a file holding it.
fn public_key(given: &str) -> Result<PublicKey> {
    if given.trim_start().starts_with("ed25519:") {
        return given.parse().context("--public-key");
    }
    let text = std::fs::read_to_string(given).with_context(|| format!("reading {given}"))?;
    text.parse().with_context(|| given.to_string())
}

pub async fn run(api: &Api, command: KeyCommand) -> Result<()> {
    match command {
        KeyCommand::Add {
            group,
            name,
            public_key: given,
            out,
        } => {
            let key = public_key(&given)?;
            let body = json!({"name": name, "public_key": key});
            let reply = api
                .post(&["groups", &group, "agent-keys"], Some(&body))
                .await?;
            if !render::json(out.output, &reply) {
                let key: AgentKeyInfo = parse(&reply)?;
                println!(
                    "added key {} ({}) to group {}",
                    key.name, key.fingerprint, key.group
                );
            }
        }
        KeyCommand::Ls { group, out } => {
            let reply = api.get(&["groups", &group, "agent-keys"], &[]).await?;
            if !render::json(out.output, &reply) {
                print_keys(&parse::<Vec<_>>(&reply)?);
            }
        }
        KeyCommand::Revoke { group, name, out } => {
            let reply = api.delete(&["groups", &group, "agent-keys", &name]).await?;
            if !render::json(out.output, &reply) {
                let key: AgentKeyInfo = parse(&reply)?;
                println!("revoked key {} of group {}", key.name, key.group);
                if !key.agents.is_empty() {
                    println!("told to leave: {}", key.agents.join(", "));
                }
            }
        }
    }
    Ok(())
}

fn print_keys(keys: &[AgentKeyInfo]) {
    let rows: Vec<Vec<String>> = keys
        .iter()
        .map(|k| {
            vec![
                k.name.clone(),
                k.fingerprint.clone(),
                time(k.created_at.0),
                opt_time(k.revoked_at.map(|t| t.0)),
                if k.agents.is_empty() {
                    "-".into()
                } else {
                    k.agents.join(",")
                },
            ]
        })
        .collect();
    table(
        "keys",
        &["NAME", "FINGERPRINT", "ADDED", "REVOKED", "AGENTS"],
        &rows,
    );
}
