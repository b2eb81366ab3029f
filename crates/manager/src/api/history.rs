//! A group's history: nodes by template and sessions by state over a window, with the scaling
//! events in it. Counts and the scaler's events only, so users read it as admins do.

#[cfg(feature = "openapi")]
use super::openapi::{ErrorResponse, Name};
use axum::extract::{Path, State};
use axum::Json;
use corral_api::history::{GroupHistory, HistoryQuery, MAX_EVENTS};

use super::{find_group, Result};
use crate::auth::Caller;
use crate::error::ApiError;
use crate::extract::Query;
use crate::history::{series, window};
use crate::{now, App};

#[cfg_attr(
    feature = "openapi",
    utoipa::path(
    get,
    path = "/api/v1/groups/{name}/history",
    summary = "Nodes by template, pending and running sessions sampled over a window, with the scaling events in it",
    params(("name" = Name, Path, description = "the group"), HistoryQuery),
    responses(
        (status = 200, description = "success", body = GroupHistory),
        (status = 400, response = ErrorResponse),
        (status = 401, response = ErrorResponse),
        (status = 403, response = ErrorResponse),
        (status = 404, response = ErrorResponse),
    )
)
)]
pub(super) async fn history(
    State(app): State<App>,
    _: Caller,
    Path(name): Path<String>,
    Query(q): Query<HistoryQuery>,
) -> Result<Json<GroupHistory>> {
    find_group(&app, &name).await?;
    Ok(Json(group_history(&app, &name, &q).await?))
}

/// The history a query asks for (also the dashboard's timeline).
pub(crate) async fn group_history(app: &App, name: &str, q: &HistoryQuery) -> Result<GroupHistory> {
    let w = window(q, now()).map_err(|e| ApiError::invalid(e.field, e.message))?;
    let rows = app
        .store
        .group_history(name, w.since, w.until, MAX_EVENTS)
        .await?;
    Ok(series(name, w, rows))
}
