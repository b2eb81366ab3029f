//! Printing answers: `--output json` as the manager sent it, tables and `key value` blocks for
//! people, times as RFC 3339 UTC.

use std::collections::BTreeMap;

use corral_core::Slots;

use super::http::Reply;
use crate::Output;

/// `--output json` prints the reply as sent, only indented, so the manager's field order stays.
/// Returns whether it printed (the caller prints a table otherwise).
pub fn json(output: Output, reply: &Reply) -> bool {
    match output {
        Output::Json => {
            if !reply.text.trim().is_empty() {
                println!("{}", pretty(&reply.text));
            }
            true
        }
        Output::Table => false,
    }
}

/// Indents compact JSON like `serde_json::to_string_pretty`, without reordering object keys
/// (serde_json's `Value` would sort them) or touching number text.
pub fn pretty(compact: &str) -> String {
    let mut out = String::with_capacity(compact.len() * 2);
    let mut depth = 0usize;
    let mut in_string = false;
    let mut escaped = false;
    let mut chars = compact.chars().peekable();
    let newline = |out: &mut String, depth: usize| {
        out.push('\n');
        out.push_str(&"  ".repeat(depth));
    };
    while let Some(c) = chars.next() {
        if in_string {
            out.push(c);
            if escaped {
                escaped = false;
            } else if c == '\\' {
                escaped = true;
            } else if c == '"' {
                in_string = false;
            }
            continue;
        }
        match c {
            '"' => {
                in_string = true;
                out.push(c);
            }
            '{' | '[' => {
                out.push(c);
                while chars.peek().is_some_and(|c| c.is_whitespace()) {
                    chars.next();
                }
                if matches!(chars.peek(), Some('}' | ']')) {
                    out.push(chars.next().unwrap_or_default());
                } else {
                    depth += 1;
                    newline(&mut out, depth);
                }
            }
            '}' | ']' => {
                depth = depth.saturating_sub(1);
                newline(&mut out, depth);
                out.push(c);
            }
            ',' => {
                out.push(c);
                newline(&mut out, depth);
            }
            ':' => out.push_str(": "),
            c if c.is_whitespace() => {}
            c => out.push(c),
        }
    }
    out
}

/// Milliseconds since the epoch as `2025-01-02T03:04:05.678Z`.
pub fn time(ms: i64) -> String {
    let secs = ms.div_euclid(1000);
    let millis = ms.rem_euclid(1000);
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{millis:03}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// Days since 1970-01-01 to (year, month, day) in the proleptic Gregorian calendar
/// (Howard Hinnant's `civil_from_days`).
fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

pub fn opt_time(ms: Option<i64>) -> String {
    ms.map_or_else(|| "-".to_string(), time)
}

/// Slots in the `cpu=2,mem=4GiB` form; none as `-`.
pub fn slots(s: &Slots) -> String {
    if s.is_empty() {
        "-".to_string()
    } else {
        s.to_string()
    }
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
    let quote = |a: &String| {
        let plain = !a.is_empty()
            && a.chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_./=:,@%+".contains(c));
        if plain {
            a.clone()
        } else {
            format!("'{}'", a.replace('\'', r"'\''"))
        }
    };
    args.iter().map(quote).collect::<Vec<_>>().join(" ")
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
    fn times_are_rfc3339_utc() {
        assert_eq!(time(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(time(951_782_400_123), "2000-02-29T00:00:00.123Z");
        assert_eq!(time(1_796_207_087_636), "2026-12-02T10:24:47.636Z");
        assert_eq!(time(-1), "1969-12-31T23:59:59.999Z");
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
    }

    #[test]
    fn command_lines_are_quoted_for_a_shell() {
        let args: Vec<String> = ["python", "-c", "print('hi')", "a b"]
            .map(String::from)
            .into();
        assert_eq!(
            command_line(&args),
            r#"python -c 'print('\''hi'\'')' 'a b'"#
        );
    }
}
