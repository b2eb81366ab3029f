//! `corral group history`: a group's series as sparklines, one line each.

use corral_api::history::GroupHistory;

use crate::client::render;

/// The widest sparkline printed; longer series are folded, each character the largest of the
/// samples it stands for (a short burst stays visible).
const WIDTH: usize = 60;
const BARS: [char; 8] = ['▁', '▂', '▃', '▄', '▅', '▆', '▇', '█'];
/// The newest events listed under the series.
const SHOWN_EVENTS: usize = 5;

fn last(values: &[u32]) -> u32 {
    values.last().copied().unwrap_or(0)
}

/// `values` as bars scaled to `top` (the largest value of all series, so lines compare).
pub fn sparkline(values: &[u32], top: u32) -> String {
    if values.is_empty() {
        return String::new();
    }
    let fold = values.len().div_ceil(WIDTH);
    values
        .chunks(fold)
        .map(|chunk| {
            let v = chunk.iter().copied().max().unwrap_or(0);
            if v == 0 {
                ' '
            } else if top == 0 {
                BARS[0]
            } else {
                let level = (u64::from(v) * 8).div_ceil(u64::from(top)) as usize - 1;
                BARS[level.min(7)]
            }
        })
        .collect()
}

/// Each series as the most it reached in each step (a burst between two sample times shows),
/// with its least and most, its mean over the window and its count now.
pub fn print_history(h: &GroupHistory) {
    let mut series: Vec<(String, &[u32], &[f64], u32)> = vec![
        (
            "pending".to_string(),
            &h.peak.pending,
            &h.mean.pending,
            last(&h.pending),
        ),
        (
            "running".to_string(),
            &h.peak.running,
            &h.mean.running,
            last(&h.running),
        ),
    ];
    for (template, values) in &h.peak.nodes {
        let mean = h.mean.nodes.get(template).map_or(&[][..], Vec::as_slice);
        let now = h.nodes.get(template).map_or(0, |v| last(v));
        series.push((format!("nodes {template}"), values, mean, now));
    }
    let top = series
        .iter()
        .flat_map(|(_, v, _, _)| v.iter().copied())
        .max()
        .unwrap_or(0);
    println!(
        "group {} from {} to {}, every {}",
        h.group,
        render::time(h.since.0),
        render::time(h.until.0),
        render::span(h.step_ms as i64)
    );
    let rows: Vec<Vec<String>> = series
        .iter()
        .map(|(name, values, means, now)| {
            let min = values.iter().min().copied().unwrap_or(0);
            let max = values.iter().max().copied().unwrap_or(0);
            let mean = means.iter().sum::<f64>() / means.len().max(1) as f64;
            vec![
                name.clone(),
                format!("|{}|", sparkline(values, top)),
                min.to_string(),
                max.to_string(),
                format!("{mean:.1}"),
                now.to_string(),
            ]
        })
        .collect();
    crate::table::print(&["SERIES", "OVER TIME", "MIN", "MAX", "MEAN", "NOW"], &rows);
    let more = if h.events_truncated {
        " (the newest)"
    } else {
        ""
    };
    // The count and the lines listed agree: it says how many of them follow.
    let shown = h.events.len().min(SHOWN_EVENTS);
    let which = match shown == h.events.len() {
        true => String::new(),
        false => format!(", the last {shown} below"),
    };
    println!(
        "{} scaling event(s){more}{which}: corral events --group {}",
        h.events.len(),
        h.group
    );
    for e in h
        .events
        .iter()
        .rev()
        .take(SHOWN_EVENTS)
        .collect::<Vec<_>>()
        .into_iter()
        .rev()
    {
        println!("  {}  {:<13} {}", render::time(e.at.0), e.kind, e.message);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bars_scale_to_the_top_and_zero_is_blank() {
        assert_eq!(sparkline(&[0, 1, 4, 8], 8), " ▁▄█");
        assert_eq!(sparkline(&[2, 2], 2), "██");
        assert_eq!(sparkline(&[], 5), "");
    }

    #[test]
    fn long_series_fold_keeping_peaks() {
        let mut values = vec![0u32; 120];
        values[61] = 9;
        let line = sparkline(&values, 9);
        assert_eq!(line.chars().count(), 60);
        assert_eq!(line.chars().nth(30), Some('█'));
        assert_eq!(line.chars().filter(|c| *c != ' ').count(), 1);
    }
}
