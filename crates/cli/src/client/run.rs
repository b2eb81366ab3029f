//! `corral session run`, `logs` and `outputs`: a session's output as the person who ran it
//! reads it.

use std::io::{IsTerminal, Write};
use std::path::Path;
use std::time::Duration;

use anyhow::{Context, Result};
use corral_api::sessions::{NewSession, OutputFile, SessionView, Submitted};
use corral_core::SessionState;

use super::http::{json, parse, Api};
use super::render::word;

/// How often a waiting client asks again.
const POLL: Duration = Duration::from_millis(100);

/// The exit code of a run interrupted by Ctrl-C, as a shell reports SIGINT.
const INTERRUPTED: i32 = 130;

/// Submits, waits (saying on a terminal what the session waits for), prints its output as it
/// comes, and returns its exit code. Ctrl-C cancels the session (and the run exits 130 once it
/// has ended); a second Ctrl-C leaves it running and says how to follow it.
pub async fn run_session(api: &Api, body: &NewSession, inputs: &[String]) -> Result<i32> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut interrupts = signal(SignalKind::interrupt()).context("listening for Ctrl-C")?;
    let mut cancelled = false;
    let reply = api.post(&["sessions"], Some(&json(body)?)).await?;
    let id = parse::<Submitted>(&reply)?.id;
    super::session::upload_inputs(api, &["sessions", &id], inputs).await?;
    let progress = std::io::stderr().is_terminal();
    if progress {
        eprintln!("session {id} submitted");
    }
    let mut last_note = String::new();
    let mut offsets = [0u64; 2];
    loop {
        let view: SessionView = parse(&api.get(&["sessions", &id], &[]).await?)?;
        let session = &view.session;
        let agent = || session.agent.as_ref().map_or("an agent", |a| a.0.as_str());
        let note = match session.state {
            SessionState::Pending => format!(
                "pending: {}",
                view.wait_reason
                    .as_deref()
                    .unwrap_or("waiting for the next pass")
            ),
            SessionState::Scheduled => format!("scheduled on {}", agent()),
            SessionState::Running => match &view.batch_job {
                Some(job) => format!("running as job {job}"),
                None => format!("running on {}", agent()),
            },
            other => word(&other),
        };
        if progress && note != last_note {
            eprintln!("{note}");
            last_note = note;
        }
        copy_logs(api, &id, &mut offsets).await?;
        if session.state.is_terminal() {
            // Agents upload the last of the logs before they report the end.
            copy_logs(api, &id, &mut offsets).await?;
            return Ok(match (session.state, view.exit_code) {
                (SessionState::Cancelled, _) if cancelled => INTERRUPTED,
                (_, Some(code)) => code,
                (SessionState::Succeeded, None) => 0,
                (state, None) => {
                    let why = view.end_reason.as_deref().unwrap_or("no reason given");
                    eprintln!("session {id} {}: {why}", word(&state));
                    1
                }
            });
        }
        tokio::select! {
            _ = tokio::time::sleep(POLL) => {}
            _ = interrupts.recv() => {
                if cancelled {
                    eprintln!("detached: session {id} goes on; follow it with `corral session logs {id} -f`");
                    return Ok(INTERRUPTED);
                }
                cancelled = true;
                eprintln!("cancelling session {id} (Ctrl-C again to leave it running)");
                // A session that ended meanwhile is refused (409): the loop reports its end.
                if let Err(e) = api.post(&["sessions", &id, "cancel"], None).await {
                    eprintln!("{e:#}");
                }
            }
        }
    }
}

/// Writes what the session's stdout and stderr gained since `offsets` to ours.
async fn copy_logs(api: &Api, id: &str, offsets: &mut [u64; 2]) -> Result<()> {
    for (i, stream) in ["stdout", "stderr"].into_iter().enumerate() {
        loop {
            let chunk = log_from(api, id, stream, offsets[i]).await?;
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
pub async fn logs(
    api: &Api,
    id: &str,
    stderr: bool,
    follow: bool,
    tail: Option<usize>,
) -> Result<()> {
    let stream = if stderr { "stderr" } else { "stdout" };
    let mut offset = 0u64;
    if let Some(lines) = tail {
        let (end, last) = last_lines(api, id, stream, lines).await?;
        std::io::stdout().write_all(&last)?;
        std::io::stdout().flush()?;
        offset = end;
    }
    loop {
        let chunk = log_from(api, id, stream, offset).await?;
        if !chunk.is_empty() {
            offset += chunk.len() as u64;
            std::io::stdout().write_all(&chunk)?;
            std::io::stdout().flush()?;
            continue;
        }
        if !follow {
            return Ok(());
        }
        let view: SessionView = parse(&api.get(&["sessions", id], &[]).await?)?;
        if view.session.state.is_terminal() {
            // One more read: the last bytes land before the end is reported.
            let chunk = log_from(api, id, stream, offset).await?;
            std::io::stdout().write_all(&chunk)?;
            return Ok(());
        }
        tokio::time::sleep(POLL).await;
    }
}

/// A session's log from `offset` (as much as the manager sends in one read).
async fn log_from(api: &Api, id: &str, stream: &str, offset: u64) -> Result<Vec<u8>> {
    api.get_bytes(
        &["sessions", id, "logs", stream],
        &[("offset", Some(offset.to_string()))],
    )
    .await
}

/// The last `lines` lines of a session's log as it stands, and where the log ends. The log is
/// read through once, keeping only what the tail needs.
async fn last_lines(api: &Api, id: &str, stream: &str, lines: usize) -> Result<(u64, Vec<u8>)> {
    let mut offset = 0u64;
    let mut kept: Vec<u8> = Vec::new();
    loop {
        let chunk = log_from(api, id, stream, offset).await?;
        if chunk.is_empty() {
            return Ok((offset, kept));
        }
        offset += chunk.len() as u64;
        kept.extend_from_slice(&chunk);
        let start = tail_start(&kept, lines);
        kept.drain(..start);
    }
}

/// Where the last `lines` lines of `text` start (a last line without its newline counts).
fn tail_start(text: &[u8], lines: usize) -> usize {
    if lines == 0 {
        return text.len();
    }
    let body = text.strip_suffix(b"\n").unwrap_or(text);
    body.iter()
        .enumerate()
        .rev()
        .filter(|(_, b)| **b == b'\n')
        .nth(lines - 1)
        .map_or(0, |(i, _)| i + 1)
}

/// Downloads every output of a session into `dir`, keeping their relative paths.
/// Downloads the outputs of `resource` (`["sessions", ID]`, or a batch job's path) into `dir`.
pub async fn outputs(api: &Api, resource: &[&str], dir: &Path, json_out: bool) -> Result<()> {
    let list = api.get(&[resource, &["outputs"]].concat(), &[]).await?;
    if json_out {
        println!("{}", super::render::pretty(&list.text));
        return Ok(());
    }
    let files: Vec<OutputFile> = parse(&list)?;
    if files.is_empty() {
        eprintln!("no outputs");
    }
    for f in &files {
        let rel = f.path.as_str();
        let path = corral_core::paths::session_path(rel).map_err(|why| {
            anyhow::anyhow!("the manager listed an output path that {why}: {rel:?}")
        })?;
        let segments: Vec<&str> = rel.split('/').collect();
        let mut url_path = [resource, &["outputs"]].concat();
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

#[cfg(test)]
mod tests {
    use super::tail_start;

    #[test]
    fn the_tail_starts_after_the_newline_before_the_last_lines() {
        let text = b"a\nb\nc\n";
        assert_eq!(&text[tail_start(text, 2)..], b"b\nc\n");
        assert_eq!(&text[tail_start(text, 5)..], text);
        assert_eq!(&text[tail_start(text, 0)..], b"");
        let open = b"a\nb\nc";
        assert_eq!(&open[tail_start(open, 1)..], b"c");
        assert_eq!(&open[tail_start(open, 2)..], b"b\nc");
    }
}
