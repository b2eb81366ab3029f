//! `corral session`: submit, list, inspect and cancel compute sessions.

use std::collections::HashMap;

use anyhow::{bail, Context, Result};
use clap::{Subcommand, ValueEnum};
use corral_api::arrays::{ArrayCancelled, ArrayView, StateCounts, NO_ARRAY};
use corral_api::sessions::{NewSession, SessionView, Submitted};
use corral_api::ClientError;
use corral_core::arrays::substitute_index;
use corral_core::devices::{bytes_text, ConstraintsText, Request};
use corral_core::{ArrayRange, DeviceGrant, Slots};

use super::http::{json, parse, Api};
use super::render::{self, command_line, fields, or_dash, pairs, slots, table, time, word};
use super::{api_name, api_value, key_value, Out};
use crate::Output;

/// The manager's page size when `--limit` is not given.
const DEFAULT_PAGE: u32 = 100;

#[derive(Subcommand)]
pub enum Command {
    /// Submit a session and print its id; a request no agent or template could ever hold is refused with the reason.
    Submit {
        /// The scaling group to run in [default: `group` in the config file, else dev].
        #[arg(long, value_name = "G")]
        group: Option<String>,
        /// Interactive (a person waits on it) or batch.
        #[arg(long = "type", value_enum, value_name = "TYPE")]
        kind: Option<SessionType>,
        /// Container image to run in; its minimum slots apply.
        #[arg(long, value_name = "IMG")]
        image: Option<String>,
        /// The slots the session needs, e.g. cpu=2,mem=4GiB,gpu=0.5; a GPU request is whole
        /// devices (gpu=2) or a fraction of one (gpu=0.5, with gpu.mem=10GiB of its memory),
        /// and may name the model (gpu.model=A100*) and the least memory (gpu.mem>=40GiB).
        #[arg(long, value_name = "SLOTS", default_value = "cpu=1")]
        request: Request,
        /// Higher runs first under the priority scheduler (-1000 to 1000).
        #[arg(long, value_name = "N", allow_negative_numbers = true)]
        priority: Option<i32>,
        /// An environment variable of the session; repeat for more.
        #[arg(long = "env", value_name = "K=V", value_parser = key_value)]
        env: Vec<(String, String)>,
        /// A local file copied into the session's working directory (under its file name)
        /// before it starts; repeat for more.
        #[arg(long = "input", value_name = "FILE")]
        inputs: Vec<String>,
        /// A path in the session's directory kept after it ends; repeat for more.
        #[arg(long = "output", value_name = "PATH")]
        outputs: Vec<String>,
        /// Submit this many identical sessions (an array), printing one id per line.
        #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=10_000))]
        count: u32,
        /// Submit an array: one session per index of FIRST-LAST[:STEP][%MAX] (as `sbatch
        /// --array`), each with CORRAL_ARRAY_INDEX and CORRAL_ARRAY_ID in its environment and
        /// `{index}` replaced in its command, input and output names (`--input
        /// data/part-{index}.csv` uploads each index's own file); %MAX caps how many run at
        /// once. Prints the array's id; `session ls`, `cancel` and `wait` take it.
        #[arg(long, value_name = "RANGE", conflicts_with = "count")]
        array: Option<ArrayRange>,
        /// How to print: the new id, or the manager's JSON answer (here `--output` is a session output path, so the long form is --format).
        #[arg(long = "format", short = 'o', value_enum, default_value_t)]
        format: Output,
        /// The command and its arguments, after `--`.
        #[arg(last = true, value_name = "COMMAND")]
        command: Vec<String>,
    },
    /// List sessions, newest first (users see their own).
    Ls {
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
        #[arg(long, value_name = "ID", conflicts_with = "active")]
        after: Option<String>,
        /// Oldest first [default: newest first].
        #[arg(long)]
        oldest: bool,
        /// Sessions not ended (pending, scheduled, running) first, then the others.
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
    },
    /// Show a session: its request, placement, why it waits, and its state history.
    Get {
        /// The session's id, as `session submit` printed it.
        id: String,
        #[command(flatten)]
        out: Out,
    },
    /// Submit a session, wait for it (saying on a terminal what it waits for), print its
    /// output as it comes, and exit with its exit code.
    Run {
        /// The scaling group to run in [default: `group` in the config file, else dev].
        #[arg(long, value_name = "G")]
        group: Option<String>,
        /// Container image to run in; its minimum slots apply.
        #[arg(long, value_name = "IMG")]
        image: Option<String>,
        /// The slots the session needs (and device constraints, as `session submit` takes them).
        #[arg(long, value_name = "SLOTS", default_value = "cpu=1")]
        request: Request,
        /// An environment variable of the session; repeat for more.
        #[arg(long = "env", value_name = "K=V", value_parser = key_value)]
        env: Vec<(String, String)>,
        /// A local file copied into the session's working directory (under its file name)
        /// before it starts; repeat for more.
        #[arg(long = "input", value_name = "FILE")]
        inputs: Vec<String>,
        /// A path in the session's directory kept after it ends; repeat for more.
        #[arg(long = "output", value_name = "PATH")]
        outputs: Vec<String>,
        /// Run this many identical sessions at once; their output is printed as it comes, and
        /// the exit code is the highest of theirs (as srun's).
        #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=1000))]
        count: u32,
        /// How to print: the session's output as it comes, or (json) each session's final
        /// state as the manager answers it, one per line, when it ends (here `--output` is a
        /// session output path, so the long form is --format).
        #[arg(long = "format", short = 'o', value_enum, default_value_t)]
        format: Output,
        /// The command and its arguments, after `--`.
        #[arg(last = true, value_name = "COMMAND", required = true)]
        command: Vec<String>,
    },
    /// Print a session's output (stdout, or stderr with --stderr).
    Logs {
        /// The session's id.
        id: String,
        /// Keep printing as the session writes, until it ends.
        #[arg(long, short)]
        follow: bool,
        /// The error stream instead of the output.
        #[arg(long)]
        stderr: bool,
        /// Only the last N lines (then, with --follow, what comes after them).
        #[arg(long, value_name = "N")]
        tail: Option<usize>,
        /// How to print: the bytes as written, or (json) one object per chunk read, with its
        /// offset in the log and its text.
        #[arg(long, short, value_enum, default_value_t, visible_alias = "format")]
        output: Output,
    },
    /// Download a session's outputs into a directory (or list them with -o json).
    Outputs {
        /// The session's id.
        id: String,
        /// Where to put them.
        #[arg(long, value_name = "DIR", default_value = ".")]
        dir: std::path::PathBuf,
        #[command(flatten)]
        out: Out,
    },
    /// Cancel a session, or every session of an array that has not ended.
    Cancel {
        /// The session's or the array's id, as `session submit` printed it.
        id: String,
        #[command(flatten)]
        out: Out,
    },
    /// Wait for a session, or every session of an array, to end, and exit with its exit code
    /// (an array's: the highest of its sessions'); a session that ended without one (failed
    /// without an exit code, cancelled, rejected) counts as 1.
    Wait {
        /// The session's or the array's id, as `session submit` printed it.
        id: String,
        #[command(flatten)]
        out: Out,
    },
}

#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum SessionType {
    Interactive,
    Batch,
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

pub async fn run(api: &Api, command: Command) -> Result<()> {
    match command {
        Command::Run {
            group,
            image,
            request,
            env,
            inputs,
            outputs,
            count,
            format,
            command,
        } => {
            let body = NewSession {
                group: group_or_default(group)?,
                kind: corral_core::SessionType::Batch,
                image,
                command,
                request: request.slots,
                constraints: request.constraints,
                environment: env.into_iter().collect(),
                inputs: input_names(&inputs)?,
                outputs,
                ..NewSession::default()
            };
            let json = matches!(format, Output::Json);
            let runs = (0..count).map(|_| super::run::run_session(api, &body, &inputs, json));
            let mut code = 0;
            for ended in futures_util::future::join_all(runs).await {
                code = code.max(ended?);
            }
            std::process::exit(code);
        }
        Command::Logs {
            id,
            follow,
            stderr,
            tail,
            output,
        } => {
            let json = matches!(output, Output::Json);
            super::run::logs(api, &id, stderr, follow, tail, json).await?
        }
        Command::Outputs { id, dir, out } => {
            let json = matches!(out.output, Output::Json);
            super::run::outputs(api, &["sessions", &id], &dir, json).await?
        }
        Command::Submit {
            group,
            kind,
            image,
            request,
            priority,
            env,
            inputs,
            outputs,
            count,
            array,
            format,
            command,
        } => {
            let body = NewSession {
                group: group_or_default(group)?,
                kind: kind.map(|k| api_value(&k)).transpose()?.unwrap_or_default(),
                image: image.clone(),
                command,
                request: request.slots.clone(),
                priority: priority.unwrap_or_default(),
                inputs: match &array {
                    Some(range) => array_input_names(&inputs, range)?,
                    None => input_names(&inputs)?,
                },
                outputs,
                environment: env.into_iter().collect(),
                constraints: request.constraints.clone(),
                array,
            };
            let body = json(&body)?;
            if array.is_some() {
                let reply = api.post(&["sessions"], Some(&body)).await?;
                let submitted = parse::<Submitted>(&reply)?;
                note_raised(&image, &request.slots, &submitted);
                upload_array_inputs(api, &submitted.id, &inputs).await?;
                if !render::json(format, &reply) {
                    println!("{}", submitted.id);
                    if let Some(made) = &submitted.array {
                        eprintln!(
                            "array {} ({}): {} sessions, the first {}",
                            made.id, made.range, made.sessions, made.first_session
                        );
                    }
                }
                return Ok(());
            }
            for i in 0..count {
                let reply = api.post(&["sessions"], Some(&body)).await?;
                let submitted = parse::<Submitted>(&reply)?;
                if i == 0 {
                    note_raised(&image, &request.slots, &submitted);
                }
                let id = submitted.id;
                upload_inputs(api, &["sessions", &id], &inputs).await?;
                if !render::json(format, &reply) {
                    println!("{id}");
                }
            }
        }
        Command::Ls {
            group,
            owner,
            state,
            limit,
            after,
            oldest,
            active,
            expand,
            watch,
            out,
        } => {
            let folds = !expand && !watch && !matches!(out.output, Output::Json);
            if folds {
                let arrays = list_arrays(api, &group, &owner, limit, oldest).await?;
                if !arrays.is_empty() {
                    let filter = ListFilter {
                        group: &group,
                        owner: &owner,
                        state,
                        limit,
                        after: &after,
                        oldest,
                        active,
                    };
                    return print_folded(api, arrays, filter).await;
                }
            }
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
            let reply = api
                .get(&["sessions"], &query(active.then_some(true), limit))
                .await?;
            let mut sessions: Vec<SessionView> = parse(&reply)?;
            // Active first: the ended ones fill the rest of the page.
            if active && sessions.len() < page as usize {
                let rest = page - sessions.len() as u32;
                let ended = api
                    .get(&["sessions"], &query(Some(false), Some(rest)))
                    .await?;
                sessions.extend(parse::<Vec<SessionView>>(&ended)?);
                if matches!(out.output, Output::Json) && !watch {
                    println!("{}", serde_json::to_string_pretty(&sessions)?);
                    return Ok(());
                }
            }
            if watch {
                let json = matches!(out.output, Output::Json);
                let next = || async { api.get(&["sessions"], &query(None, limit)).await };
                return watch_sessions(sessions, next, json).await;
            }
            if render::json(out.output, &reply) {
                return Ok(());
            }
            print_sessions(&sessions, now_ms());
            if let Some(last) = sessions
                .last()
                .filter(|_| !active && sessions.len() >= page as usize)
            {
                eprintln!("(more may follow: --after {})", last.session.id.0);
            }
        }
        Command::Get { id, out } => {
            let reply = api.get(&["sessions", &id], &[]).await?;
            if !render::json(out.output, &reply) {
                print_session(&parse(&reply)?);
            }
        }
        Command::Cancel { id, out } => {
            if find_array(api, &id).await?.is_some() {
                let reply = api.post(&["arrays", &id, "cancel"], None).await?;
                if !render::json(out.output, &reply) {
                    let c: ArrayCancelled = parse(&reply)?;
                    println!(
                        "array {}: cancelled {} sessions; now {}",
                        c.id,
                        c.cancelled,
                        counts_text(&c.counts)
                    );
                }
                return Ok(());
            }
            let reply = api.post(&["sessions", &id, "cancel"], None).await?;
            if !render::json(out.output, &reply) {
                let s: SessionView = parse(&reply)?;
                println!("session {} is {}", s.session.id.0, word(&s.session.state));
            }
        }
        Command::Wait { id, out } => {
            let code = wait(api, &id, matches!(out.output, Output::Json)).await?;
            std::process::exit(code);
        }
    }
    Ok(())
}

/// How often `session wait` reads the state again.
const WAIT_POLL: std::time::Duration = std::time::Duration::from_millis(500);

/// `session wait`: polls the session or array until it has ended; returns the exit code.
async fn wait(api: &Api, id: &str, json_out: bool) -> Result<i32> {
    if find_array(api, id).await?.is_some() {
        loop {
            let reply = api.get(&["arrays", id], &[]).await?;
            let a: ArrayView = parse(&reply)?;
            if !a.active {
                if json_out {
                    println!("{}", reply.text.trim());
                }
                return Ok(array_exit_code(&a));
            }
            tokio::time::sleep(WAIT_POLL).await;
        }
    }
    loop {
        let reply = api.get(&["sessions", id], &[]).await?;
        let s: SessionView = parse(&reply)?;
        if s.session.state.is_terminal() {
            if json_out {
                println!("{}", reply.text.trim());
            }
            return Ok(match (s.session.state, s.exit_code) {
                (_, Some(code)) => code,
                (corral_core::SessionState::Succeeded, None) => 0,
                (state, None) => {
                    let why = s.end_reason.as_deref().unwrap_or("no reason given");
                    eprintln!("session {id} {}: {why}", word(&state));
                    1
                }
            });
        }
        tokio::time::sleep(WAIT_POLL).await;
    }
}

/// An array's exit code: the highest of its sessions', and at least 1 when one of them failed
/// without an exit code, was cancelled or was rejected.
fn array_exit_code(a: &ArrayView) -> i32 {
    let c = &a.counts;
    let code = a.max_exit_code.unwrap_or(0);
    let unclean = c.failed > 0 || c.cancelled > 0 || c.rejected > 0;
    if unclean && code == 0 {
        eprintln!("array {}: {}", a.id, counts_text(c));
        return 1;
    }
    code
}

/// The array of this id, or `None` when there is no such array (the id is a session's).
async fn find_array(api: &Api, id: &str) -> Result<Option<ArrayView>> {
    match api.get(&["arrays", id], &[]).await {
        Ok(reply) => Ok(Some(parse(&reply)?)),
        Err(e) => match e.downcast_ref::<super::http::CallError>() {
            Some(call)
                if matches!(
                    call.error,
                    ClientError::Refused { status: 404, .. }
                        | ClientError::Unexpected { status: 404, .. }
                ) =>
            {
                Ok(None)
            }
            _ => Err(e),
        },
    }
}

/// `12 pending, 3 running, 85 succeeded`: the states with a session, in lifecycle order.
fn counts_text(c: &StateCounts) -> String {
    let parts: Vec<String> = [
        (c.pending, "pending"),
        (c.scheduled, "scheduled"),
        (c.running, "running"),
        (c.succeeded, "succeeded"),
        (c.failed, "failed"),
        (c.cancelled, "cancelled"),
        (c.rejected, "rejected"),
    ]
    .iter()
    .filter(|(n, _)| *n > 0)
    .map(|(n, w)| format!("{n} {w}"))
    .collect();
    if parts.is_empty() {
        "no sessions".into()
    } else {
        parts.join(", ")
    }
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

/// What `session ls` was asked for.
struct ListFilter<'a> {
    group: &'a Option<String>,
    owner: &'a Option<String>,
    state: Option<SessionState>,
    limit: Option<u32>,
    after: &'a Option<String>,
    oldest: bool,
    active: bool,
}

/// `session ls` with arrays folded: one line per array with its counts by state, merged with
/// the sessions of no array by submission time.
async fn print_folded(api: &Api, arrays: Vec<ArrayView>, f: ListFilter<'_>) -> Result<()> {
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
        rows.sort_by_key(|r| !r.1);
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

/// The group given, else the config file's, else `dev` (what `corral dev` creates).
fn group_or_default(group: Option<String>) -> Result<String> {
    Ok(match group {
        Some(g) => g,
        None => super::config::load_client_config()?
            .group
            .unwrap_or_else(|| "dev".into()),
    })
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
    Fut: std::future::Future<Output = Result<super::http::Reply>>,
{
    use std::io::Write;
    let mut seen: HashMap<String, SessionView> = HashMap::new();
    let mut changed = first;
    changed.reverse();
    if !json {
        println!("{}", SESSION_HEADER.join("  "));
    }
    loop {
        let now = now_ms();
        let mut stdout = std::io::stdout().lock();
        for s in changed {
            if json {
                writeln!(stdout, "{}", serde_json::to_string(&s)?)?;
            } else {
                writeln!(stdout, "{}", session_row(&s, now).join("  "))?;
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

fn print_session(s: &SessionView) {
    let mut rows = vec![
        ("id", s.session.id.0.clone()),
        ("state", word(&s.session.state)),
        ("group", s.session.group.clone()),
        ("owner", s.session.owner.clone()),
        ("type", word(&s.session.kind)),
        ("priority", s.session.priority.to_string()),
        ("image", or_dash(s.session.image.as_deref())),
        ("command", command_line(&s.spec.command)),
        ("request", slots(&s.session.request)),
        (
            "allocation",
            s.allocation.as_ref().map_or("-".into(), slots),
        ),
        (
            "agent",
            or_dash(s.session.agent.as_ref().map(|a| a.0.as_str())),
        ),
        ("submitted", time(s.session.submitted_at.0)),
        ("updated", time(s.updated_at.0)),
    ];
    if !s.session.constraints.is_empty() {
        let text = ConstraintsText(&s.session.constraints).to_string();
        rows.push(("constraints", text));
    }
    if !s.session.devices.is_empty() {
        rows.push(("devices", grants(&s.session.devices)));
    }
    if let Some(reason) = &s.wait_reason {
        rows.push(("waiting", reason.clone()));
    }
    if let Some(reason) = &s.end_reason {
        rows.push(("ended", reason.clone()));
    }
    if !s.spec.inputs.is_empty() {
        rows.push(("inputs", s.spec.inputs.join(", ")));
    }
    if !s.spec.outputs.is_empty() {
        rows.push(("outputs", s.spec.outputs.join(", ")));
    }
    if !s.spec.environment.is_empty() {
        rows.push(("environment", pairs(&s.spec.environment)));
    }
    fields(&rows);
    if !s.history.is_empty() {
        println!("\nHISTORY");
        let history: Vec<Vec<String>> = s
            .history
            .iter()
            .map(|h| vec![time(h.at.0), word(&h.state), h.reason.clone()])
            .collect();
        crate::table::print(&["AT", "STATE", "REASON"], &history);
    }
}

/// Says on stderr when the image's minimums raised the request (what the session needs is then
/// more than what was asked).
pub(crate) fn note_raised(image: &Option<String>, asked: &Slots, submitted: &Submitted) {
    if let Some(image) = image.as_deref().filter(|_| submitted.required != *asked) {
        eprintln!(
            "image {image}'s minimums raise the request {asked} to {}",
            submitted.required
        );
    }
}

/// The names local input files have in the session's directory: their file names, distinct.
pub(crate) fn input_names(inputs: &[String]) -> Result<Vec<String>> {
    let mut names = Vec::new();
    for input in inputs {
        if !std::path::Path::new(input).is_file() {
            bail!("--input {input:?}: not a readable file");
        }
        let name = input_name(input);
        if names.contains(&name) {
            bail!("--input {input:?}: another input is also named {name:?}");
        }
        names.push(name);
    }
    Ok(names)
}

/// The input names of an array's sessions (`{index}` left in), once every index's local
/// file is found: nothing is submitted when one is missing.
fn array_input_names(inputs: &[String], range: &ArrayRange) -> Result<Vec<String>> {
    for index in range.indices() {
        for input in inputs {
            let path = substitute_index(input, index);
            if !std::path::Path::new(&path).is_file() {
                bail!("--input {input:?}: {path:?} (index {index}) is not a readable file");
            }
        }
    }
    let mut names = Vec::new();
    for input in inputs {
        let name = input_name(input);
        if names.contains(&name) {
            bail!("--input {input:?}: another input is also named {name:?}");
        }
        names.push(name);
    }
    Ok(names)
}

/// Uploads each session's own local input files (`{index}` replaced by its index) once an
/// array is submitted, page by page of its sessions.
async fn upload_array_inputs(api: &Api, array: &str, inputs: &[String]) -> Result<()> {
    if inputs.is_empty() {
        return Ok(());
    }
    const PAGE: usize = 1000;
    let mut after = None;
    loop {
        let query = [
            ("array", Some(array.to_string())),
            ("limit", Some(PAGE.to_string())),
            ("after", after.clone()),
        ];
        let page: Vec<SessionView> = parse(&api.get(&["sessions"], &query).await?)?;
        for view in &page {
            let id = &view.session.id.0;
            let index = view
                .array_index
                .with_context(|| format!("session {id} of array {array} has no index"))?;
            for input in inputs {
                let path = substitute_index(input, index);
                let data = std::fs::read(&path).with_context(|| format!("reading {path}"))?;
                let name = substitute_index(&input_name(input), index);
                api.put_bytes(&["sessions", id, "inputs", &name], data)
                    .await?;
            }
        }
        match page.last() {
            Some(last) if page.len() == PAGE => after = Some(last.session.id.0.clone()),
            _ => return Ok(()),
        }
    }
}

/// The name a local input file has in the session's directory: its file name.
fn input_name(input: &str) -> String {
    std::path::Path::new(input)
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// Uploads the local input files of a just-submitted session or batch job (`resource`:
/// `["sessions", ID]`, or the job's path); it starts once all are there.
pub(crate) async fn upload_inputs(api: &Api, resource: &[&str], inputs: &[String]) -> Result<()> {
    for (input, name) in inputs.iter().zip(input_names(inputs)?) {
        let data = std::fs::read(input).with_context(|| format!("reading {input}"))?;
        api.put_bytes(&[resource, &["inputs", &name]].concat(), data)
            .await?;
    }
    Ok(())
}

/// The devices a session holds: `GPU-aaa (1), MIG-bbb (0.5, 10GiB)`.
fn grants(devices: &[DeviceGrant]) -> String {
    devices
        .iter()
        .map(|g| match g.memory.is_zero() || g.share.milli() == 1000 {
            true => format!("{} ({})", g.id, g.share),
            false => format!("{} ({}, {})", g.id, g.share, bytes_text(g.memory)),
        })
        .collect::<Vec<_>>()
        .join(", ")
}
