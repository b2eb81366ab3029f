//! Class prices solved by earlier packings, by the LP's inputs: a group's queue comes back to the
//! same shapes and counts against the same templates, and the LP takes most of a packing's time.

use std::collections::HashMap;

use foldhash::fast::FixedState;

use super::prices::{class_prices, ClassPrices};
use super::tables::Tables;

/// Entries kept before the memo starts again (a long replay meets a few thousand inputs at
/// most; the bound only keeps memory flat on one that keeps meeting new ones).
const KEPT: usize = 4096;

/// Class prices by the tables they were solved for. What it answers is what solving would
/// give (the same inputs, bit for bit), so a caller sees the same packing with or without it.
#[derive(Debug, Default)]
pub struct PriceMemo {
    solved: HashMap<Tables, ClassPrices, FixedState>,
}

impl PriceMemo {
    /// The class prices of `tables`: solved once, then remembered.
    pub(super) fn prices(&mut self, tables: &Tables) -> &ClassPrices {
        // Looked up by reference first: the tables are copied only when they are new.
        if !self.solved.contains_key(tables) {
            if self.solved.len() >= KEPT {
                self.solved.clear();
            }
            self.solved.insert(tables.clone(), class_prices(tables));
        }
        &self.solved[tables]
    }

    /// Inputs remembered.
    pub fn len(&self) -> usize {
        self.solved.len()
    }

    pub fn is_empty(&self) -> bool {
        self.solved.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::planner::tests::{class, offer};

    fn tables(count: u32, price: f64) -> Tables {
        let offers = [offer(&[4000, 8000], price, 3), offer(&[8000, 8000], 2.0, 3)];
        Tables::new(&[class(&[1000, 2000], count)], &offers, 2, |o| {
            o.available > 0
        })
    }

    #[test]
    fn the_same_inputs_are_solved_once_and_other_ones_again() {
        let mut memo = PriceMemo::default();
        let first = memo.prices(&tables(3, 1.0)).pi.clone();
        assert_eq!(memo.len(), 1);
        assert_eq!(memo.prices(&tables(3, 1.0)).pi, first);
        assert_eq!(memo.len(), 1, "the same tables, remembered");
        // Another count, another price: other LPs.
        memo.prices(&tables(4, 1.0));
        memo.prices(&tables(3, 1.5));
        assert_eq!(memo.len(), 3);
        assert_eq!(
            memo.prices(&tables(3, 1.5)).pi,
            class_prices(&tables(3, 1.5)).pi
        );
    }

    #[test]
    fn a_full_memo_starts_again() {
        let mut memo = PriceMemo::default();
        for count in 1..=KEPT as u32 {
            memo.prices(&tables(count, 1.0));
        }
        assert_eq!(memo.len(), KEPT);
        memo.prices(&tables(1, 1.0));
        assert_eq!(
            memo.len(),
            KEPT,
            "a known input is answered without a new entry"
        );
        memo.prices(&tables(KEPT as u32 + 1, 1.0));
        assert_eq!(memo.len(), 1);
    }
}
