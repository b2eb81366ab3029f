//! Plans as people read them: `corral group plan` (the API's dry run) and `corral plan FILE.json`
//! print the same summary and decision tables from the same JSON form.

use corral_api::plan::PlanView;

use super::super::render::{fields, slots};

/// Prints a plan (`corral plan`'s and the API's JSON form) as people read it.
pub(crate) fn print_plan(plan: &PlanView) {
    let (s, d) = (&plan.summary, &plan.decisions);
    let nodes = if s.nodes.is_empty() {
        "none".to_string()
    } else {
        s.nodes
            .iter()
            .map(|(t, n)| format!("{n} x {t}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let bound = s
        .lower_bound_cost
        .map_or("none (a demanded slot is on no template)".into(), |b| {
            format!("{b:.3}/h")
        });
    fields(&[
        (
            "launch",
            format!(
                "{nodes} ({} nodes, {:.3}/h; lower bound {bound})",
                s.node_count, s.cost_per_hour
            ),
        ),
        (
            "sessions",
            format!(
                "{} placed, {} rejected, {} pending",
                s.placed, s.rejected, s.unplaced
            ),
        ),
        (
            "agents",
            format!(
                "{} marked, {} unmarked, {} terminated",
                s.marked, s.unmarked, s.terminated
            ),
        ),
    ]);
    let section = |title: &str, header: &[&str], rows: Vec<Vec<String>>| {
        if !rows.is_empty() {
            println!("\n{title}");
            crate::table::print(header, &rows);
        }
    };
    let launches = d
        .launches
        .iter()
        .map(|l| vec![l.template.clone(), l.count.to_string(), l.reason.clone()]);
    section(
        "LAUNCHES",
        &["TEMPLATE", "COUNT", "REASON"],
        launches.collect(),
    );
    for (title, list) in [
        ("MARKS", &d.marks),
        ("UNMARKS", &d.unmarks),
        ("TERMINATIONS", &d.terminations),
    ] {
        let rows = list.iter().map(|a| vec![a.agent.clone(), a.reason.clone()]);
        section(title, &["AGENT", "REASON"], rows.collect());
    }
    let placements = d
        .placements
        .iter()
        .map(|p| vec![p.session.clone(), p.agent.clone(), slots(&p.slots)]);
    section(
        "PLACEMENTS",
        &["SESSION", "AGENT", "SLOTS"],
        placements.collect(),
    );
    for (title, list) in [("REJECTIONS", &d.rejections), ("WAITING", &d.waiting)] {
        let rows = list
            .iter()
            .map(|r| vec![r.session.clone(), r.reason.clone()]);
        section(title, &["SESSION", "REASON"], rows.collect());
    }
}
