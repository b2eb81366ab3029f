//! `corral group`: scaling groups, their policy, scheduler and templates, and their state now.
//!
//! This file holds the subcommands and runs them; beside it, `group/settings.rs` builds the
//! bodies of `create`, `set-policy` and `templates` from flags and files, `group/view.rs` prints
//! groups, `group/provider.rs` the provider and its instances, `group/plan.rs` a plan (which
//! `corral plan` prints too), `group/history.rs` a group's history as sparklines, and
//! `group/keys.rs` the keys external agents join with.

mod history;
mod keys;
mod plan;
mod provider;
mod registries;
mod settings;
mod view;

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Subcommand;
use serde_json::json;

use super::http::{parse, Api};
use super::render;
use corral_api::sessions::SessionView;

use super::session::print_pending;
use super::{read_json, Out};
use history::print_history;
pub(crate) use plan::print_plan;
use provider::{print_instances, print_provider, provider_body};
pub use settings::Settings;
use settings::{create_body, policy_patch, templates_body};
use view::{print_group, print_groups, print_required, print_shares, print_templates};

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
    /// Nodes by template, pending and running sessions over time, and the scaling events.
    History {
        /// The group's name.
        name: String,
        /// Where the window starts: a duration before now (6h, 90m), an RFC 3339 time, or ms
        /// since the epoch.
        #[arg(long, default_value = "6h")]
        since: String,
        /// Where it ends, in the same forms; default: now.
        #[arg(long)]
        until: Option<String>,
        /// Between samples (30s, 5m); default: the window in 120 steps.
        #[arg(long)]
        step: Option<String>,
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
        /// The request, e.g. cpu=2,mem=4GiB,gpu=0.5, with device constraints as a session's
        /// (gpu.model=A100*, gpu.mem>=40GiB).
        #[arg(long, value_name = "SLOTS")]
        request: corral_core::devices::Request,
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
        /// The provider: static, process, docker, aws, kubernetes, exec or batch.
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
    /// The public keys external agents join the group with: add, ls, revoke (admin).
    Key {
        #[command(subcommand)]
        command: keys::KeyCommand,
    },
    /// The accounts the group's agents sign in to registries with, to keep their images
    /// current: add, ls, rm (admin).
    Registry {
        #[command(subcommand)]
        command: registries::RegistryCommand,
    },
}

/// Runs one `corral group` subcommand.
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
        } => create(api, &name, &settings, file, out).await?,
        Command::SetPolicy {
            name,
            settings,
            file,
            out,
        } => set_policy(api, &name, &settings, file, out).await?,
        Command::Templates { name, file, out } => templates(api, &name, file, out).await?,
        Command::Delete { name, out } => delete(api, &name, out).await?,
        Command::Pending { name, out } => {
            let reply = api.get(&["groups", &name, "pending"], &[]).await?;
            if !render::json(out.output, &reply) {
                print_pending(&parse::<Vec<SessionView>>(&reply)?);
            }
        }
        Command::History {
            name,
            since,
            until,
            step,
            out,
        } => {
            let query = [("since", Some(since)), ("until", until), ("step", step)];
            history(api, &name, &query, out).await?
        }
        Command::Shares { name, out } => {
            let reply = api.get(&["groups", &name, "shares"], &[]).await?;
            if !render::json(out.output, &reply) {
                print_shares(&parse(&reply)?);
            }
        }
        Command::Required {
            name,
            request,
            image,
            out,
        } => required(api, &name, request, image, out).await?,
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
        } => change_or_show_provider(api, &name, file, provider, &options, &launch, out).await?,
        Command::Instances { name, all, out } => instances(api, &name, all, out).await?,
        Command::BootstrapToken {
            name,
            ttl_secs,
            out,
        } => bootstrap_token(api, &name, ttl_secs, out).await?,
        Command::Key { command } => keys::run(api, command).await?,
        Command::Registry { command } => registries::run(api, command).await?,
    }
    Ok(())
}

/// `group create`: the group made from `--file` and the flags (which win), then shown.
async fn create(
    api: &Api,
    name: &str,
    settings: &Settings,
    file: Option<PathBuf>,
    out: Out,
) -> Result<()> {
    let body = create_body(name, settings, file.as_deref())?;
    let reply = api.post(&["groups"], Some(&body)).await?;
    if !render::json(out.output, &reply) {
        print_group(&parse(&reply)?);
    }
    Ok(())
}

/// `group set-policy`: only what `--file` and the flags give, sent as a merge patch; the group
/// then shown.
async fn set_policy(
    api: &Api,
    name: &str,
    settings: &Settings,
    file: Option<PathBuf>,
    out: Out,
) -> Result<()> {
    let patch = policy_patch(name, settings, file.as_deref())?;
    let reply = api.patch(&["groups", name], &patch).await?;
    if !render::json(out.output, &reply) {
        print_group(&parse(&reply)?);
    }
    Ok(())
}

/// `group templates`: the group's templates, replaced first by those of `--file` if given.
async fn templates(api: &Api, name: &str, file: Option<PathBuf>, out: Out) -> Result<()> {
    let reply = match file {
        Some(path) => {
            let body = templates_body(read_json(&path)?)
                .with_context(|| format!("{}: not a list of templates", path.display()))?;
            api.put(&["groups", name, "templates"], &body).await?
        }
        None => api.get(&["groups", name, "templates"], &[]).await?,
    };
    if !render::json(out.output, &reply) {
        print_templates(&parse::<Vec<_>>(&reply)?);
    }
    Ok(())
}

/// `group delete`: one line, or as JSON what was deleted (the manager answers no content).
async fn delete(api: &Api, name: &str, out: Out) -> Result<()> {
    let reply = api.delete(&["groups", name]).await?;
    if !render::json_or(
        out.output,
        &reply,
        || json!({"deleted": "group", "name": name}),
    ) {
        println!("deleted group {name}");
    }
    Ok(())
}

/// `group history`: the window `query` names, as sparklines.
async fn history(api: &Api, name: &str, query: &[(&str, Option<String>)], out: Out) -> Result<()> {
    let reply = api.get(&["groups", name, "history"], query).await?;
    if !render::json(out.output, &reply) {
        print_history(&parse(&reply)?);
    }
    Ok(())
}

/// `group required`: what the request (with the image's minimums) takes on the group, and
/// whether it could ever run there.
async fn required(
    api: &Api,
    name: &str,
    request: corral_core::devices::Request,
    image: Option<String>,
    out: Out,
) -> Result<()> {
    let body = json!({
        "request": request.slots,
        "image": image,
        "constraints": request.constraints,
    });
    let reply = api.post(&["groups", name, "required"], Some(&body)).await?;
    if !render::json(out.output, &reply) {
        print_required(&parse(&reply)?);
    }
    Ok(())
}

/// `group provider`: the group's provider, changed first when a flag asks (`--file` replaces
/// it; `--provider`, `--option` and `--launch` change fields of the current one).
async fn change_or_show_provider(
    api: &Api,
    group: &str,
    file: Option<PathBuf>,
    provider: Option<String>,
    options: &[String],
    launch: &[String],
    out: Out,
) -> Result<()> {
    let changes = file.is_some() || provider.is_some() || !options.is_empty() || !launch.is_empty();
    let reply = if changes {
        let current = api.get(&["groups", group, "provider"], &[]).await?;
        let body = provider_body(&current.value, file.as_deref(), provider, options, launch)?;
        api.put(&["groups", group, "provider"], &body).await?
    } else {
        api.get(&["groups", group, "provider"], &[]).await?
    };
    if !render::json(out.output, &reply) {
        print_provider(&reply.value);
    }
    Ok(())
}

/// `group instances`: the provider's (with --all, the terminated and failed too), then the
/// templates held back.
async fn instances(api: &Api, name: &str, all: bool, out: Out) -> Result<()> {
    let query = [("all", all.then(|| "true".to_string()))];
    let reply = api.get(&["groups", name, "instances"], &query).await?;
    if !render::json(out.output, &reply) {
        print_instances(&parse(&reply)?);
    }
    Ok(())
}

/// `group bootstrap-token`: the token alone on stdout (for scripts), when it expires on stderr.
async fn bootstrap_token(api: &Api, name: &str, ttl_secs: u64, out: Out) -> Result<()> {
    let body = serde_json::json!({"ttl_secs": ttl_secs});
    let reply = api
        .post(&["groups", name, "bootstrap-tokens"], Some(&body))
        .await?;
    if !render::json(out.output, &reply) {
        println!("{}", reply.value["token"].as_str().unwrap_or_default());
        eprintln!(
            "works once, until {}",
            render::time(reply.value["expires_at"].as_i64().unwrap_or_default())
        );
    }
    Ok(())
}
