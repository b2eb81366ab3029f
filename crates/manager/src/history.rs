//! A group's history as series (pure): the window asked for, and the nodes by template and the
//! sessions by state at each sample time, swept over the rows the store read.

use std::collections::{BTreeMap, HashMap};
use std::str::FromStr;

use corral_api::history::{GroupHistory, HistoryQuery, Means, Peaks, MAX_SAMPLES};
use corral_core::{SessionState, Timestamp};
use corral_store::HistoryRows;

/// The window when none is given, and the number of steps it is cut into by default.
const DEFAULT_WINDOW_MS: u64 = 6 * 3_600_000;
const DEFAULT_STEPS: u64 = 120;
/// The series name of nodes with no template.
pub const NO_TEMPLATE: &str = "-";

/// The sample times: `until` (now, by default), and every `step_ms` before it back to `since`,
/// so the last sample is always the window's end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    pub since: Timestamp,
    pub until: Timestamp,
    pub step_ms: u64,
}

impl Window {
    pub fn times(&self) -> impl Iterator<Item = Timestamp> + '_ {
        let steps = self.since.ms_until(self.until) / self.step_ms;
        let first = Timestamp(self.until.0.saturating_sub((steps * self.step_ms) as i64));
        (0..=steps).map(move |i| first.plus_ms(i * self.step_ms))
    }
}

/// A field of the query that makes no sense, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct WindowError {
    pub field: &'static str,
    pub message: String,
}

fn invalid(field: &'static str, message: String) -> WindowError {
    WindowError { field, message }
}

/// A duration in people's forms (`90s`, `5m`, `6h`, `1d`, `1h30m`, ISO 8601), in ms.
fn duration_ms(text: &str) -> Option<u64> {
    let span = jiff::Span::from_str(text).ok()?;
    let duration = span
        .to_duration(jiff::SpanRelativeTo::days_are_24_hours())
        .ok()?;
    u64::try_from(duration.as_millis()).ok()
}

/// A point in time: ms since the epoch, an RFC 3339 time, or a duration before `now`.
fn point(field: &'static str, text: &str, now: Timestamp) -> Result<Timestamp, WindowError> {
    if let Ok(ms) = text.parse::<i64>() {
        return Ok(Timestamp(ms));
    }
    if let Ok(t) = jiff::Timestamp::from_str(text) {
        return Ok(Timestamp(t.as_millisecond()));
    }
    if let Some(ago) = duration_ms(text) {
        return Ok(Timestamp(
            now.0.saturating_sub(i64::try_from(ago).unwrap_or(i64::MAX)),
        ));
    }
    Err(invalid(
        field,
        format!(
            "{text:?} is not a time: give ms since the epoch, an RFC 3339 time \
             (2026-12-04T05:00:00Z) or a duration before now (6h, 90m)"
        ),
    ))
}

/// The window a query asks for, at `now`.
/// An empty field (as an HTML form sends it) is one not given.
pub fn window(query: &HistoryQuery, now: Timestamp) -> Result<Window, WindowError> {
    let given = |field: &Option<String>| field.clone().filter(|text| !text.trim().is_empty());
    let (since_text, until_text, step_text) =
        (given(&query.since), given(&query.until), given(&query.step));
    let until = match &until_text {
        Some(text) => point("until", text, now)?,
        None => now,
    };
    let since = match &since_text {
        Some(text) => point("since", text, now)?,
        None => Timestamp(until.0.saturating_sub(DEFAULT_WINDOW_MS as i64)),
    };
    if since >= until {
        return Err(invalid(
            "since",
            format!(
                "the window is empty: since ({}) is not before until ({})",
                since.0, until.0
            ),
        ));
    }
    let span = since.ms_until(until);
    let step_ms = match &step_text {
        Some(text) => {
            let ms = match text.parse::<u64>() {
                Ok(secs) => secs.checked_mul(1000),
                Err(_) => duration_ms(text),
            };
            match ms {
                Some(ms) if ms >= 1000 => ms,
                _ => {
                    return Err(invalid(
                        "step",
                        format!("{text:?} is not a step of at least 1 s (30s, 5m, or seconds)"),
                    ))
                }
            }
        }
        None => (span / DEFAULT_STEPS).max(1000),
    };
    if span / step_ms + 1 > MAX_SAMPLES {
        return Err(invalid(
            "step",
            format!(
                "{} samples over the window; at most {MAX_SAMPLES}: take a step of at least {} s",
                span / step_ms + 1,
                (span / MAX_SAMPLES + 1).div_ceil(1000)
            ),
        ));
    }
    Ok(Window {
        since,
        until,
        step_ms,
    })
}

/// One change of a series at a time.
struct Change {
    at: Timestamp,
    series: Series,
    up: bool,
}

#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum Series {
    Pending,
    Running,
    Node(usize),
}

fn series_of(state: SessionState) -> Option<Series> {
    match state {
        SessionState::Pending => Some(Series::Pending),
        SessionState::Scheduled | SessionState::Running => Some(Series::Running),
        _ => None,
    }
}

/// One series over the steps: its count at each sample time, its most and its time-weighted
/// mean over the step that ends there.
#[derive(Default)]
struct Steps {
    at: Vec<u32>,
    peak: Vec<u32>,
    mean: Vec<f64>,
}

impl Steps {
    fn push(&mut self, count: i64, (peak, mean): (i64, f64)) {
        let clamp = |v: i64| u32::try_from(v.max(0)).unwrap_or(u32::MAX);
        self.at.push(clamp(count));
        self.peak.push(clamp(peak));
        self.mean.push((mean.max(0.0) * 100.0).round() / 100.0);
    }
}

/// One series within one step: its most so far, and the area under it up to `since`.
struct Step {
    peak: i64,
    area: i128,
    since: Timestamp,
}

impl Step {
    fn new(count: i64, start: Timestamp) -> Step {
        Step {
            peak: count,
            area: 0,
            since: start,
        }
    }

    /// The count went from `was` to `now` at `at`.
    fn change(&mut self, was: i64, now: i64, at: Timestamp) {
        self.area += i128::from(was) * i128::from(at.0 - self.since.0);
        self.since = at;
        self.peak = self.peak.max(now);
    }

    /// Its most and mean over `start..end`, the count being `count` at the end (an instant's
    /// mean is its count).
    fn end(self, count: i64, start: Timestamp, end: Timestamp) -> (i64, f64) {
        if end.0 <= start.0 {
            return (self.peak.max(count), count as f64);
        }
        let area = self.area + i128::from(count) * i128::from(end.0 - self.since.0);
        (self.peak, area as f64 / (end.0 - start.0) as f64)
    }
}

/// The series of `group` over `window` from what the store read: each value is the count at
/// its sample time, every change at or before it applied, with the most and the mean over the
/// step that ends there.
pub fn series(group: &str, window: Window, rows: HistoryRows) -> GroupHistory {
    let mut changes: Vec<Change> = Vec::new();
    // Nodes: an agent is up from a start to the next end (a second start while up, as after an
    // agent restarts, changes nothing).
    let mut templates: Vec<String> = Vec::new();
    let mut template_index: HashMap<String, usize> = HashMap::new();
    let mut up: HashMap<&str, usize> = HashMap::new();
    for node in &rows.nodes {
        let template = node.template.as_deref().unwrap_or(NO_TEMPLATE);
        let index = *template_index
            .entry(template.to_string())
            .or_insert_with(|| {
                templates.push(template.to_string());
                templates.len() - 1
            });
        match (node.starts, up.get(node.agent.as_str()).copied()) {
            (true, None) => {
                up.insert(&node.agent, index);
                changes.push(Change {
                    at: node.at,
                    series: Series::Node(index),
                    up: true,
                });
            }
            (false, Some(was)) => {
                up.remove(node.agent.as_str());
                changes.push(Change {
                    at: node.at,
                    series: Series::Node(was),
                    up: false,
                });
            }
            _ => {}
        }
    }
    // Sessions: each history row leaves the state before it and enters its own.
    let mut previous: Option<(&str, Option<Series>)> = None;
    for row in &rows.sessions {
        let before = match previous {
            Some((session, series)) if session == row.session => series,
            _ => None,
        };
        let now = series_of(row.state);
        if before != now {
            if let Some(series) = before {
                changes.push(Change {
                    at: row.at,
                    series,
                    up: false,
                });
            }
            if let Some(series) = now {
                changes.push(Change {
                    at: row.at,
                    series,
                    up: true,
                });
            }
        }
        previous = Some((&row.session, now));
    }
    // Stable: a leave and an enter at one time stay in the order they were recorded.
    changes.sort_by_key(|c| c.at);

    let times: Vec<Timestamp> = window.times().collect();
    let all: Vec<Series> = [Series::Pending, Series::Running]
        .into_iter()
        .chain((0..templates.len()).map(Series::Node))
        .collect();
    let mut sampled: BTreeMap<Series, Steps> = all.iter().map(|s| (*s, Steps::default())).collect();
    let mut counts: HashMap<Series, i64> = HashMap::new();
    let mut next = changes.iter().peekable();
    // The window starts at the first sample time: its first "step" is that instant, and what
    // changed before it is where every series starts.
    let mut start = times.first().copied().unwrap_or(window.since);
    while let Some(c) = next.next_if(|c| c.at <= start) {
        *counts.entry(c.series).or_default() += if c.up { 1 } else { -1 };
    }
    for t in &times {
        let mut step: HashMap<Series, Step> = (all.iter())
            .map(|s| (*s, Step::new(counts.get(s).copied().unwrap_or(0), start)))
            .collect();
        while let Some(change) = next.next_if(|c| c.at <= *t) {
            let count = counts.entry(change.series).or_default();
            let was = *count;
            *count += if change.up { 1 } else { -1 };
            if let Some(s) = step.get_mut(&change.series) {
                s.change(was, *count, change.at);
            }
        }
        for (series, steps) in sampled.iter_mut() {
            let count = counts.get(series).copied().unwrap_or(0);
            let s = step.remove(series).unwrap_or(Step::new(count, start));
            steps.push(count, s.end(count, start, *t));
        }
        start = *t;
    }
    let mut take = |s: Series| sampled.remove(&s).unwrap_or_default();
    let pending = take(Series::Pending);
    let running = take(Series::Running);
    let nodes: Vec<(String, Steps)> = templates
        .iter()
        .enumerate()
        .map(|(i, name)| (name.clone(), take(Series::Node(i))))
        .filter(|(_, steps)| steps.peak.iter().any(|v| *v > 0))
        .collect();
    GroupHistory {
        group: group.to_string(),
        since: window.since,
        until: window.until,
        step_ms: window.step_ms,
        times,
        peak: Peaks {
            nodes: (nodes.iter())
                .map(|(n, s)| (n.clone(), s.peak.clone()))
                .collect(),
            pending: pending.peak.clone(),
            running: running.peak.clone(),
        },
        mean: Means {
            nodes: (nodes.iter())
                .map(|(n, s)| (n.clone(), s.mean.clone()))
                .collect(),
            pending: pending.mean.clone(),
            running: running.mean.clone(),
        },
        nodes: nodes.into_iter().map(|(n, s)| (n, s.at)).collect(),
        pending: pending.at,
        running: running.at,
        events: rows.events,
        events_truncated: rows.events_truncated,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use corral_store::{NodeSpan, StateChange};

    fn q(since: Option<&str>, until: Option<&str>, step: Option<&str>) -> HistoryQuery {
        HistoryQuery {
            since: since.map(str::to_string),
            until: until.map(str::to_string),
            step: step.map(str::to_string),
        }
    }

    const NOW: Timestamp = Timestamp(1_800_000_000_000);

    #[test]
    fn windows_in_people_s_forms() {
        let w = window(&q(Some("6h"), None, Some("5m")), NOW).unwrap();
        assert_eq!(window(&q(Some("360m"), None, Some("300")), NOW), Ok(w));
        assert!(window(&q(Some("1d"), None, Some("1h")), NOW).is_ok());
        assert_eq!(w.since, Timestamp(NOW.0 - 6 * 3_600_000));
        assert_eq!((w.until, w.step_ms), (NOW, 300_000));
        assert_eq!(w.times().count(), 73);
        let w = window(&q(None, None, None), NOW).unwrap();
        assert_eq!(window(&q(Some(""), Some(" "), Some("")), NOW), Ok(w));
        assert_eq!(
            (w.since.ms_until(w.until), w.step_ms),
            (6 * 3_600_000, 180_000)
        );
        let w = window(
            &q(
                Some("2026-12-04T05:00:00Z"),
                Some("2026-12-04T06:00:00Z"),
                Some("60"),
            ),
            NOW,
        )
        .unwrap();
        assert_eq!(w.since.ms_until(w.until), 3_600_000);
        assert_eq!(w.step_ms, 60_000);
        let w = window(&q(Some("1000"), Some("61000"), Some("1d")), NOW).unwrap();
        assert_eq!(w.times().collect::<Vec<_>>(), vec![Timestamp(61000)]);
        // The last sample is the window's end, whatever the step.
        let w = window(&q(Some("1000"), Some("3500"), Some("1s")), NOW).unwrap();
        let times: Vec<i64> = w.times().map(|t| t.0).collect();
        assert_eq!(times, vec![1500, 2500, 3500]);
    }

    #[test]
    fn bad_windows_name_their_field() {
        let e = window(&q(Some("yesterday"), None, None), NOW).unwrap_err();
        assert_eq!(e.field, "since");
        let e = window(&q(Some("1h"), Some("2h"), None), NOW).unwrap_err();
        assert!(e.message.contains("empty"), "{e}");
        let e = window(&q(None, None, Some("0")), NOW).unwrap_err();
        assert_eq!(e.field, "step");
        let e = window(&q(Some("7d"), None, Some("1s")), NOW).unwrap_err();
        assert_eq!(e.field, "step");
        assert!(e.message.contains("at least 605 s"), "{e}");
        // The step it names is enough.
        assert!(window(&q(Some("7d"), None, Some("605")), NOW).is_ok());
    }

    fn node(agent: &str, template: Option<&str>, at: i64, starts: bool) -> NodeSpan {
        NodeSpan {
            agent: agent.into(),
            template: template.map(str::to_string),
            at: Timestamp(at),
            starts,
        }
    }

    fn change(session: &str, at: i64, state: SessionState) -> StateChange {
        StateChange {
            session: session.into(),
            at: Timestamp(at),
            state,
        }
    }

    #[test]
    fn counts_at_each_sample_time() {
        use SessionState::*;
        let window = Window {
            since: Timestamp(100),
            until: Timestamp(500),
            step_ms: 100,
        };
        let rows = HistoryRows {
            nodes: vec![
                node("a", Some("small"), 0, true),
                node("b", Some("big"), 150, true),
                node("b", Some("big"), 160, true), // rejoined after a restart
                node("a", Some("small"), 300, false),
                node("c", None, 400, true),
                node("d", Some("gone"), 10, true),
                node("d", Some("gone"), 20, false), // before the window
            ],
            sessions: vec![
                change("s1", 50, Pending),
                change("s1", 200, Scheduled),
                change("s1", 210, Running),
                change("s1", 400, Succeeded),
                change("s2", 250, Pending),
                change("s2", 300, Scheduled),
                change("s2", 350, Pending), // requeued
                change("s2", 500, Cancelled),
            ],
            events: vec![],
            events_truncated: false,
        };
        let h = series("g", window, rows);
        assert_eq!(h.times.len(), 5);
        assert_eq!(h.pending, vec![1, 0, 0, 1, 0]);
        assert_eq!(h.running, vec![0, 1, 2, 0, 0]);
        assert_eq!(h.nodes["small"], vec![1, 1, 0, 0, 0]);
        assert_eq!(h.nodes["big"], vec![0, 1, 1, 1, 1]);
        assert_eq!(h.nodes[NO_TEMPLATE], vec![0, 0, 0, 1, 1]);
        assert!(!h.nodes.contains_key("gone"), "{:?}", h.nodes);
        // Over the steps that end at each sample: s2 pending 250-300 and 350-400 shows in the
        // step to 300 (and 400), though no sample time falls in it.
        assert_eq!(h.peak.pending, vec![1, 1, 1, 1, 1]);
        assert_eq!(h.mean.pending, vec![1.0, 1.0, 0.5, 0.5, 1.0]);
        assert_eq!(h.peak.running, vec![0, 1, 2, 2, 0]);
        assert_eq!(h.peak.nodes["small"], vec![1, 1, 1, 0, 0]);
    }

    #[test]
    fn a_burst_between_two_samples_shows_in_the_peak() {
        use SessionState::*;
        let window = Window {
            since: Timestamp(0),
            until: Timestamp(1000),
            step_ms: 1000,
        };
        let mut sessions = Vec::new();
        for i in 0..40 {
            sessions.push(change(&format!("s{i}"), 400, Pending));
            sessions.push(change(&format!("s{i}"), 600, Running));
            sessions.push(change(&format!("s{i}"), 700, Succeeded));
        }
        sessions.sort_by_key(|c| (c.session.clone(), c.at));
        let h = series(
            "g",
            window,
            HistoryRows {
                nodes: vec![],
                sessions,
                events: vec![],
                events_truncated: false,
            },
        );
        assert_eq!(h.pending, vec![0, 0], "no sample time falls in the burst");
        assert_eq!(h.peak.pending, vec![0, 40]);
        assert_eq!(h.peak.running, vec![0, 40]);
        assert_eq!(h.mean.pending, vec![0.0, 8.0]);
        assert_eq!(h.mean.running, vec![0.0, 4.0]);
    }
}
