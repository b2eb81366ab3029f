//! What the live tests of every adaptor share: specs from JSON, waiting for a job, and the
//! overlap of an array's tasks.
#![allow(dead_code)]

use std::path::Path;
use std::time::Duration;

use corral_batch::{BatchSystem, Job, JobSpec};

pub fn spec(json: serde_json::Value) -> JobSpec {
    JobSpec::parse_json(&json.to_string()).unwrap()
}

pub fn dir_of(dir: &Path) -> String {
    dir.to_str().unwrap().to_string()
}

/// Waits (60 s at most) until the job is as `wanted` says, and returns it.
pub async fn until(
    system: &dyn BatchSystem,
    id: &str,
    what: &str,
    wanted: impl Fn(&Job) -> bool,
) -> Job {
    corral_testkit::eventually_async(
        &format!("job {id} to be {what}"),
        Duration::from_secs(60),
        || async {
            let job = system.job(id).await.map_err(|e| e.to_string())?;
            if wanted(&job) {
                Ok(job)
            } else {
                Err(format!("{job:?}"))
            }
        },
    )
    .await
}

pub async fn finished(system: &dyn BatchSystem, id: &str) -> Job {
    until(system, id, "finished", |j| j.state.is_final()).await
}

/// A task's script that records when it started and ended (ns) in `task.$ID`.
pub fn timed_task(task_id_variable: &str) -> String {
    format!("s=$(date +%s%N); sleep 2; echo \"$s $(date +%s%N)\" > task.${task_id_variable}")
}

/// The most tasks of `dir`'s `task.1`..`task.N` (written by [`timed_task`]) that ran at once.
pub fn most_at_once(dir: &Path, tasks: u32) -> usize {
    let spans: Vec<(u128, u128)> = (1..=tasks)
        .map(|t| {
            let text = std::fs::read_to_string(dir.join(format!("task.{t}"))).unwrap();
            let (start, end) = text.trim().split_once(' ').unwrap();
            (start.parse().unwrap(), end.parse().unwrap())
        })
        .collect();
    spans
        .iter()
        .map(|(start, _)| {
            spans
                .iter()
                .filter(|(s, e)| s <= start && start < e)
                .count()
        })
        .max()
        .unwrap_or(0)
}
