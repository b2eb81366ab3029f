//! The REST API under `/api/v1`: the router, the fallback, and what the resources share. Every
//! handler validates its input completely before it writes anything; errors are
//! `{"error": {"code", "message", "details"}}`.
//!
//! One module per resource: `tokens.rs` (tokens, bootstrap tokens), `groups.rs` (a group's
//! settings, templates, provider and instances), `merge_patch.rs` (JSON merge patch, RFC 7396,
//! for `PATCH /groups/{name}`), `group_state.rs` (a group's queue, shares, required slots and
//! plan), `history.rs` (a group's series over a window), `batch.rs` (a group's batch system: binding, jobs, nodes, configuration), `images.rs`, `sessions.rs`, `interactive.rs` (a command, a terminal or a forwarded port in a running session, and the agents' tunnels they travel over), `arrays.rs` (session arrays: made by `POST /sessions`, read, listed and cancelled as one), `agent_registry.rs` (agents as people see and manage them;
//! the agents' own side, join and sync, is `crate::agents`) and `events.rs`.

mod agent_registry;
mod apps;
mod arrays;
mod batch;
mod events;
mod group_state;
mod groups;
mod history;
mod images;
mod interactive;
mod merge_patch;
#[cfg(feature = "openapi")]
pub mod openapi;
mod sessions;
mod tokens;

use axum::extract::{DefaultBodyLimit, State};
use axum::http::StatusCode;
use axum::routing::{any, delete, get, post, put};
use axum::Router;
use corral_core::{ScalingGroup, Snapshot};

use crate::error::ApiError;
use crate::extract::MAX_BODY;
use crate::{now, App};
use axum::response::IntoResponse;
#[cfg(feature = "openapi")]
use openapi::ErrorResponse;

pub(crate) use apps::{login_path as app_login_path, views as app_views};
pub(crate) use history::group_history;
pub(crate) use sessions::{own_session, Spec};

type Result<T, E = ApiError> = std::result::Result<T, E>;

/// The OpenAPI document the server serves: the one generated from the handlers and types
/// (`openapi::DOCUMENT`, feature `openapi`) as of the last `CORRAL_UPDATE_OPENAPI=1 cargo test
/// -p corral-manager --test openapi`, which fails while the two differ. The generator stays out
/// of the shipped binary (about 2 MB of code that would build the same text at every start).
pub const OPENAPI: &str = include_str!("../openapi.json");

#[cfg_attr(
    feature = "openapi",
    utoipa::path(
    get,
    path = "/api/v1/health",
    summary = "Whether the manager can work: its store takes a write; no token needed",
    security(()),
    responses(
        (status = 200, description = "success", body = inline(openapi::Healthy)),
        (status = 503, description = "the store cannot take writes (full disk, locked, unreachable); the reason says why", body = inline(openapi::Unhealthy)),
    )
)
)]
async fn health(State(app): State<App>) -> axum::response::Response {
    crate::health::health(&app).await
}

#[cfg_attr(
    feature = "openapi",
    utoipa::path(
    get,
    path = "/api/v1/openapi.json",
    summary = "This document; no token needed",
    security(()),
    responses((status = 200, description = "success", body = inline(openapi::Document)))
)
)]
async fn openapi_json() -> impl axum::response::IntoResponse {
    ([("content-type", "application/json")], OPENAPI)
}

#[cfg_attr(
    feature = "openapi",
    utoipa::path(
    get,
    path = "/metrics",
    summary = "The manager's metrics in Prometheus's text format (docs/metrics.md); a token is needed unless the server runs with --metrics-public",
    responses(
        (status = 200, description = "success", body = String, content_type = "text/plain"),
        (status = 401, response = ErrorResponse),
        (status = 403, response = ErrorResponse),
    )
)
)]
async fn metrics(
    State(app): State<App>,
    caller: std::result::Result<crate::auth::Caller, ApiError>,
) -> Result<axum::response::Response> {
    if !app.metrics_public {
        caller?;
    }
    let text = app.control.metrics.scrape(&app.store).await?;
    Ok(([("content-type", crate::metrics::CONTENT_TYPE)], text).into_response())
}

/// Times every request of a route, by route and status, for the metrics.
async fn timed(
    State(app): State<App>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    let started = std::time::Instant::now();
    let route = request
        .extensions()
        .get::<axum::extract::MatchedPath>()
        .map_or("unmatched", |p| p.as_str())
        .to_string();
    // Methods a client invents stay out of the label set.
    let method = match request.method().as_str() {
        m @ ("GET" | "POST" | "PUT" | "PATCH" | "DELETE" | "HEAD" | "OPTIONS") => m,
        _ => "other",
    }
    .to_string();
    let response = next.run(request).await;
    let labels = crate::metrics::HttpLabels {
        method,
        route,
        status: response.status().as_u16(),
    };
    app.control
        .metrics
        .http_requests
        .get_or_create(&labels)
        .observe(started.elapsed().as_secs_f64());
    response
}

pub fn router(app: App) -> Router {
    Router::new()
        .route("/metrics", get(metrics))
        .route("/api/v1/health", get(health))
        .route("/api/v1/openapi.json", get(openapi_json))
        .merge(token_routes())
        .merge(group_routes())
        .merge(batch_routes())
        .merge(group_state_routes())
        .route(
            "/api/v1/groups/{name}/bootstrap-tokens",
            post(tokens::new_bootstrap_token),
        )
        .merge(image_routes())
        .merge(session_routes())
        .merge(array_routes())
        .merge(agent_routes())
        .route("/api/v1/events", get(events::list_events))
        .merge(crate::agents::routes())
        .merge(crate::external::routes())
        .merge(crate::agent_builds::routes())
        .merge(crate::registry_logins::routes())
        .merge(crate::ui::routes())
        .route_layer(axum::middleware::from_fn_with_state(app.clone(), timed))
        .fallback(|| async {
            ApiError::new(
                StatusCode::NOT_FOUND,
                "not_found",
                "no such endpoint; see /api/v1/openapi.json",
            )
        })
        .layer(DefaultBodyLimit::max(MAX_BODY))
        .with_state(app)
}

/// People's tokens (`tokens.rs`).
fn token_routes() -> Router<App> {
    Router::new()
        .route(
            "/api/v1/tokens",
            get(tokens::list_tokens).post(tokens::new_token),
        )
        .route("/api/v1/tokens/{id}", delete(tokens::revoke_token))
}

/// Groups and their settings, policy, templates, provider and instances (`groups.rs`).
fn group_routes() -> Router<App> {
    Router::new()
        .route(
            "/api/v1/groups",
            get(groups::list_groups).post(groups::create_group),
        )
        .route(
            "/api/v1/groups/{name}",
            get(groups::get_group)
                .put(groups::replace_group)
                .patch(groups::patch_group)
                .delete(groups::delete_group),
        )
        .route("/api/v1/groups/{name}/policy", put(groups::put_policy))
        .route(
            "/api/v1/groups/{name}/templates",
            get(groups::get_templates).put(groups::put_templates),
        )
        .route(
            "/api/v1/groups/{name}/provider",
            get(groups::get_provider).put(groups::put_provider),
        )
        .route(
            "/api/v1/groups/{name}/instances",
            get(groups::list_instances),
        )
}

/// A group's batch system: binding, jobs, their files, nodes, configuration (`batch.rs`).
fn batch_routes() -> Router<App> {
    Router::new()
        .route(
            "/api/v1/groups/{name}/batch",
            get(batch::get_binding)
                .put(batch::put_binding)
                .delete(batch::delete_binding),
        )
        .route(
            "/api/v1/groups/{name}/batch/jobs",
            get(batch::list_jobs).post(batch::submit_job),
        )
        .route(
            "/api/v1/groups/{name}/batch/jobs/{id}",
            get(batch::get_job).delete(batch::cancel_job),
        )
        .route(
            "/api/v1/groups/{name}/batch/jobs/{id}/hold",
            post(batch::hold_job),
        )
        .route(
            "/api/v1/groups/{name}/batch/jobs/{id}/release",
            post(batch::release_job),
        )
        .route(
            "/api/v1/groups/{name}/batch/jobs/{id}/signal",
            post(batch::signal_job),
        )
        .route(
            "/api/v1/groups/{name}/batch/jobs/{id}/inputs/{*path}",
            put(batch::put_input).layer(DefaultBodyLimit::max(crate::agents::MAX_OUTPUT)),
        )
        .route(
            "/api/v1/groups/{name}/batch/jobs/{id}/outputs",
            get(batch::list_outputs),
        )
        .route(
            "/api/v1/groups/{name}/batch/jobs/{id}/outputs/{*path}",
            get(batch::get_output),
        )
        .route("/api/v1/groups/{name}/batch/nodes", get(batch::list_nodes))
        .route(
            "/api/v1/groups/{name}/batch/config",
            get(batch::get_config).patch(batch::patch_config),
        )
}

/// A group's state, read and never written: queue, history, shares, required slots, the plan
/// (`group_state.rs`, `history.rs`).
fn group_state_routes() -> Router<App> {
    Router::new()
        .route("/api/v1/groups/{name}/pending", get(group_state::pending))
        .route("/api/v1/groups/{name}/history", get(history::history))
        .route("/api/v1/groups/{name}/shares", get(group_state::shares))
        .route(
            "/api/v1/groups/{name}/required",
            post(group_state::required),
        )
        .route("/api/v1/groups/{name}/plan", get(group_state::dry_run))
}

/// Registered images (`images.rs`).
fn image_routes() -> Router<App> {
    Router::new()
        .route("/api/v1/images", get(images::list_images))
        .route(
            "/api/v1/images/{name}",
            get(images::get_image)
                .put(images::put_image)
                .delete(images::delete_image),
        )
}

/// Sessions: submit, list, get, cancel (`sessions.rs`).
fn session_routes() -> Router<App> {
    Router::new()
        .route(
            "/api/v1/sessions",
            get(sessions::list_sessions).post(sessions::submit),
        )
        .route("/api/v1/sessions/{id}", get(sessions::get_session))
        .route("/api/v1/sessions/{id}/cancel", post(sessions::cancel))
        .route("/api/v1/sessions/{id}/exec", get(interactive::exec))
        .route("/api/v1/sessions/{id}/apps", get(apps::list))
        .route("/api/v1/sessions/{id}/apps/{app}/login", post(apps::login))
        .route("/apps/{session}/{app}", any(apps::serve))
        .route("/apps/{session}/{app}/", any(apps::serve))
        .route("/apps/{session}/{app}/{*rest}", any(apps::serve))
        .route(
            "/api/v1/sessions/{id}/forward/{port}",
            get(interactive::forward),
        )
        .route("/api/v1/agents/{id}/tunnel", get(interactive::agent_tunnel))
}

/// Session arrays: listed, read, cancelled (`arrays.rs`).
fn array_routes() -> Router<App> {
    Router::new()
        .route("/api/v1/arrays", get(arrays::list_arrays))
        .route("/api/v1/arrays/{id}", get(arrays::get_array))
        .route("/api/v1/arrays/{id}/cancel", post(arrays::cancel_array))
}

/// Agents as people see and manage them (`agent_registry.rs`).
fn agent_routes() -> Router<App> {
    Router::new()
        .route(
            "/api/v1/agents",
            get(agent_registry::list_agents).post(agent_registry::register_agent),
        )
        .route(
            "/api/v1/agents/{id}",
            get(agent_registry::get_agent).delete(agent_registry::remove_agent),
        )
        .route("/api/v1/agents/{id}/drain", post(agent_registry::drain))
        .route("/api/v1/agents/{id}/unmark", post(agent_registry::unmark))
}

// ---------------------------------------------------------------- shared by the resources

fn new_id(prefix: &str) -> String {
    format!("{prefix}{}", crate::auth::random_hex(8))
}

pub(crate) async fn find_group(app: &App, name: &str) -> Result<ScalingGroup> {
    app.store
        .get_group(name)
        .await?
        .ok_or_else(|| ApiError::not_found("group", name))
}

/// A named image must be registered: its minimums decide what a session takes.
fn known_image(s: &Snapshot, image: Option<&str>) -> Result<()> {
    match image.filter(|i| !s.images.iter().any(|x| x.name == *i)) {
        Some(image) => Err(ApiError::invalid(
            "image",
            format!("no image {image:?}; an admin registers it with `corral image put {image}`"),
        )),
        None => Ok(()),
    }
}

/// The group as the cycle would see it now.
async fn snapshot(app: &App, name: &str) -> Result<Snapshot> {
    let now = now();
    let mut snapshot = app.store.snapshot(name, now).await?;
    snapshot.launch_limits = launch_limits(app, name, now).await?;
    Ok(snapshot)
}

/// What each template of the group may launch at `now`, as its owner's governor says: this
/// manager's driver when it runs the group, else the governor the owner keeps in the store
/// (several managers on one database).
pub(crate) async fn launch_limits(
    app: &App,
    name: &str,
    now: corral_core::Timestamp,
) -> Result<std::collections::BTreeMap<String, corral_core::LaunchLimit>> {
    if let Some(driver) = app.control.driver(name) {
        return Ok(driver.limits(now));
    }
    let governor = app.store.governor(name).await?;
    // One that does not parse is the driver's to report; its launch settings are the default.
    let stored = app.store.get_group_provider(name).await?;
    let settings = crate::secrets::parse_stored(name, stored.as_deref())
        .map(|config| config.launch)
        .unwrap_or_default();
    Ok(governor.limits(&settings, now))
}
