//! Times as schedulers' tools print them, read as Unix seconds. The tools print local time
//! without a zone; the adaptors run them with `TZ=UTC` where they can, and our hosts are UTC.

use jiff::civil::DateTime;
use jiff::tz::TimeZone;

fn utc(time: DateTime) -> Option<i64> {
    Some(time.to_zoned(TimeZone::UTC).ok()?.timestamp().as_second())
}

/// `2026-12-03T07:17:22` (Slurm's `sacct`, Grid Engine's `qstat -xml`); none for anything else
/// (`Unknown`, `None`).
pub fn iso(text: &str) -> Option<i64> {
    utc(text.parse().ok()?)
}

/// `Thu Dec  3 07:25:35 2026` (Grid Engine's `qacct`, PBS Pro's `qstat -F json`).
pub fn ctime(text: &str) -> Option<i64> {
    let words: Vec<&str> = text.split_whitespace().collect();
    utc(DateTime::strptime("%b %d %H:%M:%S %Y", words.get(1..)?.join(" ")).ok()?)
}

#[cfg(test)]
mod tests {
    #[test]
    fn both_forms_read_as_utc() {
        assert_eq!(super::iso("2026-12-03T07:17:22"), Some(1_796_282_242));
        assert_eq!(
            super::ctime("Thu Dec  3 07:17:22 2026"),
            Some(1_796_282_242)
        );
        assert_eq!(super::iso("Unknown"), None);
        assert_eq!(super::ctime("Thu"), None);
    }
}
