//! `corral session`: submit, list, inspect and cancel compute sessions.
//!
//! This file holds the subcommands and sends each to its own; beside it, `session/submit.rs`
//! submits (`submit`, `run`), `session/inputs.rs` uploads local input files, `session/list.rs`
//! lists (`ls`, `--watch`, and `group pending`'s queue), `session/show.rs` shows one (`get`),
//! `session/cancel.rs` cancels, `session/wait.rs` waits, `session/arrays.rs` holds what
//! several of them ask of arrays; `session/exec.rs` runs a command or a shell in a running
//! session (`exec`, `shell`; `session/terminal.rs` is the local terminal) and
//! `session/forward.rs` forwards a local port to it (`port-forward`), both through
//! `session/wire.rs`, the messages of their WebSockets.

mod apps;
mod arrays;
mod cancel;
mod exec;
mod forward;
mod inputs;
mod list;
mod show;
mod submit;
mod terminal;
mod time_limit;
mod wait;
mod wire;

use anyhow::Result;
use clap::Subcommand;

use super::http::Api;
use super::Out;
use crate::Output;
use apps::AppsArgs;
use exec::ExecArgs;
use forward::ForwardArgs;
pub(crate) use inputs::{input_names, upload_inputs};
pub use list::print_pending;
use list::ListArgs;
pub(crate) use submit::note_raised;
use submit::{RunArgs, SubmitArgs};

#[derive(Subcommand)]
pub enum Command {
    /// Submit a session and print its id; a request no agent or template could ever hold is refused with the reason.
    Submit(SubmitArgs),
    /// List sessions, newest first (users see their own).
    Ls(ListArgs),
    /// Show a session: its request, placement, why it waits, and its state history.
    Get {
        /// The session's id, as `session submit` printed it.
        id: String,
        #[command(flatten)]
        out: Out,
    },
    /// Submit a session, wait for it (saying on a terminal what it waits for), print its
    /// output as it comes, and exit with its exit code.
    Run(RunArgs),
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
    /// Run a command in a running session, with this standard input, output and error, and
    /// exit with its exit code (255 if the connection was lost); -t gives it a terminal.
    Exec(ExecArgs),
    /// A login shell in a running session, on this terminal (`exec -t` without a command).
    Shell {
        /// The session's id; it must be running.
        id: String,
    },
    /// Forward a local port to a port of a running session, until Ctrl-C: each connection
    /// gets its own stream to the session.
    PortForward(ForwardArgs),
    /// The apps a session serves (`--app` at submit), with the URL of each HTTP app; --login
    /// makes each a link that logs a browser in.
    Apps(AppsArgs),
}

/// Runs one `corral session` subcommand; `run` and `wait` exit with the session's exit code,
/// `exec` and `shell` with the command's.
pub async fn run(api: &Api, command: Command) -> Result<()> {
    match command {
        Command::Run(args) => submit::run_and_exit(api, args).await,
        Command::Logs {
            id,
            follow,
            stderr,
            tail,
            output,
        } => {
            let json = matches!(output, Output::Json);
            super::run::logs(api, &id, stderr, follow, tail, json).await
        }
        Command::Outputs { id, dir, out } => {
            let json = matches!(out.output, Output::Json);
            super::run::outputs(api, &["sessions", &id], &dir, json).await
        }
        Command::Submit(args) => submit::submit(api, args).await,
        Command::Ls(args) => list::ls(api, args).await,
        Command::Get { id, out } => show::get(api, &id, out).await,
        Command::Cancel { id, out } => cancel::cancel(api, &id, out).await,
        Command::Wait { id, out } => {
            let code = wait::wait(api, &id, matches!(out.output, Output::Json)).await?;
            std::process::exit(code);
        }
        // Exits at once: standard input may still be read on a blocking thread, which a
        // runtime's shutdown would wait for.
        Command::Exec(args) => std::process::exit(exec::exec(api, args).await?),
        Command::Shell { id } => std::process::exit(exec::shell(api, &id).await?),
        Command::PortForward(args) => forward::port_forward(api, args).await,
        Command::Apps(args) => apps::apps(api, args).await,
    }
}
