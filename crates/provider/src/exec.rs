//! `exec`: a provider written by the user as a plugin, any executable that reads one JSON
//! request on standard input and writes one JSON response on standard output (protocol version
//! 1, described in docs/plugins.md; an example is examples/plugins/local_agents.py).
//!
//! Options:
//! - `command` (absolute path, required): the plugin;
//! - `args` (list of strings, default none): its arguments;
//! - `env` (map, default empty): variables of its environment;
//! - `secret_env` (map, default empty; a secret, redacted in API answers): more variables, for
//!   credentials; they win over `env`;
//! - `timeout_secs` (1..=3600, default 60): longest one call may take; then the plugin and its
//!   process group are killed and the call fails as transient.
//!
//! The plugin runs in the group's state directory, in a process group of its own, with an
//! environment of `PATH`, `HOME`, `USER`, `LOGNAME`, `LANG`, `LC_ALL`, `TZ` and `TMPDIR` from the
//! manager, then `env` and `secret_env`: nothing else of the manager's (its credentials) leaks,
//! and no secret is ever on the plugin's command line. The bootstrap tokens of a launch are in the
//! request, on standard input; the plugin delivers them to its instances.
//!
//! Responses are checked strictly (one JSON object and nothing else, known fields and states,
//! agents that were asked for): anything else, a non-zero exit without an error object, or a
//! timeout is a transient failure naming what was wrong, with at most ~200 characters of the
//! output and the last lines of standard error. An error object carries its own class. A plugin
//! that exits without reading its request fails the write with EPIPE (the manager ignores
//! SIGPIPE); without an answer, the message says it closed its input.
//!
//! Tests (`tests/exec.rs`) run the example plugin (with a shell script standing in for `corral`)
//! and small plugins written by the tests that fail every other call, print garbage, hang, or
//! show their environment and arguments.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use async_trait::async_trait;
use corral_core::Slots;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;

use crate::local::{self, checked, KillGroupOnDrop};
use crate::{
    ConfigError, Context, ErrorClass, Instance, InstanceState, LaunchRequest, Provider,
    ProviderError, TemplateOffer,
};

mod pipes;
use pipes::{Captured, Fed, Pipes};

/// The protocol version sent in every request.
pub const PROTOCOL_VERSION: u32 = 1;
/// Variables of the manager's environment that a plugin gets.
const PASSED_ENV: [&str; 8] = [
    "PATH", "HOME", "USER", "LOGNAME", "LANG", "LC_ALL", "TZ", "TMPDIR",
];
/// Largest response read from a plugin's standard output.
const STDOUT_LIMIT: usize = 8 << 20;
/// How much of the end of a plugin's standard error is kept for messages.
const STDERR_KEEP: usize = 16 << 10;
/// Lines of standard error quoted in a message.
const STDERR_LINES: usize = 5;
/// Characters of output quoted in a message.
const EXCERPT_CHARS: usize = 200;
/// How long output pipes may stay open after the plugin exited (a process it started holds
/// them) before the call gives up on them.
const PIPE_GRACE: Duration = Duration::from_secs(2);

#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema), schema(as = OptionsExec))]
#[derive(Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Options {
    #[cfg_attr(feature = "openapi", schema(value_type = String))]
    #[serde(deserialize_with = "plugin_path")]
    pub command: PathBuf,
    #[serde(default, deserialize_with = "checked::args")]
    pub args: Vec<String>,
    #[serde(default, deserialize_with = "checked::env_map")]
    pub env: BTreeMap<String, String>,
    #[serde(default, deserialize_with = "checked::env_map")]
    pub secret_env: BTreeMap<String, String>,
    #[serde(default = "default_timeout", deserialize_with = "timeout_secs")]
    pub timeout_secs: u64,
}

/// Shows `secret_env`'s names only.
impl std::fmt::Debug for Options {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Options")
            .field("command", &self.command)
            .field("args", &self.args)
            .field("env", &self.env)
            .field("secret_env", &self.secret_env.keys().collect::<Vec<_>>())
            .field("timeout_secs", &self.timeout_secs)
            .finish()
    }
}

/// The longest `timeout_secs`.
pub const MAX_TIMEOUT_SECS: u64 = 3600;

fn default_timeout() -> u64 {
    60
}

fn timeout_secs<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    let secs = u64::deserialize(d)?;
    if (1..=MAX_TIMEOUT_SECS).contains(&secs) {
        Ok(secs)
    } else {
        Err(serde::de::Error::custom(format!(
            "{secs} is not within 1..={MAX_TIMEOUT_SECS}"
        )))
    }
}

fn plugin_path<'de, D: Deserializer<'de>>(d: D) -> Result<PathBuf, D::Error> {
    let path = PathBuf::from(checked::non_empty(d)?);
    if path.is_absolute() {
        Ok(path)
    } else {
        Err(serde::de::Error::custom(format!(
            "{} is not an absolute path",
            path.display()
        )))
    }
}

impl Options {
    /// The plugin is installed: an executable file (checked when a group is configured, so
    /// that a typo is refused at once rather than found at the first launch).
    pub fn check(&self) -> Result<(), ConfigError> {
        installed(&self.command).map_err(|why| {
            crate::options::invalid_option("command", format!("{}: {why}", self.command.display()))
        })
    }
}

/// Why `path` is not an executable file, if it is not.
fn installed(path: &std::path::Path) -> Result<(), String> {
    use std::os::unix::fs::PermissionsExt;
    let meta = std::fs::metadata(path).map_err(|e| e.to_string())?;
    if !meta.is_file() || meta.permissions().mode() & 0o111 == 0 {
        return Err("is not an executable file".into());
    }
    Ok(())
}

pub struct ExecProvider {
    options: Options,
    context: Context,
}

pub async fn connect(options: Options, context: Context) -> Result<ExecProvider, ProviderError> {
    let fatal = |why: String| {
        ProviderError::fatal(format!(
            "exec provider: plugin {}: {why}",
            options.command.display()
        ))
    };
    installed(&options.command).map_err(fatal)?;
    std::fs::create_dir_all(&context.state_dir).map_err(|e| {
        fatal(format!(
            "creating its directory {}: {e}",
            context.state_dir.display()
        ))
    })?;
    Ok(ExecProvider { options, context })
}

/// One call to the plugin.
#[derive(Debug, Clone, Copy)]
enum Op<'a> {
    Templates,
    Launch {
        template: &'a str,
        requests: &'a [LaunchRequest],
    },
    Terminate {
        ids: &'a [String],
    },
    List,
}

impl Op<'_> {
    fn name(&self) -> &'static str {
        match self {
            Op::Templates => "templates",
            Op::Launch { .. } => "launch",
            Op::Terminate { .. } => "terminate",
            Op::List => "list",
        }
    }
}

#[derive(Serialize)]
struct Request<'a> {
    version: u32,
    op: &'static str,
    group: &'a str,
    manager_url: &'a str,
    templates: Vec<TemplateInfo<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    template: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    requests: Option<&'a [LaunchRequest]>,
    #[serde(skip_serializing_if = "Option::is_none")]
    ids: Option<&'a [String]>,
}

#[derive(Serialize)]
struct TemplateInfo<'a> {
    name: &'a str,
    /// Canonical form, `cpu=2,mem=4GiB`.
    slots: String,
    price_per_hour: f64,
    labels: &'a BTreeMap<String, String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ErrorResponse {
    error: PluginError,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PluginError {
    class: ErrorClass,
    message: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TemplatesResponse {
    templates: Vec<OfferResponse>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct OfferResponse {
    name: String,
    #[serde(default)]
    slots: String,
    #[serde(default)]
    price_per_hour: Option<f64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct InstancesResponse {
    instances: Vec<InstanceResponse>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct InstanceResponse {
    id: String,
    #[serde(default)]
    agent_id: Option<String>,
    #[serde(default)]
    template: Option<String>,
    state: InstanceState,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct EmptyResponse {}

/// What a plugin printed, and how it ended.
#[derive(Debug)]
struct Output {
    status: ExitStatus,
    stdout: Captured,
    stderr: Captured,
}

impl ExecProvider {
    fn plugin(&self) -> String {
        self.options.command.display().to_string()
    }

    fn request<'a>(&'a self, op: Op<'a>) -> Request<'a> {
        let (template, requests, ids) = match op {
            Op::Launch { template, requests } => (Some(template), Some(requests), None),
            Op::Terminate { ids } => (None, None, Some(ids)),
            Op::Templates | Op::List => (None, None, None),
        };
        Request {
            version: PROTOCOL_VERSION,
            op: op.name(),
            group: &self.context.group,
            manager_url: &self.context.manager_url,
            templates: self
                .context
                .templates
                .iter()
                .map(|t| TemplateInfo {
                    name: &t.name,
                    slots: t.slots.to_string(),
                    price_per_hour: t.price_per_hour,
                    labels: &t.labels,
                })
                .collect(),
            template,
            requests,
            ids,
        }
    }

    /// Runs the plugin for `op` and reads its response into `T`, checked strictly.
    async fn call<T: DeserializeOwned>(&self, op: Op<'_>) -> Result<T, ProviderError> {
        let input = serde_json::to_vec(&self.request(op)).map_err(|e| {
            ProviderError::fatal(format!("exec provider: encoding the request: {e}"))
        })?;
        let total = input.len();
        let (output, fed) = self.run(op.name(), input).await?;
        let value = interpret(&self.plugin(), op.name(), &output).map_err(|mut e| {
            // A plugin that answers without reading its request is fine; one that does not
            // answer is told why the request may not have reached it.
            if let Some(Fed::Closed { written }) = fed {
                if e.class == ErrorClass::Transient {
                    e.message = format!(
                        "{}; it closed its standard input after reading {written} of the \
                         request's {total} bytes and exited ({}) without answering",
                        e.message, output.status
                    );
                }
            }
            e
        })?;
        serde_path_to_error::deserialize(value.clone()).map_err(|e| {
            self.invalid(
                op.name(),
                &format!("invalid response at {}: {}", e.path(), e.inner()),
                &value.to_string(),
            )
        })
    }

    fn invalid(&self, op: &str, problem: &str, output: &str) -> ProviderError {
        ProviderError::transient(format!(
            "plugin {} ({op}): {problem}; output: {}",
            self.plugin(),
            excerpt(output.as_bytes())
        ))
    }

    fn command(&self) -> tokio::process::Command {
        let mut command = tokio::process::Command::new(&self.options.command);
        command
            .args(&self.options.args)
            .env_clear()
            .current_dir(&self.context.state_dir)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            // Its own group, so that a timeout kills what it started too.
            .process_group(0)
            .kill_on_drop(true);
        for name in PASSED_ENV {
            if let Some(value) = std::env::var_os(name) {
                command.env(name, value);
            }
        }
        command
            .envs(&self.options.env)
            .envs(&self.options.secret_env);
        command
    }

    /// Runs the plugin with `input` on its standard input, within the timeout. Also says how
    /// the request was written, if that is known by the time the plugin exited.
    async fn run(&self, op: &str, input: Vec<u8>) -> Result<(Output, Option<Fed>), ProviderError> {
        let plugin = self.plugin();
        let mut child = self.command().spawn().map_err(|e| {
            let message = format!("exec provider: starting plugin {plugin} ({op}): {e}");
            match e.kind() {
                std::io::ErrorKind::NotFound | std::io::ErrorKind::PermissionDenied => {
                    ProviderError::fatal(message)
                }
                _ => ProviderError::transient(message),
            }
        })?;
        let pgid = child.id().and_then(|p| i32::try_from(p).ok()).unwrap_or(0);
        // Armed until the plugin is reaped: a dropped call kills the plugin's group.
        let mut group = KillGroupOnDrop::new(pgid);
        let mut pipes = Pipes::take(&mut child, input).ok_or_else(|| {
            ProviderError::transient(format!(
                "exec provider: plugin {plugin} ({op}): its pipes were not set up"
            ))
        })?;
        let timeout = Duration::from_secs(self.options.timeout_secs);
        match tokio::time::timeout(timeout, child.wait()).await {
            Ok(Ok(status)) => {
                group.disarm();
                let (Some(stdout), Some(stderr)) = (pipes.stdout().await, pipes.stderr().await)
                else {
                    return Err(ProviderError::transient(format!(
                        "plugin {plugin} ({op}) exited ({status}) but its output stayed open: \
                         a process it started holds it (redirect the output of what it starts)"
                    )));
                };
                if !stderr.bytes.is_empty() {
                    let text = String::from_utf8_lossy(&stderr.bytes);
                    tracing::debug!(plugin, op, stderr = %text, "plugin stderr");
                }
                let fed = pipes.fed().await;
                Ok((
                    Output {
                        status,
                        stdout,
                        stderr,
                    },
                    fed,
                ))
            }
            Ok(Err(e)) => Err(ProviderError::transient(format!(
                "exec provider: waiting for plugin {plugin} ({op}): {e}"
            ))),
            Err(_) => {
                let _ = local::signal_group(pgid, libc::SIGKILL);
                let _ = tokio::time::timeout(PIPE_GRACE, child.wait()).await;
                group.disarm();
                let stderr = pipes.stderr().await.unwrap_or_default();
                Err(ProviderError::transient(format!(
                    "plugin {plugin} ({op}) did not answer within {} s: killed its process \
                     group {pgid}{}",
                    self.options.timeout_secs,
                    stderr_tail(&stderr.bytes)
                )))
            }
        }
    }
}

/// The response of a plugin that ran: its error object as the error it names, or the one JSON
/// object it printed. Anything else is transient.
fn interpret(plugin: &str, op: &str, output: &Output) -> Result<Value, ProviderError> {
    let transient =
        |problem: String| ProviderError::transient(format!("plugin {plugin} ({op}): {problem}"));
    if output.stdout.truncated {
        return Err(transient(format!(
            "its response is longer than {STDOUT_LIMIT} bytes"
        )));
    }
    let response = single_json_object(&output.stdout.bytes);
    if let Ok(value) = &response {
        if value.get("error").is_some() {
            return Err(plugin_error(value.clone())
                .map(|e| ProviderError {
                    class: e.class,
                    message: format!("plugin {plugin} ({op}): {}", e.message),
                })
                .unwrap_or_else(|problem| {
                    transient(format!(
                        "invalid error object: {problem}; output: {}",
                        excerpt(&output.stdout.bytes)
                    ))
                }));
        }
    }
    if !output.status.success() {
        return Err(transient(format!(
            "exited with {} without an error object{}",
            output.status,
            stderr_tail(&output.stderr.bytes)
        )));
    }
    response.map_err(|problem| {
        transient(format!(
            "{problem}; output: {}{}",
            excerpt(&output.stdout.bytes),
            stderr_tail(&output.stderr.bytes)
        ))
    })
}

fn plugin_error(value: Value) -> Result<PluginError, String> {
    serde_path_to_error::deserialize::<_, ErrorResponse>(value)
        .map(|r| r.error)
        .map_err(|e| format!("at {}: {}", e.path(), e.inner()))
}

/// The one JSON object in `bytes` (white space around it allowed), or what is wrong.
fn single_json_object(bytes: &[u8]) -> Result<Value, String> {
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Err("no response on standard output".into());
    }
    let mut values = serde_json::Deserializer::from_slice(bytes).into_iter::<Value>();
    let value = match values.next() {
        Some(Ok(value)) => value,
        Some(Err(e)) => return Err(format!("the response is not JSON ({e})")),
        None => return Err("no response on standard output".into()),
    };
    let rest = &bytes[values.byte_offset()..];
    if !rest.iter().all(u8::is_ascii_whitespace) {
        return Err("extra output after the JSON response".into());
    }
    if !value.is_object() {
        return Err("the response is not a JSON object".into());
    }
    Ok(value)
}

/// At most [`EXCERPT_CHARS`] characters of `bytes`, for messages.
fn excerpt(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(bytes);
    let text = text.trim();
    if text.is_empty() {
        return "(none)".into();
    }
    let mut cut: String = text.chars().take(EXCERPT_CHARS).collect();
    if cut.len() < text.len() {
        cut.push('…');
    }
    format!("{cut:?}")
}

/// `; stderr: ...` with the last lines of standard error, or nothing.
fn stderr_tail(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(bytes);
    let lines: Vec<&str> = text
        .lines()
        .map(str::trim_end)
        .filter(|l| !l.is_empty())
        .collect();
    if lines.is_empty() {
        return String::new();
    }
    let last = lines[lines.len().saturating_sub(STDERR_LINES)..].join(" | ");
    let last: String = last.chars().rev().take(4 * EXCERPT_CHARS).collect();
    format!("; stderr: {}", last.chars().rev().collect::<String>())
}

impl ExecProvider {
    /// The instances of a response, checked: ids present and unique, states known (serde).
    fn instances(
        &self,
        op: &str,
        response: InstancesResponse,
    ) -> Result<Vec<Instance>, ProviderError> {
        let mut seen = BTreeSet::new();
        let mut instances = Vec::with_capacity(response.instances.len());
        for i in response.instances {
            let problem = if i.id.trim().is_empty() {
                Some("an instance has an empty id".to_string())
            } else if !seen.insert(i.id.clone()) {
                Some(format!("instance {:?} is listed twice", i.id))
            } else {
                None
            };
            if let Some(problem) = problem {
                return Err(ProviderError::transient(format!(
                    "plugin {} ({op}): invalid response: {problem}",
                    self.plugin()
                )));
            }
            instances.push(Instance {
                id: i.id,
                agent_id: i.agent_id,
                template: i.template,
                state: i.state,
            });
        }
        Ok(instances)
    }

    /// A launch answers only for the requests, of the template asked for.
    fn check_launched(
        &self,
        template: &str,
        requests: &[LaunchRequest],
        instances: &[Instance],
    ) -> Result<(), ProviderError> {
        let asked: BTreeSet<&str> = requests.iter().map(|r| r.agent_id.as_str()).collect();
        let mut answered = BTreeSet::new();
        for i in instances {
            let problem = match (i.agent_id.as_deref(), i.template.as_deref()) {
                (None, _) => Some(format!("instance {:?} has no agent_id", i.id)),
                (Some(a), _) if !asked.contains(a) => Some(format!(
                    "instance {:?} has agent_id {a:?}, which was not asked for",
                    i.id
                )),
                (Some(a), _) if !answered.insert(a) => {
                    Some(format!("agent {a:?} was launched twice"))
                }
                (_, Some(t)) if t != template => Some(format!(
                    "instance {:?} is of template {t:?}, not {template:?}",
                    i.id
                )),
                _ => None,
            };
            if let Some(problem) = problem {
                return Err(ProviderError::transient(format!(
                    "plugin {} (launch): invalid response: {problem}",
                    self.plugin()
                )));
            }
        }
        Ok(())
    }

    fn offers(&self, response: TemplatesResponse) -> Result<Vec<TemplateOffer>, ProviderError> {
        let invalid = |problem: String| {
            ProviderError::transient(format!(
                "plugin {} (templates): invalid response: {problem}",
                self.plugin()
            ))
        };
        let mut names = BTreeSet::new();
        let mut offers = Vec::with_capacity(response.templates.len());
        for t in response.templates {
            if t.name.trim().is_empty() {
                return Err(invalid("a template has an empty name".into()));
            }
            if !names.insert(t.name.clone()) {
                return Err(invalid(format!("template {:?} is offered twice", t.name)));
            }
            let slots = t
                .slots
                .parse::<Slots>()
                .map_err(|e| invalid(format!("template {:?}: slots {:?}: {e}", t.name, t.slots)))?;
            if t.price_per_hour.is_some_and(|p| !p.is_finite() || p < 0.0) {
                return Err(invalid(format!(
                    "template {:?}: price_per_hour must be a non-negative number",
                    t.name
                )));
            }
            offers.push(TemplateOffer {
                name: t.name,
                slots: slots.to_string(),
                price_per_hour: t.price_per_hour,
            });
        }
        Ok(offers)
    }
}

#[async_trait]
impl Provider for ExecProvider {
    async fn templates(&self) -> Result<Vec<TemplateOffer>, ProviderError> {
        let response: TemplatesResponse = self.call(Op::Templates).await?;
        self.offers(response)
    }

    async fn launch(
        &self,
        template: &str,
        requests: &[LaunchRequest],
    ) -> Result<Vec<Instance>, ProviderError> {
        if requests.is_empty() {
            return Ok(Vec::new());
        }
        let response: InstancesResponse = self.call(Op::Launch { template, requests }).await?;
        let instances = self.instances("launch", response)?;
        self.check_launched(template, requests, &instances)?;
        Ok(instances)
    }

    async fn terminate(&self, ids: &[String]) -> Result<(), ProviderError> {
        if ids.is_empty() {
            return Ok(());
        }
        let _: EmptyResponse = self.call(Op::Terminate { ids }).await?;
        Ok(())
    }

    async fn list(&self) -> Result<Vec<Instance>, ProviderError> {
        let response: InstancesResponse = self.call(Op::List).await?;
        self.instances("list", response)
    }
}

/// For the fuzzer (`fuzz/fuzz_targets/exec_answer.rs`): reads a plugin's answer to `op`
/// (`templates`, `launch` of agent `a-1` on template `small`, `terminate` or `list`) as a call
/// does, the plugin having exited with `code` after printing `stdout` and `stderr`. It must
/// never panic, whatever the plugin printed.
#[doc(hidden)]
pub fn fuzz_plugin_answer(
    op: &str,
    code: i32,
    stdout: &[u8],
    stderr: &[u8],
) -> Result<usize, ProviderError> {
    use std::os::unix::process::ExitStatusExt;
    fn parse<T: DeserializeOwned>(
        p: &ExecProvider,
        op: &str,
        v: Value,
    ) -> Result<T, ProviderError> {
        serde_path_to_error::deserialize(v.clone()).map_err(|e| {
            p.invalid(
                op,
                &format!("invalid response at {}: {}", e.path(), e.inner()),
                &v.to_string(),
            )
        })
    }
    let provider = ExecProvider {
        options: Options {
            command: "/fuzz/plugin".into(),
            args: Vec::new(),
            env: BTreeMap::new(),
            secret_env: BTreeMap::new(),
            timeout_secs: 1,
        },
        context: Context {
            group: "fuzz".into(),
            manager_url: "http://127.0.0.1:1".into(),
            templates: Vec::new(),
            corral_binary: PathBuf::new(),
            state_dir: PathBuf::new(),
        },
    };
    let output = Output {
        status: ExitStatus::from_raw((code & 0xff) << 8),
        stdout: Captured {
            bytes: stdout.to_vec(),
            truncated: false,
        },
        stderr: Captured {
            bytes: stderr.to_vec(),
            truncated: false,
        },
    };
    let value = interpret(&provider.plugin(), op, &output)?;
    match op {
        "templates" => provider
            .offers(parse(&provider, op, value)?)
            .map(|o| o.len()),
        "launch" => {
            let instances = provider.instances(op, parse(&provider, op, value)?)?;
            let requests = [LaunchRequest {
                agent_id: "a-1".into(),
                token: "t".into(),
            }];
            provider.check_launched("small", &requests, &instances)?;
            Ok(instances.len())
        }
        "terminate" => parse::<EmptyResponse>(&provider, op, value).map(|_| 0),
        _ => provider
            .instances(op, parse(&provider, op, value)?)
            .map(|i| i.len()),
    }
}

#[cfg(test)]
mod tests;
