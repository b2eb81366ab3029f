//! The planner's inputs as flat row-major tables over one slot width (needs per class, capacities
//! per offer, which class fits which offer), and the small helpers over such vectors that the
//! packing, the LPs and the bounds share.

use std::hash::{Hash, Hasher};

use crate::dense::fits;

use super::{DemandClass, Offer};

/// One call's classes and offers, every vector padded with zeros to `width`. Equal when every
/// entry is, prices by their bits (the same bits, the same LPs).
#[derive(Debug, Clone)]
pub(super) struct Tables {
    pub width: usize,
    /// Class-major: `needs[c * width + s]`.
    pub needs: Vec<u64>,
    /// Offer-major: `caps[t * width + s]`.
    pub caps: Vec<u64>,
    /// Per offer: its price per hour.
    pub prices: Vec<f64>,
    /// Per offer: whether it may be launched and priced.
    pub usable: Vec<bool>,
    /// Per class: its sessions.
    pub counts: Vec<u64>,
    /// `fit[c * n_offers + t]`: class `c` fits in one instance of usable offer `t`.
    pub fit: Vec<bool>,
}

impl PartialEq for Tables {
    fn eq(&self, other: &Self) -> bool {
        self.width == other.width
            && self.needs == other.needs
            && self.caps == other.caps
            && self.counts == other.counts
            && self.usable == other.usable
            && self.fit == other.fit
            && self.prices.len() == other.prices.len()
            && (self.prices.iter().zip(&other.prices)).all(|(a, b)| a.to_bits() == b.to_bits())
    }
}

impl Eq for Tables {}

impl Hash for Tables {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.width.hash(state);
        self.needs.hash(state);
        self.caps.hash(state);
        self.counts.hash(state);
        self.usable.hash(state);
        for p in &self.prices {
            p.to_bits().hash(state);
        }
    }
}

impl Tables {
    /// The tables of `classes` and `offers` at `width`; `usable` says which offers count.
    pub fn new(
        classes: &[DemandClass],
        offers: &[Offer],
        width: usize,
        usable: impl Fn(&Offer) -> bool,
    ) -> Self {
        let needs = flat(classes.iter().map(|c| &c.need[..]), width);
        let caps = flat(offers.iter().map(|o| &o.slots[..]), width);
        let usable: Vec<bool> = offers.iter().map(usable).collect();
        let fit = fit_matrix(&needs, classes.len(), &caps, &usable, width);
        Tables {
            width,
            needs,
            caps,
            prices: offers.iter().map(|o| o.price_per_hour).collect(),
            usable,
            counts: classes.iter().map(|c| u64::from(c.count)).collect(),
            fit,
        }
    }

    pub fn n_classes(&self) -> usize {
        self.counts.len()
    }

    pub fn n_offers(&self) -> usize {
        self.usable.len()
    }

    /// What one session of class `c` needs.
    pub fn need(&self, c: usize) -> &[u64] {
        &self.needs[c * self.width..(c + 1) * self.width]
    }

    /// What one instance of offer `t` holds.
    pub fn cap(&self, t: usize) -> &[u64] {
        &self.caps[t * self.width..(t + 1) * self.width]
    }

    /// Whether class `c` fits in one instance of usable offer `t`.
    pub fn fits(&self, c: usize, t: usize) -> bool {
        self.fit[c * self.n_offers() + t]
    }
}

/// The longest of the classes' and offers' vectors, and at least `other`.
pub(super) fn width(classes: &[DemandClass], offers: &[Offer], other: usize) -> usize {
    classes
        .iter()
        .map(|c| c.need.len())
        .chain(offers.iter().map(|o| o.slots.len()))
        .chain(std::iter::once(other))
        .max()
        .unwrap_or(0)
}

/// A price an offer may be launched and priced at: finite and not negative.
pub(super) fn valid_price(p: f64) -> bool {
    p.is_finite() && p >= 0.0
}

/// `v` padded with zeros to `width`.
pub(super) fn padded(v: &[u64], width: usize) -> Vec<u64> {
    let mut out = vec![0; width];
    out[..v.len()].copy_from_slice(v);
    out
}

/// Row-major `rows × width` copy, each row padded with zeros.
fn flat<'a>(rows: impl ExactSizeIterator<Item = &'a [u64]>, width: usize) -> Vec<u64> {
    let mut out = Vec::with_capacity(rows.len() * width);
    for r in rows {
        out.extend_from_slice(r);
        out.resize(out.len() + width - r.len(), 0);
    }
    out
}

/// `need` fits in `cap`, both read as padded with zeros to the longer.
pub(super) fn fits_padded(need: &[u64], cap: &[u64]) -> bool {
    (need.iter().enumerate()).all(|(s, &n)| n <= cap.get(s).copied().unwrap_or(0))
}

/// `fit[c * offers + t]`: class `c` fits in one instance of usable offer `t`.
fn fit_matrix(
    needs: &[u64],
    n_classes: usize,
    caps: &[u64],
    usable: &[bool],
    width: usize,
) -> Vec<bool> {
    let n_offers = usable.len();
    let mut fit = vec![false; n_classes * n_offers];
    for c in 0..n_classes {
        for t in 0..n_offers {
            fit[c * n_offers + t] = usable[t]
                && fits(
                    &needs[c * width..(c + 1) * width],
                    &caps[t * width..(t + 1) * width],
                );
        }
    }
    fit
}

/// Per slot, the largest capacity of a usable offer: the LP's unit for that slot.
pub(super) fn units(caps: &[u64], usable: &[bool], width: usize) -> Vec<f64> {
    (0..width)
        .map(|s| {
            (0..usable.len())
                .filter(|&t| usable[t])
                .map(|t| caps[t * width + s])
                .max()
                .unwrap_or(0) as f64
        })
        .collect()
}
