//! The registry accounts of a group (image auto-update, docs/image-update.md): set and removed
//! by admins, the password sealed at rest like provider secrets and redacted in every answer;
//! told in the clear only to the group's own agents (not external ones) in their syncs.

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::routing::{get, put};
use axum::{Json, Router};
use corral_api::images::{RegistryLogin, RegistryLoginUpdate, REDACTED_PASSWORD};
use corral_store::StoredLogin;

#[cfg(feature = "openapi")]
use crate::api::openapi::{ErrorResponse, Name};
use crate::auth::Caller;
use crate::error::ApiError;
use crate::extract::Body;
use crate::names::check_name;
use crate::{now, App};

type Result<T, E = ApiError> = std::result::Result<T, E>;

/// Passwords and user names longer than this are refused (registry tokens are far shorter).
const MAX_SECRET: usize = 4096;

/// Each group's accounts, opened, as agents' syncs read them.
pub type Logins = crate::views::Remembered<Arc<Vec<RegistryLogin>>>;

pub fn routes() -> Router<App> {
    Router::new()
        .route("/api/v1/groups/{name}/registry-logins", get(list_logins))
        .route(
            "/api/v1/groups/{name}/registry-logins/{registry}",
            put(put_login).delete(delete_login),
        )
}

fn redacted(login: &StoredLogin) -> RegistryLogin {
    RegistryLogin {
        registry: login.registry.clone(),
        username: login.username.clone(),
        password: REDACTED_PASSWORD.into(),
    }
}

/// The group's accounts with their passwords, for its agents' syncs. One this manager's key
/// cannot open is left out (and logged): the agent then reaches that registry anonymously.
pub(crate) async fn opened(app: &App, group: &str) -> Result<Arc<Vec<RegistryLogin>>> {
    if let Some(logins) = app.registry_logins.get(group) {
        return Ok(logins);
    }
    let generation = app.registry_logins.generation(group);
    let mut logins = Vec::new();
    for stored in app.store.list_registry_logins(group).await? {
        let what = format!("group {group}'s password for registry {}", stored.registry);
        match app.secrets.open(&stored.sealed_password, &what) {
            Ok(password) => logins.push(RegistryLogin {
                password,
                ..redacted(&stored)
            }),
            Err(e) => tracing::error!(error = %e, "registry login left out"),
        }
    }
    let logins = Arc::new(logins);
    app.registry_logins
        .remember(group, logins.clone(), generation);
    Ok(logins)
}

#[cfg_attr(
    feature = "openapi",
    utoipa::path(
    get,
    path = "/api/v1/groups/{name}/registry-logins",
    summary = "The group's registry accounts, passwords redacted (admin)",
    params(("name" = Name, Path, description = "the group")),
    responses(
        (status = 200, description = "success", body = Vec<RegistryLogin>),
        (status = 401, response = ErrorResponse),
        (status = 403, response = ErrorResponse),
        (status = 404, response = ErrorResponse),
    )
)
)]
pub(crate) async fn list_logins(
    State(app): State<App>,
    caller: Caller,
    Path(name): Path<String>,
) -> Result<Json<Vec<RegistryLogin>>> {
    caller.require_admin()?;
    let group = crate::api::find_group(&app, &name).await?;
    let logins = app.store.list_registry_logins(&group.name).await?;
    Ok(Json(logins.iter().map(redacted).collect()))
}

#[cfg_attr(
    feature = "openapi",
    utoipa::path(
    put,
    path = "/api/v1/groups/{name}/registry-logins/{registry}",
    summary = "Set the account the group's agents sign in to a registry with (admin); the password is sealed and never shown again (sent back redacted, it stays what it was)",
    params(
        ("name" = Name, Path, description = "the group"),
        ("registry" = Name, Path, description = "host[:port] as image references name it; docker.io for Docker Hub"),
    ),
    request_body = RegistryLoginUpdate,
    responses(
        (status = 200, description = "success", body = RegistryLogin),
        (status = 400, response = ErrorResponse),
        (status = 401, response = ErrorResponse),
        (status = 403, response = ErrorResponse),
        (status = 404, response = ErrorResponse),
        (status = 413, response = ErrorResponse),
    )
)
)]
pub(crate) async fn put_login(
    State(app): State<App>,
    caller: Caller,
    Path((name, registry)): Path<(String, String)>,
    Body(b): Body<RegistryLoginUpdate>,
) -> Result<Json<RegistryLogin>> {
    caller.require_admin()?;
    check_name("registry", &registry)?;
    for (field, value) in [("username", &b.username), ("password", &b.password)] {
        if value.is_empty() || value.len() > MAX_SECRET || value.chars().any(char::is_control) {
            return Err(ApiError::invalid(
                field,
                format!("1 to {MAX_SECRET} bytes with no control character"),
            ));
        }
    }
    let group = crate::api::find_group(&app, &name).await?;
    // Sent back redacted, as answers show it, the password stays what it was.
    let sealed_password = if b.password == REDACTED_PASSWORD {
        match app.store.registry_login(&group.name, &registry).await? {
            Some(kept) => kept.sealed_password,
            None => {
                return Err(ApiError::invalid(
                    "password",
                    format!(
                        "{REDACTED_PASSWORD} keeps the password set before, and group {} has \
                         none for {registry}: give the password itself",
                        group.name
                    ),
                ))
            }
        }
    } else {
        app.secrets.seal(&b.password)
    };
    let stored = StoredLogin {
        registry,
        username: b.username,
        sealed_password,
        updated_at: now(),
    };
    app.store.put_registry_login(&group.name, &stored).await?;
    app.registry_logins.invalidate(&group.name);
    tracing::info!(
        group = group.name,
        registry = stored.registry,
        "registry login set"
    );
    Ok(Json(redacted(&stored)))
}

#[cfg_attr(
    feature = "openapi",
    utoipa::path(
    delete,
    path = "/api/v1/groups/{name}/registry-logins/{registry}",
    summary = "Forget the group's account on a registry (admin)",
    params(
        ("name" = Name, Path, description = "the group"),
        ("registry" = Name, Path, description = "host[:port]"),
    ),
    responses(
        (status = 204, description = "done"),
        (status = 401, response = ErrorResponse),
        (status = 403, response = ErrorResponse),
        (status = 404, response = ErrorResponse),
    )
)
)]
pub(crate) async fn delete_login(
    State(app): State<App>,
    caller: Caller,
    Path((name, registry)): Path<(String, String)>,
) -> Result<StatusCode> {
    caller.require_admin()?;
    let group = crate::api::find_group(&app, &name).await?;
    app.store
        .delete_registry_login(&group.name, &registry)
        .await?;
    app.registry_logins.invalidate(&group.name);
    Ok(StatusCode::NO_CONTENT)
}
