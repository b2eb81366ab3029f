//! Apps: the ports a session serves by name. `GET /sessions/{id}/apps` lists them;
//! `POST /sessions/{id}/apps/{app}/login` makes a link that logs a browser in to one; and
//! `/apps/{session}/{app}/...` serves an HTTP app (its WebSockets included) through the
//! session's agent's tunnel (`proxy.rs`), to whoever shows a token (`Authorization: Bearer`,
//! scripts) or the app's pass (`pass.rs`, browsers). The manager's own credentials are taken
//! off every request before it reaches the app.
//!
//! Apps share the manager's origin, so an app's pages run where the viewer's dashboard log-in
//! is: a browser is let in to an app by its session's owner alone. An admin reaches a user's
//! app with a script's token, or with `session port-forward` (then in an origin of its own).

mod pass;
mod proxy;

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{header, HeaderValue, Request, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use axum::Json;
use corral_api::apps::{app_path, AppLogin, AppProtocol, AppView, Apps};
use corral_store::NewEvent;

use super::interactive::{reach, Reached};
#[cfg(feature = "openapi")]
use super::openapi::ErrorResponse;
use super::sessions::{own_session, Spec};
use super::Result;
use crate::auth::{self, Bearer, Caller};
use crate::error::ApiError;
use crate::{cookies, now, origin, App};
pub(crate) use pass::{Pass, PassError};

#[cfg_attr(
    feature = "openapi",
    utoipa::path(
    get,
    path = "/api/v1/sessions/{id}/apps",
    summary = "The apps a session serves (declared at submit), with the path the manager serves each HTTP app under; its owner or an admin",
    params(("id" = String, Path, description = "the session")),
    responses(
        (status = 200, description = "success", body = Vec<AppView>),
        (status = 401, response = ErrorResponse),
        (status = 403, response = ErrorResponse),
        (status = 404, response = ErrorResponse),
    )
)
)]
pub(crate) async fn list(
    State(app): State<App>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Json<Vec<AppView>>> {
    let record = own_session(&app, &caller, &id).await?;
    let spec: Spec = serde_json::from_value(record.spec).unwrap_or_default();
    Ok(Json(views(&id, spec.apps)))
}

/// Each app with where the manager serves it.
pub(crate) fn views(session: &str, apps: Apps) -> Vec<AppView> {
    apps.into_iter()
        .map(|(name, app)| AppView {
            path: (app.protocol == AppProtocol::Http).then(|| app_path(session, &name)),
            name,
            app,
        })
        .collect()
}

#[cfg_attr(
    feature = "openapi",
    utoipa::path(
    post,
    path = "/api/v1/sessions/{id}/apps/{app}/login",
    summary = "A link that logs a browser in to one HTTP app of a running session, valid for 60 s (a pass for that app alone in its query, traded for a cookie at the first visit; never an API token); the session's owner only, since the app runs in the manager's origin",
    params(
        ("id" = String, Path, description = "the session"),
        ("app" = String, Path, description = "the app's name"),
    ),
    responses(
        (status = 200, description = "success", body = AppLogin),
        (status = 401, response = ErrorResponse),
        (status = 403, response = ErrorResponse),
        (status = 404, response = ErrorResponse),
        (status = 409, response = ErrorResponse),
        (status = 503, response = ErrorResponse),
    )
)
)]
pub(crate) async fn login(
    State(app): State<App>,
    bearer: Bearer,
    Path((id, name)): Path<(String, String)>,
) -> Result<Json<AppLogin>> {
    let reached = reach(&app, &bearer.caller, &id).await?;
    browser_may(&reached, &bearer.caller)?;
    http_port(&reached, &name)?;
    Ok(Json(AppLogin {
        path: login_path(&app, &id, &name, &bearer.token_hash),
        expires_in: pass::LINK_SECS,
    }))
}

/// The app's path with a link's pass for the holder of the token of `token_hash`.
pub(crate) fn login_path(app: &App, session: &str, name: &str, token_hash: &str) -> String {
    let pass = Pass::new(session, name, token_hash, now(), pass::LINK_SECS);
    format!(
        "{}?{}={}",
        app_path(session, name),
        pass::QUERY,
        pass.issue(&app.secrets)
    )
}

/// `/apps/{session}/{app}/...`: the app's answer, or why not.
pub(crate) async fn serve(State(app): State<App>, request: Request<Body>) -> Response {
    match serve_app(&app, request).await {
        Ok(response) => response,
        Err(e) => e.into_response(),
    }
}

async fn serve_app(app: &App, request: Request<Body>) -> Result<Response> {
    let path = request.uri().path().to_string();
    let Some((session, name, rest)) = split_path(&path) else {
        return Err(ApiError::bad_request(
            "an app's path is /apps/SESSION/APP/ (see `corral session apps SESSION`)",
        ));
    };
    let prefix = app_path(session, name);
    if rest.is_none() {
        let query = request
            .uri()
            .query()
            .map(|q| format!("?{q}"))
            .unwrap_or_default();
        return Ok(Redirect::permanent(&format!("{prefix}{query}")).into_response());
    }
    let (mut parts, body) = request.into_parts();
    if let Some(link) = query_value(parts.uri.query(), pass::QUERY) {
        return log_in(app, (session, name), &link, &parts.uri).await;
    }
    let (caller, browser) = if let Some(bearer) = auth::bearer_person(&parts, app).await {
        (bearer?.1, false)
    } else if let Some(text) = cookies::value(&parts.headers, pass::COOKIE) {
        let pass = Pass::read(&app.secrets, &text, (session, name), now()).map_err(refused)?;
        (auth::person_by_hash(&pass.token_hash, app).await?, true)
    } else {
        return Err(ApiError::new(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            format!(
                "log in to this app first: open it from the session's page on the dashboard, or \
                 with `corral session apps {session} --login`; a script sends its token in \
                 `Authorization: Bearer`"
            ),
        ));
    };
    let reached = reach(app, &caller, session).await?;
    if browser {
        browser_may(&reached, &caller)?;
    }
    let port = http_port(&reached, name)?;
    if parts.headers.contains_key(header::UPGRADE) && !origin::same_origin(&parts.headers) {
        return Err(ApiError::forbidden(
            "an upgrade to an app from another site is refused (its Origin is not this manager)",
        ));
    }
    // The app never sees the user's credentials for the manager.
    parts.headers.remove(header::AUTHORIZATION);
    cookies::drop(&mut parts.headers, &[pass::COOKIE, crate::ui::COOKIE]);
    let request = Request::from_parts(parts, body);
    let target = (session, port, prefix.as_str());
    proxy::forward(app, &reached.tunnel, target, request).await
}

/// A link's pass traded for the app's cookie, and the browser sent on to the app without it.
async fn log_in(
    app: &App,
    (session, name): (&str, &str),
    link: &str,
    uri: &axum::http::Uri,
) -> Result<Response> {
    let pass = Pass::read(&app.secrets, link, (session, name), now()).map_err(refused)?;
    let caller = auth::person_by_hash(&pass.token_hash, app).await?;
    let reached = reach(app, &caller, session).await?;
    browser_may(&reached, &caller)?;
    http_port(&reached, name)?;
    let event = NewEvent {
        at: now(),
        group: Some(reached.group.clone()),
        session: Some(session.to_string()),
        agent: Some(reached.agent.clone()),
        kind: "session.app".into(),
        message: format!("{} opened app {name}", caller.user),
    };
    if let Err(e) = app.store.record_event(&event).await {
        tracing::warn!(session, error = %e, "could not record the event");
    }
    let kept = without_param(uri.query(), pass::QUERY);
    let to = format!("{}{kept}", uri.path());
    let long = Pass::new(session, name, &pass.token_hash, now(), pass::COOKIE_SECS);
    let secure = if app.https { "; Secure" } else { "" };
    let cookie = format!(
        "{}={}; Path={}; Max-Age={}; HttpOnly; SameSite=Lax{secure}",
        pass::COOKIE,
        long.issue(&app.secrets),
        app_path(session, name),
        pass::COOKIE_SECS
    );
    let mut response = Redirect::to(&to).into_response();
    let cookie = HeaderValue::from_str(&cookie)
        .map_err(|_| ApiError::bad_request("this app's name makes no cookie path"))?;
    response.headers_mut().insert(header::SET_COOKIE, cookie);
    Ok(response)
}

fn refused(e: PassError) -> ApiError {
    ApiError::new(StatusCode::UNAUTHORIZED, "unauthorized", e.to_string())
}

/// A browser is let in to an app by its session's owner alone (see the module's comment).
fn browser_may(reached: &Reached, caller: &Caller) -> Result<()> {
    if reached.owner == caller.user {
        return Ok(());
    }
    Err(ApiError::forbidden(format!(
        "session {} belongs to {}: in a browser, an app opens for its session's owner only, \
         since its pages run in this manager's origin beside the viewer's dashboard log-in; \
         reach it with `corral session port-forward` or a script's Authorization header",
        reached.id, reached.owner
    )))
}

/// The port of the session's HTTP app `name`.
fn http_port(reached: &Reached, name: &str) -> Result<u16> {
    let Some(app) = reached.apps.get(name) else {
        let names: Vec<&str> = reached.apps.keys().map(String::as_str).collect();
        return Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "not_found",
            format!(
                "session {} serves no app {name:?} (its apps: {})",
                reached.id,
                if names.is_empty() {
                    "none".into()
                } else {
                    names.join(", ")
                }
            ),
        ));
    };
    if app.protocol != AppProtocol::Http {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            "conflict",
            format!(
                "app {name} is a tcp app: reach it with `corral session port-forward {} {}`",
                reached.id, app.port
            ),
        ));
    }
    Ok(app.port)
}

/// `/apps/S/A/rest` as `(S, A, Some("rest"))`; `/apps/S/A` as `(S, A, None)`.
fn split_path(path: &str) -> Option<(&str, &str, Option<&str>)> {
    let rest = path.strip_prefix("/apps/")?;
    let (session, rest) = rest.split_once('/')?;
    let (name, rest) = match rest.split_once('/') {
        Some((name, rest)) => (name, Some(rest)),
        None => (rest, None),
    };
    (!session.is_empty() && !name.is_empty()).then_some((session, name, rest))
}

fn query_value(query: Option<&str>, name: &str) -> Option<String> {
    serde_urlencoded::from_str::<Vec<(String, String)>>(query?)
        .ok()?
        .into_iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v)
}

/// The query without `name`, with its `?` when anything is left.
fn without_param(query: Option<&str>, name: &str) -> String {
    let kept: Vec<&str> = query
        .unwrap_or_default()
        .split('&')
        .filter(|p| !p.is_empty() && p.split('=').next() != Some(name))
        .collect();
    if kept.is_empty() {
        String::new()
    } else {
        format!("?{}", kept.join("&"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_apps_path_is_split() {
        assert_eq!(
            split_path("/apps/s-1/jupyter/lab"),
            Some(("s-1", "jupyter", Some("lab")))
        );
        assert_eq!(
            split_path("/apps/s-1/jupyter/"),
            Some(("s-1", "jupyter", Some("")))
        );
        assert_eq!(
            split_path("/apps/s-1/jupyter"),
            Some(("s-1", "jupyter", None))
        );
        assert_eq!(split_path("/apps/s-1"), None);
        assert_eq!(split_path("/apps//x/"), None);
    }

    #[test]
    fn the_links_pass_leaves_the_query() {
        assert_eq!(
            without_param(Some("corral_app_token=x"), "corral_app_token"),
            ""
        );
        assert_eq!(
            without_param(Some("a=1&corral_app_token=x&b"), "corral_app_token"),
            "?a=1&b"
        );
        assert_eq!(without_param(None, "corral_app_token"), "");
    }
}
