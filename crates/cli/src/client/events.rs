//! `corral events`: what happened, newest first.

use anyhow::Result;
use corral_api::events::Event;

use super::http::{parse, Api};
use super::render::{self, or_dash, table, time};
use super::Out;

/// The manager's page size when `--limit` is not given.
const DEFAULT_PAGE: u32 = 100;

#[derive(clap::Args)]
pub struct Args {
    /// Only events of this group.
    #[arg(long, value_name = "G")]
    group: Option<String>,
    /// Only events of this session (users must give one of their own).
    #[arg(long, value_name = "S")]
    session: Option<String>,
    /// Only events of this agent.
    #[arg(long, value_name = "A")]
    agent: Option<String>,
    /// Continue below this event id (the last one of the previous page).
    #[arg(long, value_name = "ID")]
    before: Option<i64>,
    /// At most this many (the manager's default is 100, its most 1000).
    #[arg(long, value_name = "N")]
    limit: Option<u32>,
    #[command(flatten)]
    out: Out,
}

pub async fn run(api: &Api, args: Args) -> Result<()> {
    let query = [
        ("group", args.group),
        ("session", args.session),
        ("agent", args.agent),
        ("before", args.before.map(|b| b.to_string())),
        ("limit", args.limit.map(|l| l.to_string())),
    ];
    let reply = api.get(&["events"], &query).await?;
    if render::json(args.out.output, &reply) {
        return Ok(());
    }
    let events: Vec<Event> = parse(&reply)?;
    let rows: Vec<Vec<String>> = events
        .iter()
        .map(|e| {
            vec![
                e.id.to_string(),
                time(e.at.0),
                or_dash(e.group.as_deref()),
                or_dash(e.session.as_deref()),
                or_dash(e.agent.as_deref()),
                e.kind.clone(),
                e.message.clone(),
            ]
        })
        .collect();
    table(
        "events",
        &["ID", "AT", "GROUP", "SESSION", "AGENT", "KIND", "MESSAGE"],
        &rows,
    );
    let page = args.limit.unwrap_or(DEFAULT_PAGE).max(1) as usize;
    if let Some(last) = events.last().filter(|_| events.len() >= page) {
        eprintln!("(more may follow: --before {})", last.id);
    }
    Ok(())
}
