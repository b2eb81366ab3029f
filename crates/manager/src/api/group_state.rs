//! A group's state now, read, never written: its queue in order, its shares (free capacity per
//! agent, the headroom it keeps), what a request would take and whether it fits, and the plan
//! of one pass as a dry run. All are computed from a snapshot, with the core's functions.

#[cfg(feature = "openapi")]
use super::openapi::{ErrorResponse, Name};
use corral_api::groups::{Required, RequiredQuestion, Shares};
use std::collections::BTreeMap;

use axum::extract::{Path, State};
use axum::Json;
use corral_core::admission::admit;
use corral_core::plan::plan;
use corral_core::{SessionState, Slots};
use corral_store::SessionFilter;

use super::sessions::{seen_by, view};
use super::{find_group, known_image, snapshot, Result};
use crate::auth::Caller;
use crate::extract::Body;
use crate::App;
use corral_api::sessions::SessionView;

/// The group's queue in order. Everyone may see where they stand; only admins and the owner see
/// a session's command, environment, inputs and outputs.
#[cfg_attr(
    feature = "openapi",
    utoipa::path(
    get,
    path = "/api/v1/groups/{name}/pending",
    summary = "Pending sessions with why each waits",
    params(("name" = Name, Path, description = "the group")),
    responses(
        (status = 200, description = "success", body = Vec<SessionView>),
        (status = 401, response = ErrorResponse),
        (status = 403, response = ErrorResponse),
        (status = 404, response = ErrorResponse),
    )
)
)]
pub(super) async fn pending(
    State(app): State<App>,
    caller: Caller,
    Path(name): Path<String>,
) -> Result<Json<Vec<SessionView>>> {
    find_group(&app, &name).await?;
    let filter = SessionFilter {
        group: Some(name),
        state: Some(SessionState::Pending),
        limit: Some(1000),
        ..Default::default()
    };
    Ok(Json(
        app.store
            .list_sessions(&filter)
            .await?
            .into_iter()
            .map(|r| seen_by(view(r), &caller))
            .collect(),
    ))
}

#[cfg_attr(
    feature = "openapi",
    utoipa::path(
    get,
    path = "/api/v1/groups/{name}/shares",
    summary = "Available shares per agent and the minimum shares (headroom)",
    params(("name" = Name, Path, description = "the group")),
    responses(
        (status = 200, description = "success", body = Shares),
        (status = 401, response = ErrorResponse),
        (status = 403, response = ErrorResponse),
        (status = 404, response = ErrorResponse),
    )
)
)]
pub(super) async fn shares(
    State(app): State<App>,
    _: Caller,
    Path(name): Path<String>,
) -> Result<Json<Shares>> {
    let s = snapshot(&app, &name).await?;
    let available: BTreeMap<String, Slots> = s
        .available_shares()
        .into_iter()
        .map(|(id, slots)| (id.0.clone(), slots))
        .collect();
    Ok(Json(Shares {
        available,
        minimum: s.minimum_shares().clone(),
    }))
}

#[cfg_attr(
    feature = "openapi",
    utoipa::path(
    post,
    path = "/api/v1/groups/{name}/required",
    summary = "Required shares of a request on an image, and whether the group can ever hold it",
    params(("name" = Name, Path, description = "the group")),
    request_body = RequiredQuestion,
    responses(
        (status = 200, description = "success", body = Required),
        (status = 400, response = ErrorResponse),
        (status = 401, response = ErrorResponse),
        (status = 403, response = ErrorResponse),
        (status = 404, response = ErrorResponse),
        (status = 413, response = ErrorResponse),
    )
)
)]
pub(super) async fn required(
    State(app): State<App>,
    _: Caller,
    Path(name): Path<String>,
    Body(b): Body<RequiredQuestion>,
) -> Result<Json<Required>> {
    corral_core::devices::check_request(&b.request, &b.constraints, &[])
        .map_err(|e| crate::error::ApiError::invalid("constraints", e.to_string()))?;
    let s = snapshot(&app, &name).await?;
    known_image(&s, b.image.as_deref())?;
    let required = s.required_for(&b.request, b.image.as_deref());
    let verdict = admit(&s, &required, &b.constraints);
    Ok(Json(Required {
        required,
        feasible: verdict.is_ok(),
        reason: verdict.err().map(|e| e.to_string()),
    }))
}

#[cfg_attr(
    feature = "openapi",
    utoipa::path(
    get,
    path = "/api/v1/groups/{name}/plan",
    summary = "Dry-run one pass of the cycle on the group as it is now (same output as corral plan --output json) (admin)",
    params(("name" = Name, Path, description = "the group")),
    responses(
        (status = 200, description = "success", body = corral_api::plan::PlanView),
        (status = 401, response = ErrorResponse),
        (status = 403, response = ErrorResponse),
        (status = 404, response = ErrorResponse),
    )
)
)]
pub(super) async fn dry_run(
    State(app): State<App>,
    caller: Caller,
    Path(name): Path<String>,
) -> Result<Json<corral_core::plan::PlanOutput>> {
    caller.require_admin()?;
    Ok(Json(plan(&snapshot(&app, &name).await?)))
}
