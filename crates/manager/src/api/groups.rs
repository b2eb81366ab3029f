//! Scaling groups: their settings (name, policy, scheduler, templates, provider) created,
//! read, replaced whole (`PUT`), merged (`PATCH`, a JSON merge patch) and deleted; their policy,
//! templates and provider on their own; the instances their provider launched. Settings are
//! checked in full, the provider's too, before anything is written; provider secrets are sealed
//! at rest and redacted in answers (`crate::secrets`).

#[cfg(feature = "openapi")]
use super::openapi::{AcceptPatch, ErrorBody, ErrorResponse, GroupPatch, Name};
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::Json;
use corral_api::groups::{GroupView, NewGroup, PolicyUpdate};
use corral_api::instances::{InstanceList, InstancesQuery};
use corral_core::{InstanceTemplate, ScalingGroup, SlotName};
use corral_provider::{ProviderConfig, ProviderSettings};
use corral_store::InstancePhase;
use serde_json::{json, Map, Value};

use super::merge_patch::{merge, MergePatch};
use super::{find_group, Result};
use crate::auth::Caller;
use crate::error::ApiError;
use crate::extract::{from_value, Body, Query};
use crate::names::check_name;
use crate::{now, App};

/// The group's stored provider configuration (static when none is stored), its secrets opened.
/// One this manager's key cannot open reads as redacted (and is logged): answers redact it
/// anyway, and a configuration sent back must then give it again.
async fn stored_provider(app: &App, name: &str) -> Result<ProviderConfig> {
    let stored = app.store.get_group_provider(name).await?;
    let mut config = crate::secrets::parse_stored(name, stored.as_deref())?;
    crate::secrets::open_config_or_redact(&app.secrets, &mut config, name);
    Ok(config)
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

/// Each template the provider's options name (`templates.<name>`, aws and kubernetes) is one of
/// the group's: a misspelt name would leave that template without its settings, silently.
fn check_template_names(provider: &ProviderConfig, group: &ScalingGroup) -> Result<()> {
    let Some(named) = provider
        .options
        .get("templates")
        .and_then(|t| t.as_object())
    else {
        return Ok(());
    };
    for name in named.keys() {
        if !group.templates.iter().any(|t| &t.name == name) {
            let theirs: Vec<&str> = group.templates.iter().map(|t| t.name.as_str()).collect();
            return Err(ApiError::invalid(
                &format!("provider.options.templates.{name}"),
                format!(
                    "names no template of group {:?} (its templates: {})",
                    group.name,
                    if theirs.is_empty() {
                        "none".to_string()
                    } else {
                        theirs.join(", ")
                    }
                ),
            ));
        }
    }
    Ok(())
}

/// The configuration as stored: its secrets sealed.
fn provider_json(app: &App, provider: &ProviderConfig) -> Result<String> {
    let mut sealed = provider.clone();
    crate::secrets::seal_config(&app.secrets, &mut sealed);
    serde_json::to_string(&sealed)
        .map_err(|e| ApiError::from(corral_store::StoreError::Corrupt(e.to_string())))
}

fn validated(mut group: ScalingGroup) -> Result<ScalingGroup> {
    check_name("name", &group.name)?;
    for (i, t) in group.templates.iter_mut().enumerate() {
        check_name(&format!("templates[{i}].name"), &t.name)?;
        corral_core::devices::complete_template_slots(&mut t.slots, &t.devices)
            .map_err(|e| ApiError::invalid(&format!("templates[{i}].devices"), e.to_string()))?;
    }
    let expected = &group.policy.expected_nodes;
    if expected.len() > corral_core::expected::MAX_EXPECTED_NODES {
        return Err(ApiError::invalid(
            "policy.expected_nodes",
            format!(
                "{} nodes; at most {} may be declared",
                expected.len(),
                corral_core::expected::MAX_EXPECTED_NODES
            ),
        ));
    }
    for (name, slots) in expected {
        check_name(&format!("policy.expected_nodes.{name}"), name)?;
        if slots.is_empty() {
            return Err(ApiError::invalid(
                &format!("policy.expected_nodes.{name}"),
                "a node offers something: give its slots (cpu=8,mem=32GiB)",
            ));
        }
    }
    group
        .validate()
        .map_err(|e| ApiError::invalid("group", e))?;
    Ok(group)
}

#[cfg_attr(
    feature = "openapi",
    utoipa::path(
    get,
    path = "/api/v1/groups",
    summary = "List scaling groups",
    responses(
        (status = 200, description = "success", body = Vec<GroupView>),
        (status = 401, response = ErrorResponse),
        (status = 403, response = ErrorResponse),
    )
)
)]
pub(super) async fn list_groups(State(app): State<App>, _: Caller) -> Result<Json<Vec<GroupView>>> {
    let mut views = Vec::new();
    for group in app.store.list_groups().await? {
        views.push(view(&app, group).await?);
    }
    Ok(Json(views))
}

#[cfg_attr(
    feature = "openapi",
    utoipa::path(
    post,
    path = "/api/v1/groups",
    summary = "Create a scaling group (admin); 409 if it exists",
    request_body = NewGroup,
    responses(
        (status = 201, description = "success", body = GroupView),
        (status = 400, response = ErrorResponse),
        (status = 401, response = ErrorResponse),
        (status = 403, response = ErrorResponse),
        (status = 409, response = ErrorResponse),
        (status = 413, response = ErrorResponse),
    )
)
)]
pub(super) async fn create_group(
    State(app): State<App>,
    caller: Caller,
    Body(b): Body<NewGroup>,
) -> Result<impl IntoResponse> {
    caller.require_admin()?;
    let group = validated(ScalingGroup {
        name: b.name,
        policy: b.policy,
        scheduler: b.scheduler,
        templates: b.templates,
    })?;
    let provider = validated_provider(b.provider.unwrap_or_default())?;
    check_template_names(&provider, &group)?;
    crate::agent_update::check_policy(&app, &group.policy.agent_update).await?;
    crate::image_update::check_policy(&group.policy.image_update)?;
    app.store
        .create_group_with_provider(&group, Some(&provider_json(&app, &provider)?), now())
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

#[cfg_attr(
    feature = "openapi",
    utoipa::path(
    get,
    path = "/api/v1/groups/{name}",
    summary = "Get a group",
    params(("name" = Name, Path, description = "the group")),
    responses(
        (status = 200, description = "success", body = GroupView),
        (status = 401, response = ErrorResponse),
        (status = 403, response = ErrorResponse),
        (status = 404, response = ErrorResponse),
    )
)
)]
pub(super) async fn get_group(
    State(app): State<App>,
    _: Caller,
    Path(name): Path<String>,
) -> Result<Json<GroupView>> {
    let group = find_group(&app, &name).await?;
    Ok(Json(view(&app, group).await?))
}

#[cfg_attr(
    feature = "openapi",
    utoipa::path(
    put,
    path = "/api/v1/groups/{name}",
    summary = "Replace a group's policy, scheduler and templates, and its provider when given (admin); the body's name must be the URL's (400)",
    params(("name" = Name, Path, description = "the group")),
    request_body = NewGroup,
    responses(
        (status = 200, description = "success", body = GroupView),
        (status = 400, response = ErrorResponse),
        (status = 401, response = ErrorResponse),
        (status = 403, response = ErrorResponse),
        (status = 404, response = ErrorResponse),
        (status = 413, response = ErrorResponse),
    )
)
)]
pub(super) async fn replace_group(
    State(app): State<App>,
    caller: Caller,
    Path(name): Path<String>,
    Body(b): Body<NewGroup>,
) -> Result<Json<GroupView>> {
    caller.require_admin()?;
    Ok(Json(replace(&app, &name, b).await?))
}

/// Merges a JSON merge patch into the group's settings (`PATCH /groups/{name}`), and replaces
/// them with the result as `PUT` would: only what the patch names changes.
#[cfg_attr(
    feature = "openapi",
    utoipa::path(
    patch,
    path = "/api/v1/groups/{name}",
    summary = "Change some of a group's settings (admin): a JSON merge patch (RFC 7396) of what PUT takes, merged into the current ones and checked as PUT checks them; the body's name, if given, must be the URL's (400)",
    params(("name" = Name, Path, description = "the group")),
    request_body(content(
        (GroupPatch = "application/merge-patch+json"),
        (GroupPatch = "application/json"),
    )),
    responses(
        (status = 200, description = "success", body = GroupView),
        (status = 400, response = ErrorResponse),
        (status = 401, response = ErrorResponse),
        (status = 403, response = ErrorResponse),
        (status = 404, response = ErrorResponse),
        (status = 413, response = ErrorResponse),
        (status = 415, description = "the body is not a JSON merge patch: its Content-Type is neither application/merge-patch+json nor application/json", body = ErrorBody, headers(("Accept-Patch" = inline(AcceptPatch)))),
    )
)
)]
pub(super) async fn patch_group(
    State(app): State<App>,
    caller: Caller,
    Path(name): Path<String>,
    MergePatch(patch): MergePatch,
) -> Result<Json<GroupView>> {
    caller.require_admin()?;
    let group = find_group(&app, &name).await?;
    let provider = stored_provider(&app, &name).await?.redacted();
    let body = patched(group, provider, &patch)?;
    Ok(Json(replace(&app, &name, body).await?))
}

/// Replaces the group's settings with `b` (`PUT` and `PATCH`): the name must be the URL's, and
/// the settings and the provider (when given) are checked before anything is written.
async fn replace(app: &App, name: &str, b: NewGroup) -> Result<GroupView> {
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
    let stored = stored_provider(app, name).await?;
    let provider = match b.provider {
        Some(p) => Some(validated_provider(p.keep_secrets_of(&stored))?),
        None => None,
    };
    // The templates may have changed under the provider's options, as well as the options.
    check_template_names(provider.as_ref().unwrap_or(&stored), &group)?;
    crate::agent_update::check_policy(app, &group.policy.agent_update).await?;
    let before = find_group(app, name).await?;
    if let Some(p) = &provider {
        app.store
            .set_group_provider(name, Some(&provider_json(app, p)?), now())
            .await?;
    }
    let Json(group) = update(app, &before, group).await?;
    view(app, group).await
}

/// The levels of a group's settings whose fields are fixed: a patch naming any other field there
/// is refused, also with null (which would remove nothing). Below the others (the headroom's
/// slots, the provider's options) a patch may name any key.
const FIXED_FIELDS: [&str; 9] = [
    "",
    "policy",
    "policy.termination",
    "policy.external",
    "policy.agent_update",
    "policy.image_update",
    "scheduler",
    "provider",
    "provider.launch",
];

/// PUT's body for a group once `patch` is merged into its settings: `group` and `provider`
/// (redacted, as answers show it: secrets left redacted keep their values in [`replace`]).
/// The provider changes only if the patch names it; null makes it the default, static.
fn patched(
    group: ScalingGroup,
    provider: ProviderConfig,
    patch: &Map<String, Value>,
) -> Result<NewGroup> {
    if patch.get("name").is_some_and(Value::is_null) {
        return Err(ApiError::invalid(
            "name",
            "null would remove the group's name; groups cannot be renamed",
        ));
    }
    let mut settings = serde_json::to_value(GroupView { group, provider })
        .map_err(|e| ApiError::from(corral_store::StoreError::Corrupt(e.to_string())))?;
    check_fields(&settings, patch, "")?;
    let patch = Value::Object(patch.clone());
    merge(&mut settings, &patch);
    let mut body: NewGroup = from_value(&settings)?;
    body.provider = match patch.get("provider") {
        None => None,
        Some(Value::Null) => Some(ProviderConfig::default()),
        Some(_) => body.provider,
    };
    Ok(body)
}

/// Refuses what a patch names that no setting has (see [`FIXED_FIELDS`]), as PUT refuses an
/// unknown field, and a slot name that is none where it removes a slot from the headroom.
fn check_fields(settings: &Value, patch: &Map<String, Value>, path: &str) -> Result<()> {
    let Value::Object(fields) = settings else {
        return Ok(());
    };
    for (key, value) in patch {
        let field = if path.is_empty() {
            key.clone()
        } else {
            format!("{path}.{key}")
        };
        match (fields.get(key), value) {
            (None, _) if FIXED_FIELDS.contains(&path) => {
                let known: Vec<String> = fields.keys().map(|k| format!("`{k}`")).collect();
                return Err(ApiError::new(
                    StatusCode::BAD_REQUEST,
                    "invalid_body",
                    format!(
                        "{field}: unknown field `{key}`, expected one of {}",
                        known.join(", ")
                    ),
                )
                .with_details(json!({"field": field})));
            }
            (None, Value::Null) if path == "policy.headroom" => {
                SlotName::new(key).map_err(|e| ApiError::invalid(&field, e))?;
            }
            (Some(inner), Value::Object(patch)) => check_fields(inner, patch, &field)?,
            _ => {}
        }
    }
    Ok(())
}

#[cfg_attr(
    feature = "openapi",
    utoipa::path(
    get,
    path = "/api/v1/groups/{name}/provider",
    summary = "The group's provider configuration, secrets redacted",
    params(("name" = Name, Path, description = "the group")),
    responses(
        (status = 200, description = "success", body = ProviderConfig),
        (status = 401, response = ErrorResponse),
        (status = 403, response = ErrorResponse),
        (status = 404, response = ErrorResponse),
    )
)
)]
pub(super) async fn get_provider(
    State(app): State<App>,
    _: Caller,
    Path(name): Path<String>,
) -> Result<Json<ProviderConfig>> {
    find_group(&app, &name).await?;
    Ok(Json(stored_provider(&app, &name).await?.redacted()))
}

/// Replaces the group's provider configuration; secrets sent back redacted keep their values.
#[cfg_attr(
    feature = "openapi",
    utoipa::path(
    put,
    path = "/api/v1/groups/{name}/provider",
    summary = "Replace the group's provider configuration; secrets sent back redacted keep their values (admin)",
    params(("name" = Name, Path, description = "the group")),
    request_body = ProviderConfig,
    responses(
        (status = 200, description = "success", body = ProviderConfig),
        (status = 400, response = ErrorResponse),
        (status = 401, response = ErrorResponse),
        (status = 403, response = ErrorResponse),
        (status = 404, response = ErrorResponse),
        (status = 413, response = ErrorResponse),
    )
)
)]
pub(super) async fn put_provider(
    State(app): State<App>,
    caller: Caller,
    Path(name): Path<String>,
    Body(provider): Body<ProviderConfig>,
) -> Result<Json<ProviderConfig>> {
    caller.require_admin()?;
    let group = find_group(&app, &name).await?;
    let stored = stored_provider(&app, &name).await?;
    let provider = validated_provider(provider.keep_secrets_of(&stored))?;
    check_template_names(&provider, &group)?;
    app.store
        .set_group_provider(&name, Some(&provider_json(&app, &provider)?), now())
        .await?;
    app.control.wake(&name);
    if let Some(driver) = app.control.driver(&name) {
        driver.kick();
    }
    Ok(Json(provider.redacted()))
}

/// The group's instances as the manager tracks them, and the templates held back now.
#[cfg_attr(
    feature = "openapi",
    utoipa::path(
    get,
    path = "/api/v1/groups/{name}/instances",
    summary = "The group's instances and the templates held back now (admin)",
    params(("name" = Name, Path, description = "the group"), InstancesQuery),
    responses(
        (status = 200, description = "success", body = InstanceList),
        (status = 400, response = ErrorResponse),
        (status = 401, response = ErrorResponse),
        (status = 403, response = ErrorResponse),
        (status = 404, response = ErrorResponse),
    )
)
)]
pub(super) async fn list_instances(
    State(app): State<App>,
    caller: Caller,
    Path(name): Path<String>,
    Query(q): Query<InstancesQuery>,
) -> Result<Json<InstanceList>> {
    caller.require_admin()?;
    find_group(&app, &name).await?;
    let phases: &[InstancePhase] = if q.all {
        &InstancePhase::ALL
    } else {
        &InstancePhase::LIVE
    };
    let instances = app.store.list_instances(&name, phases).await?;
    let held = crate::api::launch_limits(&app, &name, now()).await?;
    Ok(Json(InstanceList { instances, held }))
}

/// Writes `group`'s new settings over `before`, its stored ones.
async fn update(
    app: &App,
    before: &ScalingGroup,
    group: ScalingGroup,
) -> Result<Json<ScalingGroup>> {
    let group = validated(group)?;
    crate::agent_update::check_policy(app, &group.policy.agent_update).await?;
    crate::image_update::check_policy(&group.policy.image_update)?;
    let at = now();
    app.store.update_group(&group, at).await?;
    app.policies.invalidate(&group.name);
    crate::image_update::policy_changed(
        app,
        &group.name,
        &before.policy.image_update,
        &group.policy.image_update,
        at,
    )
    .await?;
    crate::agent_update::policy_changed(
        app,
        &group.name,
        &before.policy.agent_update,
        &group.policy.agent_update,
        at,
    )
    .await?;
    crate::external::policy_changed(
        app,
        &group.name,
        before.policy.external,
        group.policy.external,
    )
    .await?;
    app.control.wake(&group.name);
    Ok(Json(group))
}

#[cfg_attr(
    feature = "openapi",
    utoipa::path(
    put,
    path = "/api/v1/groups/{name}/policy",
    summary = "Update the policy and/or scheduler (admin)",
    params(("name" = Name, Path, description = "the group")),
    request_body = PolicyUpdate,
    responses(
        (status = 200, description = "success", body = GroupView),
        (status = 400, response = ErrorResponse),
        (status = 401, response = ErrorResponse),
        (status = 403, response = ErrorResponse),
        (status = 404, response = ErrorResponse),
        (status = 413, response = ErrorResponse),
    )
)
)]
pub(super) async fn put_policy(
    State(app): State<App>,
    caller: Caller,
    Path(name): Path<String>,
    Body(b): Body<PolicyUpdate>,
) -> Result<Json<GroupView>> {
    caller.require_admin()?;
    let before = find_group(&app, &name).await?;
    let mut group = before.clone();
    if let Some(p) = b.policy {
        group.policy = p;
    }
    if let Some(s) = b.scheduler {
        group.scheduler = s;
    }
    let Json(group) = update(&app, &before, group).await?;
    Ok(Json(view(&app, group).await?))
}

#[cfg_attr(
    feature = "openapi",
    utoipa::path(
    get,
    path = "/api/v1/groups/{name}/templates",
    summary = "List instance templates",
    params(("name" = Name, Path, description = "the group")),
    responses(
        (status = 200, description = "success", body = Vec<InstanceTemplate>),
        (status = 401, response = ErrorResponse),
        (status = 403, response = ErrorResponse),
        (status = 404, response = ErrorResponse),
    )
)
)]
pub(super) async fn get_templates(
    State(app): State<App>,
    _: Caller,
    Path(name): Path<String>,
) -> Result<Json<Vec<InstanceTemplate>>> {
    Ok(Json(find_group(&app, &name).await?.templates))
}

#[cfg_attr(
    feature = "openapi",
    utoipa::path(
    put,
    path = "/api/v1/groups/{name}/templates",
    summary = "Replace instance templates (admin)",
    params(("name" = Name, Path, description = "the group")),
    request_body = Vec<InstanceTemplate>,
    responses(
        (status = 200, description = "success", body = Vec<InstanceTemplate>),
        (status = 400, response = ErrorResponse),
        (status = 401, response = ErrorResponse),
        (status = 403, response = ErrorResponse),
        (status = 404, response = ErrorResponse),
        (status = 413, response = ErrorResponse),
    )
)
)]
pub(super) async fn put_templates(
    State(app): State<App>,
    caller: Caller,
    Path(name): Path<String>,
    Body(templates): Body<Vec<InstanceTemplate>>,
) -> Result<Json<Vec<InstanceTemplate>>> {
    caller.require_admin()?;
    let before = find_group(&app, &name).await?;
    let group = ScalingGroup {
        templates,
        ..before.clone()
    };
    Ok(Json(update(&app, &before, group).await?.0.templates))
}

#[cfg_attr(
    feature = "openapi",
    utoipa::path(
    delete,
    path = "/api/v1/groups/{name}",
    summary = "Delete a group; refused (409) while it has agents, sessions or instances (admin)",
    params(("name" = Name, Path, description = "the group")),
    responses(
        (status = 204, description = "done"),
        (status = 401, response = ErrorResponse),
        (status = 403, response = ErrorResponse),
        (status = 404, response = ErrorResponse),
        (status = 409, response = ErrorResponse),
    )
)
)]
pub(super) async fn delete_group(
    State(app): State<App>,
    caller: Caller,
    Path(name): Path<String>,
) -> Result<StatusCode> {
    caller.require_admin()?;
    app.store.delete_group(&name).await?;
    app.control.disown(&name);
    app.policies.invalidate(&name);
    app.registry_logins.invalidate(&name);
    Ok(StatusCode::NO_CONTENT)
}

#[cfg(test)]
mod tests {
    use super::*;
    use corral_core::{ScalingPolicy, SchedulerConfig};

    fn group() -> ScalingGroup {
        let mut group: ScalingGroup = serde_json::from_value(json!({
            "name": "g", "policy": {"max_nodes": 5, "headroom": "cpu=2,gpu=1"},
            "scheduler": {"sequencer": "drf"}, "templates": []
        }))
        .unwrap();
        group.policy.cooldown_secs = 5;
        group
    }

    fn patch(value: Value) -> Map<String, Value> {
        match value {
            Value::Object(fields) => fields,
            _ => panic!("a patch is an object"),
        }
    }

    #[test]
    fn a_patch_changes_what_it_names_and_null_resets() {
        let b = patched(
            group(),
            ProviderConfig::default(),
            &patch(json!({"policy": {"min_nodes": 2, "cooldown_secs": null,
                                     "headroom": {"gpu": null}},
                          "scheduler": null})),
        )
        .unwrap();
        assert_eq!(b.name, "g");
        assert_eq!(b.policy.min_nodes, 2);
        assert_eq!(b.policy.max_nodes, 5);
        assert_eq!(
            b.policy.cooldown_secs,
            ScalingPolicy::default().cooldown_secs
        );
        assert_eq!(b.policy.headroom, "cpu=2".parse().unwrap());
        assert_eq!(b.scheduler, SchedulerConfig::default());
        assert!(b.provider.is_none(), "a provider not named stays as it is");

        let b = patched(
            group(),
            ProviderConfig::default(),
            &patch(json!({"provider": null})),
        );
        assert_eq!(b.unwrap().provider, Some(ProviderConfig::default()));
    }

    #[test]
    fn what_no_setting_has_is_refused_by_name() {
        for (body, field) in [
            (json!({"colour": null}), "colour"),
            (
                json!({"policy": {"termination": {"colour": 1}}}),
                "policy.termination.colour",
            ),
            (
                json!({"provider": {"launch": {"colour": null}}}),
                "provider.launch.colour",
            ),
            (
                json!({"policy": {"headroom": {"Bad Slot": null}}}),
                "policy.headroom.Bad Slot",
            ),
            (json!({"name": null}), "name"),
        ] {
            let Err(e) = patched(group(), ProviderConfig::default(), &patch(body.clone())) else {
                panic!("{body} was taken");
            };
            assert_eq!(e.status, StatusCode::BAD_REQUEST, "{body}");
            assert!(
                e.message.starts_with(&format!("{field}: ")),
                "{body}: {}",
                e.message
            );
        }
        // The provider's options and the headroom's slots take any name (checked later, when
        // set: by the provider, as slot names).
        let ok = json!({"provider": {"options": {"colour": null}}, "policy": {"headroom": {"mem": null}}});
        assert!(patched(group(), ProviderConfig::default(), &patch(ok)).is_ok());
    }
}
