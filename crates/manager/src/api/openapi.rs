//! The OpenAPI document, generated: utoipa reads the handlers' `#[utoipa::path]` attributes
//! (route, parameters, body, answers) and the schemas of corral-api's and corral-core's types
//! (feature `openapi`), so a field added to a body is in the document. [`document`] then
//! completes what derives cannot say, each step from a rule rather than a copy:
//!
//! - the rules across fields that the types' crates give as refinements
//!   (`corral_core::openapi::refinements`, `corral_api::openapi::refinements`);
//! - every integer's range, from its Rust type (utoipa names `u32`, `i64`... as formats);
//! - the provider's options per provider (`corral_provider::openapi`: derived from each
//!   provider's `Options`, refined with what its checks accept), and `ProviderConfig` as one of
//!   them;
//! - `GroupPatch`, the JSON merge patch of `NewGroup`, derived from its schema
//!   ([`MergePatch`]);
//! - answers as the server writes them ([`answers`]): every field present, slots canonical.
//!
//! The document is served at `/api/v1/openapi.json` and checked in as
//! `crates/manager/openapi.json`; `tests/openapi.rs` fails when that copy is stale
//! (`CORRAL_UPDATE_OPENAPI=1 cargo test -p corral-manager --test openapi` rewrites it).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::LazyLock;

use serde_json::{json, Map, Value};
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::openapi::{ContentBuilder, RefOr, Response, ResponseBuilder};
use utoipa::{Modify, OpenApi, ToResponse};

use corral_core::schema_type;

pub(crate) use corral_api::openapi::SessionPath;
pub(crate) use corral_core::openapi::{ImageName, Name};

/// The document as served, pretty-printed.
pub static DOCUMENT: LazyLock<String> = LazyLock::new(|| {
    let mut text = serde_json::to_string_pretty(&document()).expect("a JSON value prints");
    text.push('\n');
    text
});

#[derive(OpenApi)]
#[openapi(
    info(
        title = "Corral manager API",
        version = "1",
        description = "Every error is {\"error\": {\"code\", \"message\", \"details\"}}. 400: \
            the request does not match this document, or (where a description says so) names \
            something that does not exist or contradicts itself; 401: no valid token; 403: the \
            token's role may not do this (a bootstrap token only joins); 404: no such resource; \
            409: a conflict with the current state; 413: the body is too large; 415: a PATCH \
            body that is not a JSON merge patch; 422: an infeasible session, or a session array on a \
            group whose sessions run as batch jobs."
    ),
    paths(
        super::health,
        super::openapi_json,
        super::metrics,
        super::tokens::new_token,
        super::tokens::list_tokens,
        super::tokens::revoke_token,
        super::groups::list_groups,
        super::groups::create_group,
        super::groups::get_group,
        super::groups::replace_group,
        super::groups::patch_group,
        super::groups::delete_group,
        super::groups::put_policy,
        super::groups::get_templates,
        super::groups::put_templates,
        super::groups::get_provider,
        super::groups::put_provider,
        super::groups::list_instances,
        super::batch::get_binding,
        super::batch::put_binding,
        super::batch::delete_binding,
        super::batch::list_jobs,
        super::batch::submit_job,
        super::batch::get_job,
        super::batch::cancel_job,
        super::batch::hold_job,
        super::batch::release_job,
        super::batch::signal_job,
        super::batch::put_input,
        super::batch::list_outputs,
        super::batch::get_output,
        super::batch::list_nodes,
        super::batch::get_config,
        super::batch::patch_config,
        super::group_state::pending,
        super::history::history,
        super::group_state::shares,
        super::group_state::required,
        super::group_state::dry_run,
        super::tokens::new_bootstrap_token,
        super::images::list_images,
        super::images::get_image,
        super::images::put_image,
        super::images::delete_image,
        super::sessions::list_sessions,
        super::sessions::submit,
        super::sessions::get_session,
        super::sessions::cancel,
        super::interactive::exec,
        super::interactive::forward,
        super::apps::list,
        super::apps::login,
        super::arrays::list_arrays,
        super::arrays::get_array,
        super::arrays::cancel_array,
        super::agent_registry::list_agents,
        super::agent_registry::register_agent,
        super::agent_registry::get_agent,
        super::agent_registry::remove_agent,
        super::agent_registry::drain,
        super::agent_registry::unmark,
        super::interactive::agent_tunnel,
        super::events::list_events,
        crate::agents::join,
        crate::agents::sync::sync,
        crate::agents::files::append_log,
        crate::agents::files::put_output,
        crate::agents::files::get_input,
        crate::agents::files::put_input,
        crate::agents::files::read_log,
        crate::agents::files::list_outputs,
        crate::agents::files::get_output,
        crate::external::challenge,
        crate::external::join,
        crate::external::add_key,
        crate::external::list_keys,
        crate::external::revoke_key,
        crate::agent_builds::list_builds,
        crate::agent_builds::put_build,
        crate::agent_builds::download_build,
        crate::agent_builds::delete_build,
        crate::registry_logins::list_logins,
        crate::registry_logins::put_login,
        crate::registry_logins::delete_login,
    ),
    components(
        responses(ErrorResponse),
        schemas(
            corral_core::openapi::SlotsOut,
            corral_core::openapi::AmountOut,
            corral_batch::openapi::JobId
        )
    ),
    modifiers(&Bearer),
    security(("bearer" = []))
)]
struct ApiDoc;

/// Every route but health and this document takes `Authorization: Bearer <token>`.
struct Bearer;

impl Modify for Bearer {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
        );
    }
}

/// Every refusal: `{"error": {"code", "message", "details"}}` (`crate::error::ApiError`).
pub(crate) struct ErrorResponse;

impl<'a> ToResponse<'a> for ErrorResponse {
    fn response() -> (&'a str, RefOr<Response>) {
        let content = ContentBuilder::new()
            .schema(Some(utoipa::openapi::Ref::from_schema_name("ErrorBody")))
            .build();
        let response = ResponseBuilder::new()
            .description("an error")
            .content("application/json", content)
            .build();
        ("Error", RefOr::T(response))
    }
}

pub(crate) use corral_api::ErrorBody;

schema_type!(
    /// Bytes as they are: uploads, logs, files.
    Binary = json!({"type": "string", "format": "binary"})
);

schema_type!(
    /// A session's log (`agents::files::check_stream`).
    LogStream = json!({"type": "string", "enum": ["stdout", "stderr"]})
);

schema_type!(
    /// What `PATCH /groups/{name}` takes (`merge_patch.rs`), said with a 415.
    AcceptPatch = json!({"const": "application/merge-patch+json"})
);

schema_type!(
    /// `PATCH /groups/{name}`: [`merge_patch_schema`] of `NewGroup`, filled in by [`document`].
    GroupPatch = json!({})
);

schema_type!(
    /// `GET /health` when the store takes writes.
    Healthy = json!({
        "type": "object",
        "required": ["status"],
        "properties": {"status": {"const": "ok"}}
    })
);

schema_type!(
    /// `GET /health` when it does not, with the reason.
    Unhealthy = json!({
        "type": "object",
        "required": ["status", "reason"],
        "properties": {"status": {"const": "unavailable"}, "reason": {"type": "string"}}
    })
);

schema_type!(
    /// This document.
    Document = json!({"type": "object"})
);

/// The document: what utoipa generates, completed (see the module's comment).
pub fn document() -> Value {
    let mut doc = serde_json::to_value(ApiDoc::openapi()).expect("the document is JSON");
    let schemas = doc["components"]["schemas"]
        .as_object_mut()
        .expect("components.schemas");
    for (name, keywords) in corral_core::openapi::refinements()
        .into_iter()
        .chain(corral_api::openapi::refinements())
    {
        let schema = schemas
            .get_mut(name)
            .unwrap_or_else(|| panic!("refinement of {name}, which the document lacks"));
        merge(schema, keywords);
    }
    for name in corral_batch::openapi::CLOSED_ENUMS {
        let variants = schemas[*name]["oneOf"]
            .as_array_mut()
            .expect("a tagged enum");
        for variant in variants {
            variant["additionalProperties"] = json!(false);
        }
    }
    // The merge patch follows the fields of NewGroup and of the provider configuration as the
    // API carries it (`ProviderConfig`, before its options are spelt out per provider).
    let patch = MergePatch::new(schemas);
    let mut patches = BTreeMap::new();
    let group_patch = patch.of(patch.resolve("NewGroup"), &mut patches);
    schemas.extend(patches);
    schemas.insert(
        "GroupPatch".into(),
        merge_described(
            group_patch,
            "A JSON merge patch (RFC 7396) of a group's settings, the document PUT \
             /groups/{name} takes: only the fields it names change; null removes a field, which \
             then takes its default (the provider's: static); an object merges field by field; \
             templates, an array, are replaced whole. The result is checked as PUT checks it \
             (400 naming the field: min_nodes above max_nodes, a repeated template name, the \
             provider's options), and nothing changes if it fails",
        ),
    );
    // Answers show the configuration as `ProviderConfig` writes it: options as stored, with
    // every secret the provider declares shown as "********" (null when none is set), so
    // they are checked only in requests.
    let mut written_provider = schemas["ProviderConfig"].clone();
    written_provider["properties"]["name"] = provider_names();
    schemas.extend(provider_schemas());
    integer_ranges(&mut doc);
    answers(&mut doc, written_provider);
    prune(&mut doc);
    for (path, item) in doc["paths"].as_object_mut().expect("paths") {
        for op in item
            .as_object_mut()
            .into_iter()
            .flat_map(|i| i.values_mut())
        {
            // Every operation but this document reads the store (a token, at least): while the
            // database is away it answers 503 with `Retry-After`.
            if path != "/api/v1/openapi.json" {
                if let Some(responses) = op["responses"].as_object_mut() {
                    responses
                        .entry("503")
                        .or_insert_with(|| json!({"$ref": "#/components/responses/Error"}));
                }
            }
            // utoipa writes `security(())` as `[{}]` (any, or none); the document says none.
            if op.get("security") == Some(&json!([{}])) {
                op["security"] = json!([]);
            }
            // utoipa tags operations by the handler's module path, which says nothing here.
            if let Some(op) = op.as_object_mut() {
                op.remove("tags");
            }
        }
    }
    sorted(doc)
}

/// Fields a response leaves out when empty (`#[serde(skip_serializing_if)]`), per component.
const SKIPPED_WHEN_EMPTY: [(&str, &str); 1] = [("SessionView", "history")];

/// The schemas of successful answers, as the server writes them: a derived schema says what a
/// type *reads*, where fields with defaults may be left out and slots take every form people
/// write; what `Serialize` writes has every field (but [`SKIPPED_WHEN_EMPTY`]) and slots in
/// their canonical form (`SlotsOut`). A component that requests use too gets an `<Name>Out`
/// twin where the two differ. A provider's configuration is written as `ProviderConfig` is
/// (`written_provider`): its options as stored, secrets redacted.
fn answers(doc: &mut Value, written_provider: Value) {
    let mut schemas = doc["components"]["schemas"]
        .as_object()
        .expect("schemas")
        .clone();
    let mut requests = BTreeSet::new();
    for item in doc["paths"].as_object().expect("paths").values() {
        for op in item.as_object().into_iter().flat_map(|i| i.values()) {
            referenced(&op["parameters"], &schemas, &mut requests);
            referenced(&op["requestBody"], &schemas, &mut requests);
        }
    }
    // What requests take is `ProviderConfig` checked per provider; what answers show is the
    // configuration as written (see `document`).
    schemas.insert("ProviderConfig".into(), written_provider);
    let mut answer = Answers {
        schemas: &schemas,
        requests,
        made: BTreeMap::new(),
        out: BTreeMap::new(),
    };
    for item in doc["paths"].as_object_mut().expect("paths").values_mut() {
        for op in item
            .as_object_mut()
            .into_iter()
            .flat_map(|i| i.values_mut())
        {
            let Some(responses) = op.get_mut("responses").and_then(Value::as_object_mut) else {
                continue;
            };
            for (status, response) in responses.iter_mut() {
                if !status.starts_with('2') {
                    continue;
                }
                let Some(content) = response.get_mut("content").and_then(Value::as_object_mut)
                else {
                    continue;
                };
                for media in content.values_mut() {
                    if let Some(schema) = media.get_mut("schema") {
                        *schema = answer.of(schema, None);
                    }
                }
            }
        }
    }
    let out = answer.out;
    let schemas = doc["components"]["schemas"]
        .as_object_mut()
        .expect("schemas");
    schemas.extend(out);
}

struct Answers<'a> {
    schemas: &'a Map<String, Value>,
    /// Components requests refer to: their answers' form is a twin.
    requests: BTreeSet<String>,
    /// Per component, the name of its answers' form.
    made: BTreeMap<String, String>,
    out: BTreeMap<String, Value>,
}

impl Answers<'_> {
    fn of(&mut self, schema: &Value, owner: Option<&str>) -> Value {
        if let Some(reference) = schema.get("$ref").and_then(Value::as_str) {
            let name = reference.rsplit('/').next().expect("a reference names");
            return corral_core::openapi::reference(&self.component(name));
        }
        let Value::Object(object) = schema else {
            return schema.clone();
        };
        let mut result = object.clone();
        if let Some(Value::Object(properties)) = object.get("properties") {
            let mut written = Map::new();
            let mut required = Vec::new();
            for (key, value) in properties {
                // An alias serde reads (`writeOnly`) is never written.
                if value.get("writeOnly") == Some(&Value::Bool(true)) {
                    continue;
                }
                written.insert(key.clone(), self.of(value, owner));
                if !SKIPPED_WHEN_EMPTY.contains(&(owner.unwrap_or_default(), key.as_str())) {
                    required.push(Value::String(key.clone()));
                }
            }
            result.insert("properties".into(), Value::Object(written));
            if !required.is_empty() {
                result.insert("required".into(), Value::Array(required));
            }
        }
        for key in ["items", "additionalProperties"] {
            if let Some(inner) = object.get(key).filter(|v| v.is_object()) {
                result.insert(key.into(), self.of(inner, owner));
            }
        }
        for key in ["oneOf", "anyOf"] {
            if let Some(Value::Array(members)) = object.get(key) {
                let members = members.iter().map(|m| self.of(m, owner)).collect();
                result.insert(key.into(), Value::Array(members));
            }
        }
        if let Some(Value::Array(members)) = object.get("allOf") {
            // `#[serde(flatten)]`: each member describes some of the object's fields, so none
            // may refuse the others'.
            let members = members
                .iter()
                .map(|m| {
                    let mut part = self.of(m, owner);
                    if let Some(reference) = part.get("$ref").and_then(Value::as_str) {
                        let name = reference.rsplit('/').next().expect("named").to_string();
                        part = self
                            .out
                            .get(&name)
                            .or(self.schemas.get(&name))
                            .cloned()
                            .unwrap_or(part);
                    }
                    if let Some(o) = part.as_object_mut() {
                        o.remove("additionalProperties");
                    }
                    part
                })
                .collect();
            result.insert("allOf".into(), Value::Array(members));
        }
        Value::Object(result)
    }

    /// The name of the answers' form of component `name`, made on first use.
    fn component(&mut self, name: &str) -> String {
        if matches!(name, "Slots" | "RequiredSlots") {
            return "SlotsOut".into();
        }
        if matches!(name, "Amount" | "DeviceShare") {
            return "AmountOut".into();
        }
        if let Some(made) = self.made.get(name) {
            return made.clone();
        }
        let original = self.schemas[name].clone();
        self.made.insert(name.into(), name.into());
        let written = self.of(&original, Some(name));
        let made = if written == original {
            name.to_string()
        } else if self.requests.contains(name) {
            format!("{name}Out")
        } else {
            name.to_string()
        };
        if written != original {
            self.out.insert(made.clone(), written);
        }
        self.made.insert(name.into(), made.clone());
        made
    }
}

/// The components `value` refers to, and theirs.
fn referenced(value: &Value, schemas: &Map<String, Value>, found: &mut BTreeSet<String>) {
    match value {
        Value::Object(object) => {
            if let Some(reference) = object.get("$ref").and_then(Value::as_str) {
                if let Some(name) = reference.strip_prefix("#/components/schemas/") {
                    if found.insert(name.to_string()) {
                        if let Some(target) = schemas.get(name) {
                            referenced(target, schemas, found);
                        }
                    }
                }
            }
            object.values().for_each(|v| referenced(v, schemas, found));
        }
        Value::Array(items) => items.iter().for_each(|v| referenced(v, schemas, found)),
        _ => {}
    }
}

/// Drops the components nothing refers to any more (the request forms of answer-only types).
fn prune(doc: &mut Value) {
    let schemas = doc["components"]["schemas"]
        .as_object()
        .expect("schemas")
        .clone();
    let mut used = BTreeSet::new();
    referenced(&doc["paths"], &schemas, &mut used);
    referenced(&doc["components"]["responses"], &schemas, &mut used);
    doc["components"]["schemas"]
        .as_object_mut()
        .expect("schemas")
        .retain(|name, _| used.contains(name));
}

/// Merges JSON Schema keywords into a schema: objects key by key, anything else replaced.
fn merge(target: &mut Value, keywords: Value) {
    match (target, keywords) {
        (Value::Object(target), Value::Object(keywords)) => {
            for (key, value) in keywords {
                match target.get_mut(&key) {
                    Some(inner) if inner.is_object() && value.is_object() => merge(inner, value),
                    _ => {
                        target.insert(key, value);
                    }
                }
            }
        }
        (target, keywords) => *target = keywords,
    }
}

fn merge_described(mut schema: Value, description: &str) -> Value {
    merge(&mut schema, json!({"description": description}));
    schema
}

/// A JSON merge patch (RFC 7396) of a document that a schema describes, as
/// `api::merge_patch` applies it and `api::groups::patched` checks it: an object with fixed
/// fields takes any of them (none required, no other); a field the document may leave out may be
/// null (removed: it takes its default), a required one may not (the result would lack it);
/// an object of free keys (slots) takes null for a key (removed); an array or a scalar is
/// replaced whole, so it is what the document takes. The provider's options are free keys
/// there too (checked once merged, by the provider); its name, one the API knows.
struct MergePatch<'a> {
    schemas: &'a Map<String, Value>,
}

impl<'a> MergePatch<'a> {
    fn new(schemas: &'a Map<String, Value>) -> Self {
        MergePatch { schemas }
    }

    fn resolve(&self, name: &str) -> &'a Value {
        self.schemas
            .get(name)
            .unwrap_or_else(|| panic!("no component {name}"))
    }

    /// The schema of a merge patch of what `schema` describes; components it needs (named
    /// `<Name>Patch`) go to `out`.
    fn of(&self, schema: &Value, out: &mut BTreeMap<String, Value>) -> Value {
        if let Some(reference) = schema.get("$ref").and_then(Value::as_str) {
            let name = reference.rsplit('/').next().expect("a reference names");
            let target = self.resolve(name);
            if !is_object_schema(target) {
                return schema.clone();
            }
            let patch_name = format!("{name}Patch");
            if !out.contains_key(&patch_name) {
                out.insert(patch_name.clone(), json!({}));
                let mut patch = self.of(target, out);
                if name == "ProviderConfig" {
                    patch["properties"]["name"] = provider_names();
                }
                out.insert(patch_name.clone(), patch);
            }
            return json!({"$ref": format!("#/components/schemas/{patch_name}")});
        }
        for key in ["oneOf", "anyOf"] {
            if let Some(Value::Array(members)) = schema.get(key) {
                let mut patched = schema.clone();
                patched[key] = members.iter().map(|m| self.of(m, out)).collect();
                return patched;
            }
        }
        let Some(object) = schema.as_object() else {
            return schema.clone();
        };
        if let Some(Value::Object(properties)) = object.get("properties") {
            let required: Vec<&str> = object
                .get("required")
                .and_then(Value::as_array)
                .map(|r| r.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            let mut patch = Map::new();
            for (key, value) in properties {
                let inner = self.of(value, out);
                patch.insert(
                    key.clone(),
                    if required.contains(&key.as_str()) {
                        inner
                    } else {
                        nullable(inner)
                    },
                );
            }
            let mut result = json!({"type": "object", "additionalProperties": false,
                                    "properties": patch});
            if let Some(description) = object.get("description") {
                result["description"] = description.clone();
            }
            return result;
        }
        match object.get("additionalProperties") {
            Some(values) if values.is_object() => {
                let mut patched = schema.clone();
                patched["additionalProperties"] = nullable(self.of(values, out));
                patched
            }
            _ => schema.clone(),
        }
    }
}

/// The providers the API knows.
fn provider_names() -> Value {
    let names: Vec<&str> = corral_provider::openapi::options_schemas()
        .iter()
        .map(|o| o.provider)
        .collect();
    json!({"type": "string", "enum": names})
}

/// Each provider's options, and `ProviderConfig` as one of them: a name, its options, the
/// launch settings.
fn provider_schemas() -> Map<String, Value> {
    let options = corral_provider::openapi::options_schemas();
    let secrets: Vec<String> = options
        .iter()
        .filter(|o| !o.secrets.is_empty())
        .map(|o| format!("{}: {}", o.provider, o.secrets.join(", ")))
        .collect();
    let one_of: Vec<Value> = options
        .iter()
        .map(|o| {
            json!({
                "type": "object",
                "additionalProperties": false,
                "required": if o.required { json!(["name", "options"]) } else { json!(["name"]) },
                "properties": {
                    "name": {"const": o.provider},
                    "options": corral_core::openapi::reference(&o.name),
                    "launch": corral_core::openapi::reference("LaunchSettings"),
                },
            })
        })
        .collect();
    let mut schemas: Map<String, Value> = options.into_iter().map(|o| (o.name, o.schema)).collect();
    let description = format!(
        "A group's provider: name, its options (docs/configuration.md) and launch settings. \
         Secret options ({}) are shown as {:?}; sending that value back keeps the stored secret.",
        secrets.join("; "),
        corral_provider::REDACTED
    );
    schemas.insert(
        "ProviderConfig".into(),
        json!({"description": description, "oneOf": one_of}),
    );
    schemas
}

/// An object with fixed fields or free keys: what a merge patch merges into.
fn is_object_schema(schema: &Value) -> bool {
    schema.get("properties").is_some()
        || schema
            .get("additionalProperties")
            .is_some_and(Value::is_object)
        || ["oneOf", "anyOf"].iter().any(|k| {
            schema[*k]
                .as_array()
                .is_some_and(|m| m.iter().any(is_object_schema))
        })
}

/// The schema, or null.
fn nullable(schema: Value) -> Value {
    let is_null = |s: &Value| s == &json!({"type": "null"});
    match &schema {
        s if is_null(s) => schema,
        Value::Object(o)
            if o.get("oneOf")
                .and_then(Value::as_array)
                .is_some_and(|m| m.iter().any(is_null)) =>
        {
            schema
        }
        Value::Object(o)
            if o.get("type")
                .and_then(Value::as_array)
                .is_some_and(|t| t.contains(&json!("null"))) =>
        {
            schema
        }
        _ => json!({"oneOf": [schema, {"type": "null"}]}),
    }
}

/// Every integer's range, from the Rust type utoipa names as its format (`uint32`: `u32`...);
/// a narrower range given on the field stays.
fn integer_ranges(value: &mut Value) {
    match value {
        Value::Object(object) => {
            let is_integer = match object.get("type") {
                Some(Value::String(t)) => t == "integer",
                Some(Value::Array(types)) => types.contains(&json!("integer")),
                _ => false,
            };
            let format = object
                .get("format")
                .and_then(Value::as_str)
                .map(str::to_string);
            if let (true, Some(format)) = (is_integer, format) {
                // utoipa 5 writes the unsigned ones as `u-int32`.
                let (lo, hi): (Value, Value) = match format.replace('-', "").as_str() {
                    "int8" => (i8::MIN.into(), i8::MAX.into()),
                    "int16" => (i16::MIN.into(), i16::MAX.into()),
                    "int32" => (i32::MIN.into(), i32::MAX.into()),
                    "int64" => (i64::MIN.into(), i64::MAX.into()),
                    "uint8" => (0.into(), u8::MAX.into()),
                    "uint16" => (0.into(), u16::MAX.into()),
                    "uint32" => (0.into(), u32::MAX.into()),
                    "uint64" => (0.into(), u64::MAX.into()),
                    other => panic!("an integer of format {other}"),
                };
                object.remove("format");
                let narrower = |given: Option<&Value>, bound: &Value, lower: bool| match given {
                    Some(g) if as_f64(g).is_some() => {
                        let (g_f, b_f) = (as_f64(g).unwrap_or(0.0), as_f64(bound).unwrap_or(0.0));
                        if (lower && g_f > b_f) || (!lower && g_f < b_f) {
                            g.clone()
                        } else {
                            bound.clone()
                        }
                    }
                    _ => bound.clone(),
                };
                let min = narrower(object.get("minimum"), &lo, true);
                let max = narrower(object.get("maximum"), &hi, false);
                object.insert("minimum".into(), min);
                object.insert("maximum".into(), max);
            } else if is_number(object.get("type"))
                && matches!(
                    object.get("format").and_then(Value::as_str),
                    Some("double" | "float")
                )
            {
                object.remove("format");
            }
            object.values_mut().for_each(integer_ranges);
        }
        Value::Array(items) => items.iter_mut().for_each(integer_ranges),
        _ => {}
    }
}

fn is_number(types: Option<&Value>) -> bool {
    match types {
        Some(Value::String(t)) => t == "number",
        Some(Value::Array(types)) => types.contains(&json!("number")),
        _ => false,
    }
}

fn as_f64(v: &Value) -> Option<f64> {
    v.as_f64()
}

/// Keys in order, so the document prints the same on every build.
fn sorted(value: Value) -> Value {
    match value {
        Value::Object(object) => {
            let ordered: BTreeMap<String, Value> =
                object.into_iter().map(|(k, v)| (k, sorted(v))).collect();
            Value::Object(ordered.into_iter().collect())
        }
        Value::Array(items) => Value::Array(items.into_iter().map(sorted).collect()),
        other => other,
    }
}
