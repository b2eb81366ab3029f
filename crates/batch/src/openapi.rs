//! OpenAPI schemas (feature `openapi`) of the forms serde's derives cannot show: a walltime is
//! seconds or a duration's text; a job id is the scheduler's, as `is_job_id` takes it.

use serde_json::json;

/// Tagged enums that deny unknown fields: each variant's object is closed
/// (`additionalProperties: false`), which utoipa does not write for enum variants.
pub const CLOSED_ENUMS: &[&str] = &["ConfigChange"];

corral_core::schema_type!(
    /// A walltime: seconds, or `HH:MM:SS`, `D-HH:MM:SS`, `90m`, `2h`, `1d`.
    Walltime = json!({
        "description": "The longest the job may run: seconds, or HH:MM:SS, D-HH:MM:SS, MM:SS, or a number with a unit s, m, h, d",
        "oneOf": [
            {"type": "integer", "minimum": 1},
            {"type": "string", "pattern": r"^[ \t\n\r]*(?:[0-9]{1,9}[smhd]?|(?:[0-9]{1,5}-)?(?:[0-9]{1,5}:)?[0-5]?[0-9]:[0-5][0-9])[ \t\n\r]*$"}
        ]
    })
);

corral_core::schema_type!(
    /// A scheduler's job id (`is_job_id`): `123`, `123_4`, `123.4`, `123[4]`, `123.server`.
    JobId = json!({
        "type": "string",
        "pattern": r"^[0-9][A-Za-z0-9._\[\]-]{0,127}$"
    })
);

corral_core::schema_type!(
    /// A signal's name, with or without `SIG` (`check_signal`).
    Signal = json!({
        "type": "string",
        "enum": crate::SIGNALS
            .iter()
            .flat_map(|s| [s.to_string(), format!("SIG{s}")])
            .collect::<Vec<_>>()
    })
);
