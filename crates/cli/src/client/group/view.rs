//! Groups as people read them: the list, one group, its templates, its shares and what a request
//! would take.

use corral_api::groups::{GroupView, Required, Shares};
use corral_core::{HeadOfLine, InstanceTemplate};

use super::super::render::{fields, or_dash, pairs, slots, table, word};

pub(super) fn print_groups(groups: &[GroupView]) {
    let rows: Vec<Vec<String>> = groups
        .iter()
        .map(|view| {
            let g = &view.group;
            vec![
                g.name.clone(),
                word(&g.policy.kind),
                format!("{}-{}", g.policy.min_nodes, g.policy.max_nodes),
                word(&g.scheduler.sequencer),
                word(&g.scheduler.placement),
                word(&g.scheduler.head_of_line),
                g.templates.len().to_string(),
                view.provider.name.clone(),
            ]
        })
        .collect();
    table(
        "groups",
        &[
            "NAME",
            "POLICY",
            "NODES",
            "SCHEDULER",
            "PLACEMENT",
            "HEAD-OF-LINE",
            "TEMPLATES",
            "PROVIDER",
        ],
        &rows,
    );
}

pub(super) fn print_group(view: &GroupView) {
    let g = &view.group;
    let (p, s) = (&g.policy, &g.scheduler);
    let head_of_line = if s.head_of_line == HeadOfLine::Backfill {
        format!("backfill (after {} blocked passes)", s.skip_after)
    } else {
        word(&s.head_of_line)
    };
    fields(&[
        ("name", g.name.clone()),
        ("policy", word(&p.kind)),
        ("nodes", format!("{} to {}", p.min_nodes, p.max_nodes)),
        ("headroom", slots(&p.headroom)),
        ("idle wait", format!("{}s", p.idle_wait_secs)),
        ("cooldown", format!("{}s", p.cooldown_secs)),
        (
            "batching",
            format!("{}ms idle, {}ms at most", p.batch_idle_ms, p.batch_max_ms),
        ),
        ("launches/pass", p.max_launches_per_pass.to_string()),
        ("on disconnect", word(&p.on_disconnect)),
        ("on agent lost", word(&p.on_agent_lost)),
        (
            "external agents",
            if p.external.enabled {
                format!("on, {} at most", p.external.limit)
            } else {
                "off".into()
            },
        ),
        (
            "agent update",
            match (&p.agent_update.enabled, &p.agent_update.target) {
                (true, Some(target)) => format!(
                    "on, to {target} after {}s idle",
                    p.agent_update.idle_wait_secs
                ),
                (true, None) => "on, no target".into(),
                (false, _) => "off".into(),
            },
        ),
        (
            "image update",
            if p.image_update.enabled {
                format!("on, every {}s", p.image_update.interval_secs)
            } else {
                "off".into()
            },
        ),
        ("scheduler", word(&s.sequencer)),
        ("placement", word(&s.placement)),
        ("head of line", head_of_line),
        ("provider", view.provider.name.clone()),
    ]);
    if !g.templates.is_empty() {
        println!("\nTEMPLATES");
        print_templates(&g.templates);
    }
}

pub(super) fn print_templates(templates: &[InstanceTemplate]) {
    let rows: Vec<Vec<String>> = templates
        .iter()
        .map(|t| {
            vec![
                t.name.clone(),
                slots(&t.slots),
                format!("{:.3}", t.price_per_hour),
                t.max.to_string(),
                pairs(&t.labels),
            ]
        })
        .collect();
    table(
        "templates",
        &["NAME", "SLOTS", "PRICE/H", "MAX", "LABELS"],
        &rows,
    );
}

pub(super) fn print_shares(shares: &Shares) {
    let rows: Vec<Vec<String>> = shares
        .available
        .iter()
        .map(|(agent, free)| vec![agent.clone(), slots(free)])
        .collect();
    table("agents taking sessions", &["AGENT", "AVAILABLE"], &rows);
    println!("\nminimum shares (headroom): {}", slots(&shares.minimum));
}

pub(super) fn print_required(r: &Required) {
    fields(&[
        ("required", slots(&r.required)),
        (
            "feasible",
            if r.feasible { "yes" } else { "no" }.to_string(),
        ),
        ("reason", or_dash(r.reason.as_deref())),
    ]);
}
