//! The REST API under `/api/v1`. Every handler validates its input completely before it writes
//! anything; errors are `{"error": {"code", "message", "details"}}`.

use std::collections::BTreeMap;

use axum::extract::{DefaultBodyLimit, Path, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::{get, post, put};
use axum::{Json, Router};
use corral_core::admission::admit;
use corral_core::plan::plan;
use corral_core::*;
use corral_provider::ProviderConfig;
use corral_store::{EventFilter, InstancePhase, Role, SessionFilter, SessionRecord};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::auth::{create_token, Caller};
use crate::error::ApiError;
use crate::extract::{Body, Query, MAX_BODY};
use crate::{now, App};

type Result<T, E = ApiError> = std::result::Result<T, E>;

/// The OpenAPI document of this API.
pub const OPENAPI: &str = include_str!("../openapi.json");

pub fn router(app: App) -> Router {
    Router::new()
        .route(
            "/api/v1/health",
            get(|| async { Json(json!({"status": "ok"})) }),
        )
        .route(
            "/api/v1/openapi.json",
            get(|| async { ([("content-type", "application/json")], OPENAPI) }),
        )
        .route("/api/v1/tokens", post(new_token))
        .route("/api/v1/groups", get(list_groups).post(create_group))
        .route(
            "/api/v1/groups/{name}",
            get(get_group).put(replace_group).delete(delete_group),
        )
        .route("/api/v1/groups/{name}/policy", put(put_policy))
        .route(
            "/api/v1/groups/{name}/templates",
            get(get_templates).put(put_templates),
        )
        .route(
            "/api/v1/groups/{name}/provider",
            get(get_provider).put(put_provider),
        )
        .route("/api/v1/groups/{name}/instances", get(list_instances))
        .route("/api/v1/groups/{name}/pending", get(pending))
        .route("/api/v1/groups/{name}/shares", get(shares))
        .route("/api/v1/groups/{name}/required", post(required))
        .route("/api/v1/groups/{name}/plan", get(dry_run))
        .route(
            "/api/v1/groups/{name}/bootstrap-tokens",
            post(new_bootstrap_token),
        )
        .route("/api/v1/images", get(list_images))
        .route(
            "/api/v1/images/{name}",
            get(get_image).put(put_image).delete(delete_image),
        )
        .route("/api/v1/sessions", get(list_sessions).post(submit))
        .route("/api/v1/sessions/{id}", get(get_session))
        .route("/api/v1/sessions/{id}/cancel", post(cancel))
        .route("/api/v1/agents", get(list_agents).post(register_agent))
        .route("/api/v1/agents/{id}", get(get_agent))
        .route("/api/v1/agents/{id}/drain", post(drain))
        .route("/api/v1/agents/{id}/unmark", post(unmark))
        .route("/api/v1/events", get(list_events))
        .merge(crate::agents::routes())
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

// ---------------------------------------------------------------- names and ids

/// Names of groups, images and agents: what fits in a URL and a log line unquoted.
pub(crate) fn check_name(field: &str, name: &str) -> Result<()> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "._-:/".contains(c))
        && name
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphanumeric());
    if ok {
        Ok(())
    } else {
        Err(ApiError::invalid(field, format!("{name:?} is not a valid name: 1-64 letters, digits, '.', '_', '-', ':' or '/', starting with a letter or digit")))
    }
}

fn new_id(prefix: &str) -> String {
    format!("{prefix}{}", crate::auth::random_hex(8))
}

// ---------------------------------------------------------------- tokens

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TokenBody {
    user: String,
    #[serde(default = "user_role")]
    role: Role,
}

fn user_role() -> Role {
    Role::User
}

async fn new_token(
    State(app): State<App>,
    caller: Caller,
    Body(body): Body<TokenBody>,
) -> Result<impl IntoResponse> {
    caller.require_admin()?;
    check_name("user", &body.user)?;
    let (id, token) = create_token(&app.store, body.role, &body.user, now()).await?;
    Ok((
        StatusCode::CREATED,
        Json(json!({"id": id, "user": body.user, "role": body.role, "token": token})),
    ))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct BootstrapBody {
    /// How long the token may be used (once), in seconds.
    #[serde(default = "default_bootstrap_ttl")]
    ttl_secs: u64,
}

fn default_bootstrap_ttl() -> u64 {
    3600
}

/// A one-time token an agent joins this group with; it expires unused after `ttl_secs`.
async fn new_bootstrap_token(
    State(app): State<App>,
    caller: Caller,
    Path(name): Path<String>,
    Body(b): Body<BootstrapBody>,
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
        Json(json!({"token": token, "group": name, "expires_at": expires_at})),
    ))
}

// ---------------------------------------------------------------- groups

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct GroupBody {
    name: String,
    #[serde(default)]
    policy: ScalingPolicy,
    #[serde(default)]
    scheduler: SchedulerConfig,
    #[serde(default)]
    templates: Vec<InstanceTemplate>,
    /// The provider; absent means static on create and unchanged on replace.
    #[serde(default)]
    provider: Option<ProviderConfig>,
}

/// A group as the API shows it: its configuration, with its provider's secrets redacted.
#[derive(Serialize)]
struct GroupView {
    #[serde(flatten)]
    group: ScalingGroup,
    provider: ProviderConfig,
}

/// The group's stored provider configuration (static when none is stored).
async fn stored_provider(app: &App, name: &str) -> Result<ProviderConfig> {
    match app.store.get_group_provider(name).await? {
        None => Ok(ProviderConfig::default()),
        Some(text) => serde_json::from_str(&text).map_err(|e| {
            ApiError::from(corral_store::StoreError::Corrupt(format!(
                "group {name:?}, column provider: {e}"
            )))
        }),
    }
}

async fn view(app: &App, group: ScalingGroup) -> Result<GroupView> {
    let provider = stored_provider(app, &group.name).await?.redacted();
    Ok(GroupView { group, provider })
}

/// Checks a provider configuration; errors name the field (`provider.options.region`).
fn validated_provider(provider: ProviderConfig) -> Result<ProviderConfig> {
    provider
        .validate()
        .map_err(|e| ApiError::invalid(&e.field, e.message))?;
    Ok(provider)
}

fn provider_json(provider: &ProviderConfig) -> Result<String> {
    serde_json::to_string(provider)
        .map_err(|e| ApiError::from(corral_store::StoreError::Corrupt(e.to_string())))
}

fn validated(group: ScalingGroup) -> Result<ScalingGroup> {
    check_name("name", &group.name)?;
    for (i, t) in group.templates.iter().enumerate() {
        check_name(&format!("templates[{i}].name"), &t.name)?;
    }
    group
        .validate()
        .map_err(|e| ApiError::invalid("group", e))?;
    Ok(group)
}

async fn find_group(app: &App, name: &str) -> Result<ScalingGroup> {
    app.store
        .get_group(name)
        .await?
        .ok_or_else(|| ApiError::not_found("group", name))
}

async fn list_groups(State(app): State<App>, _: Caller) -> Result<Json<Vec<GroupView>>> {
    let mut views = Vec::new();
    for group in app.store.list_groups().await? {
        views.push(view(&app, group).await?);
    }
    Ok(Json(views))
}

async fn create_group(
    State(app): State<App>,
    caller: Caller,
    Body(b): Body<GroupBody>,
) -> Result<impl IntoResponse> {
    caller.require_admin()?;
    let group = validated(ScalingGroup {
        name: b.name,
        policy: b.policy,
        scheduler: b.scheduler,
        templates: b.templates,
    })?;
    let provider = validated_provider(b.provider.unwrap_or_default())?;
    app.store
        .create_group_with_provider(&group, Some(&provider_json(&provider)?), now())
        .await?;
    app.control.wake(&group.name);
    Ok((
        StatusCode::CREATED,
        Json(GroupView {
            group,
            provider: provider.redacted(),
        }),
    ))
}

async fn get_group(
    State(app): State<App>,
    _: Caller,
    Path(name): Path<String>,
) -> Result<Json<GroupView>> {
    let group = find_group(&app, &name).await?;
    Ok(Json(view(&app, group).await?))
}

async fn replace_group(
    State(app): State<App>,
    caller: Caller,
    Path(name): Path<String>,
    Body(b): Body<GroupBody>,
) -> Result<Json<GroupView>> {
    caller.require_admin()?;
    if b.name != name {
        return Err(ApiError::invalid(
            "name",
            format!(
                "{:?} differs from the group in the URL, {name:?}; groups cannot be renamed",
                b.name
            ),
        ));
    }
    let group = validated(ScalingGroup {
        name: b.name,
        policy: b.policy,
        scheduler: b.scheduler,
        templates: b.templates,
    })?;
    // Validate everything before writing anything.
    let provider = match b.provider {
        Some(p) => {
            let stored = stored_provider(&app, &name).await?;
            Some(validated_provider(p.keep_secrets_of(&stored))?)
        }
        None => None,
    };
    find_group(&app, &name).await?;
    if let Some(p) = &provider {
        app.store
            .set_group_provider(&name, Some(&provider_json(p)?), now())
            .await?;
    }
    let Json(group) = update(&app, group).await?;
    Ok(Json(view(&app, group).await?))
}

async fn get_provider(
    State(app): State<App>,
    _: Caller,
    Path(name): Path<String>,
) -> Result<Json<ProviderConfig>> {
    find_group(&app, &name).await?;
    Ok(Json(stored_provider(&app, &name).await?.redacted()))
}

/// Replaces the group's provider configuration; secrets sent back redacted keep their values.
async fn put_provider(
    State(app): State<App>,
    caller: Caller,
    Path(name): Path<String>,
    Body(provider): Body<ProviderConfig>,
) -> Result<Json<ProviderConfig>> {
    caller.require_admin()?;
    find_group(&app, &name).await?;
    let stored = stored_provider(&app, &name).await?;
    let provider = validated_provider(provider.keep_secrets_of(&stored))?;
    app.store
        .set_group_provider(&name, Some(&provider_json(&provider)?), now())
        .await?;
    app.control.wake(&name);
    if let Some(driver) = app.control.driver(&name) {
        driver.kick();
    }
    Ok(Json(provider.redacted()))
}

/// The group's instances as the manager tracks them, and the templates held back now.
async fn list_instances(
    State(app): State<App>,
    _: Caller,
    Path(name): Path<String>,
    Query(q): Query<InstancesQuery>,
) -> Result<Json<Value>> {
    find_group(&app, &name).await?;
    let phases: &[InstancePhase] = if q.all {
        &[
            InstancePhase::Requested,
            InstancePhase::Provisioning,
            InstancePhase::Joined,
            InstancePhase::Terminating,
            InstancePhase::Terminated,
            InstancePhase::Failed,
        ]
    } else {
        &InstancePhase::LIVE
    };
    let instances = app.store.list_instances(&name, phases).await?;
    let held = app
        .control
        .driver(&name)
        .map(|d| d.limits(now()))
        .unwrap_or_default();
    Ok(Json(json!({"instances": instances, "held": held})))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct InstancesQuery {
    /// Also ended instances (terminated, failed).
    #[serde(default)]
    all: bool,
}

async fn update(app: &App, group: ScalingGroup) -> Result<Json<ScalingGroup>> {
    let group = validated(group)?;
    app.store.update_group(&group, now()).await?;
    app.control.wake(&group.name);
    Ok(Json(group))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PolicyBody {
    #[serde(default)]
    policy: Option<ScalingPolicy>,
    #[serde(default)]
    scheduler: Option<SchedulerConfig>,
}

async fn put_policy(
    State(app): State<App>,
    caller: Caller,
    Path(name): Path<String>,
    Body(b): Body<PolicyBody>,
) -> Result<Json<GroupView>> {
    caller.require_admin()?;
    let mut group = find_group(&app, &name).await?;
    if let Some(p) = b.policy {
        group.policy = p;
    }
    if let Some(s) = b.scheduler {
        group.scheduler = s;
    }
    let Json(group) = update(&app, group).await?;
    Ok(Json(view(&app, group).await?))
}

async fn get_templates(
    State(app): State<App>,
    _: Caller,
    Path(name): Path<String>,
) -> Result<Json<Vec<InstanceTemplate>>> {
    Ok(Json(find_group(&app, &name).await?.templates))
}

async fn put_templates(
    State(app): State<App>,
    caller: Caller,
    Path(name): Path<String>,
    Body(templates): Body<Vec<InstanceTemplate>>,
) -> Result<Json<Vec<InstanceTemplate>>> {
    caller.require_admin()?;
    let mut group = find_group(&app, &name).await?;
    group.templates = templates;
    Ok(Json(update(&app, group).await?.0.templates))
}

async fn delete_group(
    State(app): State<App>,
    caller: Caller,
    Path(name): Path<String>,
) -> Result<StatusCode> {
    caller.require_admin()?;
    app.store.delete_group(&name).await?;
    app.control.forget(&name);
    Ok(StatusCode::NO_CONTENT)
}

// ---------------------------------------------------------------- group state

/// The group as the cycle would see it now.
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

async fn snapshot(app: &App, name: &str) -> Result<Snapshot> {
    let now = now();
    let mut snapshot = app.store.snapshot(name, now).await?;
    if let Some(driver) = app.control.driver(name) {
        snapshot.launch_limits = driver.limits(now);
    }
    Ok(snapshot)
}

async fn pending(
    State(app): State<App>,
    _: Caller,
    Path(name): Path<String>,
) -> Result<Json<Vec<SessionView>>> {
    find_group(&app, &name).await?;
    let filter = SessionFilter {
        group: Some(name),
        state: Some(SessionState::Pending),
        limit: Some(1000),
        ..Default::default()
    };
    Ok(Json(
        app.store
            .list_sessions(&filter)
            .await?
            .into_iter()
            .map(SessionView::from)
            .collect(),
    ))
}

async fn shares(
    State(app): State<App>,
    _: Caller,
    Path(name): Path<String>,
) -> Result<Json<Value>> {
    let s = snapshot(&app, &name).await?;
    let available: BTreeMap<String, Slots> = s
        .available_shares()
        .into_iter()
        .map(|(id, slots)| (id.0.clone(), slots))
        .collect();
    Ok(Json(
        json!({"available": available, "minimum": s.minimum_shares()}),
    ))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RequiredBody {
    request: Slots,
    #[serde(default)]
    image: Option<String>,
}

async fn required(
    State(app): State<App>,
    _: Caller,
    Path(name): Path<String>,
    Body(b): Body<RequiredBody>,
) -> Result<Json<Value>> {
    let s = snapshot(&app, &name).await?;
    known_image(&s, b.image.as_deref())?;
    let required = s.required_for(&b.request, b.image.as_deref());
    let verdict = admit(&s, &required);
    Ok(Json(
        json!({"required": required, "feasible": verdict.is_ok(), "reason": verdict.err().map(|e| e.to_string())}),
    ))
}

async fn dry_run(
    State(app): State<App>,
    caller: Caller,
    Path(name): Path<String>,
) -> Result<Json<corral_core::plan::PlanOutput>> {
    caller.require_admin()?;
    Ok(Json(plan(&snapshot(&app, &name).await?)))
}

// ---------------------------------------------------------------- images

async fn list_images(State(app): State<App>, _: Caller) -> Result<Json<Vec<Image>>> {
    Ok(Json(app.store.list_images().await?))
}

async fn get_image(
    State(app): State<App>,
    _: Caller,
    Path(name): Path<String>,
) -> Result<Json<Image>> {
    app.store
        .get_image(&name)
        .await?
        .map(Json)
        .ok_or_else(|| ApiError::not_found("image", &name))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ImageBody {
    #[serde(default)]
    min_slots: Slots,
}

async fn put_image(
    State(app): State<App>,
    caller: Caller,
    Path(name): Path<String>,
    Body(b): Body<ImageBody>,
) -> Result<Json<Image>> {
    caller.require_admin()?;
    check_name("name", &name)?;
    let image = Image {
        name,
        min_slots: b.min_slots,
    };
    app.store.put_image(&image).await?;
    app.control.views.invalidate_all();
    Ok(Json(image))
}

async fn delete_image(
    State(app): State<App>,
    caller: Caller,
    Path(name): Path<String>,
) -> Result<StatusCode> {
    caller.require_admin()?;
    app.store.delete_image(&name).await?;
    app.control.views.invalidate_all();
    Ok(StatusCode::NO_CONTENT)
}

// ---------------------------------------------------------------- sessions

/// What a user submits.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SubmitBody {
    group: String,
    #[serde(rename = "type", default)]
    kind: SessionType,
    #[serde(default)]
    image: Option<String>,
    #[serde(default)]
    command: Vec<String>,
    request: Slots,
    #[serde(default)]
    priority: i32,
    #[serde(default)]
    inputs: Vec<String>,
    #[serde(default)]
    outputs: Vec<String>,
    #[serde(default)]
    environment: BTreeMap<String, String>,
}

/// The submitted fields the cycle does not read, kept with the session.
#[derive(Debug, Default, Serialize, Deserialize)]
pub(crate) struct Spec {
    #[serde(default)]
    pub command: Vec<String>,
    #[serde(default)]
    pub inputs: Vec<String>,
    #[serde(default)]
    pub outputs: Vec<String>,
    #[serde(default)]
    pub environment: BTreeMap<String, String>,
}

const PRIORITY_RANGE: std::ops::RangeInclusive<i32> = -1000..=1000;

fn check_submit(b: &SubmitBody) -> Result<()> {
    check_name("group", &b.group)?;
    if b.command.is_empty() && b.image.is_none() {
        return Err(ApiError::invalid(
            "command",
            "give a command, an image, or both",
        ));
    }
    if b.request.is_empty() {
        return Err(ApiError::invalid(
            "request",
            "ask for at least one slot, e.g. cpu=1",
        ));
    }
    if !PRIORITY_RANGE.contains(&b.priority) {
        return Err(ApiError::invalid(
            "priority",
            format!(
                "{} is outside {}..={}",
                b.priority,
                PRIORITY_RANGE.start(),
                PRIORITY_RANGE.end()
            ),
        ));
    }
    for (field, paths) in [("inputs", &b.inputs), ("outputs", &b.outputs)] {
        for (i, p) in paths.iter().enumerate() {
            let escapes =
                p.is_empty() || p.starts_with('/') || p.split('/').any(|part| part == "..");
            if escapes {
                return Err(ApiError::invalid(
                    &format!("{field}[{i}]"),
                    format!("{p:?} must be a relative path inside the session's directory"),
                ));
            }
        }
    }
    for key in b.environment.keys() {
        let ok = key
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !ok {
            return Err(ApiError::invalid(
                "environment",
                format!("{key:?} is not a variable name"),
            ));
        }
    }
    Ok(())
}

async fn submit(
    State(app): State<App>,
    caller: Caller,
    Body(b): Body<SubmitBody>,
) -> Result<impl IntoResponse> {
    caller.require_person()?;
    check_submit(&b)?;
    let view = match app.control.views.get(&b.group) {
        Some(view) => view,
        None => {
            let generation = app.control.views.generation(&b.group);
            let group = app
                .store
                .get_group(&b.group)
                .await?
                .ok_or_else(|| ApiError::invalid("group", format!("no group {:?}", b.group)))?;
            // Admission needs the group's agents, templates and images, not its sessions.
            let view = Snapshot {
                now: now(),
                agents: app.store.list_agents(Some(&group.name)).await?,
                group,
                sessions: Vec::new(),
                images: app.store.list_images().await?,
                in_flight: Vec::new(),
                last_scale_out: None,
                launch_limits: Default::default(),
            };
            app.control.views.remember(view, generation)
        }
    };
    known_image(&view, b.image.as_deref())?;
    let required = view.required_for(&b.request, b.image.as_deref());
    if let Err(reason) = admit(&view, &required) {
        return Err(ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "infeasible",
            reason.to_string(),
        )
        .with_details(json!({"field": "request", "required": required})));
    }
    let session = Session {
        id: SessionId(new_id("s")),
        group: view.group.name.clone(),
        owner: caller.user,
        priority: b.priority,
        request: b.request,
        image: b.image,
        kind: b.kind,
        submitted_at: now(),
        state: SessionState::Pending,
        agent: None,
        blocked_passes: 0,
    };
    let spec = Spec {
        command: b.command,
        inputs: b.inputs,
        outputs: b.outputs,
        environment: b.environment,
    };
    let spec = serde_json::to_value(&spec).map_err(|e| ApiError::bad_request(e.to_string()))?;
    app.submitter.submit(session.clone(), spec).await?;
    Ok((
        StatusCode::CREATED,
        Json(json!({"id": session.id, "state": session.state})),
    ))
}

/// A session as the API shows it.
#[derive(Serialize)]
struct SessionView {
    #[serde(flatten)]
    session: Session,
    #[serde(flatten)]
    spec: Spec,
    allocation: Option<Slots>,
    wait_reason: Option<String>,
    end_reason: Option<String>,
    exit_code: Option<i32>,
    updated_at: Timestamp,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    history: Vec<corral_store::HistoryEntry>,
}

impl From<SessionRecord> for SessionView {
    fn from(r: SessionRecord) -> Self {
        SessionView {
            spec: serde_json::from_value(r.spec).unwrap_or_default(),
            session: r.session,
            allocation: r.allocation,
            wait_reason: r.wait_reason,
            end_reason: r.end_reason,
            exit_code: r.exit_code,
            updated_at: r.updated_at,
            history: r.history,
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SessionQuery {
    group: Option<String>,
    owner: Option<String>,
    state: Option<SessionState>,
    limit: Option<u32>,
    after: Option<String>,
}

async fn list_sessions(
    State(app): State<App>,
    caller: Caller,
    Query(q): Query<SessionQuery>,
) -> Result<Json<Vec<SessionView>>> {
    let owner = if caller.is_admin() {
        q.owner
    } else {
        Some(caller.user)
    };
    let filter = SessionFilter {
        group: q.group,
        owner,
        state: q.state,
        limit: Some(q.limit.unwrap_or(100).clamp(1, 1000)),
        after_id: q.after,
        agent: None,
    };
    Ok(Json(
        app.store
            .list_sessions(&filter)
            .await?
            .into_iter()
            .map(SessionView::from)
            .collect(),
    ))
}

/// A session the caller may see: admins see all, users their own.
pub(crate) async fn own_session(app: &App, caller: &Caller, id: &str) -> Result<SessionRecord> {
    caller.require_person()?;
    let record = app
        .store
        .get_session(id)
        .await?
        .ok_or_else(|| ApiError::not_found("session", id))?;
    if !caller.is_admin() && record.session.owner != caller.user {
        return Err(ApiError::forbidden(format!(
            "session {id:?} belongs to another user"
        )));
    }
    app.activity.touch(&app.store, id).await;
    Ok(record)
}

async fn get_session(
    State(app): State<App>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Json<SessionView>> {
    Ok(Json(own_session(&app, &caller, &id).await?.into()))
}

async fn cancel(
    State(app): State<App>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Json<SessionView>> {
    let record = own_session(&app, &caller, &id).await?;
    if !matches!(
        record.session.state,
        SessionState::Pending | SessionState::Scheduled | SessionState::Running
    ) {
        let state = serde_json::to_value(record.session.state).unwrap_or_default();
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            "already_ended",
            format!(
                "session {id:?} has already ended ({})",
                state.as_str().unwrap_or("ended")
            ),
        ));
    }
    let record = app
        .store
        .cancel_session(&id, now(), &format!("cancelled by {}", caller.user))
        .await?;
    app.control.wake(&record.session.group);
    if let Some(agent) = &record.session.agent {
        app.control.wake_agent(&agent.0);
    }
    Ok(Json(record.into()))
}

// ---------------------------------------------------------------- agents

/// An agent registered by hand (the static provider's way to join).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct AgentBody {
    id: String,
    group: String,
    capacity: Slots,
    #[serde(default)]
    labels: BTreeMap<String, String>,
    #[serde(default)]
    template: Option<String>,
}

async fn register_agent(
    State(app): State<App>,
    caller: Caller,
    Body(b): Body<AgentBody>,
) -> Result<impl IntoResponse> {
    caller.require_admin()?;
    check_name("id", &b.id)?;
    let group = app
        .store
        .get_group(&b.group)
        .await?
        .ok_or_else(|| ApiError::invalid("group", format!("no group {:?}", b.group)))?;
    if let Some(t) = b
        .template
        .as_deref()
        .filter(|t| !group.templates.iter().any(|x| x.name == *t))
    {
        return Err(ApiError::invalid(
            "template",
            format!("group {:?} has no template {t:?}", group.name),
        ));
    }
    if b.capacity.is_empty() {
        return Err(ApiError::invalid(
            "capacity",
            "an agent offers at least one slot",
        ));
    }
    if let Some(existing) = app.store.get_agent(&b.id).await? {
        if existing.group != group.name || existing.state != AgentState::Terminated {
            return Err(ApiError::new(
                StatusCode::CONFLICT,
                "conflict",
                format!("agent {:?} already exists", b.id),
            ));
        }
    }
    let now = now();
    let agent = Agent {
        id: AgentId(b.id),
        group: group.name,
        template: b.template,
        capacity: b.capacity,
        allocated: Slots::new(),
        state: AgentState::Alive,
        labels: b.labels,
        external: false,
        drained_by_hand: false,
        idle_since: Some(now),
    };
    app.store.upsert_agent(&agent, now).await?;
    app.control.wake(&agent.group);
    Ok((StatusCode::CREATED, Json(agent)))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct AgentQuery {
    group: Option<String>,
}

async fn list_agents(
    State(app): State<App>,
    _: Caller,
    Query(q): Query<AgentQuery>,
) -> Result<Json<Vec<Agent>>> {
    Ok(Json(app.store.list_agents(q.group.as_deref()).await?))
}

async fn find_agent(app: &App, id: &str) -> Result<Agent> {
    app.store
        .get_agent(id)
        .await?
        .ok_or_else(|| ApiError::not_found("agent", id))
}

async fn get_agent(
    State(app): State<App>,
    _: Caller,
    Path(id): Path<String>,
) -> Result<Json<Agent>> {
    Ok(Json(find_agent(&app, &id).await?))
}

/// Drain by hand: the agent takes nothing new, and the policy never unmarks it.
async fn drain(
    State(app): State<App>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Json<Agent>> {
    set_mark(app, caller, id, true).await
}

async fn unmark(
    State(app): State<App>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Json<Agent>> {
    set_mark(app, caller, id, false).await
}

async fn set_mark(app: App, caller: Caller, id: String, marked: bool) -> Result<Json<Agent>> {
    caller.require_admin()?;
    let agent = find_agent(&app, &id).await?;
    if !matches!(agent.state, AgentState::Alive | AgentState::Marked) {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            "refused",
            format!("agent {id:?} is {:?}, not alive or marked", agent.state).to_lowercase(),
        ));
    }
    let (state, by_hand) = if marked {
        (AgentState::Marked, true)
    } else {
        (AgentState::Alive, false)
    };
    app.store
        .set_agent_state(&id, state, by_hand, now())
        .await?;
    app.control.wake(&agent.group);
    Ok(Json(find_agent(&app, &id).await?))
}

// ---------------------------------------------------------------- events

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct EventQuery {
    group: Option<String>,
    session: Option<String>,
    agent: Option<String>,
    before: Option<i64>,
    limit: Option<u32>,
}

async fn list_events(
    State(app): State<App>,
    caller: Caller,
    Query(q): Query<EventQuery>,
) -> Result<Json<Vec<corral_store::Event>>> {
    if !caller.is_admin() {
        // Users read the events of their own sessions.
        let Some(session) = q.session.as_deref() else {
            return Err(ApiError::forbidden(
                "users read events of their own sessions: add session=ID",
            ));
        };
        own_session(&app, &caller, session).await?;
    }
    let filter = EventFilter {
        group: q.group,
        session: q.session,
        agent: q.agent,
        before_id: q.before,
        limit: Some(q.limit.unwrap_or(100).clamp(1, 1000)),
    };
    Ok(Json(app.store.list_events(&filter).await?))
}
