//! `corral session get`: one session, its request, placement, why it waits, and its history.

use anyhow::Result;
use corral_api::sessions::SessionView;
use corral_core::devices::{bytes_text, ConstraintsText};
use corral_core::DeviceGrant;

use super::super::http::{parse, Api};
use super::super::render::{self, command_line, fields, or_dash, pairs, slots, time, word};
use super::super::Out;

/// `session get`: the manager's answer as JSON, or the session's fields and history.
pub(super) async fn get(api: &Api, id: &str, out: Out) -> Result<()> {
    let reply = api.get(&["sessions", id], &[]).await?;
    if !render::json(out.output, &reply) {
        print_session(&parse(&reply)?);
    }
    Ok(())
}

fn print_session(s: &SessionView) {
    let mut rows = vec![
        ("id", s.session.id.0.clone()),
        ("state", word(&s.session.state)),
        ("group", s.session.group.clone()),
        ("owner", s.session.owner.clone()),
        ("type", word(&s.session.kind)),
        ("priority", s.session.priority.to_string()),
        ("image", or_dash(s.session.image.as_deref())),
        ("command", command_line(&s.spec.command)),
        ("request", slots(&s.session.request)),
        (
            "allocation",
            s.allocation.as_ref().map_or("-".into(), slots),
        ),
        (
            "agent",
            or_dash(s.session.agent.as_ref().map(|a| a.0.as_str())),
        ),
        ("submitted", time(s.session.submitted_at.0)),
        ("updated", time(s.updated_at.0)),
    ];
    if !s.session.constraints.is_empty() {
        let text = ConstraintsText(&s.session.constraints).to_string();
        rows.push(("constraints", text));
    }
    if !s.session.devices.is_empty() {
        rows.push(("devices", grants(&s.session.devices)));
    }
    if let Some(reason) = &s.wait_reason {
        rows.push(("waiting", reason.clone()));
    }
    if let Some(reason) = &s.end_reason {
        rows.push(("ended", reason.clone()));
    }
    if !s.spec.inputs.is_empty() {
        rows.push(("inputs", s.spec.inputs.join(", ")));
    }
    if !s.spec.outputs.is_empty() {
        rows.push(("outputs", s.spec.outputs.join(", ")));
    }
    if !s.spec.environment.is_empty() {
        rows.push(("environment", pairs(&s.spec.environment)));
    }
    fields(&rows);
    if !s.history.is_empty() {
        println!("\nHISTORY");
        let history: Vec<Vec<String>> = s
            .history
            .iter()
            .map(|h| vec![time(h.at.0), word(&h.state), h.reason.clone()])
            .collect();
        crate::table::print(&["AT", "STATE", "REASON"], &history);
    }
}

/// The devices a session holds: `GPU-aaa (1), MIG-bbb (0.5, 10GiB)`.
fn grants(devices: &[DeviceGrant]) -> String {
    devices
        .iter()
        .map(|g| match g.memory.is_zero() || g.share.milli() == 1000 {
            true => format!("{} ({})", g.id, g.share),
            false => format!("{} ({}, {})", g.id, g.share, bytes_text(g.memory)),
        })
        .collect::<Vec<_>>()
        .join(", ")
}
