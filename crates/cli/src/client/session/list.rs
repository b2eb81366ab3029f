//! `corral session ls`: sessions, newest first, an array folded into one line with its counts
//! by state; `--watch` then prints each again when it changes. Also `group pending`'s queue.

use std::collections::HashMap;

use anyhow::Result;
use clap::{Args, ValueEnum};
use corral_api::arrays::{ArrayView, StateCounts, NO_ARRAY};
use corral_api::sessions::SessionView;

use super::super::http::{parse, Api};
use super::super::render::{self, command_line, or_dash, slots, table, time, word};
use super::super::{api_name, Out};
use super::arrays::counts_text;
use crate::Output;

/// The manager's page size when `--limit` is not given.
const DEFAULT_PAGE: u32 = 100;

/// `session ls`'s flags.
#[derive(Args)]
pub struct ListArgs {
    /// Only sessions of this group.
    #[arg(long, value_name = "G")]
    group: Option<String>,
    /// Only sessions of this user (admin).
    #[arg(long, value_name = "U")]
    owner: Option<String>,
    /// Only sessions in this state.
    #[arg(long, value_enum, value_name = "S")]
    state: Option<SessionState>,
    /// At most this many (the manager's default is 100, its most 1000).
    #[arg(long, value_name = "N")]
    limit: Option<u32>,
    /// Continue after this session id (the last one of the previous page).
    #[arg(long, value_name = "ID")]
    after: Option<String>,
    /// Oldest first [default: newest first].
    #[arg(long)]
    oldest: bool,
    /// Only sessions not ended (pending, scheduled, running), as `squeue` lists jobs.
    #[arg(long)]
    active: bool,
    /// Every session of an array on its own line, instead of one line per array with its
    /// counts by state (--watch and -o json always list sessions).
    #[arg(long)]
    expand: bool,
    /// Then print each session of the listing again whenever it changes (state, wait
    /// reason), until interrupted (with -o json: one JSON object per line).
    #[arg(long, short)]
    watch: bool,
    #[command(flatten)]
    out: Out,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum SessionState {
    Pending,
    Scheduled,
    Running,
    Succeeded,
    Failed,
    Cancelled,
    Rejected,
}

/// `session ls`: with arrays among what it lists, one line per array merged with the other
/// sessions (unless expanded, watched or JSON), else the sessions one by one.
pub(super) async fn ls(api: &Api, args: ListArgs) -> Result<()> {
    let folds = !args.expand && !args.watch && !matches!(args.out.output, Output::Json);
    if folds {
        let arrays = list_arrays(api, &args.group, &args.owner, args.limit, args.oldest).await?;
        if !arrays.is_empty() {
            return print_folded(api, arrays, &args).await;
        }
    }
    list_sessions(api, args).await
}

/// `session ls` of sessions one by one: a page (with --active, of those not ended), as a table
/// or JSON, then with --watch each again when it changes.
async fn list_sessions(api: &Api, args: ListArgs) -> Result<()> {
    let ListArgs {
        group,
        owner,
        state,
        limit,
        after,
        oldest,
        active,
        watch,
        out,
        ..
    } = args;
    let order = if oldest { "oldest" } else { "newest" };
    let query = |active: Option<bool>, limit: Option<u32>| {
        [
            ("group", group.clone()),
            ("owner", owner.clone()),
            ("state", state.map(|s| api_name(&s))),
            ("limit", limit.map(|l| l.to_string())),
            ("after", after.clone()),
            ("order", Some(order.to_string())),
            ("active", active.map(|a| a.to_string())),
        ]
    };
    let page = limit.unwrap_or(DEFAULT_PAGE).max(1);
    let only_active = active.then_some(true);
    let reply = api.get(&["sessions"], &query(only_active, limit)).await?;
    let sessions: Vec<SessionView> = parse(&reply)?;
    if watch {
        let json = matches!(out.output, Output::Json);
        let next = || async { api.get(&["sessions"], &query(only_active, limit)).await };
        return watch_sessions(sessions, next, json).await;
    }
    if render::json(out.output, &reply) {
        return Ok(());
    }
    print_sessions(&sessions, now_ms());
    if let Some(last) = sessions.last().filter(|_| sessions.len() >= page as usize) {
        eprintln!("(more may follow: --after {})", last.session.id.0);
    }
    Ok(())
}

/// The arrays `session ls` folds: those its filters select, newest first (or oldest).
async fn list_arrays(
    api: &Api,
    group: &Option<String>,
    owner: &Option<String>,
    limit: Option<u32>,
    oldest: bool,
) -> Result<Vec<ArrayView>> {
    let order = if oldest { "oldest" } else { "newest" };
    let query = [
        ("group", group.clone()),
        ("owner", owner.clone()),
        ("limit", Some(limit.unwrap_or(DEFAULT_PAGE).to_string())),
        ("order", Some(order.to_string())),
    ];
    parse(&api.get(&["arrays"], &query).await?)
}

/// `session ls` with arrays folded: one line per array with its counts by state, merged with
/// the sessions of no array by submission time.
async fn print_folded(api: &Api, arrays: Vec<ArrayView>, f: &ListArgs) -> Result<()> {
    let order = if f.oldest { "oldest" } else { "newest" };
    let page = f.limit.unwrap_or(DEFAULT_PAGE).max(1) as usize;
    let query = [
        ("group", f.group.clone()),
        ("owner", f.owner.clone()),
        ("state", f.state.map(|s| api_name(&s))),
        ("limit", Some(page.to_string())),
        ("after", f.after.clone()),
        ("order", Some(order.to_string())),
        ("array", Some(NO_ARRAY.to_string())),
        ("active", f.active.then(|| "true".to_string())),
    ];
    let sessions: Vec<SessionView> = parse(&api.get(&["sessions"], &query).await?)?;
    let state = f.state.map(|s| api_name(&s));
    let now = now_ms();
    // (submitted at, active, row)
    let mut rows: Vec<(i64, bool, Vec<String>)> = sessions
        .iter()
        .map(|s| {
            let active = !s.session.state.is_terminal();
            (s.session.submitted_at.0, active, session_row(s, now))
        })
        .collect();
    for a in &arrays {
        if let Some(state) = &state {
            if state_count(&a.counts, state) == 0 {
                continue;
            }
        }
        rows.push((a.submitted_at.0, a.active, array_row(a, now)));
    }
    if f.oldest {
        rows.sort_by_key(|r| r.0);
    } else {
        rows.sort_by_key(|r| std::cmp::Reverse(r.0));
    }
    if f.active {
        rows.retain(|r| r.1);
    }
    rows.truncate(page);
    let rows: Vec<Vec<String>> = rows.into_iter().map(|r| r.2).collect();
    table("sessions", &SESSION_HEADER, &rows);
    Ok(())
}

fn state_count(c: &StateCounts, state: &str) -> u32 {
    match state {
        "pending" => c.pending,
        "scheduled" => c.scheduled,
        "running" => c.running,
        "succeeded" => c.succeeded,
        "failed" => c.failed,
        "cancelled" => c.cancelled,
        "rejected" => c.rejected,
        _ => 0,
    }
}

/// An array's line in `session ls`: its id, its counts by state, and what each session runs.
fn array_row(a: &ArrayView, now: i64) -> Vec<String> {
    let what = match (&a.spec.command[..], &a.image) {
        ([], Some(image)) => image.clone(),
        (command, _) => command_line(command),
    };
    vec![
        a.id.clone(),
        counts_text(&a.counts),
        a.group.clone(),
        a.owner.clone(),
        slots(&a.request),
        "-".into(),
        render::span(now - a.submitted_at.0),
        "-".into(),
        what,
        format!("array {} ({} sessions)", a.range, a.sessions),
    ]
}

/// Why it is where it is: waiting, or how it ended.
fn reason(s: &SessionView) -> String {
    or_dash(s.reason())
}

const SESSION_HEADER: [&str; 10] = [
    "ID", "STATE", "GROUP", "OWNER", "REQUEST", "AGENT", "AGE", "DURATION", "COMMAND", "REASON",
];

fn session_row(s: &SessionView, now: i64) -> Vec<String> {
    let ended = s.session.state.is_terminal();
    let duration = s.started_at.map(|start| {
        let end = if ended { s.updated_at.0 } else { now };
        render::span(end - start.0)
    });
    let what = match (&s.spec.command[..], &s.session.image) {
        ([], Some(image)) => image.clone(),
        (command, _) => command_line(command),
    };
    vec![
        s.session.id.0.clone(),
        word(&s.session.state),
        s.session.group.clone(),
        s.session.owner.clone(),
        slots(&s.session.request),
        or_dash(s.session.agent.as_ref().map(|a| a.0.as_str())),
        render::span(now - s.session.submitted_at.0),
        or_dash(duration.as_deref()),
        what,
        reason(s),
    ]
}

fn print_sessions(sessions: &[SessionView], now: i64) {
    let rows: Vec<Vec<String>> = sessions.iter().map(|s| session_row(s, now)).collect();
    table("sessions", &SESSION_HEADER, &rows);
}

/// `session ls --watch`: the listing, then each of its sessions again when it changes, as
/// `kubectl get --watch` prints them. `next` reads the listing again.
async fn watch_sessions<F, Fut>(first: Vec<SessionView>, next: F, json: bool) -> Result<()>
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = Result<super::super::http::Reply>>,
{
    use std::io::Write;
    let mut seen: HashMap<String, SessionView> = HashMap::new();
    let mut changed = first;
    changed.reverse();
    let first_rows: Vec<Vec<String>> = changed.iter().map(|s| session_row(s, now_ms())).collect();
    let mut columns = crate::table::Columns::new(&SESSION_HEADER, &first_rows);
    if !json {
        println!("{}", columns.line(&SESSION_HEADER));
    }
    loop {
        let now = now_ms();
        let mut stdout = std::io::stdout().lock();
        for s in changed {
            if json {
                writeln!(stdout, "{}", serde_json::to_string(&s)?)?;
            } else {
                writeln!(stdout, "{}", columns.line(&session_row(&s, now)))?;
            }
            seen.insert(s.session.id.0.clone(), s);
        }
        stdout.flush()?;
        drop(stdout);
        tokio::time::sleep(WATCH_POLL).await;
        let mut listed: Vec<SessionView> = parse(&next().await?)?;
        listed.sort_by_key(|s| s.updated_at);
        changed = listed
            .into_iter()
            .filter(|s| {
                seen.get(&s.session.id.0).is_none_or(|old| {
                    old.session.state != s.session.state
                        || old.wait_reason != s.wait_reason
                        || old.session.agent != s.session.agent
                })
            })
            .collect();
    }
}

/// How often `session ls --watch` reads the listing again.
const WATCH_POLL: std::time::Duration = std::time::Duration::from_secs(1);

/// Now, in ms since the epoch, as the manager's timestamps are.
fn now_ms() -> i64 {
    jiff::Timestamp::now().as_millisecond()
}

/// `group pending`: the queue, with why each session waits.
pub fn print_pending(sessions: &[SessionView]) {
    let rows: Vec<Vec<String>> = sessions
        .iter()
        .map(|s| {
            vec![
                s.session.id.0.clone(),
                s.session.owner.clone(),
                s.session.priority.to_string(),
                slots(&s.session.request),
                time(s.session.submitted_at.0),
                or_dash(s.wait_reason.as_deref()),
            ]
        })
        .collect();
    table(
        "pending sessions",
        &[
            "ID",
            "OWNER",
            "PRIORITY",
            "REQUEST",
            "SUBMITTED",
            "WAITING BECAUSE",
        ],
        &rows,
    );
}
