//! `corral token`: API tokens: create (the secret is shown once and stored nowhere), list,
//! revoke.

use anyhow::{Context, Result};
use clap::{Subcommand, ValueEnum};
use corral_api::tokens::{NewToken, TokenCreated, TokenInfo};
use serde_json::json;

use super::http::{json, parse, Api};
use super::render::{self, opt_time, or_dash, table, time, word};
use super::{api_value, Out};

#[derive(Subcommand)]
pub enum Command {
    /// Create a token for a user (admin) and print its secret, once.
    Create {
        /// Who the token acts as; sessions it submits belong to this user.
        user: String,
        /// Admins manage groups, images, agents and tokens; users submit and see their own sessions.
        #[arg(long, value_enum, default_value_t = Role::User)]
        role: Role,
        #[command(flatten)]
        out: Out,
    },
    /// List every token (admin): id, role, whose, when made; a bootstrap token's expiry and
    /// use. Never a secret.
    Ls {
        #[command(flatten)]
        out: Out,
    },
    /// Revoke a token at once (admin); the last admin token cannot be revoked.
    Revoke {
        /// The token's id, as `token ls` shows it.
        id: String,
        #[command(flatten)]
        out: Out,
    },
}

#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum Role {
    Admin,
    User,
}

pub async fn run(api: &Api, command: Command) -> Result<()> {
    match command {
        Command::Create { user, role, out } => {
            let reply = api
                .post(
                    &["tokens"],
                    Some(&json(&NewToken {
                        user,
                        role: api_value(&role)?,
                    })?),
                )
                .await?;
            if render::json(out.output, &reply) {
                return Ok(());
            }
            let created: TokenCreated =
                parse(&reply).context("the token was created but its answer is unreadable")?;
            // The secret alone on standard output, so that `$(corral token create bob)` is the token.
            println!("{}", created.token);
            eprintln!(
                "token {} for {} ({}): keep the secret now, it is not shown again",
                created.id,
                created.user,
                word(&created.role)
            );
        }
        Command::Ls { out } => {
            let reply = api.get(&["tokens"], &[]).await?;
            if render::json(out.output, &reply) {
                return Ok(());
            }
            let tokens: Vec<TokenInfo> = parse(&reply)?;
            let rows: Vec<Vec<String>> = tokens
                .iter()
                .map(|t| {
                    vec![
                        t.id.clone(),
                        word(&t.role),
                        t.user.clone(),
                        time(t.created_at.0),
                        opt_time(t.expires_at.map(|t| t.0)),
                        opt_time(t.used_at.map(|t| t.0)),
                        or_dash(t.agent.as_deref()),
                    ]
                })
                .collect();
            table(
                "tokens",
                &["ID", "ROLE", "USER", "CREATED", "EXPIRES", "USED", "AGENT"],
                &rows,
            );
        }
        Command::Revoke { id, out } => {
            let reply = api.delete(&["tokens", &id]).await?;
            if !render::json_or(out.output, &reply, || json!({"revoked": "token", "id": id})) {
                println!("token {id} revoked");
            }
        }
    }
    Ok(())
}
