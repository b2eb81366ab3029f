//! Tokens: people's tokens made by an admin (`POST /tokens`), and the one-time bootstrap tokens
//! an agent joins a group with (`POST /groups/{name}/bootstrap-tokens`). How tokens are made,
//! stored and checked is `crate::auth`.

#[cfg(feature = "openapi")]
use super::openapi::{ErrorResponse, Name};
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::Json;
use corral_api::tokens::{
    BootstrapTokenCreated, NewBootstrapToken, NewToken, TokenCreated, TokenInfo,
};
use corral_store::Role;

use super::{find_group, Result};
use crate::auth::{create_token, Caller};
use crate::error::ApiError;
use crate::extract::Body;
use crate::names::check_name;
use crate::{now, App};

#[cfg_attr(
    feature = "openapi",
    utoipa::path(
    post,
    path = "/api/v1/tokens",
    summary = "Create a token for a user; the secret is shown once (admin)",
    request_body = NewToken,
    responses(
        (status = 201, description = "success", body = TokenCreated),
        (status = 400, response = ErrorResponse),
        (status = 401, response = ErrorResponse),
        (status = 403, response = ErrorResponse),
        (status = 413, response = ErrorResponse),
    )
)
)]
pub(super) async fn new_token(
    State(app): State<App>,
    caller: Caller,
    Body(body): Body<NewToken>,
) -> Result<impl IntoResponse> {
    caller.require_admin()?;
    check_name("user", &body.user)?;
    if body.role == Role::Bootstrap {
        return Err(ApiError::invalid(
            "role",
            "bootstrap tokens are made per group: POST /api/v1/groups/{name}/bootstrap-tokens",
        ));
    }
    let (id, token) = create_token(&app.store, body.role, &body.user, now()).await?;
    Ok((
        StatusCode::CREATED,
        Json(TokenCreated {
            id,
            user: body.user,
            role: body.role,
            token,
        }),
    ))
}

#[cfg_attr(
    feature = "openapi",
    utoipa::path(
    get,
    path = "/api/v1/tokens",
    summary = "Every token, oldest first: whose, its role, a bootstrap token's expiry and use; never a secret (admin)",
    responses(
        (status = 200, description = "success", body = Vec<TokenInfo>),
        (status = 401, response = ErrorResponse),
        (status = 403, response = ErrorResponse),
    )
)
)]
pub(super) async fn list_tokens(
    State(app): State<App>,
    caller: Caller,
) -> Result<Json<Vec<TokenInfo>>> {
    caller.require_admin()?;
    Ok(Json(app.store.list_tokens().await?))
}

#[cfg_attr(
    feature = "openapi",
    utoipa::path(
    delete,
    path = "/api/v1/tokens/{id}",
    summary = "Revoke a token at once; 409 for the last admin token (admin)",
    params(("id" = String, Path, description = "the token's id")),
    responses(
        (status = 204, description = "revoked"),
        (status = 401, response = ErrorResponse),
        (status = 403, response = ErrorResponse),
        (status = 404, response = ErrorResponse),
        (status = 409, response = ErrorResponse),
    )
)
)]
pub(super) async fn revoke_token(
    State(app): State<App>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<StatusCode> {
    caller.require_admin()?;
    let hash = app.store.revoke_token(&id).await?;
    crate::auth::revoked(&app, vec![hash]);
    Ok(StatusCode::NO_CONTENT)
}

/// A one-time token an agent joins this group with; it expires unused after `ttl_secs`.
#[cfg_attr(
    feature = "openapi",
    utoipa::path(
    post,
    path = "/api/v1/groups/{name}/bootstrap-tokens",
    summary = "A one-time token an agent joins this group with; it expires unused after ttl_secs (admin)",
    params(("name" = Name, Path, description = "the group")),
    request_body = NewBootstrapToken,
    responses(
        (status = 201, description = "success", body = BootstrapTokenCreated),
        (status = 400, response = ErrorResponse),
        (status = 401, response = ErrorResponse),
        (status = 403, response = ErrorResponse),
        (status = 404, response = ErrorResponse),
        (status = 413, response = ErrorResponse),
    )
)
)]
pub(super) async fn new_bootstrap_token(
    State(app): State<App>,
    caller: Caller,
    Path(name): Path<String>,
    Body(b): Body<NewBootstrapToken>,
) -> Result<impl IntoResponse> {
    caller.require_admin()?;
    find_group(&app, &name).await?;
    if !(1..=7 * 24 * 3600).contains(&b.ttl_secs) {
        return Err(ApiError::invalid(
            "ttl_secs",
            format!("{} is outside 1..=604800", b.ttl_secs),
        ));
    }
    let (token, expires_at) = crate::auth::create_bootstrap_token(
        &app.store,
        &name,
        None,
        std::time::Duration::from_secs(b.ttl_secs),
        now(),
    )
    .await?;
    Ok((
        StatusCode::CREATED,
        Json(BootstrapTokenCreated {
            token,
            group: name,
            expires_at,
        }),
    ))
}
