//! OpenAPI schemas (feature `openapi`) for what the bodies' Rust types do not show: the rules
//! the manager checks on strings (no NUL in what reaches a process, session paths, variable
//! names), and the rules across fields, given by [`refinements`] as JSON Schema keywords the
//! manager merges into the derived schemas.

use serde_json::{json, Value};

use corral_core::openapi::{reference, session_path_pattern};
use corral_core::schema_type;

/// No NUL: a C string (an argument, an environment value) cannot hold one.
const NO_NUL: &str = r"^[^\u0000]*$";

schema_type!(
    /// A string that reaches a process: its arguments or environment.
    NoNul = json!({"type": "string", "pattern": NO_NUL})
);

schema_type!(
    /// A path inside a session's directory (`corral_core::paths::session_path`).
    SessionPath = json!({
        "type": "string",
        "maxLength": 1024,
        "pattern": session_path_pattern(),
        "description": "A relative path inside the session's directory: '/'-separated parts, \
            none empty, '.' or '..', no control character; at most 1024 bytes, 255 a part"
    })
);

schema_type!(
    /// An Ed25519 public key (`agent_keys::PublicKey`): `ed25519:` and its 32 bytes in base64,
    /// 43 digits (the last with its two low bits zero) and one `=`; a comment may follow.
    PublicKey = json!({
        "type": "string",
        "pattern": r"^ed25519:[A-Za-z0-9+/]{42}[AEIMQUYcgkosw048]=(\s.*)?$",
        "example": "ed25519:11qYAYKxCrfVS/7TyWQHOg7hcvPapiMlrwIaaPcHURo="
    })
);

/// A variable name, as a session's environment takes it.
pub const VARIABLE_NAME: &str = "^[A-Za-z_][A-Za-z0-9_]*$";

schema_type!(
    /// A session's environment: variable names and values without NUL.
    Environment = json!({
        "type": "object",
        "propertyNames": {"pattern": VARIABLE_NAME, "maxLength": 255},
        "additionalProperties": {"type": "string", "pattern": NO_NUL}
    })
);

schema_type!(
    /// A session's apps by name (`crate::apps`): at most 16, each on a port.
    AppsByName = json!({
        "type": "object",
        "maxProperties": crate::apps::MAX_APPS,
        "propertyNames": {"pattern": "^[a-z][a-z0-9-]*$", "maxLength": crate::apps::MAX_NAME},
        "additionalProperties": reference("App")
    })
);

schema_type!(
    /// The state of a session just submitted: a refused one is a 422, never an answer.
    Pending = json!({"const": "pending"})
);

/// Rules across fields, or that a field's type cannot carry, per component: JSON Schema
/// keywords merged into the derived schema (objects key by key, anything else replaced).
pub fn refinements() -> Vec<(&'static str, Value)> {
    vec![
        (
            // Bootstrap tokens are made per group (POST /groups/{name}/bootstrap-tokens); a
            // token's role as listed may be any.
            "NewToken",
            json!({"properties": {"role": {
                "enum": ["admin", "user", "agent"],
                "description": "bootstrap tokens are made per group \
                    (POST /api/v1/groups/{name}/bootstrap-tokens)"
            }}}),
        ),
        (
            // `check_submit`: a command, an image, or both.
            "NewSession",
            json!({
                "description": "The group must exist and a named image must be registered \
                    (else 400); a request no agent or template of the group could ever hold \
                    is refused with 422",
                "anyOf": [
                    {"required": ["command"], "properties": {"command": {"minItems": 1}}},
                    {"required": ["image"], "properties": {"image": reference("ImageName")}},
                ]
            }),
        ),
    ]
}
