//! What a replay comes to: waits, slowdown, utilisation, node-hours, cost and its lower bound,
//! as numbers for scripts (`--output json`) and rows for people.

use std::collections::BTreeMap;

use serde::Serialize;

use corral_core::dense::SlotIndex;
use corral_core::planner::{class_lower_bound, DemandClass, Offer};
use corral_core::Slots;

use crate::config::SimConfig;
use crate::engine::Outcome;
use crate::trace::Trace;

/// Below this run time a job's slowdown is counted as if it ran this long (the usual 10 s bound,
/// so that very short jobs do not dominate the mean).
const SLOWDOWN_BOUND_SECS: f64 = 10.0;

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Report {
    pub config: String,
    /// Jobs of the trace replayed (those that ran in the real system).
    pub sessions: usize,
    pub finished: usize,
    /// Refused by admission: no agent or template could ever hold them.
    pub rejected: usize,
    /// Per reason, as admission words it.
    pub rejections: BTreeMap<String, usize>,
    /// Admitted but never ended: the replay ran out of events (none under a sound group).
    pub unfinished: usize,
    /// Jobs of the trace that never ran (cancelled, no run time), not replayed.
    pub skipped: usize,
    /// Lines of the trace that could not be read, not replayed.
    pub malformed: usize,
    /// From submit to start, over the sessions that started.
    pub wait_secs: Stats,
    /// The waits the trace itself recorded, for the same jobs (SWF only).
    pub recorded_wait_secs: Option<Stats>,
    /// Mean of max(1, (wait + run) / max(run, 10 s)).
    pub bounded_slowdown: f64,
    /// From the first submit to the last end.
    pub makespan_secs: u64,
    /// Per slot: what sessions held over what agents offered, over the agents' lives.
    pub utilisation: BTreeMap<String, f64>,
    /// Paid node time (from launch, or the start, to termination or the last end).
    pub node_hours: f64,
    pub node_hours_by_kind: BTreeMap<String, f64>,
    pub cost: f64,
    /// What any group of these templates must pay to run the same sessions for as long
    /// (the planner's class-assignment LP over the sessions' run time); only for groups that
    /// start with no agents.
    pub cost_lower_bound: Option<f64>,
    /// Instances launched, and of those, refused by the provider.
    pub scale_outs: u64,
    pub launch_failures: u64,
    /// Agents terminated by scale-in.
    pub scale_ins: u64,
    /// Passes of the cycle run.
    pub passes: u64,
}

/// A distribution, in seconds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Stats {
    pub mean: f64,
    pub p50: f64,
    pub p95: f64,
    pub p99: f64,
    pub max: f64,
}

impl Stats {
    /// Of `values` in milliseconds (nearest-rank percentiles).
    fn of_ms(mut values: Vec<u64>) -> Stats {
        if values.is_empty() {
            return Stats::default();
        }
        values.sort_unstable();
        let n = values.len();
        let rank = |p: f64| {
            let k = ((p * n as f64).ceil() as usize).clamp(1, n);
            values[k - 1] as f64 / 1000.0
        };
        Stats {
            mean: values.iter().map(|&v| v as f64).sum::<f64>() / n as f64 / 1000.0,
            p50: rank(0.50),
            p95: rank(0.95),
            p99: rank(0.99),
            max: values[n - 1] as f64 / 1000.0,
        }
    }
}

impl Report {
    pub fn of(name: &str, trace: &Trace, config: &SimConfig, outcome: &Outcome) -> Report {
        let end = outcome.end;
        let mut rejections: BTreeMap<String, usize> = BTreeMap::new();
        let (mut waits, mut recorded) = (Vec::new(), Vec::new());
        let (mut slowdown, mut finished, mut unfinished) = (0.0, 0usize, 0usize);
        let mut held: BTreeMap<String, f64> = BTreeMap::new();
        for (record, job) in outcome.sessions.iter().zip(&trace.jobs) {
            if let Some(reason) = &record.rejected {
                *rejections.entry(reason.clone()).or_default() += 1;
                continue;
            }
            let (Some(started), Some(_)) = (record.started, record.ended) else {
                unfinished += 1;
                continue;
            };
            finished += 1;
            let wait = record.submitted.ms_until(started);
            waits.push(wait);
            if let Some(w) = job.recorded_wait_secs {
                recorded.push(w * 1000);
            }
            let run = job.duration_secs as f64;
            slowdown += ((wait as f64 / 1000.0 + run) / run.max(SLOWDOWN_BOUND_SECS)).max(1.0);
            for (slot, q) in record.slots.iter() {
                *held.entry(slot.to_string()).or_default() += q.milli() as f64 * run;
            }
        }
        let mut offered: BTreeMap<String, f64> = BTreeMap::new();
        let mut node_hours_by_kind: BTreeMap<String, f64> = BTreeMap::new();
        let mut cost = 0.0;
        for node in &outcome.nodes {
            let until = node.terminated.unwrap_or(end).min(end);
            let alive = node.joined.ms_until(until) as f64 / 1000.0;
            for (slot, q) in node.capacity.iter() {
                *offered.entry(slot.to_string()).or_default() += q.milli() as f64 * alive;
            }
            let hours = node.paid_from.ms_until(until) as f64 / 3_600_000.0;
            let kind = match node.template {
                Some(t) => config.templates[t].name.clone(),
                None => "agents".to_string(),
            };
            *node_hours_by_kind.entry(kind).or_default() += hours;
            cost += hours * node.price_per_hour;
        }
        let utilisation = offered
            .iter()
            .map(|(slot, &o)| {
                let h = held.get(slot).copied().unwrap_or(0.0);
                (slot.clone(), if o > 0.0 { h / o } else { 0.0 })
            })
            .collect();
        let first_submit = outcome.sessions.iter().map(|s| s.submitted).min();
        Report {
            config: name.to_string(),
            sessions: trace.jobs.len(),
            finished,
            rejected: rejections.values().sum(),
            rejections,
            unfinished,
            skipped: trace.skipped.cancelled + trace.skipped.no_run_time,
            malformed: trace.malformed.len(),
            wait_secs: Stats::of_ms(waits),
            recorded_wait_secs: (!recorded.is_empty()).then(|| Stats::of_ms(recorded)),
            bounded_slowdown: if finished > 0 {
                slowdown / finished as f64
            } else {
                0.0
            },
            makespan_secs: first_submit.map_or(0, |f| f.ms_until(end) / 1000),
            utilisation,
            node_hours: node_hours_by_kind.values().sum(),
            node_hours_by_kind,
            cost,
            cost_lower_bound: cost_lower_bound(trace, config, outcome),
            scale_outs: outcome.launched,
            launch_failures: outcome.launch_failures,
            scale_ins: outcome.terminated,
            passes: outcome.passes,
        }
    }

    /// The report as rows of `(what, value)` for people.
    pub fn rows(&self) -> Vec<(String, String)> {
        let secs = |s: &Stats| {
            format!(
                "mean {} · p50 {} · p95 {} · p99 {}",
                human_secs(s.mean),
                human_secs(s.p50),
                human_secs(s.p95),
                human_secs(s.p99)
            )
        };
        let mut rows = vec![
            ("sessions".to_string(), self.sessions.to_string()),
            ("finished".to_string(), self.finished.to_string()),
            ("rejected".to_string(), self.rejected.to_string()),
        ];
        for (reason, n) in &self.rejections {
            rows.push((format!("  {reason}"), n.to_string()));
        }
        if self.unfinished > 0 {
            rows.push(("unfinished".into(), self.unfinished.to_string()));
        }
        rows.push(("skipped (never ran)".into(), self.skipped.to_string()));
        if self.malformed > 0 {
            rows.push(("malformed lines".into(), self.malformed.to_string()));
        }
        rows.push(("wait".into(), secs(&self.wait_secs)));
        if let Some(r) = &self.recorded_wait_secs {
            rows.push(("wait in the trace".into(), secs(r)));
        }
        rows.push((
            "bounded slowdown".into(),
            format!("{:.2}", self.bounded_slowdown),
        ));
        rows.push(("makespan".into(), human_secs(self.makespan_secs as f64)));
        for (slot, u) in &self.utilisation {
            rows.push((format!("utilisation {slot}"), format!("{:.1}%", u * 100.0)));
        }
        rows.push(("node-hours".into(), format!("{:.1}", self.node_hours)));
        for (kind, h) in &self.node_hours_by_kind {
            rows.push((format!("  {kind}"), format!("{h:.1}")));
        }
        rows.push(("cost".into(), format!("{:.2}", self.cost)));
        rows.push((
            "cost lower bound".into(),
            self.cost_lower_bound
                .map_or("-".into(), |b| format!("{b:.2}")),
        ));
        rows.push(("scale-outs".into(), self.scale_outs.to_string()));
        rows.push(("launch failures".into(), self.launch_failures.to_string()));
        rows.push(("scale-ins".into(), self.scale_ins.to_string()));
        rows.push(("passes".into(), self.passes.to_string()));
        rows
    }
}

/// Several reports side by side: one row per measure, one column per report (rows that only
/// some reports have, such as rejection reasons, are left empty where missing).
pub fn side_by_side(reports: &[Report]) -> (Vec<String>, Vec<Vec<String>>) {
    // A row only some reports have goes after the row that comes before it in theirs.
    let mut order: Vec<String> = Vec::new();
    let mut cells: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (i, r) in reports.iter().enumerate() {
        let mut after: Option<usize> = None;
        for (what, value) in r.rows() {
            let at = match order.iter().position(|w| *w == what) {
                Some(at) => at,
                None => {
                    let at = after.map_or(0, |a| a + 1);
                    order.insert(at, what.clone());
                    cells.insert(what.clone(), vec![String::new(); reports.len()]);
                    at
                }
            };
            if let Some(row) = cells.get_mut(&what) {
                row[i] = value;
            }
            after = Some(at);
        }
    }
    let header = std::iter::once(String::new())
        .chain(reports.iter().map(|r| r.config.clone()))
        .collect();
    let rows = order
        .into_iter()
        .map(|what| {
            let values = cells.remove(&what).unwrap_or_default();
            std::iter::once(what).chain(values).collect()
        })
        .collect();
    (header, rows)
}

/// `42 s`, `3.5 min`, `2.1 h`.
fn human_secs(s: f64) -> String {
    if s < 120.0 {
        format!("{s:.0} s")
    } else if s < 7200.0 {
        format!("{:.1} min", s / 60.0)
    } else {
        format!("{:.1} h", s / 3600.0)
    }
}

/// The class-assignment LP's dual bound holds at every instant for the sessions running then,
/// and is linear in how many run: so summed over time it is the LP over each class's total run
/// time. Counts are in a unit coarse enough for the LP's integers, rounded down, so the bound
/// stays a bound.
fn cost_lower_bound(trace: &Trace, config: &SimConfig, outcome: &Outcome) -> Option<f64> {
    if !config.agents.is_empty() || config.templates.is_empty() {
        return None;
    }
    let mut run_secs: BTreeMap<String, (Slots, u64)> = BTreeMap::new();
    for (record, job) in outcome.sessions.iter().zip(&trace.jobs) {
        if record.ended.is_some() {
            let entry = run_secs
                .entry(record.slots.to_string())
                .or_insert_with(|| (record.slots.clone(), 0));
            entry.1 += job.duration_secs;
        }
    }
    let most = run_secs.values().map(|(_, s)| *s).max().unwrap_or(0);
    let unit = most.div_ceil(u64::from(u32::MAX)).max(1);
    let index = SlotIndex::of(
        (config.templates.iter().map(|t| &t.slots)).chain(run_secs.values().map(|(s, _)| s)),
    );
    let classes: Vec<DemandClass> = run_secs
        .values()
        .map(|(slots, secs)| DemandClass {
            need: index.vector(slots),
            count: u32::try_from(secs / unit).unwrap_or(u32::MAX),
        })
        .collect();
    let offers: Vec<Offer> = config
        .templates
        .iter()
        .map(|t| Offer::of(t, &index, t.max))
        .collect();
    class_lower_bound(&classes, &offers).map(|per_hour| per_hour * unit as f64 / 3600.0)
}
