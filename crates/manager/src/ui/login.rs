//! Logging in with a token, kept in a cookie, and out again.

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use maud::{html, Markup};
use serde::Deserialize;

use super::{html, layout, COOKIE};
use crate::App;

/// How long a log-in lasts in the browser; the token itself may be revoked sooner.
const COOKIE_SECS: u64 = 12 * 3600;
/// Longest token field taken (tokens are `corral_` and 64 hex digits).
const MAX_TOKEN: usize = 256;

#[derive(Deserialize)]
pub struct LogIn {
    token: String,
}

fn form_page(message: Option<&str>) -> Markup {
    layout::page(
        "Log in",
        None,
        html! {
            h1 { "Log in" }
            p { "Paste an API token (" code { "corral token create USER" } " makes one)." }
            @if let Some(m) = message { p #error .error { (m) } }
            form #login method="post" action="/ui/login" {
                label for="token" { "Token" }
                input #token type="password" name="token" autocomplete="current-password"
                    required autofocus;
                button type="submit" { "Log in" }
            }
        },
    )
}

pub async fn form() -> Response {
    html(StatusCode::OK, form_page(None))
}

/// The token in the request's cookie, if any.
pub fn token_in(headers: &HeaderMap) -> Option<String> {
    crate::cookies::value(headers, COOKIE).filter(|v| !v.is_empty())
}

fn cookie(app: &App, value: &str, max_age: u64) -> HeaderValue {
    let secure = if app.https { "; Secure" } else { "" };
    let text =
        format!("{COOKIE}={value}; Path=/ui; Max-Age={max_age}; HttpOnly; SameSite=Strict{secure}");
    HeaderValue::from_str(&text).unwrap_or_else(|_| HeaderValue::from_static(""))
}

/// `response`, with the cookie cleared.
pub fn cleared(app: &App, mut response: Response) -> Response {
    response
        .headers_mut()
        .insert(header::SET_COOKIE, cookie(app, "", 0));
    response
}

pub async fn log_in(State(app): State<App>, headers: HeaderMap, body: Bytes) -> Response {
    if !crate::origin::same_origin(&headers) {
        return html(
            StatusCode::FORBIDDEN,
            form_page(Some("this form was sent from another site")),
        );
    }
    let token = match serde_urlencoded::from_bytes::<LogIn>(&body) {
        Ok(f) => f.token.trim().to_string(),
        Err(_) => {
            return html(
                StatusCode::BAD_REQUEST,
                form_page(Some("the form has no token field")),
            )
        }
    };
    // A cookie value holds no separator or space; a real token never does either.
    let plausible = !token.is_empty()
        && token.len() <= MAX_TOKEN
        && token
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if !plausible {
        return html(
            StatusCode::UNAUTHORIZED,
            form_page(Some(
                "this is not a token: tokens are letters, digits and '_'",
            )),
        );
    }
    match crate::auth::person(&token, &app).await {
        Ok(caller) => {
            tracing::info!(user = caller.user, "logged in to the dashboard");
            let mut response = Redirect::to("/ui").into_response();
            response
                .headers_mut()
                .insert(header::SET_COOKIE, cookie(&app, &token, COOKIE_SECS));
            response
        }
        Err(e) => html(e.status, form_page(Some(&e.message))),
    }
}

pub async fn log_out(State(app): State<App>, headers: HeaderMap) -> Response {
    if !crate::origin::same_origin(&headers) {
        return html(
            StatusCode::FORBIDDEN,
            form_page(Some("this form was sent from another site")),
        );
    }
    cleared(&app, Redirect::to("/ui/login").into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cookie_is_found_among_others() {
        let mut h = HeaderMap::new();
        h.insert(
            header::COOKIE,
            HeaderValue::from_static("a=1; corral_ui=corral_abc; b=2"),
        );
        assert_eq!(token_in(&h).as_deref(), Some("corral_abc"));
        h.insert(header::COOKIE, HeaderValue::from_static("corral_ui="));
        assert_eq!(token_in(&h), None);
    }
}
