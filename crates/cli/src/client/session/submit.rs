//! `corral session submit` and `session run`: a session (or alike ones, or an array) made from
//! flags and sent to the manager.

use anyhow::Result;
use clap::{Args, ValueEnum};
use corral_api::apps::AppPort;
use corral_api::sessions::{NewSession, Submitted};
use corral_core::devices::Request;
use corral_core::{ArrayRange, Slots};
use serde_json::Value;

use super::super::http::{json, parse, Api};
use super::super::render;
use super::super::{api_value, key_value};
use super::inputs::{array_input_names, input_names, upload_array_inputs, upload_inputs};
use crate::Output;

/// `session submit`'s flags.
#[derive(Args)]
pub struct SubmitArgs {
    /// The scaling group to run in [default: `group` in the config file, else dev].
    #[arg(long, value_name = "G")]
    group: Option<String>,
    /// Interactive (a person works in it: the group's idle policy may end it once unused) or
    /// batch [default: batch, or interactive for a session with --app].
    #[arg(long = "type", value_enum, value_name = "TYPE")]
    kind: Option<SessionType>,
    /// The same as --type interactive.
    #[arg(long, conflicts_with = "kind")]
    interactive: bool,
    /// Container image to run in; its minimum slots apply.
    #[arg(long, value_name = "IMG")]
    image: Option<String>,
    /// The slots the session needs, e.g. cpu=2,mem=4GiB,gpu=0.5; a GPU request is whole
    /// devices (gpu=2) or a fraction of one (gpu=0.5, with gpu.mem=10GiB of its memory),
    /// and may name the model (gpu.model=A100*) and the least memory (gpu.mem>=40GiB).
    #[arg(long, value_name = "SLOTS", default_value = "cpu=1")]
    request: Request,
    /// Its time limit: its agent stops it this long after it starts, and it fails with the
    /// reason `time limit` (90s, 30m, 2h, 1d, 1h30m, or as Slurm's --time: HH:MM:SS,
    /// D-HH:MM:SS) [default: the group's].
    #[arg(long = "time", value_name = "LIMIT", value_parser = super::time_limit::parse_time_limit)]
    time_limit: Option<u64>,
    /// Higher runs first under the priority scheduler (-1000 to 1000).
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    priority: Option<i32>,
    /// A port the session serves, by name: NAME=PORT for an HTTP app the manager serves at
    /// /apps/SESSION/NAME/ (the session learns that path as CORRAL_APP_<NAME>_PREFIX), or
    /// NAME=tcp:PORT for one `session port-forward` reaches; repeat for more.
    #[arg(long = "app", value_name = "NAME=PORT")]
    apps: Vec<AppPort>,
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
}

/// `session run`'s flags.
#[derive(Args)]
pub struct RunArgs {
    /// The scaling group to run in [default: `group` in the config file, else dev].
    #[arg(long, value_name = "G")]
    group: Option<String>,
    /// Container image to run in; its minimum slots apply.
    #[arg(long, value_name = "IMG")]
    image: Option<String>,
    /// The slots the session needs (and device constraints, as `session submit` takes them).
    #[arg(long, value_name = "SLOTS", default_value = "cpu=1")]
    request: Request,
    /// Its time limit: its agent stops it this long after it starts, and it fails with the
    /// reason `time limit` (90s, 30m, 2h, 1d, 1h30m, or as Slurm's --time: HH:MM:SS,
    /// D-HH:MM:SS) [default: the group's].
    #[arg(long = "time", value_name = "LIMIT", value_parser = super::time_limit::parse_time_limit)]
    time_limit: Option<u64>,
    /// A port the session serves, by name: NAME=PORT for an HTTP app the manager serves at
    /// /apps/SESSION/NAME/ (the session learns that path as CORRAL_APP_<NAME>_PREFIX), or
    /// NAME=tcp:PORT for one `session port-forward` reaches; repeat for more.
    #[arg(long = "app", value_name = "NAME=PORT")]
    apps: Vec<AppPort>,
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
}

#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum SessionType {
    Interactive,
    Batch,
}

/// `session run`: `--count` alike sessions followed at once, then exits with the highest of
/// their exit codes (as srun does).
pub(super) async fn run_and_exit(api: &Api, args: RunArgs) -> Result<()> {
    let RunArgs {
        group,
        image,
        request,
        time_limit,
        apps,
        env,
        inputs,
        outputs,
        count,
        format,
        command,
    } = args;
    let body = NewSession {
        group: api.group_or_default(group),
        image,
        time_limit_secs: time_limit,
        command,
        request: request.slots,
        constraints: request.constraints,
        environment: env.into_iter().collect(),
        inputs: input_names(&inputs)?,
        outputs,
        apps: corral_api::apps::collect(apps)?,
        ..NewSession::default()
    };
    let json = matches!(format, Output::Json);
    let runs = (0..count).map(|_| super::super::run::run_session(api, &body, &inputs, json));
    let mut code = 0;
    for ended in futures_util::future::join_all(runs).await {
        code = code.max(ended?);
    }
    std::process::exit(code);
}

/// `session submit`: an array in one request, or `--count` alike sessions one by one.
pub(super) async fn submit(api: &Api, args: SubmitArgs) -> Result<()> {
    let SubmitArgs {
        group,
        kind,
        interactive,
        image,
        request,
        time_limit,
        priority,
        apps,
        env,
        inputs,
        outputs,
        count,
        array,
        format,
        command,
    } = args;
    let body = NewSession {
        group: api.group_or_default(group),
        kind: match (kind, interactive) {
            (Some(k), _) => Some(api_value(&k)?),
            (None, true) => Some(corral_core::SessionType::Interactive),
            (None, false) => None,
        },
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
        apps: corral_api::apps::collect(apps)?,
        array,
        time_limit_secs: time_limit,
    };
    let body = json(&body)?;
    let sent = Sent {
        body: &body,
        image: &image,
        asked: &request.slots,
        inputs: &inputs,
        format,
    };
    if array.is_some() {
        return submit_array(api, sent).await;
    }
    submit_alike(api, sent, count).await
}

/// What a submit sends, and what it says afterwards.
struct Sent<'a> {
    body: &'a Value,
    image: &'a Option<String>,
    /// The slots asked for, to say when the image's minimums raised them.
    asked: &'a Slots,
    inputs: &'a [String],
    format: Output,
}

/// An array, in one request; then each session's own inputs. Prints the array's id, and on
/// stderr what it holds.
async fn submit_array(api: &Api, sent: Sent<'_>) -> Result<()> {
    let reply = api.post(&["sessions"], Some(sent.body)).await?;
    let submitted = parse::<Submitted>(&reply)?;
    note_raised(sent.image, sent.asked, &submitted);
    upload_array_inputs(api, &submitted.id, sent.inputs).await?;
    if !render::json(sent.format, &reply) {
        println!("{}", submitted.id);
        if let Some(made) = &submitted.array {
            eprintln!(
                "array {} ({}): {} sessions, the first {}",
                made.id, made.range, made.sessions, made.first_session
            );
        }
    }
    Ok(())
}

/// `count` alike sessions, one request each, each with its inputs; prints each id (the
/// image's raise is said once).
async fn submit_alike(api: &Api, sent: Sent<'_>, count: u32) -> Result<()> {
    for i in 0..count {
        let reply = api.post(&["sessions"], Some(sent.body)).await?;
        let submitted = parse::<Submitted>(&reply)?;
        if i == 0 {
            note_raised(sent.image, sent.asked, &submitted);
        }
        let id = submitted.id;
        upload_inputs(api, &["sessions", &id], sent.inputs).await?;
        if !render::json(sent.format, &reply) {
            println!("{id}");
        }
    }
    Ok(())
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
