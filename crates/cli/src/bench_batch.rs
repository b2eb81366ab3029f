//! `corral bench batch`: a group bound to the real Slurm on this host, through a manager in this
//! process: how many jobs the API submits per second, and how long one listing of a thousand
//! jobs takes (one `squeue --json`, read and filtered, through the API). The jobs are submitted
//! held, so the cluster runs none of them, and cancelled at the end.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use corral_api::batch::{BatchJob, JobSpec, SubmittedJob};
use corral_api::Client;
use serde_json::{json, Value};

pub async fn run(jobs: usize, concurrency: usize, runs: u32) -> Result<()> {
    let manager = crate::bench_api::InProcess::start(None).await?;
    let client = Client::new(&manager.base, &manager.token, None)?;
    let group = manager.group.clone();
    client
        .post::<Value, _>(&["groups"], Some(&json!({"name": group})))
        .await?;
    // The jobs run as .ci/slurm.sh's account under root (which may not run them as itself),
    // as this account otherwise.
    // SAFETY: geteuid has no preconditions and cannot fail.
    let options = match unsafe { libc::geteuid() } {
        0 => json!({"run_as": "corral-batch"}),
        _ => json!({"run_as_manager": true}),
    };
    client
        .put::<Value, _>(
            &["groups", &group, "batch"],
            &json!({"system": "slurm", "options": options}),
        )
        .await
        .context("binding the group to Slurm (is it running? .ci/slurm.sh)")?;
    let name = group.clone();
    let spec = JobSpec {
        name: Some(name.clone()),
        script: Some("true".into()),
        directory: Some(std::env::temp_dir().display().to_string()),
        hold: true,
        ..JobSpec::default()
    };

    // Submits: `concurrency` clients as fast as answers come.
    let start = Instant::now();
    let next = Arc::new(AtomicUsize::new(0));
    let submitters: Vec<_> = (0..concurrency)
        .map(|_| {
            let (client, next, spec, group) =
                (client.clone(), next.clone(), spec.clone(), group.clone());
            tokio::spawn(async move {
                let mut ids = Vec::new();
                while next.fetch_add(1, Ordering::Relaxed) < jobs {
                    let path = ["groups", group.as_str(), "batch", "jobs"];
                    let s: SubmittedJob = client.post(&path, Some(&spec)).await?.body()?;
                    ids.push(s.id);
                }
                anyhow::Ok(ids)
            })
        })
        .collect();
    let mut ids = Vec::new();
    for s in submitters {
        ids.extend(s.await??);
    }
    let secs = start.elapsed().as_secs_f64();
    println!("batch_submit_per_s {:.1} jobs/s", ids.len() as f64 / secs);

    // One poll of every job's state: the best of `runs`.
    let mut best = f64::INFINITY;
    for _ in 0..runs {
        let start = Instant::now();
        let listed: Vec<BatchJob> = client
            .get(
                &["groups", &group, "batch", "jobs"],
                &[("name", Some(name.clone()))],
            )
            .await?
            .body()?;
        best = best.min(start.elapsed().as_secs_f64() * 1000.0);
        if listed.len() != jobs {
            bail!("listed {} jobs of the {jobs} submitted", listed.len());
        }
    }
    println!("batch_status_{jobs}_jobs_ms {best:.1} ms");

    // Cancelled, so the cluster is as it was.
    let cancellers: Vec<_> = ids
        .chunks(ids.len().div_ceil(concurrency).max(1))
        .map(|chunk| {
            let (client, chunk, group) = (client.clone(), chunk.to_vec(), group.clone());
            tokio::spawn(async move {
                for id in chunk {
                    client
                        .delete::<Value, _>(&["groups", group.as_str(), "batch", "jobs", &id])
                        .await?;
                }
                anyhow::Ok(())
            })
        })
        .collect();
    for c in cancellers {
        c.await??;
    }
    Ok(())
}
