//! `corral group provider` and `corral group instances`: the group's provider as JSON built from
//! flags, and how both read for people.

use anyhow::{Context, Result};
use corral_api::instances::InstanceList;
use serde_json::{json, Value};

use super::super::read_json;
use super::super::render::{self, fields, or_dash, table};

/// The body of `PUT /groups/NAME/provider`: the file's provider or the current one, with the
/// flags applied. Secrets come back from the manager redacted, and sent so they stay as stored.
pub(super) fn provider_body(
    current: &Value,
    file: Option<&std::path::Path>,
    name: Option<String>,
    options: &[String],
    launch: &[String],
) -> Result<Value> {
    let mut body = match file {
        Some(path) => read_json(path)?,
        None => current.clone(),
    };
    let what = file.map_or("the provider".to_string(), |p| p.display().to_string());
    let provider = body
        .as_object_mut()
        .with_context(|| format!("{what}: a provider is a JSON object"))?;
    if let Some(name) = name {
        if provider.get("name").and_then(Value::as_str) != Some(name.as_str()) {
            // Another provider's options mean nothing to this one.
            provider.remove("options");
        }
        provider.insert("name".into(), name.into());
    }
    let mut section = |key: &str, pairs: &[String], numeric: bool| -> Result<()> {
        if pairs.is_empty() {
            return Ok(());
        }
        let map = provider
            .entry(key)
            .or_insert_with(|| json!({}))
            .as_object_mut()
            .with_context(|| format!("{what}: {key} is not an object"))?;
        for pair in pairs {
            let (k, v) = pair.split_once('=').with_context(|| {
                format!("--{}: {pair:?} is not KEY=VALUE", key.trim_end_matches('s'))
            })?;
            if v.is_empty() && !numeric {
                map.remove(k);
                continue;
            }
            let value = if numeric {
                Value::from(
                    v.parse::<u64>()
                        .with_context(|| format!("--launch {k}: {v:?} is not a whole number"))?,
                )
            } else {
                serde_json::from_str(v).unwrap_or_else(|_| Value::from(v))
            };
            map.insert(k.to_string(), value);
        }
        Ok(())
    };
    section("options", options, false)?;
    section("launch", launch, true)?;
    Ok(body)
}

pub(super) fn print_provider(p: &Value) {
    let text = |v: &Value| match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    let mut rows = vec![("provider", text(&p["name"]))];
    let options: Vec<(String, String)> = p["options"]
        .as_object()
        .map(|m| {
            m.iter()
                .map(|(k, v)| (format!("option {k}"), text(v)))
                .collect()
        })
        .unwrap_or_default();
    let launch: Vec<(String, String)> = p["launch"]
        .as_object()
        .map(|m| m.iter().map(|(k, v)| (k.clone(), text(v))).collect())
        .unwrap_or_default();
    let owned: Vec<(&str, String)> = options
        .iter()
        .chain(&launch)
        .map(|(k, v)| (k.as_str(), v.clone()))
        .collect();
    rows.extend(owned);
    fields(&rows);
}

pub(super) fn print_instances(list: &InstanceList) {
    let rows: Vec<Vec<String>> = list
        .instances
        .iter()
        .map(|i| {
            vec![
                i.id.clone(),
                i.template.clone(),
                render::word(&i.phase),
                or_dash(i.provider_id.as_deref()),
                render::time(i.requested_at.0),
                or_dash(i.reason.as_deref()),
            ]
        })
        .collect();
    table(
        "instances",
        &[
            "AGENT",
            "TEMPLATE",
            "STATE",
            "INSTANCE",
            "REQUESTED",
            "REASON",
        ],
        &rows,
    );
    // Held: nothing more may launch now; a budget partly spent still lets some launch.
    for (template, h) in &list.held {
        if h.allowed == 0 {
            println!("held: {template}: {}", h.reason);
        } else {
            println!("budget: {template}: {} more now; {}", h.allowed, h.reason);
        }
    }
}
