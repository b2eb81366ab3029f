//! The agent builds the manager serves (docs/agent-update.md): an admin uploads a build of
//! `corral` under its version and platform; agents download it to update themselves. A file is
//! kept once, under its SHA-256, with the manager's files ([`crate::files`], scope
//! `agent-builds`), so every manager on a PostgreSQL database serves it.

use axum::body::{Body, Bytes};
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::get;
use axum::{Json, Router};
use corral_api::agent_builds::AgentBuild;
use futures_util::StreamExt;
use tokio::io::AsyncWriteExt;

#[cfg(feature = "openapi")]
use crate::api::openapi::{Binary, ErrorResponse};
use crate::auth::{random_hex, AgentCaller, Caller};
use crate::error::ApiError;
use crate::files::AGENT_BUILDS;
use crate::names::check_version;
use crate::{now, App};
#[cfg(feature = "openapi")]
use corral_core::openapi::{Platform, Version};

type Result<T, E = ApiError> = std::result::Result<T, E>;

/// Largest build taken: a debug build with line tables is some hundreds of MiB.
const MAX_BUILD: u64 = 2 << 30;

pub fn routes() -> Router<App> {
    Router::new()
        .route("/api/v1/agent-builds", get(list_builds))
        .route(
            "/api/v1/agent-builds/{version}/{platform}",
            get(download_build).put(put_build).delete(delete_build),
        )
}

/// Where builds are received before they are kept.
fn builds_dir(app: &App) -> std::path::PathBuf {
    app.data_dir.join("agent-builds")
}

/// A platform as Rust names it: `linux-x86_64`, `macos-aarch64`.
pub(crate) fn check_platform(platform: &str) -> Result<()> {
    let ok = matches!(platform.split_once('-'), Some((os, arch))
        if [os, arch].iter().all(|p| !p.is_empty()
            && p.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')));
    if ok {
        Ok(())
    } else {
        Err(ApiError::invalid(
            "platform",
            format!(
                "{platform:?} is not a platform: OS-ARCH as Rust names them, e.g. linux-x86_64"
            ),
        ))
    }
}

fn io_error(e: std::io::Error) -> ApiError {
    crate::agents::data_error(e, "agent builds")
}

#[cfg_attr(
    feature = "openapi",
    utoipa::path(
    get,
    path = "/api/v1/agent-builds",
    summary = "The agent builds the manager serves (admin)",
    responses(
        (status = 200, description = "success", body = Vec<AgentBuild>),
        (status = 401, response = ErrorResponse),
        (status = 403, response = ErrorResponse),
    )
)
)]
pub(crate) async fn list_builds(
    State(app): State<App>,
    caller: Caller,
) -> Result<Json<Vec<AgentBuild>>> {
    caller.require_admin()?;
    Ok(Json(app.store.list_agent_builds().await?))
}

#[cfg_attr(
    feature = "openapi",
    utoipa::path(
    put,
    path = "/api/v1/agent-builds/{version}/{platform}",
    summary = "Upload the build of corral of a version for a platform (admin, up to 2 GiB); the same file again changes nothing, another file under a version held is refused (409)",
    params(
        ("version" = inline(Version), Path, description = "the version the build reports (corral --version)"),
        ("platform" = inline(Platform), Path, description = "OS-ARCH, e.g. linux-x86_64"),
    ),
    request_body(content = inline(Binary), content_type = "application/octet-stream"),
    responses(
        (status = 201, description = "success", body = AgentBuild),
        (status = 400, response = ErrorResponse),
        (status = 401, response = ErrorResponse),
        (status = 403, response = ErrorResponse),
        (status = 409, response = ErrorResponse),
        (status = 413, response = ErrorResponse),
    )
)
)]
pub(crate) async fn put_build(
    State(app): State<App>,
    caller: Caller,
    Path((version, platform)): Path<(String, String)>,
    body: Body,
) -> Result<impl IntoResponse> {
    caller.require_admin()?;
    check_version("version", &version)?;
    check_platform(&platform)?;
    let dir = builds_dir(&app);
    tokio::fs::create_dir_all(&dir).await.map_err(io_error)?;
    let path = dir.join(format!(".partial-{}", random_hex(12)));
    let partial = Partial(Some(path.clone()));
    let (sha256, size) = receive(body, &path).await?;
    if size == 0 {
        return Err(ApiError::invalid("body", "the build is empty"));
    }
    // Kept under its digest: the same file under two versions is one file.
    app.files.keep(AGENT_BUILDS, &sha256, &path).await?;
    drop(partial);
    let build = AgentBuild {
        version,
        platform,
        sha256,
        size,
        uploaded_at: now(),
    };
    match app.store.put_agent_build(&build).await {
        Ok(held) => Ok((StatusCode::CREATED, Json(held))),
        Err(e) => {
            forget_file_unless_held(&app, &build.sha256).await;
            Err(e.into())
        }
    }
}

/// A build being received: removed unless it was kept, also when the upload is abandoned (the
/// client went away, and the handler with it).
struct Partial(Option<std::path::PathBuf>);

impl Drop for Partial {
    fn drop(&mut self) {
        if let Some(path) = self.0.take() {
            let _ = std::fs::remove_file(path);
        }
    }
}

/// Writes the body to `partial` and syncs it; its SHA-256 (hex) and size. Over
/// [`MAX_BUILD`] is 413.
async fn receive(body: Body, partial: &std::path::Path) -> Result<(String, u64)> {
    let mut file = tokio::fs::File::create(partial).await.map_err(io_error)?;
    let mut digest = ring::digest::Context::new(&ring::digest::SHA256);
    let mut size = 0u64;
    let mut stream = body.into_data_stream();
    while let Some(piece) = stream.next().await {
        let piece: Bytes =
            piece.map_err(|e| ApiError::invalid("body", format!("the upload broke off: {e}")))?;
        size += piece.len() as u64;
        if size > MAX_BUILD {
            return Err(ApiError::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                "too_large",
                format!("a build is at most {MAX_BUILD} bytes"),
            ));
        }
        digest.update(&piece);
        file.write_all(&piece).await.map_err(io_error)?;
    }
    file.sync_all().await.map_err(io_error)?;
    Ok((hex::encode(digest.finish()), size))
}

/// Removes the file of digest `sha256` unless a build still names it.
async fn forget_file_unless_held(app: &App, sha256: &str) {
    let held = app
        .store
        .agent_build_file_held(sha256)
        .await
        .unwrap_or(true);
    if !held {
        if let Err(e) = app.files.remove(AGENT_BUILDS, sha256).await {
            tracing::warn!(
                sha256,
                error = e.message,
                "an agent build's file was not removed"
            );
        }
    }
}

async fn find_build(app: &App, version: &str, platform: &str) -> Result<AgentBuild> {
    app.store
        .get_agent_build(version, platform)
        .await?
        .ok_or_else(|| ApiError::not_found("agent build", &format!("{version} {platform}")))
}

#[cfg_attr(
    feature = "openapi",
    utoipa::path(
    get,
    path = "/api/v1/agent-builds/{version}/{platform}",
    summary = "Download a build (an agent or an admin); the agent checks it against the SHA-256 its sync named",
    params(
        ("version" = inline(Version), Path, description = "the build's version"),
        ("platform" = inline(Platform), Path, description = "OS-ARCH, e.g. linux-x86_64"),
    ),
    responses(
        (status = 200, description = "the build", body = inline(Binary), content_type = "application/octet-stream"),
        (status = 401, response = ErrorResponse),
        (status = 403, response = ErrorResponse),
        (status = 404, response = ErrorResponse),
    )
)
)]
pub(crate) async fn download_build(
    State(app): State<App>,
    _: AgentCaller,
    Path((version, platform)): Path<(String, String)>,
) -> Result<impl IntoResponse> {
    let build = find_build(&app, &version, &platform).await?;
    // As it was stored: the agent finds out if the file was damaged since it was uploaded.
    let pieces = app
        .files
        .pieces(AGENT_BUILDS, &build.sha256)
        .await?
        .ok_or_else(|| ApiError::not_found("agent build's file", &build.sha256))?;
    Ok((
        [
            ("content-type", "application/octet-stream".to_string()),
            ("content-length", build.size.to_string()),
        ],
        Body::from_stream(pieces),
    ))
}

#[cfg_attr(
    feature = "openapi",
    utoipa::path(
    delete,
    path = "/api/v1/agent-builds/{version}/{platform}",
    summary = "Forget a build (admin); refused (409) while a group's agent update targets its version",
    params(
        ("version" = inline(Version), Path, description = "the build's version"),
        ("platform" = inline(Platform), Path, description = "OS-ARCH, e.g. linux-x86_64"),
    ),
    responses(
        (status = 204, description = "done"),
        (status = 401, response = ErrorResponse),
        (status = 403, response = ErrorResponse),
        (status = 404, response = ErrorResponse),
        (status = 409, response = ErrorResponse),
    )
)
)]
pub(crate) async fn delete_build(
    State(app): State<App>,
    caller: Caller,
    Path((version, platform)): Path<(String, String)>,
) -> Result<StatusCode> {
    caller.require_admin()?;
    find_build(&app, &version, &platform).await?;
    let targets: Vec<String> = app
        .store
        .list_groups()
        .await?
        .into_iter()
        .filter(|g| g.policy.agent_update.target.as_deref() == Some(version.as_str()))
        .map(|g| g.name)
        .collect();
    if !targets.is_empty() {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            "conflict",
            format!(
                "version {version} is the agent update target of group(s) {}: change their \
                 target first",
                targets.join(", ")
            ),
        ));
    }
    let (build, shared) = app.store.delete_agent_build(&version, &platform).await?;
    if !shared {
        let _ = tokio::fs::remove_file(builds_dir(&app).join(&build.sha256)).await;
    }
    Ok(StatusCode::NO_CONTENT)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn platforms_are_os_and_arch_as_rust_names_them() {
        for good in ["linux-x86_64", "macos-aarch64", "linux-riscv64"] {
            assert!(check_platform(good).is_ok(), "{good}");
        }
        for bad in [
            "linux",
            "-x86_64",
            "linux-",
            "Linux-x86_64",
            "linux/x86_64",
            "../x",
        ] {
            assert!(check_platform(bad).is_err(), "{bad}");
        }
    }
}
