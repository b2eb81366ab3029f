//! `corral session wait`: polls a session or an array until it has ended, for its exit code.

use anyhow::Result;
use corral_api::arrays::ArrayView;
use corral_api::sessions::SessionView;

use super::super::http::{parse, Api};
use super::super::render::word;
use super::arrays::{counts_text, find_array};

/// How often `session wait` reads the state again.
const WAIT_POLL: std::time::Duration = std::time::Duration::from_millis(500);

/// `session wait`: polls the session or array until it has ended; returns the exit code.
pub(super) async fn wait(api: &Api, id: &str, json_out: bool) -> Result<i32> {
    if find_array(api, id).await?.is_some() {
        return wait_array(api, id, json_out).await;
    }
    wait_session(api, id, json_out).await
}

/// Polls an array until none of its sessions is active; its exit code.
async fn wait_array(api: &Api, id: &str, json_out: bool) -> Result<i32> {
    loop {
        let reply = api.get(&["arrays", id], &[]).await?;
        let a: ArrayView = parse(&reply)?;
        if !a.active {
            if json_out {
                println!("{}", reply.text.trim());
            }
            return Ok(array_exit_code(&a));
        }
        tokio::time::sleep(WAIT_POLL).await;
    }
}

/// Polls a session until it has ended; its exit code, 0 for one that succeeded without one,
/// else 1 with why it ended on stderr.
async fn wait_session(api: &Api, id: &str, json_out: bool) -> Result<i32> {
    loop {
        let reply = api.get(&["sessions", id], &[]).await?;
        let s: SessionView = parse(&reply)?;
        if s.session.state.is_terminal() {
            if json_out {
                println!("{}", reply.text.trim());
            }
            return Ok(match (s.session.state, s.exit_code) {
                (_, Some(code)) => code,
                (corral_core::SessionState::Succeeded, None) => 0,
                (state, None) => {
                    let why = s.end_reason.as_deref().unwrap_or("no reason given");
                    eprintln!("session {id} {}: {why}", word(&state));
                    1
                }
            });
        }
        tokio::time::sleep(WAIT_POLL).await;
    }
}

/// An array's exit code: the highest of its sessions', and at least 1 when one of them failed
/// without an exit code, was cancelled or was rejected.
fn array_exit_code(a: &ArrayView) -> i32 {
    let c = &a.counts;
    let code = a.max_exit_code.unwrap_or(0);
    let unclean = c.failed > 0 || c.cancelled > 0 || c.rejected > 0;
    if unclean && code == 0 {
        eprintln!("array {}: {}", a.id, counts_text(c));
        return 1;
    }
    code
}
