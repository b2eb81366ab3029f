//! `exec`: a batch system Corral does not know, through the site's own plugin: any executable
//! that reads one JSON request on standard input and writes one JSON answer on standard output,
//! started once per call as `PLUGIN OP` (protocol version 1, the provider plugins' conventions;
//! docs/plugins.md, "Batch plugins"). An example is examples/batch-plugin/local_batch.py.
//!
//! The plugin runs as the other adaptors' commands do ([`Commands`]): in a process group of its
//! own, killed with what it started at the timeout, with `PATH` and the binding's `env` and
//! nothing else of the manager's environment.
//!
//! Answers are read into the crate's own types and checked strictly: one JSON object and
//! nothing else, no field the types do not know, job ids as [`crate::is_job_id`] takes them,
//! the job asked for. Anything else is [`BatchError::Parse`] quoting the output. An error
//! object (`{"error": {"class": ..., "message": ...}}`, whatever the exit status) is the
//! error its class names, its message verbatim; a non-zero exit without one is a refusal in
//! the words of its standard error.

use std::collections::BTreeSet;
use std::path::PathBuf;

use async_trait::async_trait;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::system::check_job_id;
use crate::{
    check_signal, is_job_id, Answer, BatchError, BatchSystem, Commands, ConfigChange, Job,
    JobFilter, JobSpec, Node, Rendered, SchedulerConfig,
};

const NAME: &str = "exec";
/// The protocol version sent in every request.
pub const PROTOCOL_VERSION: u32 = 1;

pub struct Exec {
    commands: Commands,
    program: PathBuf,
}

impl Exec {
    /// The plugin `program` (an absolute path), run with `commands`' timeout and environment.
    pub fn new(commands: Commands, program: PathBuf) -> Exec {
        Exec { commands, program }
    }
}

/// One call to the plugin.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Submit,
    Jobs,
    Job,
    Cancel,
    Hold,
    Release,
    Signal,
    Nodes,
    Config,
    Apply,
}

impl Op {
    fn name(self) -> &'static str {
        match self {
            Op::Submit => "submit",
            Op::Jobs => "jobs",
            Op::Job => "job",
            Op::Cancel => "cancel",
            Op::Hold => "hold",
            Op::Release => "release",
            Op::Signal => "signal",
            Op::Nodes => "nodes",
            Op::Config => "config",
            Op::Apply => "apply",
        }
    }

    /// What an `unsupported` error without a message says the plugin cannot do.
    fn what(self) -> &'static str {
        match self {
            Op::Submit => "submit jobs",
            Op::Jobs => "list jobs",
            Op::Job => "read a job",
            Op::Cancel => "cancel jobs",
            Op::Hold => "hold jobs",
            Op::Release => "release jobs",
            Op::Signal => "signal jobs",
            Op::Nodes => "list nodes",
            Op::Config => "read its configuration",
            Op::Apply => "change its configuration",
        }
    }
}

/// A request, with the fields its operation takes.
#[derive(Serialize)]
struct Request<'a> {
    version: u32,
    op: &'static str,
    /// `submit`: the job as given, its name (the default one when it gives none) and the body
    /// of its script (environment and command), as the other adaptors render them.
    #[serde(skip_serializing_if = "Option::is_none")]
    spec: Option<&'a JobSpec>,
    #[serde(skip_serializing_if = "Option::is_none")]
    name: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    script: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    filter: Option<&'a JobFilter>,
    #[serde(skip_serializing_if = "Option::is_none")]
    id: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    signal: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    change: Option<&'a ConfigChange>,
}

impl Request<'_> {
    fn new(op: Op) -> Self {
        Request {
            version: PROTOCOL_VERSION,
            op: op.name(),
            spec: None,
            name: None,
            script: None,
            filter: None,
            id: None,
            signal: None,
            change: None,
        }
    }
}

// The answers. Each also serializes, so that what reading ignored can be told (`unknown_field`).

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Submitted {
    id: String,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Jobs {
    jobs: Vec<Job>,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct OneJob {
    job: Job,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Nodes {
    nodes: Vec<Node>,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Config {
    config: SchedulerConfig,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Done {}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Failure {
    error: PluginError,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PluginError {
    #[serde(default)]
    class: ErrorClass,
    #[serde(default)]
    message: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
enum ErrorClass {
    /// The batch system said no (`message` required).
    #[default]
    Refused,
    /// The job named by the request's `id` does not exist.
    NoSuchJob,
    /// The batch system cannot do this (`message`: what, after "cannot").
    Unsupported,
}

impl Exec {
    /// Runs the plugin for `request` and reads its answer into `T`, checked strictly; with the
    /// output, for the checks that follow to quote.
    async fn call<T: DeserializeOwned + Serialize>(
        &self,
        op: Op,
        request: &Request<'_>,
    ) -> Result<(T, String), BatchError> {
        let program = self.program.display().to_string();
        let command = self.command(op);
        let input = serde_json::to_string(request).map_err(|e| BatchError::Io {
            command: command.clone(),
            source: std::io::Error::other(e),
        })?;
        // An operator's change runs as the manager's own account, as with the other adaptors.
        let commands = match op {
            Op::Apply => self.commands.own(),
            _ => self.commands.clone(),
        };
        let answer = commands
            .run(&program, &[op.name().to_string()], Some(&input))
            .await?;
        let value = single_object(&answer.stdout);
        if let Ok(value) = &value {
            if value.get("error").is_some() {
                return Err(plugin_error(&command, op, request.id, value, &answer));
            }
        }
        if !answer.ok() {
            return Err(BatchError::Refused {
                scheduler: NAME,
                message: failure(&answer),
            });
        }
        let value =
            value.map_err(|problem| BatchError::parse(&command, problem, &answer.stdout))?;
        Ok((read(&command, &value, &answer.stdout)?, answer.stdout))
    }
}

/// The one JSON object of `text` (white space around it allowed), or what is wrong.
fn single_object(text: &str) -> Result<Value, String> {
    if text.trim().is_empty() {
        return Err("no answer on standard output".into());
    }
    let mut values = serde_json::Deserializer::from_str(text).into_iter::<Value>();
    let value = match values.next() {
        Some(Ok(value)) => value,
        Some(Err(e)) => return Err(format!("not JSON: {e}")),
        None => return Err("no answer on standard output".into()),
    };
    if !text[values.byte_offset()..].trim().is_empty() {
        return Err("more output after the JSON answer".into());
    }
    if !value.is_object() {
        return Err("not a JSON object".into());
    }
    Ok(value)
}

/// `value` read as `T`: a field serde ignored, or one it could not read, is named.
fn read<T: DeserializeOwned + Serialize>(
    command: &str,
    value: &Value,
    output: &str,
) -> Result<T, BatchError> {
    let read: T = serde_path_to_error::deserialize(value).map_err(|e| {
        let at = e.path().to_string();
        let problem = if at == "." {
            e.inner().to_string()
        } else {
            format!("{at}: {}", e.inner())
        };
        BatchError::parse(command, problem, output)
    })?;
    let again = serde_json::to_value(&read).unwrap_or(Value::Null);
    match unknown_field(value, &again, "") {
        Some(field) => Err(BatchError::parse(
            command,
            format!("unknown field {field}"),
            output,
        )),
        None => Ok(read),
    }
}

/// The first field of `sent` that reading it ignored, as `jobs[0].colour`: what `read` gave
/// back, written again (`again`), lacks it. Fields left out when empty are `null` when sent.
/// This is `deny_unknown_fields` for the types (`Job`, `Node`) that do not deny them, as the
/// API's clients read them too and must take fields a newer manager adds.
fn unknown_field(sent: &Value, again: &Value, path: &str) -> Option<String> {
    match (sent, again) {
        (Value::Object(sent), Value::Object(again)) => sent.iter().find_map(|(key, value)| {
            let here = if path.is_empty() {
                key.clone()
            } else {
                format!("{path}.{key}")
            };
            match again.get(key) {
                Some(read) => unknown_field(value, read, &here),
                None if value.is_null() => None,
                None => Some(here),
            }
        }),
        (Value::Array(sent), Value::Array(again)) => sent
            .iter()
            .zip(again)
            .enumerate()
            .find_map(|(i, (value, read))| unknown_field(value, read, &format!("{path}[{i}]"))),
        _ => None,
    }
}

/// The error an error object names; a malformed one is a parse error quoting it.
fn plugin_error(
    command: &str,
    op: Op,
    id: Option<&str>,
    value: &Value,
    answer: &Answer,
) -> BatchError {
    let error = match serde_path_to_error::deserialize::<_, Failure>(value) {
        Ok(failure) => failure.error,
        Err(e) => {
            let problem = format!("invalid error object at {}: {}", e.path(), e.inner());
            return BatchError::parse(command, problem, &answer.stdout);
        }
    };
    let message = error.message.filter(|m| !m.trim().is_empty());
    match (error.class, id, message) {
        (ErrorClass::NoSuchJob, Some(id), _) => BatchError::NoSuchJob { id: id.into() },
        (ErrorClass::Unsupported, _, what) => BatchError::Unsupported {
            scheduler: NAME,
            what: what.unwrap_or_else(|| op.what().into()),
        },
        (_, _, Some(message)) => BatchError::Refused {
            scheduler: NAME,
            message,
        },
        // Without a job to name, no_such_job is a refusal.
        (ErrorClass::NoSuchJob, None, None) => BatchError::Refused {
            scheduler: NAME,
            message: "no such job".into(),
        },
        (ErrorClass::Refused, _, None) => {
            BatchError::parse(command, "an error without a message", &answer.stdout)
        }
    }
}

/// Why a plugin that exited non-zero without an error object failed: its standard error.
fn failure(answer: &Answer) -> String {
    let complaint = answer.complaint();
    if !complaint.is_empty() {
        return complaint;
    }
    match answer.code {
        Some(code) => format!("exited with status {code} without a message"),
        None => "killed by a signal without a message".into(),
    }
}

/// Ids that schedulers' ids are, each job once.
fn check_jobs(command: &str, jobs: &[Job], output: &str) -> Result<(), BatchError> {
    let mut seen = BTreeSet::new();
    for job in jobs {
        let problem = if !is_job_id(&job.id) {
            format!("{:?} is not a job id", job.id)
        } else if let Some(array) = job.array_id.as_deref().filter(|a| !is_job_id(a)) {
            format!("job {}: array_id {array:?} is not a job id", job.id)
        } else if !seen.insert(job.id.as_str()) {
            format!("job {} is listed twice", job.id)
        } else {
            continue;
        };
        return Err(BatchError::parse(command, problem, output));
    }
    Ok(())
}

/// Names given, each once (`what`: `node`, `queue`).
fn check_names<'a>(
    command: &str,
    what: &str,
    names: impl Iterator<Item = &'a str>,
    output: &str,
) -> Result<(), BatchError> {
    let mut seen = BTreeSet::new();
    for name in names {
        let problem = if name.trim().is_empty() {
            format!("a {what} without a name")
        } else if !seen.insert(name) {
            format!("{what} {name:?} is listed twice")
        } else {
            continue;
        };
        return Err(BatchError::parse(command, problem, output));
    }
    Ok(())
}

impl Exec {
    fn command(&self, op: Op) -> String {
        format!("{} {}", self.program.display(), op.name())
    }

    /// `cancel`, `hold`, `release`, `signal`: answered `{}`.
    async fn act(&self, op: Op, id: &str, signal: Option<&str>) -> Result<(), BatchError> {
        check_job_id(id)?;
        let request = Request {
            id: Some(id),
            signal,
            ..Request::new(op)
        };
        self.call::<Done>(op, &request).await.map(|_| ())
    }
}

#[async_trait]
impl BatchSystem for Exec {
    fn name(&self) -> &'static str {
        NAME
    }

    /// The script is the job's body, which the plugin is sent with the job; the command, the
    /// plugin's call.
    fn render(&self, spec: &JobSpec) -> Result<Rendered, BatchError> {
        spec.check()?;
        let mut script = String::from("#!/bin/sh\n");
        for line in spec.script_body() {
            script.push_str(&line);
            script.push('\n');
        }
        Ok(Rendered {
            script,
            command: vec![self.program.display().to_string(), Op::Submit.name().into()],
        })
    }

    async fn submit(&self, spec: &JobSpec) -> Result<String, BatchError> {
        let rendered = self.render(spec)?;
        let request = Request {
            spec: Some(spec),
            name: Some(spec.job_name()),
            script: Some(rendered.script),
            ..Request::new(Op::Submit)
        };
        let (submitted, output): (Submitted, _) = self.call(Op::Submit, &request).await?;
        if !is_job_id(&submitted.id) {
            return Err(BatchError::parse(
                &self.command(Op::Submit),
                format!("{:?} is not a job id", submitted.id),
                &output,
            ));
        }
        Ok(submitted.id)
    }

    /// The plugin is given the filter; only the jobs that match are kept, so one may ignore it.
    async fn jobs(&self, filter: &JobFilter) -> Result<Vec<Job>, BatchError> {
        let request = Request {
            filter: Some(filter),
            ..Request::new(Op::Jobs)
        };
        let (Jobs { mut jobs }, output) = self.call(Op::Jobs, &request).await?;
        check_jobs(&self.command(Op::Jobs), &jobs, &output)?;
        jobs.retain(|j| filter.matches(j));
        Ok(jobs)
    }

    async fn job(&self, id: &str) -> Result<Job, BatchError> {
        check_job_id(id)?;
        let request = Request {
            id: Some(id),
            ..Request::new(Op::Job)
        };
        let (OneJob { job }, output) = self.call(Op::Job, &request).await?;
        let command = self.command(Op::Job);
        check_jobs(&command, std::slice::from_ref(&job), &output)?;
        if job.id != id {
            return Err(BatchError::parse(
                &command,
                format!("asked for job {id}, answered job {}", job.id),
                &output,
            ));
        }
        Ok(job)
    }

    async fn cancel(&self, id: &str) -> Result<(), BatchError> {
        self.act(Op::Cancel, id, None).await
    }

    async fn hold(&self, id: &str) -> Result<(), BatchError> {
        self.act(Op::Hold, id, None).await
    }

    async fn release(&self, id: &str) -> Result<(), BatchError> {
        self.act(Op::Release, id, None).await
    }

    async fn signal(&self, id: &str, signal: &str) -> Result<(), BatchError> {
        let signal = check_signal(signal)?;
        self.act(Op::Signal, id, Some(signal)).await
    }

    async fn nodes(&self) -> Result<Vec<Node>, BatchError> {
        let (Nodes { nodes }, output) = self.call(Op::Nodes, &Request::new(Op::Nodes)).await?;
        let names = nodes.iter().map(|n| n.name.as_str());
        check_names(&self.command(Op::Nodes), "node", names, &output)?;
        Ok(nodes)
    }

    async fn config(&self) -> Result<SchedulerConfig, BatchError> {
        let (Config { config }, output) = self.call(Op::Config, &Request::new(Op::Config)).await?;
        let names = config.queues.iter().map(|q| q.name.as_str());
        check_names(&self.command(Op::Config), "queue", names, &output)?;
        Ok(config)
    }

    async fn apply(&self, change: &ConfigChange) -> Result<(), BatchError> {
        let request = Request {
            change: Some(change),
            ..Request::new(Op::Apply)
        };
        self.call::<Done>(Op::Apply, &request).await.map(|_| ())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_ignored_field_is_named_where_it_is() {
        let sent = serde_json::json!({"jobs": [
            {"id": "1", "name": "a", "user": "u", "state": "done", "native_state": "D",
             "reason": null},
            {"id": "2", "name": "b", "user": "u", "state": "done", "native_state": "D",
             "colour": "red"}]});
        let e = read::<Jobs>("plugin jobs", &sent, "out").unwrap_err();
        assert!(
            e.to_string().contains("unknown field jobs[1].colour"),
            "{e}"
        );
        let e = read::<Jobs>(
            "plugin jobs",
            &serde_json::json!({"jobs": [{"id": "1"}]}),
            "out",
        )
        .unwrap_err();
        assert!(
            e.to_string().contains("jobs[0]: missing field `name`"),
            "{e}"
        );
        assert!(single_object("{} {}").is_err());
        assert!(single_object("[]").is_err());
        assert!(single_object(" {}\n").is_ok());
    }
}
