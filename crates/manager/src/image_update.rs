//! Image auto-update (docs/image-update.md): while a group's policy is on, each sync of its
//! agents answers how often to check the images they hold; agents report what they hold
//! (recorded, for `corral image ls` and `get`) and what they could not check or pull (events).

use corral_api::images::{HeldImage, ImageCheck, ImageProblem};
use corral_api::protocol::SyncRequest;
use corral_core::image_update::MAX_INTERVAL_SECS;
use corral_core::{ImageAutoUpdate, Timestamp};
use corral_store::{Heard, NewEvent};

use crate::error::ApiError;
use crate::names::check_image_name;
use crate::App;

type Result<T, E = ApiError> = std::result::Result<T, E>;

/// The most images (and image problems) one agent reports at once.
const MAX_HELD: usize = 1000;
/// The most of a problem's reason kept in its event.
const MAX_REASON: usize = 1000;

/// Checks a group's image auto-update policy (400 naming the field).
pub(crate) fn check_policy(policy: &ImageAutoUpdate) -> Result<()> {
    if !(1..=MAX_INTERVAL_SECS).contains(&policy.interval_secs) {
        return Err(ApiError::invalid(
            "policy.image_update.interval_secs",
            format!(
                "{} is not between 1 and {MAX_INTERVAL_SECS} (a week)",
                policy.interval_secs
            ),
        ));
    }
    Ok(())
}

/// What the sync of an agent of `heard.group` answers about images: while the group's policy
/// is on, the check interval, and the group's registry accounts unless the agent is external
/// (its machine is its owner's).
pub(crate) async fn order(app: &App, heard: &Heard) -> Result<Option<ImageCheck>> {
    let policy = app.policies.policy(&app.store, &heard.group).await?;
    let Some(policy) = policy.filter(|p| p.image_update.enabled) else {
        return Ok(None);
    };
    let logins = match heard.external {
        true => Vec::new(),
        false => crate::registry_logins::opened(app, &heard.group)
            .await?
            .to_vec(),
    };
    Ok(Some(ImageCheck {
        interval_secs: policy.image_update.interval_secs,
        logins,
    }))
}

/// Records what agent `id` reports of its images: what it holds now, if it says, and what it
/// could not check or pull, as events. Checked in full before anything is written.
pub(crate) async fn reported(
    app: &App,
    id: &str,
    heard: &Heard,
    req: &SyncRequest,
    now: Timestamp,
) -> Result<()> {
    if let Some(held) = &req.images {
        check_held(held)?;
    }
    if req.image_problems.len() > MAX_HELD {
        return Err(ApiError::invalid(
            "image_problems",
            format!(
                "{} problems: an agent reports at most {MAX_HELD} at once",
                req.image_problems.len()
            ),
        ));
    }
    for (i, problem) in req.image_problems.iter().enumerate() {
        check_image_name(&format!("image_problems[{i}].image"), &problem.image)?;
    }
    if let Some(held) = &req.images {
        app.store.put_agent_images(id, held, now).await?;
    }
    for problem in &req.image_problems {
        tracing::warn!(
            agent = id,
            image = problem.image,
            reason = problem.reason,
            "image check failed"
        );
        app.store
            .record_event(&problem_event(id, &heard.group, problem, now))
            .await?;
    }
    Ok(())
}

fn problem_event(agent: &str, group: &str, problem: &ImageProblem, now: Timestamp) -> NewEvent {
    let mut reason = problem.reason.clone();
    if reason.len() > MAX_REASON {
        reason.truncate(reason.floor_char_boundary(MAX_REASON));
        reason.push_str("...");
    }
    let message = format!(
        "agent {agent} could not check or pull {}: {reason}; it tries again in {} s, and new \
         sessions start on the digest it holds meanwhile",
        problem.image, problem.retry_secs
    );
    NewEvent::of_agent(now, group, agent, "image_check_failed", message)
}

fn check_held(held: &[HeldImage]) -> Result<()> {
    if held.len() > MAX_HELD {
        return Err(ApiError::invalid(
            "images",
            format!("{} images: an agent reports at most {MAX_HELD}", held.len()),
        ));
    }
    let mut seen = std::collections::HashSet::new();
    for (i, h) in held.iter().enumerate() {
        check_image_name(&format!("images[{i}].image"), &h.image)?;
        check_digest(&format!("images[{i}].digest"), &h.digest)?;
        if let Some(offered) = &h.offered {
            check_digest(&format!("images[{i}].offered"), offered)?;
        }
        if !seen.insert(h.image.as_str()) {
            return Err(ApiError::invalid(
                &format!("images[{i}].image"),
                format!("{:?} is reported twice", h.image),
            ));
        }
    }
    Ok(())
}

fn check_digest(field: &str, digest: &str) -> Result<()> {
    digest
        .parse::<corral_registry::Digest>()
        .map(drop)
        .map_err(|why| ApiError::invalid(field, format!("{digest:?}: {why}")))
}

/// A change of a group's image auto-update policy, recorded as an event.
pub(crate) async fn policy_changed(
    app: &App,
    group: &str,
    before: &ImageAutoUpdate,
    after: &ImageAutoUpdate,
    now: Timestamp,
) -> Result<()> {
    if before == after {
        return Ok(());
    }
    let message = if after.enabled {
        format!(
            "image update on: agents check the images they hold every {} s and pull new digests",
            after.interval_secs
        )
    } else {
        "image update off: agents pull nothing by themselves".to_string()
    };
    app.store
        .record_event(&NewEvent::of_group(now, group, "policy", message))
        .await?;
    Ok(())
}
