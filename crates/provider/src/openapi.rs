//! The providers' options as OpenAPI schemas (feature `openapi`), for the manager's document.
//! Each provider's `Options` type derives its schema: its fields, their types, which may be
//! left out, and their doc comments, so a field added to a provider is in the document. What
//! the provider's checks accept beyond the types (patterns, ranges, reserved keys, options that
//! go together) is given here as refinements: a refined field replaces the derived one but keeps
//! its description, and a refinement of a field the type lacks fails the document's build.
//! The names the checks reserve come from the constants the checks use.

use serde_json::{json, Map, Value};
use utoipa::openapi::RefOr;
use utoipa::ToSchema;

use corral_api::identity::{
    AGENT_ENV, AGENT_LABEL, AGENT_TAG, GROUP_LABEL, GROUP_TAG, SERVER_TAG, TEMPLATE_LABEL,
    TEMPLATE_TAG, TOKEN_TAG,
};

/// One provider's options: the provider's name, the schema's name in `components/schemas`,
/// the schema, the options that hold secrets (never shown), and whether a configuration must
/// give options (the provider refuses to start from none).
pub struct OptionsSchema {
    pub provider: &'static str,
    pub name: String,
    pub schema: Value,
    pub secrets: &'static [&'static str],
    pub required: bool,
}

/// The options of every provider this build has, in the order the document lists them.
pub fn options_schemas() -> Vec<OptionsSchema> {
    let mut all = vec![
        refined::<crate::static_provider::Options>("static", json!({})),
        refined::<crate::process::Options>("process", process()),
        refined::<crate::docker::Options>("docker", docker()),
        refined::<crate::exec::Options>("exec", exec()),
        refined::<crate::batch::Options>("batch", batch()),
    ];
    #[cfg(feature = "aws")]
    all.push(refined::<crate::aws::Options>("aws", aws()));
    #[cfg(feature = "kubernetes")]
    all.push(refined::<crate::kubernetes::Options>(
        "kubernetes",
        kubernetes(),
    ));
    all
}

/// `T`'s derived schema with `refinement` applied: its `properties` replace the derived
/// fields (keeping their descriptions); its other keywords are added to the object.
fn refined<T: ToSchema>(provider: &'static str, refinement: Value) -> OptionsSchema {
    let name = T::name().into_owned();
    let RefOr::T(derived) = T::schema() else {
        panic!("{name} derives an inline schema");
    };
    let mut schema = serde_json::to_value(derived).expect("a schema is JSON");
    let Value::Object(mut refinement) = refinement else {
        panic!("the refinement of {name} is an object");
    };
    if let Some(Value::Object(fields)) = refinement.remove("properties") {
        for (field, mut refined) in fields {
            let derived = schema["properties"]
                .get_mut(&field)
                .unwrap_or_else(|| panic!("refinement of {name}.{field}, which it lacks"));
            if let Some(description) = derived.get("description") {
                refined["description"] = description.clone();
            }
            *derived = refined;
        }
    }
    let object = schema.as_object_mut().expect("options are an object");
    object.extend(refinement);
    OptionsSchema {
        provider,
        name,
        schema,
        secrets: crate::options::secrets_of(provider).unwrap_or_default(),
        required: crate::read_options(provider, &Map::new()).is_err(),
    }
}

/// A string without NUL (it cannot be an argument or an environment value).
fn no_nul() -> Value {
    json!({"type": "string", "pattern": "^[^\\u0000]*$"})
}

/// A string with something other than blanks in it.
fn not_blank() -> Value {
    json!({"type": "string", "pattern": "\\S"})
}

/// `schema`, or null.
fn or_null(schema: Value) -> Value {
    json!({"oneOf": [schema, {"type": "null"}]})
}

/// An environment variable's name.
const ENV_NAME: &str = "^[A-Za-z_][A-Za-z0-9_]*$";

fn env_map() -> Value {
    json!({"type": "object", "propertyNames": {"pattern": ENV_NAME},
           "additionalProperties": no_nul()})
}

/// `field` left out or null.
fn absent(field: &str) -> Value {
    json!({"anyOf": [
        {"not": {"required": [field]}},
        {"properties": {field: {"type": "null"}}, "required": [field]},
    ]})
}

/// `field` given as a string.
fn present(field: &str) -> Value {
    json!({"required": [field], "properties": {field: {"type": "string"}}})
}

fn process() -> Value {
    json!({"properties": {
        "binary": or_null(json!({"type": "string"})),
        "extra_args": {"type": "array", "items": no_nul()},
    }})
}

fn docker() -> Value {
    json!({"properties": {
        "image": not_blank(),
        "network": not_blank(),
        "docker_host": {"type": "string", "pattern": "^(unix://|tcp://|http://|/)"},
        "runtime": {"const": "process"},
        "extra_env": {"type": "object",
                      "propertyNames": {"pattern": ENV_NAME, "not": {"enum": AGENT_ENV}},
                      "additionalProperties": no_nul()},
        "command": {"type": "array", "items": no_nul(), "minItems": 1},
    }})
}

fn exec() -> Value {
    json!({"properties": {
        "command": {"type": "string", "pattern": "^/", "description": "An absolute path"},
        "args": {"type": "array", "items": no_nul()},
        "env": env_map(),
        "secret_env": env_map(),
        "timeout_secs": {"type": "integer", "minimum": 1, "maximum": crate::exec::MAX_TIMEOUT_SECS},
    }})
}

/// Pilot jobs: the batch system as a binding takes it, with a work directory, and the job's
/// fields as a `JobSpec`'s checks take them (one line each, for the script's header).
fn batch() -> Value {
    let absolute = || json!({"type": "string", "pattern": "^/[^\\u0000]*$"});
    let one_line = || json!({"type": "string", "pattern": "^[^\\u0000\\n\\r]*$"});
    let name = json!({"type": "string", "pattern": "^[A-Za-z0-9._-]+$"});
    // Which options each system takes beside the common ones.
    let only = |system: &str, takes: &[&str]| {
        let others: Vec<Value> = ["parallel_environment", "flavor", "command"]
            .into_iter()
            .filter(|o| !takes.contains(o))
            .map(absent)
            .collect();
        json!({"properties": {"system": {"const": system}, "options": {"allOf": others}}})
    };
    let exec = json!({"properties": {"system": {"const": "exec"},
        "options": {"allOf": [present("command"), absent("bin_dir"),
                              absent("parallel_environment"), absent("flavor")]}}});
    json!({"properties": {
        "batch": {
            "type": "object",
            "additionalProperties": false,
            "required": ["system", "options"],
            "properties": {
                "system": {"$ref": "#/components/schemas/SystemName"},
                "options": {
                    "type": "object",
                    "additionalProperties": false,
                    "required": ["work_dir"],
                    "properties": {
                        "bin_dir": or_null(absolute()),
                        "timeout_secs": or_null(json!({"type": "integer", "minimum": 1,
                            "maximum": corral_batch::MAX_TIMEOUT_SECS})),
                        "env": env_map(),
                        "parallel_environment": or_null(name),
                        "run_as": or_null(json!({"type": "string",
                            "pattern": "^[a-z_][a-z0-9_.-]{0,31}$"})),
                        "run_as_manager": {"type": "boolean"},
                        "flavor": or_null(json!({"$ref": "#/components/schemas/PbsFlavor"})),
                        "command": or_null(absolute()),
                        "work_dir": absolute(),
                    },
                },
            },
            "oneOf": [only("slurm", &[]), only("gridengine", &["parallel_environment"]),
                      only("pbs", &["flavor"]), only("lsf", &[]), exec],
        },
        "binary": or_null(absolute()),
        "extra_args": {"type": "array", "items": no_nul()},
        "queue": or_null(one_line()),
        "account": or_null(one_line()),
        "native": {"type": "object", "additionalProperties": {"type": "array", "items": one_line()}},
        "walltime_secs": or_null(json!({"type": "integer", "minimum": 1, "maximum": u64::MAX})),
    }})
}

#[cfg(feature = "aws")]
fn aws() -> Value {
    use crate::aws::{EXTRA_TAGS_MAX, USER_DATA_MAX};
    let text = || or_null(not_blank());
    json!({
        "description": "ec2 mode (the default) needs image_id and takes no asg_name; asg mode \
            needs asg_name and takes no image_id, templates or user_data. access_key_id and \
            secret_access_key come together; session_token needs both.",
        "properties": {
            "region": or_null(json!({"type": "string", "pattern": "^[a-z0-9-]*[a-z0-9-]$"})),
            "endpoint_url": or_null(json!({"type": "string", "pattern": "^https?://"})),
            "access_key_id": text(),
            "secret_access_key": text(),
            "session_token": text(),
            "image_id": text(),
            "templates": {"type": "object", "additionalProperties": {
                "type": "object", "additionalProperties": false, "properties": {
                    "instance_type": text(),
                    "image_id": text(),
                    "subnet_id": text(),
                    "security_group_ids": {"type": "array", "items": not_blank()},
                    "key_name": text(),
                    "iam_instance_profile": text(),
                }}},
            "tags": {"type": "object", "maxProperties": EXTRA_TAGS_MAX,
                     "propertyNames": {"minLength": 1, "maxLength": 128, "not": {"anyOf": [
                         {"pattern": "^[Aa][Ww][Ss]:"},
                         {"enum": [GROUP_TAG, AGENT_TAG, TEMPLATE_TAG, TOKEN_TAG, SERVER_TAG]},
                     ]}},
                     "additionalProperties": {"type": "string", "maxLength": 256}},
            "user_data": {"type": "string"},
            "asg_name": text(),
        },
        "allOf": [
            {"oneOf": [
                {"properties": {"mode": {"const": "ec2"},
                                "user_data": {"maxLength": USER_DATA_MAX}},
                 "allOf": [present("image_id"), absent("asg_name")]},
                {"properties": {"mode": {"const": "asg"}, "templates": {"maxProperties": 0},
                                "user_data": {"maxLength": 0}},
                 "required": ["mode"],
                 "allOf": [present("asg_name"), absent("image_id")]},
            ]},
            {"anyOf": [
                {"allOf": [present("access_key_id"), present("secret_access_key")]},
                {"allOf": [absent("access_key_id"), absent("secret_access_key"),
                           absent("session_token")]},
            ]},
        ],
    })
}

#[cfg(feature = "kubernetes")]
fn kubernetes() -> Value {
    use crate::kubernetes::MAX_POD_WAIT_SECS;
    const DNS_LABEL: &str = "[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?";
    const LABEL_NAME: &str = "[A-Za-z0-9](?:[A-Za-z0-9._-]{0,61}[A-Za-z0-9])?";
    let dns_label = format!("^{DNS_LABEL}$");
    let subdomain = format!("{DNS_LABEL}(?:\\.{DNS_LABEL})*");
    let label_key = format!("^(?:{subdomain}/)?{LABEL_NAME}$");
    let label_value = json!({"type": "string", "pattern": format!("^(?:{LABEL_NAME})?$")});
    let selector = json!({"type": "object", "propertyNames": {"pattern": label_key},
                          "additionalProperties": label_value});
    let image = or_null(json!({"type": "string", "pattern": "^\\S+$"}));
    let pod_options = [
        "image",
        "image_pull_policy",
        "command",
        "set_resources",
        "service_account",
    ];
    let mut statefulset_mode = vec![present("statefulset")];
    statefulset_mode.extend(pod_options.iter().map(|field| absent(field)));
    let mut properties = Map::new();
    for (field, schema) in [
        (
            "namespace",
            or_null(json!({"type": "string", "pattern": dns_label})),
        ),
        (
            "context",
            or_null(json!({"type": "string", "minLength": 1})),
        ),
        (
            "api_server",
            or_null(json!({"type": "string", "pattern": "^https?://[^/]"})),
        ),
        ("token", or_null(json!({"type": "string", "minLength": 1}))),
        (
            "labels",
            json!({"type": "object",
            "propertyNames": {"pattern": label_key,
                              "not": {"enum": [GROUP_LABEL, AGENT_LABEL, TEMPLATE_LABEL]}},
            "additionalProperties": label_value}),
        ),
        ("image", image.clone()),
        (
            "command",
            or_null(json!({"type": "array", "minItems": 1,
            "prefixItems": [{"type": "string", "minLength": 1}], "items": {"type": "string"}})),
        ),
        ("set_resources", json!({"type": ["boolean", "null"]})),
        ("node_selector", selector.clone()),
        (
            "service_account",
            or_null(json!({"type": "string", "maxLength": 253,
            "pattern": format!("^{subdomain}$")})),
        ),
        (
            "templates",
            json!({"type": "object", "additionalProperties": {
            "type": "object", "additionalProperties": false,
            "properties": {"node_selector": selector, "image": image}}}),
        ),
        (
            "statefulset",
            or_null(json!({"type": "string", "pattern": dns_label})),
        ),
        (
            "pod_wait_secs",
            or_null(json!({"type": "integer", "minimum": 1,
                                         "maximum": MAX_POD_WAIT_SECS})),
        ),
    ] {
        properties.insert(field.into(), schema);
    }
    json!({
        "description": "pods mode (the default) needs image and takes no statefulset or \
            pod_wait_secs; statefulset mode needs statefulset and takes none of the pod \
            options. context cannot be used with api_server.",
        "properties": properties,
        "allOf": [
            {"oneOf": [
                {"properties": {"mode": {"const": "pods"}},
                 "allOf": [present("image"), absent("statefulset"), absent("pod_wait_secs")]},
                {"properties": {"mode": {"const": "statefulset"},
                                "node_selector": {"maxProperties": 0},
                                "templates": {"maxProperties": 0}},
                 "required": ["mode"],
                 "allOf": statefulset_mode},
            ]},
            {"anyOf": [absent("api_server"), absent("context")]},
        ],
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[cfg(all(feature = "aws", feature = "kubernetes"))]
    fn every_provider_has_its_options_schema_and_every_refinement_a_field() {
        let schemas = options_schemas();
        let names: Vec<&str> = schemas.iter().map(|s| s.provider).collect();
        for (name, _) in crate::options::PROVIDERS {
            assert!(names.contains(name), "{name} has no options schema");
        }
        let exec = schemas.iter().find(|s| s.provider == "exec").unwrap();
        assert_eq!(exec.name, "OptionsExec");
        assert_eq!(exec.schema["required"], json!(["command"]));
        assert_eq!(exec.schema["additionalProperties"], json!(false));
        assert_eq!(exec.schema["properties"]["timeout_secs"]["maximum"], 3600);
        let required: Vec<&str> = schemas
            .iter()
            .filter(|s| s.required)
            .map(|s| s.provider)
            .collect();
        assert_eq!(required, ["exec", "batch", "aws", "kubernetes"]);
    }

    #[test]
    #[should_panic(expected = "refinement of OptionsProcess.bianry, which it lacks")]
    fn a_refinement_of_a_field_the_options_lack_fails() {
        refined::<crate::process::Options>("process", json!({"properties": {"bianry": {}}}));
    }
}
