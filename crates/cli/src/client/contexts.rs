//! `corral config ls` and `corral config use NAME`: the managers the client knows, side by side
//! in its config file, and which one commands go to when no `--context` says.

use anyhow::{Context, Result};
use clap::Subcommand;
use serde_json::json;

use super::config::{client_config_path, read_config_file, write_config_file};
use super::render::{or_dash, table};
use super::Out;

#[derive(Subcommand)]
pub enum Command {
    /// The contexts of the config file: name, server and group; `*` marks the current one.
    #[command(visible_alias = "list")]
    Ls {
        #[command(flatten)]
        out: Out,
    },
    /// Makes a context the one commands use when no `--context` says.
    Use {
        /// A context of the config file (`corral config ls`).
        name: String,
    },
}

pub fn run(command: Command) -> Result<()> {
    let path =
        client_config_path().context("no home directory holds a config file; set CORRAL_CONFIG")?;
    let mut file = read_config_file(&path)?;
    match command {
        Command::Ls { out } => {
            let current = file.current_name();
            let contexts = file.contexts();
            // Tokens are never printed: the file holds them, the listing names whose they are not.
            let listed: Vec<_> = (contexts.iter())
                .map(|(name, c)| {
                    json!({
                        "name": name,
                        "current": current.as_deref() == Some(name.as_str()),
                        "server": c.server,
                        "group": c.group,
                        "has_token": c.token.is_some(),
                    })
                })
                .collect();
            if matches!(out.output, crate::Output::Json) {
                println!("{}", serde_json::Value::Array(listed));
            } else {
                let rows = (contexts.iter())
                    .map(|(name, c)| {
                        let mark = if current.as_deref() == Some(name.as_str()) {
                            "*"
                        } else {
                            ""
                        };
                        vec![
                            mark.to_string(),
                            name.clone(),
                            or_dash(c.server.as_deref()),
                            or_dash(c.group.as_deref()),
                        ]
                    })
                    .collect::<Vec<_>>();
                table("contexts", &["CURRENT", "NAME", "SERVER", "GROUP"], &rows);
            }
            Ok(())
        }
        Command::Use { name } => {
            file.use_context(&name)
                .with_context(|| path.display().to_string())?;
            write_config_file(&path, &file)?;
            let server = file.contexts().remove(&name).and_then(|c| c.server);
            println!(
                "using context {name:?} ({})",
                server.as_deref().unwrap_or(super::config::DEFAULT_SERVER)
            );
            Ok(())
        }
    }
}
