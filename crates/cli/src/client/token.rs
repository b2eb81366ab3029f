//! `corral token`: API tokens. The secret is shown once and stored nowhere.

use anyhow::{Context, Result};
use clap::{Subcommand, ValueEnum};
use corral_api::tokens::{NewToken, TokenCreated};

use super::http::{json, parse, Api};
use super::render::{self, word};
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
    }
    Ok(())
}
