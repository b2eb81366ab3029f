//! `corral group registry`: the accounts a group's agents sign in to registries with, to keep
//! the images they hold current (admin).

use anyhow::{bail, Context, Result};
use clap::Subcommand;
use corral_api::images::{RegistryLogin, RegistryLoginUpdate};
use serde_json::json;

use super::super::http::{json as body, parse, Api};
use super::super::render::{self, table};
use super::super::Out;

#[derive(Subcommand)]
pub enum RegistryCommand {
    /// Set the group's account on a registry; the password is read from standard input (one
    /// line), or from the environment variable --password-env names, never from a flag.
    Add {
        /// The group's name.
        group: String,
        /// The registry as image references name it: host[:port], docker.io for Docker Hub.
        registry: String,
        #[arg(long)]
        username: String,
        /// Read the password from this environment variable instead of standard input.
        #[arg(long, value_name = "VAR")]
        password_env: Option<String>,
        #[command(flatten)]
        out: Out,
    },
    /// List the group's registry accounts (passwords are never shown).
    Ls {
        /// The group's name.
        group: String,
        #[command(flatten)]
        out: Out,
    },
    /// Forget the group's account on a registry.
    Rm {
        /// The group's name.
        group: String,
        registry: String,
        #[command(flatten)]
        out: Out,
    },
}

/// The password: the variable's value, or standard input's first line.
fn password(env: Option<&str>) -> Result<String> {
    let password = match env {
        Some(var) => std::env::var(var).with_context(|| format!("--password-env {var}"))?,
        None => {
            let mut line = String::new();
            std::io::stdin()
                .read_line(&mut line)
                .context("reading the password from standard input")?;
            line.trim_end_matches(['\r', '\n']).to_string()
        }
    };
    if password.is_empty() {
        bail!("the password is empty");
    }
    Ok(password)
}

pub async fn run(api: &Api, command: RegistryCommand) -> Result<()> {
    match command {
        RegistryCommand::Add {
            group,
            registry,
            username,
            password_env,
            out,
        } => {
            let update = RegistryLoginUpdate {
                username,
                password: password(password_env.as_deref())?,
            };
            let reply = api
                .put(
                    &["groups", &group, "registry-logins", &registry],
                    &body(&update)?,
                )
                .await?;
            if !render::json(out.output, &reply) {
                let login: RegistryLogin = parse(&reply)?;
                println!(
                    "group {group} signs in to {} as {}",
                    login.registry, login.username
                );
            }
        }
        RegistryCommand::Ls { group, out } => {
            let reply = api.get(&["groups", &group, "registry-logins"], &[]).await?;
            if !render::json(out.output, &reply) {
                let logins: Vec<RegistryLogin> = parse(&reply)?;
                let rows: Vec<Vec<String>> = logins
                    .iter()
                    .map(|l| vec![l.registry.clone(), l.username.clone()])
                    .collect();
                table("registry accounts", &["REGISTRY", "USERNAME"], &rows);
            }
        }
        RegistryCommand::Rm {
            group,
            registry,
            out,
        } => {
            let reply = api
                .delete(&["groups", &group, "registry-logins", &registry])
                .await?;
            if !render::json_or(
                out.output,
                &reply,
                || json!({"deleted": "registry login", "group": group, "registry": registry}),
            ) {
                println!("group {group} no longer signs in to {registry}");
            }
        }
    }
    Ok(())
}
