//! What several `corral session` subcommands ask of arrays: whether an id is an array's, and
//! its sessions counted by state, in words.

use anyhow::Result;
use corral_api::arrays::{ArrayView, StateCounts};
use corral_api::ClientError;

use super::super::http::{parse, Api};

/// The array of this id, or `None` when there is no such array (the id is a session's).
pub(super) async fn find_array(api: &Api, id: &str) -> Result<Option<ArrayView>> {
    match api.get(&["arrays", id], &[]).await {
        Ok(reply) => Ok(Some(parse(&reply)?)),
        Err(e) => match e.downcast_ref::<super::super::http::CallError>() {
            Some(call)
                if matches!(
                    call.error,
                    ClientError::Refused { status: 404, .. }
                        | ClientError::Unexpected { status: 404, .. }
                ) =>
            {
                Ok(None)
            }
            _ => Err(e),
        },
    }
}

/// [`StateCounts::text`], or `no sessions`.
pub(super) fn counts_text(c: &StateCounts) -> String {
    match c.text() {
        t if t.is_empty() => "no sessions".into(),
        t => t,
    }
}
