//! `corral session run`, `logs` and `outputs`: a session's output as the person who ran it
//! reads it.

use std::future::Future;
use std::io::{IsTerminal, Write};
use std::path::Path;
use std::pin::Pin;
use std::time::Duration;

use anyhow::{Context, Result};
use corral_api::sessions::{NewSession, OutputFile, SessionView, Submitted};
use corral_core::SessionState;

use super::http::{json, parse, Api};
use super::render::word;

/// How long the manager may hold one blocking read (below the client's 60 s limit per call).
const WAIT: Duration = Duration::from_secs(25);

/// The exit code of a run interrupted by Ctrl-C, as a shell reports SIGINT.
const INTERRUPTED: i32 = 130;

/// A read in flight.
type Pending<'a, T> = Pin<Box<dyn Future<Output = Result<T>> + 'a>>;

/// Submits, waits (saying on a terminal what the session waits for), prints its output as it
/// comes (with `json`, instead, its final state as the manager answers it, on one line), and
/// returns its exit code. Every wait is a blocking read that the manager answers when something
/// changed: the session's state, or its logs. Ctrl-C cancels the session (and the run exits 130
/// once it has ended); a second Ctrl-C leaves it running and says how to follow it.
pub async fn run_session(
    api: &Api,
    body: &NewSession,
    inputs: &[String],
    json_out: bool,
) -> Result<i32> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut interrupts = signal(SignalKind::interrupt()).context("listening for Ctrl-C")?;
    let mut cancelled = false;
    let reply = api.post(&["sessions"], Some(&json(body)?)).await?;
    let submitted = parse::<Submitted>(&reply)?;
    super::session::note_raised(&body.image, &body.request, &submitted);
    let id = submitted.id;
    super::session::upload_inputs(api, &["sessions", &id], inputs).await?;
    let progress = !json_out && std::io::stderr().is_terminal();
    if progress {
        eprintln!("session {id} submitted");
    }
    let mut last_note = String::new();
    let mut offsets = [0u64; 2];
    let changed = |etag: Option<String>| -> Pending<'_, _> {
        let id = id.clone();
        Box::pin(async move {
            api.get_changed(&["sessions", &id], etag.as_deref(), WAIT)
                .await
        })
    };
    let mut etag: Option<String> = None;
    let mut state = changed(None);
    // A log read that came back empty (the wait ended) rests until the state changes.
    let mut logs: [Option<Pending<'_, Vec<u8>>>; 2] = [0, 1].map(|i| {
        (!json_out)
            .then(|| Box::pin(log_after(api, &id, STREAMS[i], offsets[i], WAIT)) as Pending<'_, _>)
    });
    loop {
        let [out, err] = &mut logs;
        tokio::select! {
            answer = &mut state => {
                // Nothing changed within the wait (304): the same question again.
                if let Some((reply, tag)) = answer? {
                    let view: SessionView = parse(&reply)?;
                    let note = progress_note(&view);
                    if progress && note != last_note {
                        eprintln!("{note}");
                        last_note = note;
                    }
                    if view.session.state.is_terminal() {
                        drop(logs);
                        if json_out {
                            println!("{}", reply.text.trim());
                        } else {
                            // Agents upload the last of the logs before they report the end.
                            copy_logs(api, &id, &mut offsets).await?;
                        }
                        return Ok(exit_code(&view, cancelled));
                    }
                    etag = tag;
                }
                state = changed(etag.clone());
                for (i, log) in logs.iter_mut().enumerate() {
                    if log.is_none() && !json_out {
                        *log = Some(Box::pin(log_after(api, &id, STREAMS[i], offsets[i], WAIT)));
                    }
                }
            }
            chunk = next(out) => {
                logs[0] = write_chunk(api, &id, 0, chunk?, &mut offsets)?;
            }
            chunk = next(err) => {
                logs[1] = write_chunk(api, &id, 1, chunk?, &mut offsets)?;
            }
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

/// The two logs, in `offsets`' order.
const STREAMS: [&str; 2] = ["stdout", "stderr"];

/// What the session is doing, as the progress line on a terminal says it.
fn progress_note(view: &SessionView) -> String {
    let session = &view.session;
    let agent = || session.agent.as_ref().map_or("an agent", |a| a.0.as_str());
    match session.state {
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
    }
}

/// The exit code `session run` ends with: the session's own, 130 if Ctrl-C cancelled it, 1
/// (with the reason on stderr) if it ended without one.
fn exit_code(view: &SessionView, cancelled: bool) -> i32 {
    match (view.session.state, view.exit_code) {
        (SessionState::Cancelled, _) if cancelled => INTERRUPTED,
        (_, Some(code)) => code,
        (SessionState::Succeeded, None) => 0,
        (state, None) => {
            let why = view.end_reason.as_deref().unwrap_or("no reason given");
            eprintln!("session {} {}: {why}", view.session.id.0, word(&state));
            1
        }
    }
}

/// The next answer of a log read in flight; never, while it rests.
async fn next(log: &mut Option<Pending<'_, Vec<u8>>>) -> Result<Vec<u8>> {
    match log {
        Some(read) => read.await,
        None => std::future::pending().await,
    }
}

/// Writes a chunk of log `i` where it belongs and starts the next read after it; an empty chunk
/// (the wait ended) leaves the log resting until the session's state changes.
fn write_chunk<'a>(
    api: &'a Api,
    id: &'a str,
    i: usize,
    chunk: Vec<u8>,
    offsets: &mut [u64; 2],
) -> Result<Option<Pending<'a, Vec<u8>>>> {
    if chunk.is_empty() {
        return Ok(None);
    }
    offsets[i] += chunk.len() as u64;
    write_log(i, &chunk)?;
    Ok(Some(Box::pin(log_after(
        api, id, STREAMS[i], offsets[i], WAIT,
    ))))
}

/// Log `i`'s bytes to our stdout (0) or stderr (1).
fn write_log(i: usize, chunk: &[u8]) -> Result<()> {
    if i == 0 {
        let mut stdout = std::io::stdout();
        stdout.write_all(chunk)?;
        stdout.flush()?;
    } else {
        std::io::stderr().write_all(chunk)?;
    }
    Ok(())
}

/// Writes what the session's stdout and stderr gained since `offsets` to ours.
async fn copy_logs(api: &Api, id: &str, offsets: &mut [u64; 2]) -> Result<()> {
    for (i, stream) in STREAMS.into_iter().enumerate() {
        loop {
            let chunk = log_from(api, id, stream, offsets[i]).await?;
            if chunk.is_empty() {
                break;
            }
            offsets[i] += chunk.len() as u64;
            write_log(i, &chunk)?;
        }
    }
    Ok(())
}

/// Prints a session's log (stdout, or stderr); with `follow`, keeps printing until it ends,
/// each read waiting at the manager for bytes to come.
/// With `json`, each chunk is a line `{"stream": ..., "offset": N, "text": ...}` (the text as
/// UTF-8, an invalid sequence replaced).
pub async fn logs(
    api: &Api,
    id: &str,
    stderr: bool,
    follow: bool,
    tail: Option<usize>,
    json: bool,
) -> Result<()> {
    let stream = if stderr { "stderr" } else { "stdout" };
    let print = |offset: u64, chunk: &[u8]| -> Result<()> {
        let mut stdout = std::io::stdout();
        if json {
            let line = serde_json::json!({
                "stream": stream,
                "offset": offset,
                "text": String::from_utf8_lossy(chunk),
            });
            writeln!(stdout, "{line}")?;
        } else {
            stdout.write_all(chunk)?;
        }
        Ok(stdout.flush()?)
    };
    let mut offset = 0u64;
    if let Some(lines) = tail {
        let (end, last) = last_lines(api, id, stream, lines).await?;
        if !last.is_empty() {
            print(end - last.len() as u64, &last)?;
        }
        offset = end;
    }
    let wait = if follow { WAIT } else { Duration::ZERO };
    loop {
        let chunk = log_after(api, id, stream, offset, wait).await?;
        if !chunk.is_empty() {
            print(offset, &chunk)?;
            offset += chunk.len() as u64;
            continue;
        }
        if !follow {
            return Ok(());
        }
        // Nothing came: the wait ended, or the session did.
        let view: SessionView = parse(&api.get(&["sessions", id], &[]).await?)?;
        if view.session.state.is_terminal() {
            // One more read: the last bytes land before the end is reported.
            let chunk = log_from(api, id, stream, offset).await?;
            if !chunk.is_empty() {
                print(offset, &chunk)?;
            }
            return Ok(());
        }
    }
}

/// A session's log from `offset`; with a `wait`, an answer that would be empty is held by the
/// manager until bytes come or the session ends.
async fn log_after(
    api: &Api,
    id: &str,
    stream: &str,
    offset: u64,
    wait: Duration,
) -> Result<Vec<u8>> {
    let wait_ms = (!wait.is_zero()).then(|| wait.as_millis().to_string());
    api.get_bytes(
        &["sessions", id, "logs", stream],
        &[("offset", Some(offset.to_string())), ("wait_ms", wait_ms)],
    )
    .await
}

/// A session's log from `offset` (as much as the manager sends in one read).
async fn log_from(api: &Api, id: &str, stream: &str, offset: u64) -> Result<Vec<u8>> {
    log_after(api, id, stream, offset, Duration::ZERO).await
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
