//! The web dashboard at `/ui`: server-rendered HTML (maud escapes everything it is given), a
//! little plain JavaScript that follows a running session's log, no build step.
//!
//! People log in with their token, which is kept in a cookie (HttpOnly, SameSite=Strict, Secure
//! over TLS, path `/ui`) and checked on every request as an API token is; pages read what the
//! API would let the same token read: users see only their own sessions, admins everything.
//! One module per page: `overview.rs` (groups and recent sessions), `group.rs` (agents, queue,
//! instances, timeline), `session.rs` (history, logs, outputs); `login.rs` the cookie;
//! `layout.rs` the page frame and the bars; `timeline.rs` the SVG timeline.

mod group;
mod layout;
mod login;
mod overview;
mod session;
mod timeline;

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use axum::Router;
use maud::Markup;

use crate::auth::Caller;
use crate::error::ApiError;
use crate::App;

/// The cookie that holds the token.
pub(crate) const COOKIE: &str = "corral_ui";
/// What the pages may load: their own scripts and styles, nothing from elsewhere, never framed.
const CSP: &str = "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; \
                   frame-ancestors 'none'; form-action 'self'; base-uri 'none'";

pub fn routes() -> Router<App> {
    Router::new()
        .route("/ui", get(overview::page))
        .route("/ui/", get(|| async { Redirect::to("/ui") }))
        .route("/ui/login", get(login::form).post(login::log_in))
        .route("/ui/logout", post(login::log_out))
        .route("/ui/groups/{name}", get(group::page))
        .route("/ui/sessions/{id}", get(session::page))
        .route("/ui/sessions/{id}/logs/{stream}", get(session::log))
        .route("/ui/sessions/{id}/outputs/{*path}", get(session::output))
        .route("/ui/sessions/{id}/apps/{app}", get(session::open_app))
        .route("/ui/static/style.css", get(style))
        .route("/ui/static/app.js", get(script))
}

/// Who is looking: the person the cookie's token belongs to.
pub struct Viewer(pub Caller);

impl FromRequestParts<App> for Viewer {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, app: &App) -> Result<Self, Response> {
        let Some(secret) = login::token_in(&parts.headers) else {
            return Err(Redirect::to("/ui/login").into_response());
        };
        match crate::auth::person(&secret, app).await {
            Ok(caller) => Ok(Viewer(caller)),
            // Revoked or never valid: log in again, and let the stale cookie go.
            Err(e) if e.status == StatusCode::UNAUTHORIZED || e.status == StatusCode::FORBIDDEN => {
                Err(login::cleared(
                    app,
                    Redirect::to("/ui/login").into_response(),
                ))
            }
            Err(e) => Err(error_page(e)),
        }
    }
}

/// A page: HTML that is never cached and keeps to [`CSP`].
pub fn html(status: StatusCode, markup: Markup) -> Response {
    let mut response = (status, markup.into_string()).into_response();
    let h = response.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/html; charset=utf-8"),
    );
    secure_headers(h);
    response
}

fn secure_headers(h: &mut axum::http::HeaderMap) {
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("same-origin"),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
}

/// An API error as a page that says what went wrong, with its status.
pub fn error_page(e: ApiError) -> Response {
    let title = e.status.canonical_reason().unwrap_or("Error");
    html(
        e.status,
        layout::page(
            title,
            None,
            maud::html! {
                h1 { (title) }
                p #error { (e.message) }
                p { a href="/ui" { "Back to the overview" } }
            },
        ),
    )
}

/// A page's handler result: the page, or the error, shown as a page.
pub type PageResult = Result<Response, PageError>;

/// What went wrong while making a page; answered with [`error_page`].
#[derive(Debug)]
pub struct PageError(ApiError);

impl From<ApiError> for PageError {
    fn from(e: ApiError) -> Self {
        PageError(e)
    }
}

impl From<corral_store::StoreError> for PageError {
    fn from(e: corral_store::StoreError) -> Self {
        PageError(e.into())
    }
}

impl IntoResponse for PageError {
    fn into_response(self) -> Response {
        error_page(self.0)
    }
}

async fn style() -> Response {
    asset("text/css; charset=utf-8", include_str!("style.css"))
}

async fn script() -> Response {
    asset("text/javascript; charset=utf-8", include_str!("app.js"))
}

fn asset(content_type: &'static str, body: &'static str) -> Response {
    let mut response = body.into_response();
    let h = response.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("public, max-age=300"),
    );
    response
}
