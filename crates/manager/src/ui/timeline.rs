//! A group's timeline as SVG (pure): nodes by template stacked, the queue and the sessions on
//! agents as lines, the scaling events as marks with their message on hover.

use std::fmt::Write;

use corral_api::history::GroupHistory;
use maud::{html, Markup};

const WIDTH: f64 = 960.0;
const HEIGHT: f64 = 240.0;
const LEFT: f64 = 44.0;
const RIGHT: f64 = 8.0;
const TOP: f64 = 10.0;
const BOTTOM: f64 = 22.0;
/// Colours of the templates' areas, by class (`n0`...), in the style sheet.
const TEMPLATE_CLASSES: usize = 8;

struct Scale {
    since: i64,
    span: f64,
    top: f64,
}

impl Scale {
    fn x(&self, at: i64) -> f64 {
        LEFT + (at - self.since) as f64 / self.span * (WIDTH - LEFT - RIGHT)
    }

    fn y(&self, value: f64) -> f64 {
        HEIGHT - BOTTOM - value / self.top * (HEIGHT - TOP - BOTTOM)
    }
}

/// Points of a step line through `values`, each held until the next sample (the last until
/// `until`).
fn steps(scale: &Scale, times: &[i64], values: &[f64], until: i64) -> Vec<(f64, f64)> {
    let mut points = Vec::with_capacity(values.len() * 2);
    for (i, v) in values.iter().enumerate() {
        let next = times.get(i + 1).copied().unwrap_or(until);
        points.push((scale.x(times[i]), scale.y(*v)));
        points.push((scale.x(next), scale.y(*v)));
    }
    points
}

fn path_of(points: &[(f64, f64)]) -> String {
    let mut text = String::new();
    for (x, y) in points {
        let _ = write!(text, "{x:.1},{y:.1} ");
    }
    text.trim_end().to_string()
}

fn clock(ms: i64) -> String {
    jiff::Timestamp::from_millisecond(ms)
        .map(|t| t.strftime("%H:%M").to_string())
        .unwrap_or_default()
}

/// The timeline of `h`: each series at the most it reached in each step (`peak`), so that a
/// burst between two sample times shows.
pub fn svg(h: &GroupHistory) -> Markup {
    let times: Vec<i64> = h.times.iter().map(|t| t.0).collect();
    let n = times.len();
    // Stacked node counts: each template's band sits on the ones before it.
    let mut stacked: Vec<(String, Vec<f64>, Vec<f64>)> = Vec::new();
    let mut base = vec![0.0; n];
    for (template, values) in &h.peak.nodes {
        let top: Vec<f64> = base
            .iter()
            .zip(values)
            .map(|(b, v)| b + f64::from(*v))
            .collect();
        stacked.push((template.clone(), base.clone(), top.clone()));
        base = top;
    }
    let pending: Vec<f64> = h.peak.pending.iter().map(|v| f64::from(*v)).collect();
    let running: Vec<f64> = h.peak.running.iter().map(|v| f64::from(*v)).collect();
    let top = base
        .iter()
        .chain(&pending)
        .chain(&running)
        .copied()
        .fold(1.0, f64::max);
    let since = times.first().copied().unwrap_or(h.since.0);
    let until = h.until.0.max(since + 1);
    let scale = Scale {
        since,
        span: (until - since) as f64,
        top,
    };
    let bands: Vec<(usize, &str, String)> = stacked
        .iter()
        .enumerate()
        .map(|(i, (template, low, high))| {
            let mut points = steps(&scale, &times, high, until);
            let mut under = steps(&scale, &times, low, until);
            under.reverse();
            points.extend(under);
            (i % TEMPLATE_CLASSES, template.as_str(), path_of(&points))
        })
        .collect();
    let pending_line = path_of(&steps(&scale, &times, &pending, until));
    let running_line = path_of(&steps(&scale, &times, &running, until));
    let y_top = scale.y(top);
    let y_zero = scale.y(0.0);
    let mid = since + (until - since) / 2;
    html! {
        svg #timeline xmlns="http://www.w3.org/2000/svg" viewBox=(format!("0 0 {WIDTH} {HEIGHT}"))
            role="img" aria-label="nodes, pending and running sessions over time, with scaling events" {
            g.axes {
                line x1=(LEFT) y1=(y_zero) x2=(WIDTH - RIGHT) y2=(y_zero) {}
                line x1=(LEFT) y1=(y_top) x2=(LEFT) y2=(y_zero) {}
                text x=(LEFT - 4.0) y=(y_top + 4.0) text-anchor="end" { (top) }
                text x=(LEFT - 4.0) y=(y_zero) text-anchor="end" { "0" }
                text x=(LEFT) y=(HEIGHT - 6.0) { (clock(since)) }
                text x=(scale.x(mid)) y=(HEIGHT - 6.0) text-anchor="middle" { (clock(mid)) }
                text x=(WIDTH - RIGHT) y=(HEIGHT - 6.0) text-anchor="end" { (clock(until)) }
            }
            g.nodes {
                @for (class, template, points) in &bands {
                    polygon class=(format!("band n{class}")) data-template=(template) points=(points) {
                        title { "nodes of " (template) }
                    }
                }
            }
            polyline.pending points=(pending_line) { title { "pending sessions" } }
            polyline.running points=(running_line) { title { "sessions on agents" } }
            g #events .events {
                @for e in &h.events {
                    @let x = scale.x(e.at.0.clamp(since, until));
                    line class=(format!("event kind-{}", e.kind)) data-kind=(e.kind)
                        x1=(format!("{x:.1}")) y1=(TOP) x2=(format!("{x:.1}")) y2=(y_zero) {
                        title { (super::layout::time(e.at)) " " (e.kind) ": " (e.message) }
                    }
                }
            }
        }
        ul.legend {
            @for (class, template, _) in &bands {
                li { span class=(format!("swatch n{class}")) {} "nodes " (template) }
            }
            li { span.swatch.pending {} "pending" }
            li { span.swatch.running {} "on agents" }
            li { span.swatch.event {} (h.events.len()) " scaling event(s)"
                 @if h.events_truncated { " (the newest)" } }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use corral_api::events::Event;
    use corral_core::Timestamp;

    #[test]
    fn the_timeline_draws_each_series_and_event() {
        let nodes: std::collections::BTreeMap<String, Vec<u32>> = [
            ("small".to_string(), vec![0, 1, 2, 2]),
            ("big".to_string(), vec![0, 0, 1, 0]),
        ]
        .into_iter()
        .collect();
        let h = GroupHistory {
            group: "g".into(),
            since: Timestamp(0),
            until: Timestamp(3000),
            step_ms: 1000,
            times: vec![
                Timestamp(0),
                Timestamp(1000),
                Timestamp(2000),
                Timestamp(3000),
            ],
            peak: corral_api::history::Peaks {
                nodes: nodes.clone(),
                pending: vec![3, 2, 0, 0],
                running: vec![0, 1, 3, 1],
            },
            mean: Default::default(),
            nodes,
            pending: vec![3, 2, 0, 0],
            running: vec![0, 1, 3, 1],
            events: vec![Event {
                id: 1,
                at: Timestamp(900),
                group: Some("g".into()),
                session: None,
                agent: None,
                kind: "launch".into(),
                message: "2 × small: <3 sessions wait>".into(),
            }],
            events_truncated: false,
        };
        let text = svg(&h).into_string();
        assert_eq!(text.matches("<polygon").count(), 2, "{text}");
        assert!(text.contains(r#"data-template="small""#));
        assert_eq!(
            text.matches("<line class=\"event kind-launch\"").count(),
            1,
            "{text}"
        );
        // The message is escaped, never markup.
        assert!(text.contains("&lt;3 sessions wait&gt;"), "{text}");
        // The scale's top is the largest of the stacked nodes (3) and the lines (3).
        assert!(text.contains(">3</text>"), "{text}");
    }
}
