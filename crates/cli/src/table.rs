//! Aligned text tables for people.

/// Prints `rows` under `header`, each column as wide as its widest cell.
pub fn print(header: &[&str], rows: &[Vec<String>]) {
    let mut columns = Columns::new(header, rows);
    println!("{}", columns.line(header));
    for row in rows {
        println!("{}", columns.line(row));
    }
}

/// Column widths for a table printed whole, or row by row as rows come (`session ls --watch`,
/// `events -f`): as wide as the header and the first rows, widened (never narrowed) when a later
/// row needs it. The last column is not padded.
pub struct Columns {
    widths: Vec<usize>,
}

impl Columns {
    pub fn new(header: &[&str], first: &[Vec<String>]) -> Columns {
        let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
        for row in first {
            for (w, cell) in widths.iter_mut().zip(row) {
                *w = (*w).max(cell.chars().count());
            }
        }
        Columns { widths }
    }

    /// One line of `cells`, padded to the widths (which grow to hold them).
    pub fn line(&mut self, cells: &[impl AsRef<str>]) -> String {
        let last = cells.len().saturating_sub(1);
        let text: Vec<String> = (cells.iter().enumerate())
            .map(|(i, c)| {
                let c = c.as_ref();
                match self.widths.get_mut(i) {
                    Some(w) if i < last => {
                        *w = (*w).max(c.chars().count());
                        format!("{c:<w$}", w = *w)
                    }
                    _ => c.to_string(),
                }
            })
            .collect();
        text.join("  ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_that_come_later_line_up_with_the_first() {
        let first = vec![vec!["s1".to_string(), "pending".into(), "why".into()]];
        let mut columns = Columns::new(&["ID", "STATE", "REASON"], &first);
        assert_eq!(
            columns.line(&["ID", "STATE", "REASON"]),
            "ID  STATE    REASON"
        );
        assert_eq!(columns.line(&first[0]), "s1  pending  why");
        assert_eq!(columns.line(&["s2", "running", "-"]), "s2  running  -");
        // Wider: it grows, and the rows after it keep the new width.
        assert_eq!(columns.line(&["s3", "succeeded", "-"]), "s3  succeeded  -");
        assert_eq!(columns.line(&["s4", "failed", "-"]), "s4  failed     -");
    }
}
