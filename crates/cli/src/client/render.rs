//! Printing answers: `--output json` as the manager sent it, tables and `key value` blocks for
//! people, times as RFC 3339 UTC.

use std::collections::BTreeMap;

use corral_core::Slots;
use serde::de::{Deserialize, Deserializer, MapAccess, Visitor};
use serde::ser::{Error as _, Serialize, Serializer};
use serde_json::value::RawValue;

use super::http::Reply;
use crate::Output;

/// `--output json` prints the reply as sent, only indented, so the manager's field order stays;
/// an answer with no content (204) prints `{}`, so a script always reads JSON. Returns whether
/// it printed (the caller prints a table otherwise).
pub fn json(output: Output, reply: &Reply) -> bool {
    json_or(output, reply, || serde_json::json!({}))
}

/// [`json`], with what to print when the manager answered no content (what was deleted).
pub fn json_or(output: Output, reply: &Reply, done: impl FnOnce() -> serde_json::Value) -> bool {
    match output {
        Output::Json => {
            if reply.text.trim().is_empty() {
                println!("{:#}", done());
            } else {
                println!("{}", pretty(&reply.text));
            }
            true
        }
        Output::Table => false,
    }
}

/// Indents JSON with serde_json's pretty printer, keeping what its `Value` would not: the order
/// of object keys (`Value` sorts them) and the text of numbers and strings. Text that is not JSON
/// comes back as it is.
pub fn pretty(text: &str) -> String {
    serde_json::from_str::<&RawValue>(text)
        .and_then(|raw| serde_json::to_string_pretty(&AsSent(raw)))
        .unwrap_or_else(|_| text.to_string())
}

/// A JSON value written as it was sent: objects and arrays are walked in their order, scalars
/// are copied.
struct AsSent<'a>(&'a RawValue);

impl Serialize for AsSent<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let text = self.0.get().trim_start();
        match text.as_bytes().first() {
            Some(b'{') => {
                let Entries(entries) = serde_json::from_str(text).map_err(S::Error::custom)?;
                serializer.collect_map(entries.into_iter().map(|(k, v)| (k, AsSent(v))))
            }
            Some(b'[') => {
                let items: Vec<&RawValue> = serde_json::from_str(text).map_err(S::Error::custom)?;
                serializer.collect_seq(items.into_iter().map(AsSent))
            }
            _ => self.0.serialize(serializer),
        }
    }
}

/// An object's members in their order, each value unparsed.
struct Entries<'a>(Vec<(String, &'a RawValue)>);

impl<'de> Deserialize<'de> for Entries<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct InOrder;
        impl<'de> Visitor<'de> for InOrder {
            type Value = Entries<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Entries<'de>, A::Error> {
                let mut entries = Vec::new();
                while let Some(entry) = map.next_entry()? {
                    entries.push(entry);
                }
                Ok(Entries(entries))
            }
        }
        deserializer.deserialize_map(InOrder)
    }
}

/// The API's word for an enum value (`pending`, `batch`, `alive`).
pub fn word(value: &impl Serialize) -> String {
    match serde_json::to_value(value) {
        Ok(serde_json::Value::String(s)) => s,
        Ok(other) => other.to_string(),
        Err(_) => "?".into(),
    }
}

/// Milliseconds since the epoch as `2025-01-02T03:04:05.678Z`.
pub fn time(ms: i64) -> String {
    match jiff::Timestamp::from_millisecond(ms) {
        Ok(t) => format!("{t:.3}"),
        // Beyond the years RFC 3339 writes (0 to 9999 and a little more): the number itself.
        Err(_) => format!("{ms} ms since the epoch"),
    }
}

/// A length of time as people read it, to the second: `42s`, `5m 3s`, `2h 5m 1s`.
pub fn span(ms: i64) -> String {
    let secs = (ms.max(0) + 500) / 1000;
    format!("{:#}", jiff::SignedDuration::from_secs(secs))
}

pub fn opt_time(ms: Option<i64>) -> String {
    ms.map_or_else(|| "-".to_string(), time)
}

/// Slots in the `cpu=2,mem=4GiB` form, amounts of bytes as people read them (`mem=23.5GiB`,
/// not `mem=24683784KiB`; `-o json` keeps the exact amount); none as `-`.
pub fn slots(s: &Slots) -> String {
    if s.is_empty() {
        return "-".to_string();
    }
    let pairs: Vec<String> = s
        .iter()
        .map(|(name, q)| match name.is_bytes() {
            true => format!("{name}={}", readable_bytes(q.milli() / 1000)),
            false => format!("{name}={}", q.display_for(name)),
        })
        .collect();
    pairs.join(",")
}

/// `32GiB`, `23.5GiB`, `512MiB`, `700B`: the largest binary unit it holds one of, whole when
/// it is, else to a tenth.
fn readable_bytes(bytes: u64) -> String {
    for (suffix, size) in corral_core::slots::BINARY_UNITS {
        if bytes >= size {
            return match bytes.is_multiple_of(size) {
                true => format!("{}{suffix}", bytes / size),
                false => format!("{:.1}{suffix}", bytes as f64 / size as f64),
            };
        }
    }
    format!("{bytes}B")
}

/// `-` for nothing, so that table columns never collapse.
pub fn or_dash(s: Option<&str>) -> String {
    match s {
        Some(s) if !s.is_empty() => s.to_string(),
        _ => "-".to_string(),
    }
}

/// `k=v,k2=v2`.
pub fn pairs(map: &BTreeMap<String, String>) -> String {
    if map.is_empty() {
        return "-".to_string();
    }
    map.iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// A command line as a shell would need it typed.
pub fn command_line(args: &[String]) -> String {
    if args.is_empty() {
        return "-".to_string();
    }
    // Arguments hold no NUL (the manager refuses them), the one thing no shell word can hold.
    shlex::try_join(args.iter().map(String::as_str)).unwrap_or_else(|_| format!("{args:?}"))
}

/// `key  value` lines, keys padded to one width.
pub fn fields(rows: &[(&str, String)]) {
    let width = rows.iter().map(|(k, _)| k.len()).max().unwrap_or(0);
    for (k, v) in rows {
        println!("{k:<width$}  {v}");
    }
}

/// A table, or `none` on standard error when there are no rows (a bare header says little).
pub fn table(what: &str, header: &[&str], rows: &[Vec<String>]) {
    if rows.is_empty() {
        eprintln!("no {what}");
    } else {
        crate::table::print(header, rows);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_is_shown_as_people_read_it() {
        let s: Slots = "cpu=8,mem=24683784KiB,gpu=1,gpu.mem=80GiB".parse().unwrap();
        assert_eq!(slots(&s), "cpu=8,gpu=1,gpu.mem=80GiB,mem=23.5GiB");
        assert_eq!(readable_bytes(700), "700B");
        assert_eq!(readable_bytes(512 << 20), "512MiB");
        assert_eq!(slots(&Slots::new()), "-");
    }

    #[test]
    fn times_are_rfc3339_utc() {
        assert_eq!(time(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(time(951_782_400_123), "2000-02-29T00:00:00.123Z");
        assert_eq!(time(1_796_207_087_636), "2026-12-02T10:24:47.636Z");
        assert_eq!(time(-1), "1969-12-31T23:59:59.999Z");
        assert_eq!(time(i64::MAX), "9223372036854775807 ms since the epoch");
    }

    #[test]
    fn pretty_matches_serde_json_and_keeps_key_order() {
        let compact = r#"{"b":[1,2.50,{"x":"a,b:{c}\"]"}],"a":{},"c":[],"d":null}"#;
        let expected = "{\n  \"b\": [\n    1,\n    2.50,\n    {\n      \"x\": \"a,b:{c}\\\"]\"\n    }\n  ],\n  \"a\": {},\n  \"c\": [],\n  \"d\": null\n}";
        assert_eq!(pretty(compact), expected);
        let sorted = r#"{"a":[{"k":1}],"b":"s"}"#;
        let value: serde_json::Value = serde_json::from_str(sorted).unwrap();
        assert_eq!(
            pretty(sorted),
            serde_json::to_string_pretty(&value).unwrap()
        );
        // Spaced out, and duplicate keys kept as sent.
        assert_eq!(
            pretty(r#" { "z" : 1e3 , "a" : [ ] , "z" : -0 } "#),
            "{\n  \"z\": 1e3,\n  \"a\": [],\n  \"z\": -0\n}"
        );
        assert_eq!(pretty("not json"), "not json");
    }

    #[test]
    fn command_lines_are_quoted_for_a_shell() {
        let args: Vec<String> = ["python", "-c", "print('hi')", "a b"]
            .map(String::from)
            .into();
        assert_eq!(command_line(&args), r#"python -c "print('hi')" 'a b'"#);
        // Whatever the arguments, a shell splits the line back into them.
        let odd: Vec<String> = ["", "$HOME", "it's \"quoted\"", "a\nb", "*", "x=y", "ü"]
            .map(String::from)
            .into();
        assert_eq!(shlex::split(&command_line(&odd)), Some(odd));
        assert_eq!(command_line(&[]), "-");
    }
}
