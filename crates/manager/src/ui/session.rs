//! A session's page: what it is, its apps (links for its owner while it runs), its history,
//! its logs (followed by `app.js` while it runs) and its outputs. Its owner and admins only,
//! as in the API.

use axum::extract::{Path, State};
use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Redirect};
use corral_core::SessionState;
use maud::html;
use percent_encoding::{utf8_percent_encode, AsciiSet, CONTROLS};
use serde::Deserialize;

use super::{html, PageResult, Viewer};
use super::{layout, login};
use crate::error::ApiError;
use crate::extract::Query;
use crate::App;

/// Characters an output's path keeps escaped in a link (its `/` stay separators).
const PATH_SEGMENT: &AsciiSet = &CONTROLS
    .add(b' ')
    .add(b'"')
    .add(b'#')
    .add(b'%')
    .add(b'<')
    .add(b'>')
    .add(b'?')
    .add(b'`')
    .add(b'{')
    .add(b'}');
/// How long a following read waits for bytes before the script asks again.
const FOLLOW_WAIT_MS: u64 = 20_000;

pub async fn page(
    State(app): State<App>,
    Viewer(viewer): Viewer,
    Path(id): Path<String>,
) -> PageResult {
    let record = crate::api::own_session(&app, &viewer, &id).await?;
    let outputs = crate::agents::output_files(&app, &id).await?;
    let mut logs = Vec::new();
    for stream in ["stdout", "stderr"] {
        logs.push((
            stream,
            crate::agents::log_head(&app, &record, stream).await?,
        ));
    }
    let s = &record.session;
    let ended = s.state.is_terminal();
    let command = record
        .spec
        .get("command")
        .and_then(|c| c.as_array())
        .map(|args| {
            args.iter()
                .map(|a| a.as_str().unwrap_or_default())
                .collect::<Vec<_>>()
                .join(" ")
        })
        .unwrap_or_default();
    let spec: crate::api::Spec = serde_json::from_value(record.spec.clone()).unwrap_or_default();
    let apps = crate::api::app_views(&s.id.0, spec.apps);
    // A browser opens an app for its session's owner alone (see `crate::api::apps`).
    let openable = s.state == SessionState::Running && viewer.user == s.owner;
    let body = html! {
        h1 { "Session " (s.id.0) }
        table.fields #fields {
            tr { th { "State" } td #state { (layout::state(&layout::word(&s.state))) } }
            tr { th { "Group" } td { a href=(format!("/ui/groups/{}", s.group)) { (s.group) } } }
            tr { th { "Owner" } td { (s.owner) } }
            tr { th { "Request" } td { (s.request) } }
            @if let Some(image) = &s.image { tr { th { "Image" } td { (image) } } }
            tr { th { "Command" } td { code { (command) } } }
            tr { th { "Agent" } td { (s.agent.as_ref().map_or("-", |a| a.0.as_str())) } }
            tr { th { "Submitted" } td { (layout::time(s.submitted_at)) } }
            @if let Some(reason) = &record.wait_reason { tr { th { "Why it waits" } td.wait-reason { (reason) } } }
            @if let Some(reason) = &record.end_reason { tr { th { "Why it ended" } td { (reason) } } }
            @if let Some(code) = record.exit_code { tr { th { "Exit code" } td #exit-code { (code) } } }
        }
        @if !apps.is_empty() {
            h2 { "Apps" }
            ul #apps {
                @for a in &apps {
                    li {
                        @if let (true, Some(_)) = (openable, &a.path) {
                            a href=(format!("/ui/sessions/{}/apps/{}", s.id.0, a.name))
                              target="_blank" rel="noopener" { (a.name) }
                        } @else {
                            (a.name)
                        }
                        " (" (a.app.protocol) " port " (a.app.port) ")"
                        @if a.path.is_none() {
                            " — " code { "corral session port-forward " (s.id.0) " " (a.app.port) }
                        }
                    }
                }
            }
        }
        h2 { "History" }
        table #session-history {
            thead { tr { th { "At" } th { "State" } th { "Why" } } }
            tbody {
                @for h in &record.history {
                    tr { td { (layout::time(h.at)) } td { (layout::state(&layout::word(&h.state))) }
                         td { (h.reason) } }
                }
            }
        }
        @for (stream, bytes) in &logs {
            h2 { (stream) }
            // The script follows the log from data-offset while the session runs.
            pre.log id=(format!("log-{stream}"))
                data-url=(format!("/ui/sessions/{}/logs/{stream}", s.id.0))
                data-offset=(bytes.len())
                data-follow=(if ended { "false" } else { "true" }) {
                (String::from_utf8_lossy(bytes))
            }
        }
        h2 { "Outputs" }
        @if outputs.is_empty() {
            p.empty { "None." }
        } @else {
            ul #outputs {
                @for o in &outputs {
                    li { a href=(format!("/ui/sessions/{}/outputs/{}", s.id.0,
                                        utf8_percent_encode(&o.path, PATH_SEGMENT)))
                           { (o.path) } " (" (o.size) " bytes)" }
                }
            }
        }
    };
    Ok(html(
        StatusCode::OK,
        layout::page(&format!("Session {id}"), Some(&viewer), body),
    ))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LogRead {
    #[serde(default)]
    offset: u64,
}

/// The log from `offset`, waiting for bytes while the session runs; the header
/// `x-corral-ended` says no more will come.
pub async fn log(
    State(app): State<App>,
    Viewer(viewer): Viewer,
    Path((id, stream)): Path<(String, String)>,
    Query(q): Query<LogRead>,
) -> PageResult {
    let (bytes, ended) = crate::agents::read_log_waiting(
        &app,
        &viewer,
        &id,
        &stream,
        q.offset,
        Some(FOLLOW_WAIT_MS),
    )
    .await?;
    let mut response = bytes.into_response();
    let h = response.headers_mut();
    h.insert(
        "content-type",
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    h.insert("cache-control", HeaderValue::from_static("no-store"));
    h.insert(
        "x-corral-ended",
        HeaderValue::from_static(if ended { "true" } else { "false" }),
    );
    Ok(response)
}

/// One output file, downloaded.
pub async fn output(
    State(app): State<App>,
    Viewer(viewer): Viewer,
    Path((id, path)): Path<(String, String)>,
) -> PageResult {
    let file = crate::agents::output_file(&app, &viewer, &id, &path).await?;
    let mut response = file.into_response();
    response.headers_mut().insert(
        "content-disposition",
        HeaderValue::from_static("attachment"),
    );
    Ok(response)
}

/// An app's link on the session's page: a pass for the viewer's log-in, and on to the app.
pub async fn open_app(
    State(app): State<App>,
    Viewer(viewer): Viewer,
    headers: axum::http::HeaderMap,
    Path((id, name)): Path<(String, String)>,
) -> PageResult {
    let record = crate::api::own_session(&app, &viewer, &id).await?;
    if record.session.owner != viewer.user {
        return Err(ApiError::forbidden(format!(
            "session {id} belongs to {}: in a browser, an app opens for its session's owner only",
            record.session.owner
        ))
        .into());
    }
    let token = login::token_in(&headers).unwrap_or_default();
    let path = crate::api::app_login_path(&app, &id, &name, &crate::auth::hash(&token));
    Ok(Redirect::to(&path).into_response())
}
