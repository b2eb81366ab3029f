//! `corral events`: what happened, newest first; with `--follow`, oldest first and then each new
//! event as it happens, as `tail -f` does.

use std::io::Write;
use std::time::Duration;

use anyhow::Result;
use corral_api::events::Event;

use super::http::{parse, Api};
use super::render::{self, or_dash, table, time};
use super::Out;
use crate::Output;

/// How often `--follow` asks for new events.
const FOLLOW_POLL: Duration = Duration::from_millis(500);

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
    #[arg(long, value_name = "ID", conflicts_with = "follow")]
    before: Option<i64>,
    /// Print the latest events oldest first, then each new one as it happens, until
    /// interrupted (with -o json: one JSON object per line).
    #[arg(long, short)]
    follow: bool,
    /// At most this many (the manager's default is 100, its most 1000).
    #[arg(long, value_name = "N")]
    limit: Option<u32>,
    #[command(flatten)]
    out: Out,
}

pub async fn run(api: &Api, args: Args) -> Result<()> {
    let filters = [
        ("group", args.group.clone()),
        ("session", args.session.clone()),
        ("agent", args.agent.clone()),
    ];
    let mut query = filters.to_vec();
    query.push(("before", args.before.map(|b| b.to_string())));
    query.push(("limit", args.limit.map(|l| l.to_string())));
    let reply = api.get(&["events"], &query).await?;
    if args.follow {
        let mut events: Vec<Event> = parse(&reply)?;
        events.reverse();
        return follow(api, &filters, events, &args.out).await;
    }
    if render::json(args.out.output, &reply) {
        return Ok(());
    }
    let events: Vec<Event> = parse(&reply)?;
    let rows: Vec<Vec<String>> = events.iter().map(row).collect();
    table("events", &HEADER, &rows);
    let page = args.limit.unwrap_or(DEFAULT_PAGE).max(1) as usize;
    // Ids start at 1: below the first event there is nothing more.
    if let Some(last) = events.last().filter(|e| events.len() >= page && e.id > 1) {
        eprintln!("(more may follow: --before {})", last.id);
    }
    Ok(())
}

const HEADER: [&str; 7] = ["ID", "AT", "GROUP", "SESSION", "AGENT", "KIND", "MESSAGE"];

fn row(e: &Event) -> Vec<String> {
    vec![
        e.id.to_string(),
        time(e.at.0),
        or_dash(e.group.as_deref()),
        or_dash(e.session.as_deref()),
        or_dash(e.agent.as_deref()),
        e.kind.clone(),
        e.message.clone(),
    ]
}

/// Prints `first` (oldest first), then every newer event matching `filters` as it comes.
async fn follow(
    api: &Api,
    filters: &[(&str, Option<String>)],
    first: Vec<Event>,
    out: &Out,
) -> Result<()> {
    let json = matches!(out.output, Output::Json);
    let mut last = first.last().map_or(0, |e| e.id);
    let mut batch = first;
    let first_rows: Vec<Vec<String>> = batch.iter().map(row).collect();
    let mut columns = crate::table::Columns::new(&HEADER, &first_rows);
    if !json {
        println!("{}", columns.line(&HEADER));
    }
    loop {
        let mut stdout = std::io::stdout().lock();
        for e in &batch {
            if json {
                writeln!(stdout, "{}", serde_json::to_string(e)?)?;
            } else {
                writeln!(stdout, "{}", columns.line(&row(e)))?;
            }
        }
        stdout.flush()?;
        drop(stdout);
        if let Some(e) = batch.last() {
            last = e.id;
        }
        tokio::time::sleep(FOLLOW_POLL).await;
        let mut query = filters.to_vec();
        query.push(("after", Some(last.to_string())));
        query.push(("limit", Some("1000".into())));
        batch = parse(&api.get(&["events"], &query).await?)?;
    }
}
