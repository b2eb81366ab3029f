//! `corral session run`, `logs` and `outputs`: a session's output as the person who ran it
//! reads it.

use std::io::{IsTerminal, Write};
use std::path::{Component, Path};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use serde_json::Value;

use super::http::Api;

/// How often a waiting client asks again.
const POLL: Duration = Duration::from_millis(100);

/// Submits, waits (saying on a terminal what the session waits for), prints its output as it
/// comes, and returns its exit code.
pub async fn run_session(api: &Api, body: Value, inputs: &[String]) -> Result<i32> {
    let reply = api.post(&["sessions"], Some(&body)).await?;
    let id = reply.value["id"]
        .as_str()
        .context("the manager's answer has no session id")?
        .to_string();
    super::session::upload_inputs(api, &id, inputs).await?;
    let progress = std::io::stderr().is_terminal();
    if progress {
        eprintln!("session {id} submitted");
    }
    let mut last_note = String::new();
    let mut offsets = [0u64; 2];
    loop {
        let session = api.get(&["sessions", &id], &[]).await?.value;
        let state = session["state"].as_str().unwrap_or_default().to_string();
        let note = match state.as_str() {
            "pending" => format!(
                "pending: {}",
                session["wait_reason"]
                    .as_str()
                    .unwrap_or("waiting for the next pass")
            ),
            "scheduled" => format!(
                "scheduled on {}",
                session["agent"].as_str().unwrap_or("an agent")
            ),
            "running" => format!(
                "running on {}",
                session["agent"].as_str().unwrap_or("an agent")
            ),
            other => other.to_string(),
        };
        if progress && note != last_note {
            eprintln!("{note}");
            last_note = note;
        }
        copy_logs(api, &id, &mut offsets).await?;
        if !matches!(state.as_str(), "pending" | "scheduled" | "running") {
            // Agents upload the last of the logs before they report the end.
            copy_logs(api, &id, &mut offsets).await?;
            return Ok(match (state.as_str(), session["exit_code"].as_i64()) {
                (_, Some(code)) => i32::try_from(code).unwrap_or(1),
                ("succeeded", None) => 0,
                _ => {
                    let why = session["end_reason"].as_str().unwrap_or("no reason given");
                    eprintln!("session {id} {state}: {why}");
                    1
                }
            });
        }
        tokio::time::sleep(POLL).await;
    }
}

/// Writes what the session's stdout and stderr gained since `offsets` to ours.
async fn copy_logs(api: &Api, id: &str, offsets: &mut [u64; 2]) -> Result<()> {
    for (i, stream) in ["stdout", "stderr"].into_iter().enumerate() {
        loop {
            let chunk = api
                .get_bytes(
                    &["sessions", id, "logs", stream],
                    &[("offset", Some(offsets[i].to_string()))],
                )
                .await?;
            if chunk.is_empty() {
                break;
            }
            offsets[i] += chunk.len() as u64;
            if i == 0 {
                std::io::stdout().write_all(&chunk)?;
                std::io::stdout().flush()?;
            } else {
                std::io::stderr().write_all(&chunk)?;
            }
        }
    }
    Ok(())
}

/// Prints a session's log (stdout, or stderr); with `follow`, keeps printing until it ends.
pub async fn logs(api: &Api, id: &str, stderr: bool, follow: bool) -> Result<()> {
    let stream = if stderr { "stderr" } else { "stdout" };
    let mut offset = 0u64;
    loop {
        let chunk = api
            .get_bytes(
                &["sessions", id, "logs", stream],
                &[("offset", Some(offset.to_string()))],
            )
            .await?;
        if !chunk.is_empty() {
            offset += chunk.len() as u64;
            std::io::stdout().write_all(&chunk)?;
            std::io::stdout().flush()?;
            continue;
        }
        if !follow {
            return Ok(());
        }
        let state = api.get(&["sessions", id], &[]).await?.value["state"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        if !matches!(state.as_str(), "pending" | "scheduled" | "running") {
            // One more read: the last bytes land before the end is reported.
            let chunk = api
                .get_bytes(
                    &["sessions", id, "logs", stream],
                    &[("offset", Some(offset.to_string()))],
                )
                .await?;
            std::io::stdout().write_all(&chunk)?;
            return Ok(());
        }
        tokio::time::sleep(POLL).await;
    }
}

/// Downloads every output of a session into `dir`, keeping their relative paths.
pub async fn outputs(api: &Api, id: &str, dir: &Path, json_out: bool) -> Result<()> {
    let list = api.get(&["sessions", id, "outputs"], &[]).await?;
    if json_out {
        println!("{}", serde_json::to_string_pretty(&list.value)?);
        return Ok(());
    }
    let files = list.value.as_array().cloned().unwrap_or_default();
    if files.is_empty() {
        eprintln!("no outputs");
    }
    for f in files {
        let rel = f["path"].as_str().unwrap_or_default();
        let path = Path::new(rel);
        if rel.is_empty() || !path.components().all(|c| matches!(c, Component::Normal(_))) {
            bail!("the manager listed an output path that leaves the directory: {rel:?}");
        }
        let segments: Vec<&str> = rel.split('/').collect();
        let mut url_path = vec!["sessions", id, "outputs"];
        url_path.extend(segments);
        let data = api.get_bytes(&url_path, &[]).await?;
        let target = dir.join(path);
        if let Some(parent) = target.parent() {
            std::fs::create_dir_all(parent)
                .with_context(|| format!("creating {}", parent.display()))?;
        }
        std::fs::write(&target, &data).with_context(|| format!("writing {}", target.display()))?;
        println!("{}  {} bytes", target.display(), data.len());
    }
    Ok(())
}
