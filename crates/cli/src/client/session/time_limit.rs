//! `--time`: a session's time limit as people write it, in units (`90s`, `30m`, `2h`, `1d`,
//! `1h30m`) or as Slurm's `--time` does (`MM:SS`, `HH:MM:SS`, `D-HH`, `D-HH:MM`, `D-HH:MM:SS`).

/// The limit in seconds. A bare number is refused: Slurm reads it as minutes, most other
/// tools as seconds, and a guess either way would end someone's session at the wrong time.
pub fn parse_time_limit(text: &str) -> Result<u64, String> {
    let text = text.trim();
    let secs = if text.contains(':') || text.contains('-') {
        slurm_form(text)
    } else if text.chars().all(|c| c.is_ascii_digit()) && !text.is_empty() {
        return Err(format!(
            "{text:?}: give the unit: {text}m (minutes, as Slurm reads a bare number) or {text}s"
        ));
    } else {
        units(text)
    }
    .ok_or_else(|| {
        format!("{text:?} is not a time limit (90s, 30m, 2h, 1d, 1h30m, HH:MM:SS or D-HH:MM:SS)")
    })?;
    if secs == 0 {
        return Err(format!("{text:?}: a time limit is at least 1 s"));
    }
    Ok(secs)
}

/// `1h30m`, `90s`, `2 hours` (jiff's friendly form, as `group history --step` reads it); a
/// negative or sub-second span is not a limit.
fn units(text: &str) -> Option<u64> {
    let span: jiff::Span = text.parse().ok()?;
    let duration = span
        .to_duration(jiff::SpanRelativeTo::days_are_24_hours())
        .ok()?;
    u64::try_from(duration.as_secs()).ok()
}

/// Slurm's forms: `MM:SS`, `HH:MM:SS`, and with days `D-HH`, `D-HH:MM`, `D-HH:MM:SS`.
fn slurm_form(text: &str) -> Option<u64> {
    let number = |s: &str| -> Option<u64> {
        (!s.is_empty() && s.chars().all(|c| c.is_ascii_digit())).then(|| s.parse().ok())?
    };
    let (days, clock) = match text.split_once('-') {
        Some((d, clock)) => (number(d)?, clock),
        None => (0, text),
    };
    let parts: Vec<u64> = clock.split(':').map(number).collect::<Option<_>>()?;
    let (h, m, s) = match (text.contains('-'), parts.as_slice()) {
        (true, [h]) => (*h, 0, 0),
        (true, [h, m]) => (*h, *m, 0),
        (_, [h, m, s]) => (*h, *m, *s),
        (false, [m, s]) => (0, *m, *s),
        _ => return None,
    };
    if (text.contains('-') || parts.len() == 3) && h >= 24 && days > 0 {
        return None;
    }
    days.checked_mul(86_400)?
        .checked_add(h.checked_mul(3600)?)?
        .checked_add(m.checked_mul(60)?)?
        .checked_add(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units_and_slurm_forms_read_as_people_mean_them() {
        for (text, secs) in [
            ("90s", 90),
            ("30m", 1800),
            ("2h", 7200),
            ("1d", 86_400),
            ("1h30m", 5400),
            ("1.5h", 5400),
            ("2 hours", 7200),
            ("05:00", 300),
            ("2:00:00", 7200),
            ("1-12", 129_600),
            ("1-00:30", 88_200),
            ("0-00:00:10", 10),
        ] {
            assert_eq!(parse_time_limit(text), Ok(secs), "{text}");
        }
    }

    #[test]
    fn bare_numbers_zero_and_nonsense_are_refused_saying_why() {
        assert_eq!(
            parse_time_limit("120").unwrap_err(),
            "\"120\": give the unit: 120m (minutes, as Slurm reads a bare number) or 120s"
        );
        assert!(parse_time_limit("0s").unwrap_err().contains("at least 1 s"));
        for bad in ["", "2x", "h", "1:2:3:4", "1-25:00", "-5", "-5s"] {
            assert!(parse_time_limit(bad).is_err(), "{bad}");
        }
    }
}
