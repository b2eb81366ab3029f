//! OpenAPI schemas (feature `openapi`): what the core's types accept, for the manager's
//! generated document. Most types derive `utoipa::ToSchema` beside their definition; here are
//! the forms serde's derives cannot show: resource slots (an object of amounts or one string,
//! whose grammar is `Quantity::parse`'s), and the names the API checks.
//!
//! [`raw`] writes a schema as JSON Schema, for the keywords utoipa's model has no field for
//! (`not`, `const`, `prefixItems`); utoipa prints them as they are.

use std::borrow::Cow;

use serde_json::{json, Value};
use utoipa::openapi::schema::{Object, Schema, SchemaType};
use utoipa::openapi::RefOr;
use utoipa::{PartialSchema, ToSchema};

use crate::slots::Slots;

/// A schema written as JSON Schema.
pub fn raw(schema: Value) -> RefOr<Schema> {
    let Value::Object(keywords) = schema else {
        panic!("a JSON Schema is an object: {schema}");
    };
    let mut object = Object::with_type(SchemaType::AnyValue);
    object.extensions = Some(keywords.into_iter().collect());
    RefOr::T(Schema::Object(object))
}

/// `{"$ref": "#/components/schemas/NAME"}`.
pub fn reference(name: &str) -> Value {
    json!({ "$ref": format!("#/components/schemas/{name}") })
}

/// A schema-only type: its name in `components/schemas`, its JSON Schema, and the components
/// it refers to (`uses`).
#[macro_export]
macro_rules! schema_type {
    ($(#[$doc:meta])* $name:ident = $schema:expr $(; uses $($dep:ty),+)?) => {
        $(#[$doc])*
        pub struct $name;

        impl ::utoipa::PartialSchema for $name {
            fn schema() -> ::utoipa::openapi::RefOr<::utoipa::openapi::schema::Schema> {
                $crate::openapi::raw($schema)
            }
        }

        impl ::utoipa::ToSchema for $name {
            fn name() -> ::std::borrow::Cow<'static, str> {
                ::std::borrow::Cow::Borrowed(stringify!($name))
            }

            #[allow(unused_variables)]
            fn schemas(
                schemas: &mut Vec<(
                    String,
                    ::utoipa::openapi::RefOr<::utoipa::openapi::schema::Schema>,
                )>,
            ) {
                $($(
                    schemas.push((
                        <$dep as ::utoipa::ToSchema>::name().into(),
                        <$dep as ::utoipa::PartialSchema>::schema(),
                    ));
                    <$dep as ::utoipa::ToSchema>::schemas(schemas);
                )+)?
            }
        }
    };
}

/// Blanks JSON reads around an amount and a slot (`Quantity::parse` trims them).
const WS: &str = r"[ \t\n\r]*";
/// A slot name (`SlotName::new`).
pub const SLOT_NAME: &str = "[a-z][a-z0-9._-]{0,63}";

/// The units an amount may carry, each with the integer and fraction digits the document
/// allows: few enough integer digits that any value stays within `u64::MAX` thousandths, and
/// only fraction digits that are always exact in thousandths (`Quantity::parse` takes a few
/// more, such as a longer fraction of a KiB that happens to be exact; the document promises
/// the forms always taken).
const UNITS: [(&str, u32, u32); 10] = [
    ("kB|KB|k|K", 13, 6),
    ("MB|M", 10, 9),
    ("GB|G", 7, 12),
    ("TB|T", 4, 15),
    ("PB|P", 1, 18),
    ("KiB|Ki", 13, 3),
    ("MiB|Mi", 10, 3),
    ("GiB|Gi", 7, 3),
    ("TiB|Ti", 4, 3),
    ("PiB|Pi", 1, 3),
];

/// One amount without its blanks: a plain number (optionally `B`), thousandths (`m`), or a
/// number with a unit.
fn amount_body() -> String {
    let number = |int: u32, frac: u32| {
        format!(r"(?:0*[0-9]{{1,{int}}}(?:\.[0-9]{{0,{frac}}}0*)?|\.(?:[0-9]{{1,{frac}}}0*|0+))")
    };
    let mut alternatives = vec![
        format!("{}(?:B)?", number(16, 3)),
        r"(?:0*[0-9]{1,19}(?:\.0*)?|\.0+)(?:m)".to_string(),
    ];
    alternatives.extend(
        UNITS
            .iter()
            .map(|(units, int, frac)| format!("{}(?:{units})", number(*int, *frac))),
    );
    format!(r"\+?(?:{})", alternatives.join("|"))
}

/// A zero amount, in any unit.
const ZERO_BODY: &str =
    r"\+?(?:0+\.?0*|\.0+)(?:KiB|MiB|GiB|TiB|PiB|kB|KB|MB|GB|TB|PB|Ki|Mi|Gi|Ti|Pi|B|m|k|K|M|G|T|P)?";

/// The string form `cpu=2,mem=4GiB` whose amounts match `amount` (empty parts allowed).
fn slots_text(amount: &str) -> String {
    let pair = format!("{WS}{SLOT_NAME}{WS}={WS}{amount}{WS}");
    format!("^(?:{pair}|{WS})(?:,(?:{pair}|{WS}))*$")
}

crate::schema_type!(
    /// One amount of a slot.
    Amount = json!({
        "description": "A non-negative amount: a number with at most three decimals, or a string \
            with an optional unit (m, k, M, G, T, P, Ki, Mi, Gi, Ti, Pi, each optionally followed \
            by B), at most 18446744073709551615 thousandths",
        "oneOf": [
            {"type": "integer", "minimum": 0, "maximum": u64::MAX / 1000},
            {"type": "number", "not": {"type": "integer"}, "minimum": 0,
             "maximum": 18446744073709550u64, "multipleOf": 0.001},
            {"type": "string", "pattern": format!("^{WS}{}{WS}$", amount_body())},
        ]
    })
);

crate::schema_type!(
    /// Slots as one string: `cpu=2,mem=4GiB`.
    SlotsText = json!({"type": "string", "pattern": slots_text(&amount_body())})
);

impl PartialSchema for Slots {
    fn schema() -> RefOr<Schema> {
        raw(json!({
            "description": "Resource slots: an object of amounts ({\"cpu\": 2, \"mem\": \"4GiB\", \
                \"gpu\": 0.5}) or one string \"cpu=2,mem=4GiB,gpu=0.5\". Slot names are lowercase \
                letters, digits, '.', '_' and '-', starting with a letter, at most 64; a name \
                given twice in the string form is refused (400). Zero amounts are dropped.",
            "oneOf": [
                {
                    "type": "object",
                    "propertyNames": {"pattern": format!("^{SLOT_NAME}$")},
                    "additionalProperties": reference("Amount"),
                },
                reference("SlotsText"),
            ]
        }))
    }
}

impl ToSchema for Slots {
    fn name() -> Cow<'static, str> {
        Cow::Borrowed("Slots")
    }

    fn schemas(schemas: &mut Vec<(String, RefOr<Schema>)>) {
        schemas.push(("Amount".into(), Amount::schema()));
        schemas.push(("SlotsText".into(), SlotsText::schema()));
    }
}

crate::schema_type!(
    /// Slots with at least one amount that is not zero: what a session requests and an agent
    /// offers.
    RequiredSlots = json!({
        "description": "Slots with at least one non-zero amount",
        "allOf": [reference("Slots")],
        "not": {"anyOf": [
            {"type": "object", "additionalProperties": {"oneOf": [
                {"type": "number", "const": 0},
                {"type": "string", "pattern": format!("^{WS}{ZERO_BODY}{WS}$")},
            ]}},
            {"type": "string", "pattern": slots_text(ZERO_BODY)},
        ]}
    });
    uses Slots
);

crate::schema_type!(
    /// Slots as the server writes them (`Slots`' `Serialize`): canonical amounts as strings.
    SlotsOut = json!({
        "description": "Resource slots as the server prints them: canonical amounts as strings",
        "type": "object",
        "propertyNames": {"pattern": format!("^{SLOT_NAME}$")},
        "additionalProperties": {"type": "string", "pattern": r"^[0-9]+(?:\.[0-9]{1,3})?(?:[KMGTP]iB)?$"}
    })
);

crate::schema_type!(
    /// One amount as the server prints it (a device's memory or share).
    AmountOut = json!({
        "description": "An amount as the server prints it: canonical, as a string",
        "type": "string",
        "pattern": r"^[0-9]+(?:\.[0-9]{1,3})?(?:[KMGTP]iB)?$"
    })
);

/// What the manager's `names.rs` accepts as the name of a group, agent, template or user.
pub const NAME_PATTERN: &str = "^[A-Za-z0-9][A-Za-z0-9._:-]{0,63}$";

crate::schema_type!(
    /// A group, agent, template or user name.
    Name = json!({
        "type": "string",
        "pattern": NAME_PATTERN,
        "description": "1-64 letters, digits, '.', '_', '-' or ':', starting with a letter or digit"
    })
);

crate::schema_type!(
    /// Nodes a group expects though they have not joined, by agent name, with their shapes.
    ExpectedNodes = json!({
        "type": "object",
        "maxProperties": crate::expected::MAX_EXPECTED_NODES,
        "propertyNames": {"pattern": NAME_PATTERN},
        "additionalProperties": reference("RequiredSlots")
    });
    uses RequiredSlots
);

crate::schema_type!(
    /// A version of Corral, as the manager's `names::check_version` accepts it.
    Version = json!({
        "type": "string",
        "pattern": "^[A-Za-z0-9][A-Za-z0-9._+-]{0,63}$",
        "description": "1-64 letters, digits, '.', '_', '-' or '+', starting with a letter or digit"
    })
);

crate::schema_type!(
    /// A platform: OS and architecture as Rust names them (`linux-x86_64`).
    Platform = json!({"type": "string", "pattern": "^[a-z0-9_]+-[a-z0-9_]+$"})
);

crate::schema_type!(
    /// A slot name, such as a device kind (`gpu`).
    SlotNameText = json!({"type": "string", "pattern": format!("^{SLOT_NAME}$")})
);

crate::schema_type!(
    /// A device's id on its host (`devices::check_devices`).
    DeviceId = json!({
        "type": "string", "minLength": 1, "maxLength": 128,
        "pattern": "^[^,\\u0000-\\u001f\\u007f-\\u009f]+$",
        "description": "1 to 128 characters, no comma or control character"
    })
);

crate::schema_type!(
    /// A device model name (`NVIDIA A100-SXM4-80GB`); empty when unknown.
    ModelName = json!({
        "type": "string", "maxLength": 128,
        "pattern": "^[^\\u0000-\\u001f\\u007f-\\u009f]*$"
    })
);

crate::schema_type!(
    /// A model pattern of a device constraint (`devices::check_request`).
    ModelPattern = json!({
        "type": "string", "maxLength": 128,
        "pattern": "^[A-Za-z0-9 _.:/()+*?-]*[A-Za-z0-9_.:/()+*?-][A-Za-z0-9 _.:/()+*?-]*$",
        "description": "letters, digits, spaces and -_.:/()+, with * (any characters) and ? \
            (one) as wildcards, not only spaces"
    })
);

crate::schema_type!(
    /// How much of one device a device is: above 0, at most 1.
    DeviceShare = json!({
        "oneOf": [
            {"type": "number", "exclusiveMinimum": 0, "maximum": 1, "multipleOf": 0.001},
            {"type": "string", "pattern": "^0*(?:1(?:\\.0*)?|0?\\.[0-9]{0,2}[1-9]0*)$"}
        ]
    })
);

crate::schema_type!(
    /// A content digest, as registries name images.
    Digest = json!({"type": "string", "pattern": "^sha256:[0-9a-f]{64}$"})
);

crate::schema_type!(
    /// A registry user name or password: no control character.
    Credential = json!({
        "type": "string", "minLength": 1, "maxLength": 4096,
        "pattern": "^[^\\u0000-\\u001f\\u007f-\\u009f]+$"
    })
);

/// What the manager's `names.rs` accepts as an image name: a container image reference.
pub const IMAGE_NAME_PATTERN: &str =
    "^[A-Za-z0-9][A-Za-z0-9._:@-]*(?:/[A-Za-z0-9][A-Za-z0-9._:@-]*)*$";

crate::schema_type!(
    /// A container image reference.
    ImageName = json!({
        "type": "string",
        "maxLength": 255,
        "pattern": IMAGE_NAME_PATTERN,
        "description": "A container image reference (registry:5000/team/py:3.12): components of \
            letters, digits, '.', '_', '-', ':' or '@', each starting with a letter or digit, \
            joined by '/'; at most 255 characters"
    })
);

/// A path inside a session's directory as `paths::session_path` accepts it: `/`-separated
/// parts, none empty, `.` or `..`, no control character, at most 255 bytes a part (1024 in all,
/// said by `maxLength` where the path is a body's).
pub fn session_path_pattern() -> String {
    const CHAR: &str = r"[^/\u0000-\u001f\u007f-\u009f]";
    const FIRST: &str = r"[^/.\u0000-\u001f\u007f-\u009f]";
    let part = format!(r"(?:{FIRST}{CHAR}{{0,254}}|\.{FIRST}{CHAR}{{0,253}}|\.\.{CHAR}{{1,253}})");
    format!("^{part}(?:/{part})*$")
}

/// What the derived schemas cannot show, per component: JSON Schema keywords the manager merges
/// into them (objects key by key, anything else replaced). serde's `alias` is invisible to
/// utoipa: a template's price may also be given as `price`, but not both.
pub fn refinements() -> Vec<(&'static str, Value)> {
    vec![(
        "InstanceTemplate",
        json!({
            "description": "Names are unique within a group (a repeated name is refused, 400)",
            "properties": {
                "price": {
                    "type": "number",
                    "minimum": 0,
                    "writeOnly": true,
                    "description": "Alias of price_per_hour (read, never written)"
                }
            },
            "not": {"required": ["price", "price_per_hour"]}
        }),
    )]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_amount_pattern_takes_every_unit_and_slots_text_every_amount() {
        let RefOr::T(Schema::Object(amount)) = Amount::schema() else {
            unreachable!("Amount is written as JSON Schema");
        };
        let pattern = amount.extensions.unwrap()["oneOf"][2]["pattern"]
            .as_str()
            .unwrap()
            .to_string();
        for (units, _, _) in UNITS {
            assert!(pattern.contains(&format!("(?:{units})")), "{units}");
        }
        assert!(pattern.contains("(?:B)?") && pattern.contains("(?:m)"));
        // The string form is pairs of a slot name and exactly that amount.
        let body = amount_body();
        assert!(slots_text(&body).contains(&format!("={WS}{body}{WS}")));
    }
}
