//! `JobSpec`: a batch job as any scheduler can run it (after DRMAA2's job template and PSI/J's
//! `JobSpec`): what to run, where, with which resources and for how long, in which queue, as an
//! array, held or after other jobs; with the files it is given (inputs) and those collected when
//! it ends (outputs); and, for what the generic form cannot say, native options per scheduler.
//! Read from JSON or TOML; [`JobSpec::parse_json`] and [`JobSpec::parse_toml`] refuse a bad
//! specification naming the field (`resources.cpus_per_task`, `walltime`, `array`).

use std::collections::BTreeMap;

use serde::{Deserialize, Deserializer, Serialize};

use crate::BatchError;

/// A batch job to submit.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct JobSpec {
    /// The job's name in the scheduler [default: the executable's file name if it is a name a
    /// job may be given, else `corral`]. Names starting `corral.` are Corral's own (its pilots).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The program to run, with `arguments`; or give `script` instead.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub executable: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub arguments: Vec<String>,
    /// A `/bin/sh` script's body, instead of `executable`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub script: Option<String>,
    /// The working directory, absolute [default: the scheduler's, usually the submitter's home].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub directory: Option<String>,
    /// Files for standard input, output and error (relative to `directory`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stdin: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stdout: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stderr: Option<String>,
    /// Environment variables set for the job.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub environment: BTreeMap<String, String>,
    #[serde(default)]
    pub resources: Resources,
    /// The longest the job may run: seconds, `HH:MM:SS`, `D-HH:MM:SS`, or `90m`, `2h`, `1d`.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "walltime"
    )]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<crate::openapi::Walltime>))]
    pub walltime: Option<u64>,
    /// The queue (Slurm: partition).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue: Option<String>,
    /// The account (project) charged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub account: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub array: Option<ArraySpec>,
    /// Submit held: it waits until released.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub hold: bool,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dependencies: Vec<Dependency>,
    /// Native options per scheduler (`{"slurm": ["--qos=high"]}`), added as they are.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub native: BTreeMap<String, Vec<String>>,
    /// Files given with the job (relative paths), staged into `directory` before it starts.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub inputs: Vec<String>,
    /// Paths (relative to `directory`) collected when the job ends.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub outputs: Vec<String>,
}

/// What the job needs. Unset means the scheduler's default.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct Resources {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nodes: Option<u32>,
    /// Tasks (processes) in all.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tasks: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpus_per_task: Option<u32>,
    /// Memory per node in bytes; written `4GiB`, `500MB`, or a number of bytes.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "memory"
    )]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<corral_core::openapi::Amount>))]
    pub memory_per_node: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpus_per_node: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpus_per_task: Option<u32>,
    /// The nodes are the job's alone.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub exclusive: bool,
}

/// A job array: tasks `start..=end` by `step`, at most `max_concurrent` at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct ArraySpec {
    pub start: u32,
    pub end: u32,
    #[serde(default = "one")]
    pub step: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_concurrent: Option<u32>,
}

fn one() -> u32 {
    1
}

/// Start only after another job ended: successfully (`after_ok`) or in any way (`after_any`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct Dependency {
    pub kind: DependencyKind,
    pub job: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum DependencyKind {
    AfterOk,
    AfterAny,
}

/// The longest name a job may have (Grid Engine and PBS cut longer ones).
pub const MAX_NAME: usize = 200;

/// How the names of Corral's own jobs start (pilots: `corral.<group>.<agent>`): refused in
/// what users submit ([`JobSpec::check_submitted`]), so that no user's job passes for one.
pub const RESERVED_NAME_PREFIX: &str = "corral.";

impl JobSpec {
    /// Reads and checks a specification in JSON.
    pub fn parse_json(text: &str) -> Result<JobSpec, BatchError> {
        let de = &mut serde_json::Deserializer::from_str(text);
        let spec: JobSpec = serde_path_to_error::deserialize(de).map_err(|e| {
            let field = e.path().to_string();
            BatchError::invalid(field_or_spec(&field), e.into_inner().to_string())
        })?;
        spec.check()?;
        Ok(spec)
    }

    /// Reads and checks a specification in TOML.
    pub fn parse_toml(text: &str) -> Result<JobSpec, BatchError> {
        let de = toml::Deserializer::parse(text)
            .map_err(|e| BatchError::invalid("spec", e.message().to_string()))?;
        let spec: JobSpec = serde_path_to_error::deserialize(de).map_err(|e| {
            let field = e.path().to_string();
            BatchError::invalid(field_or_spec(&field), e.into_inner().message().to_string())
        })?;
        spec.check()?;
        Ok(spec)
    }

    /// [`JobSpec::check`], and what a user may not ask for: a name in Corral's own prefix
    /// ([`RESERVED_NAME_PREFIX`]). For specifications from users; Corral's own jobs (pilots,
    /// sessions) are checked with [`JobSpec::check`].
    pub fn check_submitted(&self) -> Result<(), BatchError> {
        self.check()?;
        match &self.name {
            Some(name) if is_reserved(name) => Err(BatchError::invalid(
                "name",
                format!("{name:?}: names starting {RESERVED_NAME_PREFIX:?} are Corral's own"),
            )),
            _ => Ok(()),
        }
    }

    /// Checks what the types cannot: one command, sensible counts and ranges, paths and names
    /// a scheduler can take.
    pub fn check(&self) -> Result<(), BatchError> {
        match (&self.executable, &self.script) {
            (None, None) => {
                return Err(BatchError::invalid(
                    "executable",
                    "give executable or script",
                ))
            }
            (Some(_), Some(_)) => {
                return Err(BatchError::invalid(
                    "script",
                    "give executable or script, not both",
                ))
            }
            (Some(e), None) if e.trim().is_empty() => {
                return Err(BatchError::invalid("executable", "must not be empty"))
            }
            (None, Some(_)) if !self.arguments.is_empty() => {
                return Err(BatchError::invalid("arguments", "only go with executable"))
            }
            _ => {}
        }
        if let Some(name) = &self.name {
            check_name(name)?;
        }
        if let Some(dir) = self.directory.as_deref().filter(|d| !d.starts_with('/')) {
            return Err(BatchError::invalid(
                "directory",
                format!("{dir:?} is not absolute"),
            ));
        }
        // Those marked `true` become options on a script's header line, which ends at a newline.
        let texts = [
            ("executable", self.executable.as_deref(), false),
            ("script", self.script.as_deref(), false),
            ("directory", self.directory.as_deref(), true),
            ("stdin", self.stdin.as_deref(), true),
            ("stdout", self.stdout.as_deref(), true),
            ("stderr", self.stderr.as_deref(), true),
            ("queue", self.queue.as_deref(), true),
            ("account", self.account.as_deref(), true),
        ];
        for (field, text, header) in texts {
            let Some(text) = text else { continue };
            if text.contains('\0') {
                return Err(BatchError::invalid(field, "holds a NUL character"));
            }
            if header && (text.contains('\n') || text.contains('\r')) {
                return Err(BatchError::invalid(field, "holds a line break"));
            }
        }
        // A program's path has no use for them, and its file name may name the job.
        if let Some(executable) = &self.executable {
            if executable.chars().any(char::is_control) {
                return Err(BatchError::invalid(
                    "executable",
                    "holds a control character (a line break, a tab...)",
                ));
            }
        }
        for (i, argument) in self.arguments.iter().enumerate() {
            if argument.contains('\0') {
                return Err(BatchError::invalid(
                    format!("arguments[{i}]"),
                    "holds a NUL character",
                ));
            }
        }
        for (name, value) in &self.environment {
            if !is_env_name(name) {
                return Err(BatchError::invalid(
                    format!("environment.{name}"),
                    "not a variable name (letters, digits and _, not starting with a digit)",
                ));
            }
            if value.contains('\0') {
                return Err(BatchError::invalid(
                    format!("environment.{name}"),
                    "holds a NUL character",
                ));
            }
        }
        self.resources.check()?;
        if self.walltime == Some(0) {
            return Err(BatchError::invalid("walltime", "must be more than 0"));
        }
        if let Some(array) = &self.array {
            array.check()?;
        }
        for (i, dependency) in self.dependencies.iter().enumerate() {
            if !is_job_id(&dependency.job) {
                return Err(BatchError::invalid(
                    format!("dependencies[{i}].job"),
                    format!("{:?} is not a job id", dependency.job),
                ));
            }
        }
        for (scheduler, options) in &self.native {
            for (i, option) in options.iter().enumerate() {
                if option.contains('\n') || option.contains('\r') || option.contains('\0') {
                    return Err(BatchError::invalid(
                        format!("native.{scheduler}[{i}]"),
                        "holds a line break or NUL",
                    ));
                }
            }
        }
        for (field, paths) in [("inputs", &self.inputs), ("outputs", &self.outputs)] {
            for (i, path) in paths.iter().enumerate() {
                corral_core::paths::session_path(path).map_err(|e| {
                    BatchError::invalid(format!("{field}[{i}]"), format!("the path {path:?} {e}"))
                })?;
            }
        }
        // Who stages the files makes their directory (the manager: under its work_dir).
        Ok(())
    }

    /// The body of a job's `/bin/sh` script, after the scheduler's header: the environment
    /// exported (values with commas or quotes would not survive the schedulers' own export
    /// options), then the command.
    pub fn script_body(&self) -> Vec<String> {
        let mut lines: Vec<String> = self
            .environment
            .iter()
            .map(|(name, value)| format!("export {name}={}", crate::shell_quote(value)))
            .collect();
        match (&self.executable, &self.script) {
            (Some(executable), _) => {
                let words: Vec<String> = std::iter::once(executable)
                    .chain(&self.arguments)
                    .map(|w| crate::shell_quote(w))
                    .collect();
                lines.push(format!("exec {}", words.join(" ")));
            }
            (None, Some(body)) => lines.push(body.trim_end().to_string()),
            (None, None) => {}
        }
        lines
    }

    /// The name the scheduler shows: `name`, or the executable's file name when it passes the
    /// checks a given name does (it goes onto a header line too) and is not one of Corral's own,
    /// else `corral`.
    pub fn job_name(&self) -> String {
        if let Some(name) = &self.name {
            return name.clone();
        }
        self.executable
            .as_deref()
            .and_then(|e| e.rsplit('/').next())
            .filter(|n| check_name(n).is_ok() && !is_reserved(n))
            .map_or_else(|| "corral".to_string(), str::to_string)
    }
}

impl Resources {
    /// One node and one task with `slots`' CPUs and GPUs (whole, rounded up) and memory: what a
    /// pilot of a template, or a session of that request, asks of the scheduler.
    pub fn for_slots(slots: &corral_core::Slots) -> Resources {
        let whole = |name: &str| -> Option<u32> {
            let milli = slots.get(name).milli();
            (milli > 0).then(|| u32::try_from(milli.div_ceil(1000)).unwrap_or(u32::MAX))
        };
        // Amounts are kept in thousandths; memory's unit is the byte.
        let memory = slots.get("mem").milli() / 1000;
        Resources {
            nodes: Some(1),
            tasks: Some(1),
            cpus_per_task: whole("cpu"),
            memory_per_node: (memory > 0).then_some(memory),
            gpus_per_node: whole("gpu"),
            ..Resources::default()
        }
    }

    fn check(&self) -> Result<(), BatchError> {
        for (field, value) in [
            ("nodes", self.nodes),
            ("tasks", self.tasks),
            ("cpus_per_task", self.cpus_per_task),
        ] {
            if value == Some(0) {
                return Err(BatchError::invalid(
                    format!("resources.{field}"),
                    "must be at least 1",
                ));
            }
        }
        if self.memory_per_node == Some(0) {
            return Err(BatchError::invalid(
                "resources.memory_per_node",
                "must be more than 0",
            ));
        }
        if self.gpus_per_node.is_some() && self.gpus_per_task.is_some() {
            return Err(BatchError::invalid(
                "resources.gpus_per_task",
                "give gpus_per_node or gpus_per_task, not both",
            ));
        }
        Ok(())
    }
}

impl ArraySpec {
    fn check(&self) -> Result<(), BatchError> {
        if self.end < self.start {
            return Err(BatchError::invalid(
                "array",
                format!("the range {}-{} is reversed", self.start, self.end),
            ));
        }
        if self.step == 0 {
            return Err(BatchError::invalid("array.step", "must be at least 1"));
        }
        if self.max_concurrent == Some(0) {
            return Err(BatchError::invalid(
                "array.max_concurrent",
                "must be at least 1",
            ));
        }
        Ok(())
    }

    /// How many tasks the array has (at least one).
    pub fn tasks(&self) -> u32 {
        (self.end - self.start) / self.step + 1
    }
}

fn check_name(name: &str) -> Result<(), BatchError> {
    if name.is_empty() || name.len() > MAX_NAME {
        return Err(BatchError::invalid(
            "name",
            format!("must have 1 to {MAX_NAME} characters"),
        ));
    }
    if !name
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || "._-".contains(c))
    {
        return Err(BatchError::invalid(
            "name",
            format!(
                "{name:?}: only letters, digits, '.', '_' and '-' (every scheduler takes those)"
            ),
        ));
    }
    if !name.starts_with(|c: char| c.is_ascii_alphabetic()) {
        return Err(BatchError::invalid(
            "name",
            "must start with a letter (Grid Engine and PBS need one)",
        ));
    }
    Ok(())
}

/// Whether `name` is in Corral's own prefix (whatever its case: some schedulers fold it).
fn is_reserved(name: &str) -> bool {
    name.get(..RESERVED_NAME_PREFIX.len())
        .is_some_and(|p| p.eq_ignore_ascii_case(RESERVED_NAME_PREFIX))
}

fn is_env_name(name: &str) -> bool {
    !name.is_empty()
        && !name.starts_with(|c: char| c.is_ascii_digit())
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// A job id as schedulers write them: `123`, `123_4` (Slurm array task), `123.4`, `123[4]`,
/// `123.server` (PBS).
pub fn is_job_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 128
        && id.starts_with(|c: char| c.is_ascii_digit())
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "._-[]".contains(c))
}

fn field_or_spec(path: &str) -> &str {
    if path.is_empty() || path == "." {
        "spec"
    } else {
        path
    }
}

/// Reads a walltime: seconds, or a string of the forms [`parse_walltime`] takes.
fn walltime<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Form {
        Seconds(u64),
        Text(String),
    }
    match Option::<Form>::deserialize(d)? {
        None => Ok(None),
        Some(Form::Seconds(s)) => Ok(Some(s)),
        Some(Form::Text(t)) => parse_walltime(&t)
            .map(Some)
            .map_err(serde::de::Error::custom),
    }
}

/// Seconds from `HH:MM:SS`, `MM:SS`, `D-HH:MM:SS`, or a number with a unit: `90s`, `30m`,
/// `2h`, `1d`.
pub fn parse_walltime(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let bad =
        || format!("{text:?} is not a duration (seconds, HH:MM:SS, D-HH:MM:SS, or 90m, 2h, 1d)");
    let number = |s: &str| -> Result<u64, String> {
        if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
            return Err(bad());
        }
        s.parse::<u64>().map_err(|_| bad())
    };
    if let Some(unit) = t.chars().last().filter(|c| c.is_ascii_alphabetic()) {
        let amount = number(&t[..t.len() - 1])?;
        let scale = match unit {
            's' => 1,
            'm' => 60,
            'h' => 3600,
            'd' => 86_400,
            _ => return Err(bad()),
        };
        return amount.checked_mul(scale).ok_or_else(bad);
    }
    let (days, clock) = match t.split_once('-') {
        Some((d, rest)) => (number(d)?, rest),
        None => (0, t),
    };
    let parts: Vec<&str> = clock.split(':').collect();
    let (h, m, s) = match parts.as_slice() {
        [s] if days == 0 => (0, 0, number(s)?),
        [m, s] => (0, number(m)?, number(s)?),
        [h, m, s] => (number(h)?, number(m)?, number(s)?),
        _ => return Err(bad()),
    };
    if m >= 60 || s >= 60 && parts.len() > 1 {
        return Err(bad());
    }
    days.checked_mul(86_400)
        .and_then(|d| d.checked_add(h.checked_mul(3600)?))
        .and_then(|t| t.checked_add(m * 60 + s))
        .ok_or_else(bad)
}

/// Reads memory: bytes, or an amount with a unit (`4GiB`, `500MB`, `1.5G`).
fn memory<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Form {
        Bytes(u64),
        Text(String),
    }
    match Option::<Form>::deserialize(d)? {
        None => Ok(None),
        Some(Form::Bytes(b)) => Ok(Some(b)),
        Some(Form::Text(t)) => corral_core::slots::Quantity::parse("mem", &t)
            .map(|q| Some(q.milli() / 1000))
            .map_err(serde::de::Error::custom),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn field_of(text: &str) -> (String, String) {
        match JobSpec::parse_json(text).unwrap_err() {
            BatchError::InvalidSpec { field, message } => (field, message),
            other => panic!("not an invalid spec: {other}"),
        }
    }

    #[test]
    fn a_full_spec_reads_from_json_and_toml_alike() {
        let json = r#"{"name": "train", "executable": "/usr/bin/python3",
            "arguments": ["train.py", "--epochs", "3"], "directory": "/scratch/u",
            "environment": {"SEED": "1"},
            "resources": {"nodes": 1, "tasks": 2, "cpus_per_task": 4, "memory_per_node": "4GiB",
                          "gpus_per_node": 1, "exclusive": true},
            "walltime": "01:30:00", "queue": "gpu", "account": "proj",
            "array": {"start": 1, "end": 4, "max_concurrent": 2}, "hold": true,
            "dependencies": [{"kind": "after_ok", "job": "12"}],
            "native": {"slurm": ["--qos=high"]}, "inputs": ["data/in.csv"], "outputs": ["out"]}"#;
        let spec = JobSpec::parse_json(json).unwrap();
        assert_eq!(spec.walltime, Some(5400));
        assert_eq!(spec.resources.memory_per_node, Some(4 << 30));
        assert_eq!(spec.array.unwrap().tasks(), 4);
        let toml = r#"
            name = "train"
            executable = "/usr/bin/python3"
            arguments = ["train.py", "--epochs", "3"]
            directory = "/scratch/u"
            walltime = "90m"
            queue = "gpu"
            account = "proj"
            hold = true
            inputs = ["data/in.csv"]
            outputs = ["out"]
            native = { slurm = ["--qos=high"] }
            environment = { SEED = "1" }
            dependencies = [{ kind = "after_ok", job = "12" }]
            [resources]
            nodes = 1
            tasks = 2
            cpus_per_task = 4
            memory_per_node = "4GiB"
            gpus_per_node = 1
            exclusive = true
            [array]
            start = 1
            end = 4
            max_concurrent = 2
        "#;
        assert_eq!(JobSpec::parse_toml(toml).unwrap(), spec);
        // And back: what a spec writes, it reads.
        let again = JobSpec::parse_json(&serde_json::to_string(&spec).unwrap()).unwrap();
        assert_eq!(again, spec);
    }

    #[test]
    fn bad_specs_are_refused_naming_the_field() {
        let cases = [
            (
                r#"{"executable": "x", "resources": {"cpus_per_task": -1}}"#,
                "resources.cpus_per_task",
            ),
            (r#"{"executable": "x", "walltime": 0}"#, "walltime"),
            (r#"{"executable": "x", "walltime": "00:00:00"}"#, "walltime"),
            (r#"{"executable": "x", "walltime": "soon"}"#, "walltime"),
            (
                r#"{"executable": "x", "resources": {"memory_per_node": "4XB"}}"#,
                "resources.memory_per_node",
            ),
            (
                r#"{"executable": "x", "array": {"start": 5, "end": 1}}"#,
                "array",
            ),
            (
                r#"{"executable": "x", "resources": {"nodes": 0}}"#,
                "resources.nodes",
            ),
            (
                r#"{"executable": "x", "inputs": ["../etc/passwd"], "directory": "/w"}"#,
                "inputs[0]",
            ),
            (
                r#"{"executable": "x", "directory": "relative"}"#,
                "directory",
            ),
            (r#"{"executable": "x", "queue": "a\nb"}"#, "queue"),
            (r#"{"executable": "x", "name": "9lives"}"#, "name"),
            (
                r#"{"executable": "x", "environment": {"1A": "v"}}"#,
                "environment.1A",
            ),
            (
                r#"{"executable": "x", "dependencies": [{"kind": "after_ok", "job": "x; rm"}]}"#,
                "dependencies[0].job",
            ),
            (r#"{"executable": "x", "colour": "red"}"#, "colour"),
            (r#"{"arguments": ["a"]}"#, "executable"),
            (r#"{"executable": "x", "script": "true"}"#, "script"),
        ];
        for (text, field) in cases {
            let (got, message) = field_of(text);
            assert_eq!(got, field, "{text}: {message}");
        }
        let (_, message) = field_of(r#"{"executable": "x", "array": {"start": 5, "end": 1}}"#);
        assert!(message.contains("reversed"), "{message}");
        let (_, message) =
            field_of(r#"{"executable": "x", "resources": {"memory_per_node": "4XB"}}"#);
        assert!(message.contains("XB"), "{message}");
    }

    #[test]
    fn walltimes_in_the_forms_schedulers_write() {
        for (text, secs) in [
            ("59", 59),
            ("10:00", 600),
            ("01:30:00", 5400),
            ("2-00:00:00", 172_800),
            ("90s", 90),
            ("30m", 1800),
            ("2h", 7200),
            ("1d", 86_400),
        ] {
            assert_eq!(parse_walltime(text), Ok(secs), "{text}");
        }
        for text in ["", "1:60:00", "h", "-1", "1:2:3:4", "1.5h", "2w"] {
            assert!(parse_walltime(text).is_err(), "{text}");
        }
    }

    #[test]
    fn a_name_from_the_executable_never_breaks_the_header() {
        // The reported executable: with no name, it rendered a header line of its own.
        let spec = JobSpec {
            executable: Some("true\nid > injected.out\n#".into()),
            directory: Some("/w".into()),
            hold: true,
            ..JobSpec::default()
        };
        let e = spec.check().unwrap_err();
        assert!(
            matches!(&e, BatchError::InvalidSpec { field, .. } if field == "executable"),
            "{e}"
        );
        for executable in ["/bin/a\tb", "/bin/x\r", "/bin/\u{1b}[2J"] {
            let spec = JobSpec {
                executable: Some(executable.into()),
                ..JobSpec::default()
            };
            assert!(spec.check().is_err(), "{executable:?}");
        }
        // A file name that could not be given as a name does not name the job.
        for (executable, name) in [
            ("/usr/bin/python3", "python3"),
            ("/usr/bin/g++", "corral"),
            ("/opt/7z", "corral"),
            ("/opt/my prog", "corral"),
            ("/opt/corral.pil.pil-0123456789", "corral"),
            ("/opt/", "corral"),
        ] {
            let spec = JobSpec {
                executable: Some(executable.into()),
                ..JobSpec::default()
            };
            assert_eq!(spec.job_name(), name, "{executable:?}");
        }
    }

    #[test]
    fn users_cannot_give_a_job_one_of_corrals_own_names() {
        for name in ["corral.pil.pil-0123456789", "Corral.gpu.x", "corral."] {
            let spec = JobSpec {
                name: Some(name.into()),
                executable: Some("/bin/true".into()),
                ..JobSpec::default()
            };
            let e = spec.check_submitted().unwrap_err();
            assert!(
                matches!(&e, BatchError::InvalidSpec { field, .. } if field == "name"),
                "{name}: {e}"
            );
            // Corral's own jobs are checked without it.
            spec.check().unwrap();
        }
        let spec = JobSpec {
            name: Some("corral-echo".into()),
            executable: Some("/bin/true".into()),
            ..JobSpec::default()
        };
        spec.check_submitted().unwrap();
    }
}
