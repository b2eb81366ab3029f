//! `corral session apps`: the ports a session serves by name, with the URL the manager serves
//! each HTTP app at; `--login` makes each URL a link that logs a browser in (for a minute).

use anyhow::Result;
use clap::Args;
use corral_api::apps::{AppLogin, AppView};
use serde_json::Value;

use super::super::http::{parse, Api};
use super::super::render::{or_dash, table};
use super::super::Out;
use crate::Output;

/// `session apps`'s flags.
#[derive(Args)]
pub struct AppsArgs {
    /// The session's id.
    id: String,
    /// Each HTTP app's URL as a link that logs a browser in to it, valid for 60 s (it carries
    /// a pass for that app alone, never your token); the session must be running and yours.
    #[arg(long)]
    login: bool,
    #[command(flatten)]
    out: Out,
}

pub(super) async fn apps(api: &Api, args: AppsArgs) -> Result<()> {
    let reply = api.get(&["sessions", &args.id, "apps"], &[]).await?;
    let apps: Vec<AppView> = parse(&reply)?;
    let server = api.server().trim_end_matches('/').to_string();
    let mut urls = Vec::new();
    for app in &apps {
        let url = match &app.path {
            Some(_) if args.login => {
                let path = ["sessions", args.id.as_str(), "apps", &app.name, "login"];
                let login: AppLogin = parse(&api.post(&path, None).await?)?;
                Some(format!("{server}{}", login.path))
            }
            Some(path) => Some(format!("{server}{path}")),
            None => None,
        };
        urls.push(url);
    }
    let json = || {
        let listed = apps.iter().zip(&urls).map(|(app, url)| {
            let mut value = serde_json::to_value(app).unwrap_or(Value::Null);
            value["url"] = url.clone().map_or(Value::Null, Value::String);
            value
        });
        Value::Array(listed.collect())
    };
    if matches!(args.out.output, Output::Json) {
        println!("{:#}", json());
    } else {
        let rows: Vec<Vec<String>> = apps
            .iter()
            .zip(&urls)
            .map(|(a, url)| {
                vec![
                    a.name.clone(),
                    a.app.protocol.to_string(),
                    a.app.port.to_string(),
                    or_dash(url.as_deref()),
                ]
            })
            .collect();
        table("apps", &["NAME", "PROTOCOL", "PORT", "URL"], &rows);
    }
    Ok(())
}
