//! The client subcommands (`group`, `image`, `session`, `agent`, `events`, `batch`, `token`): one per
//! resource of the manager's REST API, tables for people and `--output json` for scripts.

mod agent;
mod agent_build;
mod batch;
pub mod config;
mod contexts;
mod events;
mod group;
pub(crate) use group::print_plan;
mod http;
mod image;
mod render;
mod run;
mod session;
mod token;

use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand, ValueEnum};

use crate::Output;
use http::Api;
pub use http::CallError;

/// Which manager, as whom. Flag, then environment, then the config file, then the default.
/// No `Debug`: it holds the token.
#[derive(Args)]
pub struct Conn {
    /// The manager's URL [default: `server` in the config file, else http://127.0.0.1:8470].
    #[arg(
        long,
        global = true,
        visible_alias = "manager",
        help_heading = "Connection",
        env = "CORRAL_SERVER",
        value_name = "URL"
    )]
    pub server: Option<String>,
    /// API token [default: `token` in the config file ($CORRAL_CONFIG or ~/.config/corral/config.toml)].
    #[arg(
        long,
        global = true,
        help_heading = "Connection",
        env = "CORRAL_TOKEN",
        hide_env_values = true,
        value_name = "TOKEN"
    )]
    pub token: Option<String>,
    /// PEM certificates to trust for an https:// manager besides the system's roots
    /// [default: `ca_file` in the config file].
    #[arg(
        long,
        global = true,
        help_heading = "Connection",
        env = "CORRAL_CA_FILE",
        value_name = "FILE"
    )]
    pub ca_file: Option<std::path::PathBuf>,
    /// Which of the config file's contexts to use [default: its `current` one]
    /// (`corral config ls`).
    #[arg(
        long,
        global = true,
        help_heading = "Connection",
        env = "CORRAL_CONTEXT",
        value_name = "NAME"
    )]
    pub context: Option<String>,
}

impl Conn {
    fn api(&self) -> Result<Api> {
        Api::new(config::resolve(
            self.server.as_deref(),
            self.token.as_deref(),
            self.ca_file.as_deref(),
            self.context.as_deref(),
        )?)
    }
}

/// The output format flag of every client subcommand.
#[derive(Args, Clone, Copy)]
pub struct Out {
    /// How to print: tables for people, or the manager's JSON answer as sent.
    #[arg(long, short, value_enum, default_value_t, visible_alias = "format")]
    output: Output,
}

#[derive(Subcommand)]
pub enum Command {
    /// Scaling groups: their policy, scheduler and templates, and what they would do now.
    Group {
        #[command(flatten)]
        conn: Conn,
        #[command(subcommand)]
        command: group::Command,
    },
    /// Images and the least each needs to run.
    Image {
        #[command(flatten)]
        conn: Conn,
        #[command(subcommand)]
        command: image::Command,
    },
    /// Submit, list, inspect and cancel compute sessions.
    Session {
        #[command(flatten)]
        conn: Conn,
        #[command(subcommand)]
        command: session::Command,
    },
    /// Agents: list, register by hand, drain and unmark; without a subcommand, run this host's
    /// agent daemon (`corral agent --manager URL --group G`).
    #[command(args_conflicts_with_subcommands = true)]
    Agent {
        #[command(flatten)]
        conn: Conn,
        #[command(subcommand)]
        command: Option<agent::Command>,
        #[command(flatten)]
        daemon: Box<crate::daemons::AgentArgs>,
    },
    /// Builds of corral the manager serves to agents that update themselves (admin).
    AgentBuild {
        #[command(flatten)]
        conn: Conn,
        #[command(subcommand)]
        command: agent_build::Command,
    },
    /// What happened, newest first: placements, launches, marks, state changes.
    Events {
        #[command(flatten)]
        conn: Conn,
        #[command(flatten)]
        args: events::Args,
    },
    /// A group's batch system (Slurm, Grid Engine): bind it; its jobs, nodes and configuration.
    Batch {
        #[command(flatten)]
        conn: Conn,
        #[command(subcommand)]
        command: batch::Command,
    },
    /// The client's config file: the managers it knows (contexts) and which one it uses.
    Config {
        #[command(subcommand)]
        command: contexts::Command,
    },
    /// API tokens (admin).
    Token {
        #[command(flatten)]
        conn: Conn,
        #[command(subcommand)]
        command: token::Command,
    },
}

/// Runs one client subcommand on a single-threaded runtime: one request or two at a time.
pub fn run(command: Command) -> Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    runtime.block_on(async {
        match command {
            Command::Group { conn, command } => group::run(&conn.api()?, command).await,
            Command::Image { conn, command } => image::run(&conn.api()?, command).await,
            Command::Session { conn, command } => session::run(&conn.api()?, command).await,
            // Needs no manager.
            Command::Agent {
                command: Some(agent::Command::Keygen { out }),
                ..
            } => agent::keygen(&out),
            Command::Agent {
                conn,
                command: Some(command),
                ..
            } => agent::run(&conn.api()?, command).await,
            Command::Agent { command: None, .. } => {
                bail!("the agent daemon is started by main, not by the client")
            }
            Command::AgentBuild { conn, command } => agent_build::run(&conn.api()?, command).await,
            Command::Events { conn, args } => events::run(&conn.api()?, args).await,
            Command::Batch { conn, command } => batch::run(&conn.api()?, command).await,
            Command::Token { conn, command } => token::run(&conn.api()?, command).await,
            // Needs no manager.
            Command::Config { command } => contexts::run(command),
        }
    })
}

/// The API's spelling of a flag's value (`head-of-line strict` is `"strict"`).
fn api_name<T: ValueEnum>(value: &T) -> String {
    value
        .to_possible_value()
        .map(|v| v.get_name().replace('-', "_"))
        .unwrap_or_default()
}

/// A flag's value as the API type of the same spelling (`--type batch` is `SessionType::Batch`).
fn api_value<T: serde::de::DeserializeOwned>(value: &impl ValueEnum) -> Result<T> {
    let name = api_name(value);
    serde_json::from_value(serde_json::Value::String(name.clone()))
        .map_err(|e| anyhow::anyhow!("{name:?}: {e}"))
}

/// `K=V` of `--env` and `--label`.
fn key_value(text: &str) -> Result<(String, String)> {
    match text.split_once('=') {
        Some((k, v)) if !k.trim().is_empty() => Ok((k.trim().to_string(), v.to_string())),
        _ => bail!("{text:?} is not KEY=VALUE"),
    }
}

/// Reads a JSON file given to `--file`, naming it in errors.
fn read_json(path: &std::path::Path) -> Result<serde_json::Value> {
    let text = if path.as_os_str() == "-" {
        std::io::read_to_string(std::io::stdin()).context("reading standard input")?
    } else {
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?
    };
    serde_json::from_str(&text).with_context(|| format!("{}: not valid JSON", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_values_split_at_the_first_equals() {
        assert_eq!(key_value("A=b=c").unwrap(), ("A".into(), "b=c".into()));
        assert_eq!(key_value("A=").unwrap(), ("A".into(), String::new()));
        assert!(key_value("A").is_err());
        assert!(key_value("=b").is_err());
    }
}
