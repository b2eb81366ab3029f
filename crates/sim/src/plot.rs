//! The replay's time series as one SVG chart, so a person sees at a glance when the queue grew,
//! how the group scaled in answer and how full its nodes were. Three panels share the x axis
//! (hours since the trace's start): sessions, nodes by kind, utilisation per slot.

use std::error::Error;
use std::ops::Range;

use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use crate::engine::Outcome;

const WIDTH: u32 = 1000;
const HEIGHT: u32 = 900;
/// Room on the right of each panel for its legend, so that no legend hides a line.
const LEGEND_WIDTH: u32 = 170;
const FONT: &str = "sans-serif";
/// Count axes never show more ticks than this, whatever the largest count.
const MAX_COUNT_TICKS: u32 = 10;

/// Why no chart could be drawn.
#[derive(Debug, thiserror::Error)]
pub enum PlotError {
    /// A sample does not give one value per node kind or per slot that the outcome names, so
    /// its values could not be told apart.
    #[error(
        "the sample at {at_secs} s has {found} {what} value(s), but the outcome names {expected}"
    )]
    Mismatched {
        at_secs: u64,
        what: &'static str,
        found: usize,
        expected: usize,
    },
    /// The drawing library refused a part of the chart.
    #[error("could not draw the chart's {part}: {source}")]
    Draw {
        part: &'static str,
        #[source]
        source: Box<dyn Error + Send + Sync>,
    },
}

/// The replay's time series as an SVG chart: queue length, nodes by kind and utilisation per slot
/// over time.
pub fn svg(outcome: &Outcome, title: &str) -> Result<String, PlotError> {
    check_shapes(outcome)?;
    let hours = hour_range(outcome);
    let panels = [
        sessions_panel(outcome),
        nodes_panel(outcome),
        utilisation_panel(outcome),
    ];

    let mut document = String::new();
    {
        let root = SVGBackend::with_string(&mut document, (WIDTH, HEIGHT)).into_drawing_area();
        root.fill(&WHITE).map_err(failed("background"))?;
        let below_title = root.titled(title, (FONT, 24)).map_err(failed("title"))?;
        let areas = below_title.split_evenly((panels.len(), 1));
        let last = panels.len() - 1;
        for (index, (panel, area)) in panels.iter().zip(&areas).enumerate() {
            draw_panel(area, panel, hours.clone(), index == last)?;
        }
        root.present().map_err(failed("document"))?;
    }
    Ok(document)
}

/// One panel: its lines over the shared hours axis, with the y axis it needs.
struct Panel {
    /// What the panel shows, for an error message.
    part: &'static str,
    y_label: &'static str,
    y_top: f64,
    /// Counts take whole-number ticks; percentages the library's own.
    counts: bool,
    lines: Vec<Line>,
}

/// One named series, as (hours, value) points.
struct Line {
    name: String,
    points: Vec<(f64, f64)>,
}

/// A sample's values are found by position, so a sample of the wrong length would plot one
/// kind's numbers under another's name: refuse it instead.
fn check_shapes(outcome: &Outcome) -> Result<(), PlotError> {
    for sample in &outcome.samples {
        let shapes = [
            ("node kind", sample.nodes.len(), outcome.node_kinds.len()),
            ("slot", sample.utilisation.len(), outcome.slots.len()),
        ];
        for (what, found, expected) in shapes {
            if found != expected {
                return Err(PlotError::Mismatched {
                    at_secs: sample.at_secs,
                    what,
                    found,
                    expected,
                });
            }
        }
    }
    Ok(())
}

fn hours_of(at_secs: u64) -> f64 {
    at_secs as f64 / 3600.0
}

/// From the trace's start to the last sample; an hour when there is nothing to span, so that
/// the axis still has a width.
fn hour_range(outcome: &Outcome) -> Range<f64> {
    let last = outcome.samples.iter().map(|s| s.at_secs).max().unwrap_or(0);
    let end = hours_of(last);
    0.0..if end > 0.0 { end } else { 1.0 }
}

fn sessions_panel(outcome: &Outcome) -> Panel {
    let series = |name: &str, value: fn(&crate::engine::Sample) -> usize| Line {
        name: name.to_string(),
        points: outcome
            .samples
            .iter()
            .map(|s| (hours_of(s.at_secs), value(s) as f64))
            .collect(),
    };
    let lines = vec![
        series("pending", |s| s.pending),
        series("running", |s| s.running),
    ];
    Panel {
        part: "sessions panel",
        y_label: "sessions",
        y_top: count_top(&lines),
        counts: true,
        lines,
    }
}

/// One line per kind of node, leaving out kinds the replay never had: a flat zero line only
/// crowds the legend.
fn nodes_panel(outcome: &Outcome) -> Panel {
    let lines: Vec<Line> = outcome
        .node_kinds
        .iter()
        .enumerate()
        .filter(|(kind, _)| outcome.samples.iter().any(|s| s.nodes[*kind] > 0))
        .map(|(kind, name)| Line {
            name: name.clone(),
            points: outcome
                .samples
                .iter()
                .map(|s| (hours_of(s.at_secs), f64::from(s.nodes[kind])))
                .collect(),
        })
        .collect();
    Panel {
        part: "nodes panel",
        y_label: "nodes",
        y_top: count_top(&lines),
        counts: true,
        lines,
    }
}

/// Utilisation in percent, held to 0–100 so that the panel's scale is the same in every chart
/// and comparable between replays.
fn utilisation_panel(outcome: &Outcome) -> Panel {
    let lines = outcome
        .slots
        .iter()
        .enumerate()
        .map(|(slot, name)| Line {
            name: name.as_str().to_string(),
            points: outcome
                .samples
                .iter()
                .filter(|s| s.utilisation[slot].is_finite())
                .map(|s| {
                    let percent = (s.utilisation[slot] * 100.0).clamp(0.0, 100.0);
                    (hours_of(s.at_secs), percent)
                })
                .collect(),
        })
        .collect();
    Panel {
        part: "utilisation panel",
        y_label: "utilisation (%)",
        y_top: 100.0,
        counts: false,
        lines,
    }
}

/// The largest count drawn, and at least 1 so that an all-zero panel still has a height.
fn count_top(lines: &[Line]) -> f64 {
    lines
        .iter()
        .flat_map(|line| line.points.iter().map(|&(_, value)| value))
        .fold(1.0, f64::max)
}

fn draw_panel(
    area: &DrawingArea<SVGBackend<'_>, Shift>,
    panel: &Panel,
    hours: Range<f64>,
    shows_x_label: bool,
) -> Result<(), PlotError> {
    let (plot_area, legend_area) = area.split_horizontally(WIDTH - LEGEND_WIDTH);
    let mut chart = ChartBuilder::on(&plot_area)
        .margin(12)
        .x_label_area_size(if shows_x_label { 40 } else { 25 })
        .y_label_area_size(60)
        .build_cartesian_2d(hours, 0.0..panel.y_top)
        .map_err(failed(panel.part))?;

    // With no more ticks than the top count plus one, the library's 1-2-5 steps cannot fall
    // below 1, so every count tick is a whole number.
    let y_ticks = if panel.counts {
        (panel.y_top as u32).min(MAX_COUNT_TICKS) as usize + 1
    } else {
        11
    };
    let mut mesh = chart.configure_mesh();
    mesh.y_desc(panel.y_label)
        .y_labels(y_ticks)
        .y_label_formatter(&|value| format!("{value:.0}"))
        .light_line_style(WHITE.mix(0.0))
        .bold_line_style(BLACK.mix(0.1))
        .label_style((FONT, 14))
        .axis_desc_style((FONT, 15));
    if shows_x_label {
        mesh.x_desc("hours since the trace's start");
    }
    mesh.draw().map_err(failed(panel.part))?;

    for (index, line) in panel.lines.iter().enumerate() {
        let style = series_colour(index).stroke_width(2);
        chart
            .draw_series(LineSeries::new(line.points.iter().copied(), style))
            .map_err(failed(panel.part))?;
    }
    draw_legend(&legend_area, panel)
}

/// The legend beside the panel rather than inside it: one swatch and name per line, from the top.
fn draw_legend(area: &DrawingArea<SVGBackend<'_>, Shift>, panel: &Panel) -> Result<(), PlotError> {
    const TOP: i32 = 24;
    const ROW: i32 = 22;
    const SWATCH: i32 = 24;
    let text = TextStyle::from((FONT, 15)).pos(Pos::new(HPos::Left, VPos::Center));
    for (index, line) in panel.lines.iter().enumerate() {
        let y = TOP + ROW * index as i32;
        let style = series_colour(index).stroke_width(3);
        area.draw(&PathElement::new(vec![(0, y), (SWATCH, y)], style))
            .map_err(failed(panel.part))?;
        area.draw(&Text::new(line.name.as_str(), (SWATCH + 8, y), &text))
            .map_err(failed(panel.part))?;
    }
    Ok(())
}

/// Distinct colours picked by position, so the same outcome always gets the same colours.
fn series_colour(index: usize) -> PaletteColor<Palette99> {
    Palette99::pick(index)
}

/// Wraps a drawing library error with the part of the chart it stopped.
fn failed<E: Error + Send + Sync + 'static>(part: &'static str) -> impl FnOnce(E) -> PlotError {
    move |error| PlotError::Draw {
        part,
        source: Box::new(error),
    }
}

#[cfg(test)]
mod tests {
    use corral_core::{SlotName, Timestamp};

    use super::*;
    use crate::engine::Sample;

    fn outcome(samples: Vec<Sample>) -> Outcome {
        Outcome {
            sessions: Vec::new(),
            nodes: Vec::new(),
            node_kinds: vec!["agents".into(), "gpu-large".into(), "never-used".into()],
            slots: vec![SlotName::new("cpu").unwrap(), SlotName::new("mem").unwrap()],
            samples,
            passes: 0,
            launched: 0,
            launch_failures: 0,
            terminated: 0,
            end: Timestamp::default(),
        }
    }

    fn sample(at_secs: u64, pending: usize, gpu: u32, cpu: f64) -> Sample {
        Sample {
            at_secs,
            pending,
            running: 3,
            nodes: vec![2, gpu, 0],
            utilisation: vec![cpu, 0.25],
        }
    }

    fn replay() -> Outcome {
        outcome(vec![
            sample(0, 5, 0, 0.1),
            sample(1800, 12, 2, 0.6),
            sample(3600, 4, 3, 0.95),
            sample(7200, 0, 1, 0.4),
        ])
    }

    #[test]
    fn chart_holds_the_title_kinds_and_slots() {
        let chart = svg(&replay(), "Replay of week 12").unwrap();
        assert!(chart.starts_with("<svg"), "{}", &chart[..80]);
        assert!(chart.trim_end().ends_with("</svg>"));
        for text in [
            "Replay of week 12",
            "pending",
            "running",
            "agents",
            "gpu-large",
            "cpu",
            "mem",
        ] {
            assert!(chart.contains(text), "no {text:?} in the chart");
        }
    }

    #[test]
    fn kinds_the_replay_never_had_are_left_out() {
        let chart = svg(&replay(), "t").unwrap();
        assert!(!chart.contains("never-used"));
    }

    #[test]
    fn same_outcome_gives_the_same_document() {
        assert_eq!(svg(&replay(), "t").unwrap(), svg(&replay(), "t").unwrap());
    }

    #[test]
    fn empty_outcome_still_gives_a_chart() {
        let chart = svg(&outcome(Vec::new()), "nothing ran").unwrap();
        assert!(chart.starts_with("<svg"));
        assert!(chart.contains("nothing ran"));
        assert!(chart.contains("cpu"));
    }

    #[test]
    fn single_sample_at_the_start_does_not_panic() {
        let chart = svg(&outcome(vec![sample(0, 0, 0, 0.0)]), "t").unwrap();
        assert!(chart.starts_with("<svg"));
    }

    #[test]
    fn sample_of_the_wrong_shape_is_refused() {
        let mut broken = replay();
        broken.samples[1].utilisation.pop();
        let error = svg(&broken, "t").unwrap_err();
        assert!(
            matches!(
                error,
                PlotError::Mismatched {
                    at_secs: 1800,
                    what: "slot",
                    found: 1,
                    expected: 2
                }
            ),
            "{error}"
        );
    }
}
