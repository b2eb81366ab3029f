//! `batch`: pilot jobs. Each instance is a job of the site's batch system (Slurm, Grid Engine,
//! PBS/Torque, LSF or a plugin, through `corral-batch`) that runs `corral agent`: the group grows
//! with the scheduler's nodes, the way dask-jobqueue grows its workers.
//!
//! Options:
//! - `batch`: the batch system and how its commands run, as `corral batch bind` takes it
//!   (`{"system": "slurm", "options": {"run_as": "...", "work_dir": "...", ...}}`);
//!   `options.work_dir` is required: each pilot gets `WORK_DIR/pilots/<agent_id>`, on a file
//!   system the manager's host and the nodes share;
//! - `binary` (path on the nodes, default: the manager's own `corral`), `runtime` and
//!   `extra_args`: as for the `process` provider;
//! - `queue`, `account`, `native`: the pilot job's queue (Slurm: partition), account, and native
//!   options per scheduler;
//! - `walltime_secs`: the pilot's walltime [default: the queue's]; with it, the agent drains
//!   itself `drain_before_secs` (default 300; more than half the walltime counts as half)
//!   before the end, so that it is empty when the scheduler ends the job.
//!
//! A launch makes the pilot's directory and writes the one-time bootstrap token into a file
//! there, both as the jobs' account with a umask of 077; the job script reads the token, removes
//! the file and starts the agent (so the token is neither in the job's environment, which
//! `qstat -j` shows every user on Grid Engine, nor in its arguments). The file sits there while
//! the job is queued, readable by that account's other processes; so the token is bound to the
//! job: the script hands the agent its job's id from the scheduler's environment
//! (`SystemName::job_id_variable`, `corral agent --batch-job`), and the manager takes the token
//! only from a join that names the job it recorded for that pilot while the scheduler says the
//! job runs (corral-manager's `pilots.rs`). The job asks for one node,
//! one task, the template's CPUs, memory and GPUs; the agent offers the same. Its output goes to
//! `agent.out` and `agent.err` in the pilot's directory.
//!
//! The instance id is the job id; the job is named `corral.<group>.<agent_id>`, so `list` finds
//! the group's pilots in one listing of the scheduler's jobs (queued and held: pending; running:
//! running; completing: stopping; ended: gone). `terminate` cancels the jobs. A pilot still
//! queued after the group's `max_provisioning_secs` is cancelled by the manager and counts as a
//! failed launch, as for every provider.

use std::collections::BTreeMap;
use std::path::PathBuf;

use async_trait::async_trait;
use corral_batch::{
    shell_quote, staging, BatchConfig, BatchError, BatchSystem, Commands, JobFilter, JobSpec,
    JobState, Resources,
};
use serde::Deserialize;

pub use crate::local::AgentRuntime;
use crate::local::{self, checked, AgentSpec};
use crate::options::invalid_option as invalid;
use crate::{
    ConfigError, Context, Instance, InstanceState, LaunchRequest, Provider, ProviderError,
    TemplateOffer,
};

/// How long before its walltime an agent drains itself, unless the options say otherwise.
const DEFAULT_DRAIN_BEFORE_SECS: u64 = 300;
/// The file in a pilot's directory that holds its bootstrap token until the job reads it.
const TOKEN_FILE: &str = "token";

#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema), schema(as = OptionsBatch))]
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Options {
    /// The batch system, as `corral batch bind` takes it; `options.work_dir` is required.
    pub batch: BatchConfig,
    /// The `corral` executable on the nodes [default: the manager's own].
    #[cfg_attr(feature = "openapi", schema(value_type = Option<String>))]
    #[serde(default)]
    pub binary: Option<PathBuf>,
    /// How the agents run their sessions.
    #[cfg_attr(feature = "openapi", schema(inline))]
    #[serde(default)]
    pub runtime: AgentRuntime,
    /// More arguments for `corral agent`, after the provider's own.
    #[serde(default, deserialize_with = "checked::args")]
    pub extra_args: Vec<String>,
    /// The pilot jobs' queue (Slurm: partition) [default: the scheduler's].
    #[serde(default)]
    pub queue: Option<String>,
    /// The account (project) the pilot jobs are charged to.
    #[serde(default)]
    pub account: Option<String>,
    /// Native options per scheduler (`{"slurm": ["--qos=high"]}`), added as they are.
    #[serde(default)]
    pub native: BTreeMap<String, Vec<String>>,
    /// The pilot jobs' walltime in seconds [default: the queue's].
    #[serde(default)]
    pub walltime_secs: Option<u64>,
    /// How long before the walltime the agent takes nothing new [default: 300]; more than half
    /// the walltime counts as half.
    #[serde(default)]
    pub drain_before_secs: Option<u64>,
}

impl Options {
    /// Checks what serde cannot: the batch system's options, a work directory, and the fields
    /// that go into the job as the JobSpec checks them.
    pub fn check(&self) -> Result<(), ConfigError> {
        self.batch.check().map_err(|e| batch_field("batch", e))?;
        if self.batch.options.work_dir.is_none() {
            return Err(invalid(
                "batch.options.work_dir",
                "pilot jobs need a directory on a file system the manager and the nodes share",
            ));
        }
        if self.batch.options.sessions {
            return Err(invalid(
                "batch.options.sessions",
                "pilot jobs run agents; sessions run as jobs through a group's own binding",
            ));
        }
        if self.walltime_secs == Some(0) {
            return Err(invalid("walltime_secs", "must be at least 1"));
        }
        if self.binary.as_ref().is_some_and(|b| !b.is_absolute()) {
            return Err(invalid("binary", "must be an absolute path on the nodes"));
        }
        // The job's own fields, checked as a submit would check them.
        let probe = JobSpec {
            executable: Some("/bin/true".into()),
            queue: self.queue.clone(),
            account: self.account.clone(),
            native: self.native.clone(),
            walltime: self.walltime_secs,
            ..JobSpec::default()
        };
        probe.check().map_err(|e| match e {
            BatchError::InvalidSpec { field, message } => {
                let field = if field == "walltime" {
                    "walltime_secs".to_string()
                } else {
                    field
                };
                invalid(&field, message)
            }
            e => invalid("batch", e.to_string()),
        })
    }

    /// When the agent drains itself, counted from its start: `drain_before_secs` before the
    /// walltime, at most half of it (so a pilot always has time to work).
    fn drain_after(&self) -> Option<u64> {
        let walltime = self.walltime_secs?;
        let before = self
            .drain_before_secs
            .unwrap_or(DEFAULT_DRAIN_BEFORE_SECS)
            .min(walltime / 2);
        Some(walltime - before)
    }
}

/// A batch configuration's error as a field of these options.
fn batch_field(prefix: &str, e: BatchError) -> ConfigError {
    match e {
        BatchError::InvalidSpec { field, message } => {
            invalid(&format!("{prefix}.{field}"), message)
        }
        e => invalid(prefix, e.to_string()),
    }
}

pub struct BatchProvider {
    system: Box<dyn BatchSystem>,
    /// The batch system's commands as the jobs' account, for the pilots' files.
    commands: Commands,
    binary: PathBuf,
    options: Options,
    context: Context,
}

pub async fn connect(options: Options, context: Context) -> Result<BatchProvider, ProviderError> {
    options
        .check()
        .map_err(|e| ProviderError::fatal(format!("batch provider: {e}")))?;
    let system = options.batch.connect().await.map_err(failure)?;
    let binary = options
        .binary
        .clone()
        .unwrap_or_else(|| context.corral_binary.clone());
    Ok(BatchProvider {
        system,
        commands: options.batch.commands(),
        binary,
        options,
        context,
    })
}

/// A batch system's error, classified: what an operator must fix is fatal; a scheduler that is
/// slow or says something unexpected may do better next time.
fn failure(e: BatchError) -> ProviderError {
    let message = format!("batch provider: {e}");
    match e {
        BatchError::InvalidSpec { .. }
        | BatchError::Refused { .. }
        | BatchError::CommandMissing { .. }
        | BatchError::Unsupported { .. } => ProviderError::fatal(message),
        BatchError::Parse { .. }
        | BatchError::Timeout { .. }
        | BatchError::NoSuchJob { .. }
        | BatchError::Staging { .. }
        | BatchError::Io { .. } => ProviderError::transient(message),
    }
}

/// How the provider names a pilot of `group` that joins as `agent_id`.
fn job_name(group: &str, agent_id: &str) -> String {
    format!("corral.{group}.{agent_id}")
}

/// The agent id of a pilot of `group`, from its job's name.
fn agent_of<'a>(group: &str, name: &'a str) -> Option<&'a str> {
    let rest = name.strip_prefix("corral.")?.strip_prefix(group)?;
    rest.strip_prefix('.').filter(|id| local::is_agent_id(id))
}

fn instance_state(state: JobState) -> InstanceState {
    match state {
        JobState::Queued | JobState::Held | JobState::Unknown => InstanceState::Pending,
        JobState::Running | JobState::Suspended => InstanceState::Running,
        JobState::Completing => InstanceState::Stopping,
        JobState::Done | JobState::Failed | JobState::Cancelled | JobState::Timeout => {
            InstanceState::Gone
        }
    }
}

impl BatchProvider {
    fn pilot_dir(&self, agent_id: &str) -> String {
        // check() made sure there is a work directory.
        let work_dir = self
            .options
            .batch
            .options
            .work_dir
            .as_deref()
            .unwrap_or("/");
        format!("{}/pilots/{agent_id}", work_dir.trim_end_matches('/'))
    }

    /// The job script: reads the token, removes its file, becomes the agent.
    fn script(&self, spec: &AgentSpec, dir: &str) -> String {
        let mut words = vec![
            self.binary.to_string_lossy().into_owned(),
            "agent".into(),
            "--server".into(),
            spec.server.clone(),
        ];
        words.extend(spec.agent_flags());
        words.extend([
            "--work-dir".into(),
            format!("{dir}/work"),
            "--runtime".into(),
            self.options.runtime.as_str().into(),
        ]);
        // Sessions run as the pilot's account: sandboxed, or not at all, and blind to the
        // shared work directory (other pilots' tokens, users' job directories) and to Slurm's
        // credential socket (jobs of the account) (docs/security.md).
        let work_dir = dir.rsplit_once("/pilots/").map_or(dir, |(root, _)| root);
        words.extend([
            "--isolation".into(),
            "on".into(),
            "--hide".into(),
            work_dir.to_string(),
            "--hide".into(),
            "/run/munge".into(),
        ]);
        if let Some(after) = self.options.drain_after() {
            words.extend(["--drain-after".into(), after.to_string()]);
        }
        words.extend(self.options.extra_args.iter().cloned());
        let command: Vec<String> = words.iter().map(|w| shell_quote(w)).collect();
        let token = shell_quote(&format!("{dir}/{TOKEN_FILE}"));
        // The job's id, as its scheduler set it: the manager takes the token from this job only.
        format!(
            "{env}=$(cat {token}) && rm -f {token} || exit 1\nexport {env}\n\
             {job_env}=\"${{{job_id}:-}}\"\nexport {job_env}\nexec {}\n",
            command.join(" "),
            env = local::ENV_TOKEN,
            job_env = corral_api::identity::ENV_BATCH_JOB,
            job_id = self.options.batch.system.job_id_variable(),
        )
    }

    async fn launch_one(
        &self,
        template: &str,
        request: &LaunchRequest,
    ) -> Result<Instance, ProviderError> {
        let spec = AgentSpec::new(&self.context, template, request)?;
        let dir = self.pilot_dir(&spec.agent_id);
        staging::make_dir(&self.commands, &dir)
            .await
            .map_err(failure)?;
        staging::write(&self.commands, &dir, TOKEN_FILE, spec.token.as_bytes())
            .await
            .map_err(failure)?;
        let job = JobSpec {
            name: Some(job_name(&spec.group, &spec.agent_id)),
            script: Some(self.script(&spec, &dir)),
            directory: Some(dir.clone()),
            stdout: Some("agent.out".into()),
            stderr: Some("agent.err".into()),
            resources: Resources::for_slots(&self.context.template(template)?.slots),
            walltime: self.options.walltime_secs,
            queue: self.options.queue.clone(),
            account: self.options.account.clone(),
            native: self.options.native.clone(),
            ..JobSpec::default()
        };
        let id = self.system.submit(&job).await.map_err(failure)?;
        Ok(Instance {
            id,
            agent_id: Some(spec.agent_id),
            template: Some(spec.template),
            state: InstanceState::Pending,
        })
    }

    async fn terminate_one(&self, id: &str) -> Result<(), ProviderError> {
        if !corral_batch::is_job_id(id) {
            // Not an id this provider gives: nothing of ours to stop.
            tracing::debug!(id, "batch provider: ignoring an id it never gave");
            return Ok(());
        }
        match self.system.cancel(id).await {
            Ok(()) | Err(BatchError::NoSuchJob { .. }) => Ok(()),
            // An ended job cannot be cancelled; it is gone all the same.
            Err(e) => match self.system.job(id).await {
                Ok(job) if job.state.is_final() => Ok(()),
                Err(BatchError::NoSuchJob { .. }) => Ok(()),
                _ => Err(failure(e)),
            },
        }
    }
}

#[async_trait]
impl Provider for BatchProvider {
    async fn templates(&self) -> Result<Vec<TemplateOffer>, ProviderError> {
        Ok(local::offers(&self.context))
    }

    async fn launch(
        &self,
        template: &str,
        requests: &[LaunchRequest],
    ) -> Result<Vec<Instance>, ProviderError> {
        local::launch_each("batch", template, requests, |request| {
            self.launch_one(template, request)
        })
        .await
    }

    async fn terminate(&self, ids: &[String]) -> Result<(), ProviderError> {
        local::terminate_each(ids, |id| self.terminate_one(id)).await
    }

    /// A job's name is its submitter's to choose: any job of the account (or one a job of it
    /// submits) can be named like a pilot, so `list` finds candidates, not proof.
    fn lists_only_its_own(&self) -> bool {
        false
    }

    async fn list(&self) -> Result<Vec<Instance>, ProviderError> {
        let filter = JobFilter {
            user: self.options.batch.options.run_as.clone(),
            ..JobFilter::default()
        };
        let jobs = self.system.jobs(&filter).await.map_err(failure)?;
        let group = &self.context.group;
        let mut instances: Vec<Instance> = jobs
            .into_iter()
            .filter_map(|job| {
                let agent = agent_of(group, &job.name)?.to_string();
                Some(Instance {
                    id: job.id,
                    agent_id: Some(agent),
                    template: None,
                    state: instance_state(job.state),
                })
            })
            .collect();
        instances.sort_by(|a, b| a.id.cmp(&b.id));
        Ok(instances)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn options(value: serde_json::Value) -> Result<Options, ConfigError> {
        let map = value.as_object().unwrap().clone();
        let options: Options = crate::options::parse(&map)?;
        options.check()?;
        Ok(options)
    }

    fn slurm() -> serde_json::Value {
        json!({"system": "slurm", "options": {"work_dir": "/shared/corral", "run_as": "pilot"}})
    }

    #[test]
    fn job_names_carry_group_and_agent() {
        let name = job_name("gpu-a", "gpu-a-1f2e");
        assert_eq!(name, "corral.gpu-a.gpu-a-1f2e");
        assert_eq!(agent_of("gpu-a", &name), Some("gpu-a-1f2e"));
        // Another group's pilot, one of a group whose name starts alike, and other jobs.
        assert_eq!(agent_of("gpu", &name), None);
        assert_eq!(agent_of("gpu-a", "corral.gpu-a.Not_An_Id"), None);
        assert_eq!(agent_of("gpu-a", "train.sh"), None);
    }

    #[test]
    fn options_name_what_is_wrong() {
        let field = |v| options(v).unwrap_err().field;
        assert!(options(json!({"batch": slurm(), "walltime_secs": 3600})).is_ok());
        assert_eq!(
            field(json!({"batch": {"system": "slurm", "options": {"run_as": "pilot"}}})),
            "provider.options.batch.options.work_dir"
        );
        assert_eq!(
            field(json!({"batch": {"system": "slurm",
                "options": {"work_dir": "rel", "run_as": "pilot"}}})),
            "provider.options.batch.options.work_dir"
        );
        assert_eq!(
            field(json!({"batch": {"system": "slurm",
                "options": {"work_dir": "/w", "sessions": true, "run_as": "pilot"}}})),
            "provider.options.batch.options.sessions"
        );
        // Pilots run as the binding's account, never as the manager's by default (issue 43).
        assert_eq!(
            field(json!({"batch": {"system": "slurm", "options": {"work_dir": "/w"}}})),
            "provider.options.batch.options.run_as"
        );
        assert_eq!(
            field(json!({"batch": slurm(), "walltime_secs": 0})),
            "provider.options.walltime_secs"
        );
        assert_eq!(
            field(json!({"batch": slurm(), "queue": "a\nb"})),
            "provider.options.queue"
        );
        assert_eq!(
            field(json!({"batch": slurm(), "binary": "corral"})),
            "provider.options.binary"
        );
        assert_eq!(
            field(json!({"batch": slurm(), "walltime": 5})),
            "provider.options.walltime"
        );
    }

    /// The job script hands the agent its job's id, from the variable its scheduler sets, and
    /// the token from the file it then removes; neither is in the script itself.
    #[test]
    fn the_job_script_names_its_job_to_the_agent() {
        let ge = json!({"system": "gridengine",
            "options": {"work_dir": "/shared/corral", "run_as": "pilot"}});
        for (batch, variable) in [(slurm(), "SLURM_JOB_ID"), (ge, "JOB_ID")] {
            let options = options(json!({"batch": batch})).unwrap();
            let context = Context {
                group: "hpc".into(),
                manager_url: "http://manager:8470".into(),
                templates: vec![corral_core::InstanceTemplate {
                    name: "small".into(),
                    slots: "cpu=1,mem=1GiB".parse().unwrap(),
                    price_per_hour: 0.0,
                    max: 0,
                    labels: BTreeMap::new(),
                    devices: Vec::new(),
                }],
                corral_binary: "/usr/bin/corral".into(),
                state_dir: "/tmp/x".into(),
            };
            // Rendering the script asks no scheduler: Grid Engine's adaptor (which runs nothing
            // to be made) stands in for each.
            let system = corral_batch::gridengine::GridEngine::new(options.batch.commands(), None);
            let provider = BatchProvider {
                system: Box::new(system),
                commands: options.batch.commands(),
                binary: "/usr/bin/corral".into(),
                options,
                context,
            };
            let request = LaunchRequest {
                agent_id: "hpc-0123456789".into(),
                token: "secret-token".into(),
            };
            let spec = AgentSpec::new(&provider.context, "small", &request).unwrap();
            let dir = provider.pilot_dir(&spec.agent_id);
            let script = provider.script(&spec, &dir);
            assert!(
                script.contains(&format!(
                    "\nCORRAL_AGENT_BATCH_JOB=\"${{{variable}:-}}\"\nexport CORRAL_AGENT_BATCH_JOB\n"
                )),
                "{script}"
            );
            assert!(
                script.starts_with(
                    "CORRAL_TOKEN=$(cat /shared/corral/pilots/hpc-0123456789/token) && rm -f"
                ),
                "{script}"
            );
            assert!(!script.contains("secret-token"), "{script}");
        }
    }

    #[test]
    fn the_agent_drains_before_the_walltime() {
        let drain = |v| options(v).unwrap().drain_after();
        assert_eq!(drain(json!({"batch": slurm()})), None);
        assert_eq!(
            drain(json!({"batch": slurm(), "walltime_secs": 3600})),
            Some(3300)
        );
        // A short walltime: half of it.
        assert_eq!(
            drain(json!({"batch": slurm(), "walltime_secs": 120})),
            Some(60)
        );
        assert_eq!(
            drain(json!({"batch": slurm(), "walltime_secs": 3600, "drain_before_secs": 60})),
            Some(3540)
        );
        // Never more than half the walltime.
        assert_eq!(
            drain(json!({"batch": slurm(), "walltime_secs": 600, "drain_before_secs": 400})),
            Some(300)
        );
    }

    #[test]
    fn job_states_map_to_instance_states() {
        assert_eq!(instance_state(JobState::Queued), InstanceState::Pending);
        assert_eq!(instance_state(JobState::Held), InstanceState::Pending);
        assert_eq!(instance_state(JobState::Running), InstanceState::Running);
        assert_eq!(
            instance_state(JobState::Completing),
            InstanceState::Stopping
        );
        for ended in [
            JobState::Done,
            JobState::Failed,
            JobState::Cancelled,
            JobState::Timeout,
        ] {
            assert_eq!(instance_state(ended), InstanceState::Gone);
        }
    }
}
