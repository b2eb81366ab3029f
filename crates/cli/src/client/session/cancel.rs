//! `corral session cancel`: a session, or every session of an array that has not ended.

use anyhow::Result;
use corral_api::arrays::ArrayCancelled;
use corral_api::sessions::SessionView;

use super::super::http::{parse, Api};
use super::super::render::{self, word};
use super::super::Out;
use super::arrays::{counts_text, find_array};

/// `session cancel`: an array's id cancels what of it has not ended, and says how many; a
/// session's, that session, and says its state.
pub(super) async fn cancel(api: &Api, id: &str, out: Out) -> Result<()> {
    if find_array(api, id).await?.is_some() {
        let reply = api.post(&["arrays", id, "cancel"], None).await?;
        if !render::json(out.output, &reply) {
            let c: ArrayCancelled = parse(&reply)?;
            println!(
                "array {}: cancelled {} sessions; now {}",
                c.id,
                c.cancelled,
                counts_text(&c.counts)
            );
        }
        return Ok(());
    }
    let reply = api.post(&["sessions", id, "cancel"], None).await?;
    if !render::json(out.output, &reply) {
        let s: SessionView = parse(&reply)?;
        println!("session {} is {}", s.session.id.0, word(&s.session.state));
    }
    Ok(())
}
