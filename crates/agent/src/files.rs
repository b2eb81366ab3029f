//! A session's files and the manager: inputs downloaded into its work directory before it
//! starts, logs appended as they grow (offset-checked), outputs uploaded at its end.

use corral_api::protocol::Assignment;
use corral_api::ClientError;

use crate::sessions::spec_of;
use crate::Agent;

/// What became of a session's outputs.
pub(crate) enum Outputs {
    /// All of them are with the manager.
    Saved,
    /// Those not saved did not exist when the session ended.
    Missing(Vec<String>),
    /// Some could not be collected or uploaded: the reason.
    Failed(String),
}

/// Collects the session's outputs (files and directory trees) and uploads every file in them.
pub(crate) async fn upload_outputs(agent: &Agent, a: &Assignment) -> Outputs {
    if a.outputs.is_empty() {
        return Outputs::Saved;
    }
    let root = agent.config.work_root.join(&a.id).join("outputs");
    let collected = match agent
        .runtime
        .collect_outputs(&spec_of(a, &agent.config.group), &agent.config.work_root)
        .await
    {
        Ok(c) => c,
        Err(e) => return Outputs::Failed(e.to_string()),
    };
    let client = agent.as_agent();
    let mut failed = Vec::new();
    let mut files = collected.clone();
    while let Some(file) = files.pop() {
        let rel = file
            .strip_prefix(&root)
            .unwrap_or(&file)
            .to_string_lossy()
            .into_owned();
        if file.is_dir() {
            match std::fs::read_dir(&file) {
                Ok(entries) => files.extend(entries.flatten().map(|e| e.path())),
                Err(e) => failed.push(format!("{rel}: {e}")),
            }
            continue;
        }
        let sent = match tokio::fs::read(&file).await {
            Ok(data) => client
                .put_output(&agent.config.id, &a.id, &rel, data)
                .await
                .map_err(|e| e.to_string()),
            Err(e) => Err(e.to_string()),
        };
        if let Err(e) = sent {
            tracing::warn!(session = a.id, file = rel, error = e, "output not uploaded");
            failed.push(format!("{rel}: {e}"));
        }
    }
    if !failed.is_empty() {
        return Outputs::Failed(failed.join("; "));
    }
    let missing: Vec<String> = a
        .outputs
        .iter()
        .filter(|o| {
            !collected.iter().any(|c| {
                c.strip_prefix(&root)
                    .is_ok_and(|r| r == std::path::Path::new(o))
            })
        })
        .cloned()
        .collect();
    if missing.is_empty() {
        Outputs::Saved
    } else {
        Outputs::Missing(missing)
    }
}

/// Sends the bytes a session's logs gained since the last upload (1 MiB a stream at a time).
pub(crate) async fn flush_logs(agent: &Agent, id: &str) {
    use tokio::io::{AsyncReadExt, AsyncSeekExt};
    let client = agent.as_agent();
    let mut offsets = agent.offsets.lock().await;
    for stream in ["stdout", "stderr"] {
        let offset = offsets.entry((id.to_string(), stream)).or_insert(0);
        let path = agent
            .config
            .work_root
            .join(id)
            .join(format!("{stream}.log"));
        let Ok(mut f) = tokio::fs::File::open(&path).await else {
            continue;
        };
        let mut chunk = Vec::new();
        if f.seek(std::io::SeekFrom::Start(*offset)).await.is_err()
            || f.take(1 << 20).read_to_end(&mut chunk).await.is_err()
            || chunk.is_empty()
        {
            continue;
        }
        let len = chunk.len() as u64;
        match client
            .append_log(&agent.config.id, id, stream, *offset, chunk)
            .await
        {
            Ok(()) => *offset += len,
            Err(ClientError::Refused {
                status: 409,
                details,
                ..
            }) => {
                // The manager holds a different amount (a retry landed twice): go on from there.
                if let Some(size) = details["size"].as_u64() {
                    *offset = size;
                }
            }
            Err(e) => tracing::debug!(session = id, error = %e, "log upload failed"),
        }
    }
}

/// Downloads the session's inputs into its working directory before it starts.
pub(crate) async fn fetch_inputs(agent: &Agent, a: &Assignment) -> Result<(), String> {
    let client = agent.as_agent();
    let work = corral_runtime::SessionPaths::new(&agent.config.work_root, &a.id).work;
    for input in &a.inputs {
        let rel =
            corral_core::paths::session_path(input).map_err(|why| format!("{input:?} {why}"))?;
        let data = client
            .get_input(&agent.config.id, &a.id, input)
            .await
            .map_err(|e| format!("{input}: {e}"))?;
        let target = work.join(rel);
        if let Some(parent) = target.parent() {
            tokio::fs::create_dir_all(parent)
                .await
                .map_err(|e| format!("{input}: {e}"))?;
        }
        tokio::fs::write(&target, &data)
            .await
            .map_err(|e| format!("{input}: {e}"))?;
    }
    Ok(())
}
