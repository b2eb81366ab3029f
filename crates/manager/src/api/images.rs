//! Images: the container images sessions name, each with the minimum slots a session of it
//! takes, and the digest of it each agent holds. Changing one invalidates the admission views
//! (`crate::views`).

#[cfg(feature = "openapi")]
use super::openapi::{ErrorResponse, ImageName};
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::Json;
use corral_api::images::{ImageHolding, ImageUpdate, ImageView};
use corral_core::Image;

use super::Result;
use crate::auth::Caller;
use crate::error::ApiError;
use crate::extract::Body;
use crate::names::check_image_name;
use crate::App;

#[cfg_attr(
    feature = "openapi",
    utoipa::path(
    get,
    path = "/api/v1/images",
    summary = "List images",
    responses(
        (status = 200, description = "success", body = Vec<ImageView>),
        (status = 401, response = ErrorResponse),
        (status = 403, response = ErrorResponse),
    )
)
)]
pub(super) async fn list_images(State(app): State<App>, _: Caller) -> Result<Json<Vec<ImageView>>> {
    let mut holdings: std::collections::HashMap<String, Vec<ImageHolding>> =
        std::collections::HashMap::new();
    for (image, holding) in app.store.list_image_holdings().await? {
        holdings.entry(image).or_default().push(holding);
    }
    let views = app
        .store
        .list_images()
        .await?
        .into_iter()
        .map(|image| {
            let agents = holdings.remove(&image.name).unwrap_or_default();
            view(image, agents)
        })
        .collect();
    Ok(Json(views))
}

fn view(image: Image, agents: Vec<ImageHolding>) -> ImageView {
    ImageView {
        name: image.name,
        min_slots: image.min_slots,
        agents,
    }
}

#[cfg_attr(
    feature = "openapi",
    utoipa::path(
    get,
    path = "/api/v1/images/{name}",
    summary = "Get an image",
    params(("name" = ImageName, Path, description = "the image")),
    responses(
        (status = 200, description = "success", body = ImageView),
        (status = 401, response = ErrorResponse),
        (status = 403, response = ErrorResponse),
        (status = 404, response = ErrorResponse),
    )
)
)]
pub(super) async fn get_image(
    State(app): State<App>,
    _: Caller,
    Path(name): Path<String>,
) -> Result<Json<ImageView>> {
    let image = app
        .store
        .get_image(&name)
        .await?
        .ok_or_else(|| ApiError::not_found("image", &name))?;
    let agents = app.store.image_holdings(&name).await?;
    Ok(Json(view(image, agents)))
}

#[cfg_attr(
    feature = "openapi",
    utoipa::path(
    put,
    path = "/api/v1/images/{name}",
    summary = "Create or replace an image and its minimum slots (admin)",
    params(("name" = ImageName, Path, description = "the image")),
    request_body = ImageUpdate,
    responses(
        (status = 200, description = "success", body = Image),
        (status = 400, response = ErrorResponse),
        (status = 401, response = ErrorResponse),
        (status = 403, response = ErrorResponse),
        (status = 413, response = ErrorResponse),
    )
)
)]
pub(super) async fn put_image(
    State(app): State<App>,
    caller: Caller,
    Path(name): Path<String>,
    Body(b): Body<ImageUpdate>,
) -> Result<Json<Image>> {
    caller.require_admin()?;
    check_image_name("name", &name)?;
    let image = Image {
        name,
        min_slots: b.min_slots,
    };
    app.store.put_image(&image).await?;
    app.control.views.invalidate_all();
    Ok(Json(image))
}

#[cfg_attr(
    feature = "openapi",
    utoipa::path(
    delete,
    path = "/api/v1/images/{name}",
    summary = "Delete an image (admin)",
    params(("name" = ImageName, Path, description = "the image")),
    responses(
        (status = 204, description = "done"),
        (status = 401, response = ErrorResponse),
        (status = 403, response = ErrorResponse),
        (status = 404, response = ErrorResponse),
    )
)
)]
pub(super) async fn delete_image(
    State(app): State<App>,
    caller: Caller,
    Path(name): Path<String>,
) -> Result<StatusCode> {
    caller.require_admin()?;
    app.store.delete_image(&name).await?;
    app.control.views.invalidate_all();
    Ok(StatusCode::NO_CONTENT)
}
