//! Sessions of a batch-backed group as batch jobs: a session's program, environment and request
//! rendered into a [`JobSpec`], and what its job's state means for the session. Pure: the
//! manager submits, polls and cancels.

use std::collections::BTreeMap;

use corral_core::{SessionState, Slots};

use crate::{BatchError, Job, JobSpec, JobState, Node, Resources};

/// The slots a session's job can ask a scheduler for.
const SLOTS: [&str; 3] = ["cpu", "mem", "gpu"];

/// The files in a session job's directory that hold its standard output and error, named as the
/// streams of a session's logs.
pub const STDOUT: &str = "stdout";
pub const STDERR: &str = "stderr";

/// What a session brings to its job.
#[derive(Debug, Clone, Copy)]
pub struct SessionJob<'a> {
    pub id: &'a str,
    /// The program and its arguments.
    pub command: &'a [String],
    pub environment: &'a BTreeMap<String, String>,
    pub request: &'a Slots,
    /// The job's own directory, where its inputs are staged and its logs and outputs written.
    pub directory: &'a str,
    pub inputs: &'a [String],
    pub outputs: &'a [String],
}

impl SessionJob<'_> {
    /// The job that runs the session: its program in its directory, one node and one task with
    /// the request's CPUs, memory and GPUs, logs in [`STDOUT`] and [`STDERR`]. Held when it has
    /// inputs: the manager releases it once they are staged. Checked as any job is.
    pub fn job_spec(&self) -> Result<JobSpec, BatchError> {
        let (program, arguments) = self
            .command
            .split_first()
            .ok_or_else(|| BatchError::invalid("command", "a batch job needs a program"))?;
        if let Some((slot, _)) = self
            .request
            .iter()
            .find(|(s, _)| !SLOTS.contains(&s.as_str()))
        {
            return Err(BatchError::invalid(
                "request",
                format!("a batch job asks for cpu, mem and gpu, not {slot}"),
            ));
        }
        let spec = JobSpec {
            name: Some(job_name(self.id)),
            executable: Some(program.clone()),
            arguments: arguments.to_vec(),
            directory: Some(self.directory.to_string()),
            stdout: Some(STDOUT.into()),
            stderr: Some(STDERR.into()),
            environment: self.environment.clone(),
            resources: Resources::for_slots(self.request),
            hold: !self.inputs.is_empty(),
            inputs: self.inputs.to_vec(),
            outputs: self.outputs.to_vec(),
            ..JobSpec::default()
        };
        spec.check()?;
        Ok(spec)
    }
}

/// Whether one of `nodes` could ever run the job (one node's worth of CPUs, memory and GPUs),
/// counting nodes that are down or drained, which may come back; else why not. For schedulers
/// that would leave such a job queued for good.
pub fn fits(resources: &Resources, nodes: &[Node]) -> Result<(), String> {
    let cpus = resources.cpus_per_task.unwrap_or(1) * resources.tasks.unwrap_or(1);
    let memory = resources.memory_per_node.unwrap_or(0);
    let gpus = resources.gpus_per_node.unwrap_or(0);
    if nodes
        .iter()
        .any(|n| n.cpus >= cpus && n.memory >= memory && n.gpus >= gpus)
    {
        return Ok(());
    }
    let most = |f: fn(&Node) -> u64| nodes.iter().map(f).max().unwrap_or(0);
    Err(format!(
        "no node of the cluster has {cpus} CPUs, {memory} bytes of memory and {gpus} GPUs \
         (at most {} CPUs, {} bytes, {} GPUs on one node of {})",
        most(|n| n.cpus.into()),
        most(|n| n.memory),
        most(|n| n.gpus.into()),
        nodes.len()
    ))
}

/// The name of session `id`'s job, by which the manager finds it in the scheduler's listing.
pub fn job_name(id: &str) -> String {
    format!("corral.session.{id}")
}

/// The session a job name belongs to, if it is a session's job.
pub fn session_of(name: &str) -> Option<&str> {
    name.strip_prefix("corral.session.")
        .filter(|id| !id.is_empty())
}

/// Where a session stands, from its job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Progress {
    /// Not started; the scheduler's reason, if it gives one.
    Waiting(Option<String>),
    Running,
    Ended {
        state: SessionState,
        exit_code: Option<i32>,
        reason: String,
    },
}

/// What the job's state means for its session. A job that ran to its walltime failed; one
/// cancelled outside Corral is cancelled.
pub fn progress(job: &Job) -> Progress {
    let ended = |state, reason: String| Progress::Ended {
        state,
        exit_code: job.exit_code,
        reason,
    };
    match job.state {
        JobState::Queued | JobState::Held | JobState::Unknown => {
            Progress::Waiting(job.reason.clone())
        }
        JobState::Running | JobState::Suspended | JobState::Completing => Progress::Running,
        JobState::Done => ended(SessionState::Succeeded, format!("job {} done", job.id)),
        JobState::Failed => ended(
            SessionState::Failed,
            match job.exit_code {
                Some(code) => format!("job {} failed with exit code {code}", job.id),
                None => format!("job {} failed ({})", job.id, job.native_state),
            },
        ),
        JobState::Timeout => ended(
            SessionState::Failed,
            format!("job {} was killed at its walltime", job.id),
        ),
        JobState::Cancelled => ended(
            SessionState::Cancelled,
            format!("job {} was cancelled in the scheduler", job.id),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(state: JobState, exit_code: Option<i32>) -> Job {
        Job {
            id: "41".into(),
            name: job_name("s1f2"),
            user: "corral-jobs".into(),
            state,
            native_state: "X".into(),
            reason: Some("Resources".into()),
            exit_code,
            queue: None,
            nodes: None,
            submitted_at: None,
            started_at: None,
            ended_at: None,
            array_id: None,
            tasks: None,
        }
    }

    #[test]
    fn a_session_becomes_a_job_of_its_request() {
        let command = vec![
            "python3".to_string(),
            "train.py".into(),
            "--epochs=3".into(),
        ];
        let environment = BTreeMap::from([("SEED".to_string(), "7".to_string())]);
        let request: Slots = "cpu=1.5,mem=2GiB,gpu=1".parse().unwrap();
        let inputs = vec!["data.csv".to_string()];
        let outputs = vec!["model.pt".to_string()];
        let session = SessionJob {
            id: "s1f2",
            command: &command,
            environment: &environment,
            request: &request,
            directory: "/shared/corral/alice/s1f2",
            inputs: &inputs,
            outputs: &outputs,
        };
        let spec = session.job_spec().unwrap();
        assert_eq!(spec.name.as_deref(), Some("corral.session.s1f2"));
        assert_eq!(spec.executable.as_deref(), Some("python3"));
        assert_eq!(spec.arguments, ["train.py", "--epochs=3"]);
        assert_eq!(spec.directory.as_deref(), Some("/shared/corral/alice/s1f2"));
        assert_eq!(
            (spec.stdout.as_deref(), spec.stderr.as_deref()),
            (Some("stdout"), Some("stderr"))
        );
        assert_eq!(spec.environment, environment);
        let r = &spec.resources;
        assert_eq!(
            (r.nodes, r.tasks, r.cpus_per_task),
            (Some(1), Some(1), Some(2))
        );
        assert_eq!(r.memory_per_node, Some(2 << 30));
        assert_eq!(r.gpus_per_node, Some(1));
        assert!(spec.hold, "held until its inputs are staged");
        assert_eq!((&spec.inputs, &spec.outputs), (&inputs, &outputs));

        let bare = SessionJob {
            request: &Slots::new(),
            inputs: &[],
            ..session
        };
        let spec = bare.job_spec().unwrap();
        assert!(!spec.hold);
        assert_eq!(spec.resources.cpus_per_task, None);
        assert_eq!(spec.resources.memory_per_node, None);
        let field = |s: SessionJob| match s.job_spec().unwrap_err() {
            BatchError::InvalidSpec { field, .. } => field,
            e => panic!("{e}"),
        };
        assert_eq!(
            field(SessionJob {
                command: &[],
                ..bare
            }),
            "command"
        );
        let bad_env = BTreeMap::from([("A=B".to_string(), "1".to_string())]);
        assert_eq!(
            field(SessionJob {
                environment: &bad_env,
                ..bare
            }),
            "environment.A=B"
        );
    }

    fn node(cpus: u32, memory: u64, gpus: u32) -> Node {
        Node {
            name: "n1".into(),
            state: crate::NodeState::Drained,
            native_state: "DRAINED".into(),
            cpus,
            cpus_allocated: 0,
            memory,
            memory_allocated: 0,
            gpus,
            queues: vec![],
            reason: None,
        }
    }

    #[test]
    fn a_request_fits_when_one_node_could_hold_it() {
        let nodes = [node(2, 4 << 30, 0), node(8, 1 << 30, 1)];
        let ask = |request: &str| fits(&Resources::for_slots(&request.parse().unwrap()), &nodes);
        assert_eq!(
            ask("cpu=2,mem=4GiB"),
            Ok(()),
            "a drained node may come back"
        );
        assert_eq!(ask("cpu=8,gpu=1"), Ok(()));
        let why = ask("cpu=8,mem=2GiB").unwrap_err();
        assert!(
            why.contains("8 CPUs") && why.contains("at most 8 CPUs"),
            "{why}"
        );
        assert!(ask("gpu=2").is_err());
        assert!(fits(&Resources::default(), &[]).is_err(), "no node at all");
    }

    #[test]
    fn a_session_asks_only_for_what_a_scheduler_knows() {
        let request: Slots = "cpu=1,tpu=1".parse().unwrap();
        let command = vec!["true".to_string()];
        let s = SessionJob {
            id: "s1",
            command: &command,
            environment: &BTreeMap::new(),
            request: &request,
            directory: "/w/a/s1",
            inputs: &[],
            outputs: &[],
        };
        match s.job_spec().unwrap_err() {
            BatchError::InvalidSpec { field, message } => {
                assert_eq!(field, "request");
                assert!(message.contains("tpu"), "{message}");
            }
            e => panic!("{e}"),
        }
    }

    #[test]
    fn job_names_lead_back_to_their_session() {
        assert_eq!(session_of(&job_name("s1f2")), Some("s1f2"));
        assert_eq!(session_of("corral.session."), None);
        assert_eq!(session_of("corral.pilots.a1"), None);
    }

    #[test]
    fn a_jobs_state_is_its_sessions() {
        let waiting = Progress::Waiting(Some("Resources".into()));
        assert_eq!(progress(&job(JobState::Queued, None)), waiting);
        assert_eq!(progress(&job(JobState::Held, None)), waiting);
        assert_eq!(progress(&job(JobState::Running, None)), Progress::Running);
        assert_eq!(
            progress(&job(JobState::Completing, None)),
            Progress::Running
        );
        let ended = |state, code| match progress(&job(state, code)) {
            Progress::Ended {
                state, exit_code, ..
            } => (state, exit_code),
            p => panic!("{p:?}"),
        };
        assert_eq!(
            ended(JobState::Done, Some(0)),
            (SessionState::Succeeded, Some(0))
        );
        assert_eq!(
            ended(JobState::Failed, Some(3)),
            (SessionState::Failed, Some(3))
        );
        assert_eq!(ended(JobState::Timeout, None), (SessionState::Failed, None));
        assert_eq!(
            ended(JobState::Cancelled, None),
            (SessionState::Cancelled, None)
        );
        match progress(&job(JobState::Failed, Some(3))) {
            Progress::Ended { reason, .. } => assert_eq!(reason, "job 41 failed with exit code 3"),
            p => panic!("{p:?}"),
        }
    }
}
