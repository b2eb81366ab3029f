//! Dense slot vectors for the hot loops: one fixed order of slot names per pass, so that a fit
//! check is a walk over a few integers instead of map look-ups.

use std::collections::BTreeSet;
use std::sync::Arc;

use crate::ledger::DeviceLayout;
use crate::slots::{Quantity, SlotName, Slots};

/// Names a snapshot's index looks among one by one; past them, in order.
const FEW_NAMES: usize = 16;

/// A dense vector of thousandths, in the order of a [`SlotIndex`].
pub type Vector = Box<[u64]>;

/// The slot names seen in one snapshot, in a fixed (sorted) order, then the dimensions of its
/// devices ([`DeviceLayout`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SlotIndex {
    names: Vec<SlotName>,
    /// Shared: the indexes of one pass's steps hold the same layout.
    devices: Arc<DeviceLayout>,
}

impl SlotIndex {
    /// The union of the names of all the given sets.
    pub fn of<'a>(sets: impl IntoIterator<Item = &'a Slots>) -> Self {
        let mut names = NamesSeen::default();
        for set in sets {
            names.add(set);
        }
        names.index()
    }

    /// With the devices' dimensions after the names: `devices` must start at `self.names().len()`.
    pub fn with_devices(mut self, devices: impl Into<Arc<DeviceLayout>>) -> Self {
        self.devices = devices.into();
        self
    }

    pub fn devices(&self) -> &DeviceLayout {
        &self.devices
    }

    /// The device layout, to share with a [`FreeIndex`](crate::schedule::FreeIndex).
    pub fn shared_devices(&self) -> &Arc<DeviceLayout> {
        &self.devices
    }

    /// Dimensions of a vector: the named slots, then the devices'.
    pub fn len(&self) -> usize {
        self.names.len() + self.devices.dims()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn names(&self) -> &[SlotName] {
        &self.names
    }

    /// The dense form of `slots` (device dimensions 0); every name of `slots` must be in the
    /// index.
    pub fn vector(&self, slots: &Slots) -> Vector {
        // Sized exactly: a grown `Vec` would be reallocated again to box it.
        let mut v: Vector = vec![0; self.len()].into_boxed_slice();
        self.walk(slots, |i, milli| v[i] = milli);
        v
    }

    /// [`SlotIndex::vector`] into `v`, replacing what it held (a buffer used again allocates
    /// nothing).
    pub fn vector_into(&self, slots: &Slots, v: &mut Vec<u64>) {
        v.clear();
        v.resize(self.len(), 0);
        self.walk(slots, |i, milli| v[i] = milli);
    }

    /// `v -= slots`, slot by slot, saturating at 0.
    pub fn subtract(&self, v: &mut [u64], slots: &Slots) {
        self.walk(slots, |i, milli| v[i] = v[i].saturating_sub(milli));
    }

    /// `v += slots`, slot by slot, saturating.
    pub fn add(&self, v: &mut [u64], slots: &Slots) {
        self.walk(slots, |i, milli| v[i] = v[i].saturating_add(milli));
    }

    /// Calls `f` with the position and thousandths of each of `slots`' names.
    fn walk(&self, slots: &Slots, mut f: impl FnMut(usize, u64)) {
        // Both are in name order: one walk, an equality test a step (the hot loop of a pass).
        let mut i = 0;
        for (name, q) in slots.iter() {
            while self
                .names
                .get(i)
                .expect("slot index built from every set of the snapshot")
                != name
            {
                i += 1;
            }
            f(i, q.milli());
            i += 1;
        }
    }

    /// Back to named slots (device dimensions are left out).
    pub fn slots(&self, v: &[u64]) -> Slots {
        // Zero amounts are not stored: their names are not copied either.
        let pairs = (self.names.iter().zip(v))
            .filter(|(_, &m)| m > 0)
            .map(|(name, &m)| (name.clone(), Quantity::from_milli(m)));
        Slots::from_pairs(pairs).expect("names of an index are distinct")
    }
}

/// The names of sets seen so far, for a [`SlotIndex`]: a pass sees the same few names hundreds
/// of thousands of times, nearly always the same shared copies (`SlotName::new` shares the
/// common ones), so a look among the few seen so far, by pointer first, costs less than sorting
/// them all. A pass adds its sets source by source (a chain of iterators over them cost more
/// than the look-ups).
#[derive(Default)]
pub struct NamesSeen<'a> {
    names: Vec<&'a SlotName>,
    /// Past a few names (a queue of odd requests), a look-up by order instead.
    many: BTreeSet<&'a SlotName>,
    previous: Option<&'a Slots>,
}

impl<'a> NamesSeen<'a> {
    // In line in each source's loop: a call per set cost more than its look-ups.
    #[inline(always)]
    pub fn add(&mut self, set: &'a Slots) {
        // Sets come in runs of the same names (agents alike, sessions alike): one test a name
        // skips a set already seen.
        if (self.previous).is_some_and(|p| p.len() == set.len() && p.names().eq(set.names())) {
            return;
        }
        for name in set.names() {
            self.add_name(name);
        }
        self.previous = Some(set);
    }

    /// One name, seen once or more.
    #[inline(always)]
    pub fn add_name(&mut self, name: &'a SlotName) {
        let seen = if self.names.len() <= FEW_NAMES {
            self.names.iter().any(|n| n.is(name)) || self.names.contains(&name)
        } else {
            self.many.contains(name)
        };
        if !seen {
            self.names.push(name);
            match self.names.len() {
                n if n == FEW_NAMES + 1 => self.many.extend(self.names.iter().copied()),
                n if n > FEW_NAMES + 1 => _ = self.many.insert(name),
                _ => {}
            }
        }
    }

    /// The index of the names seen, sorted, with no device dimensions.
    pub fn index(mut self) -> SlotIndex {
        self.names.sort_unstable();
        SlotIndex {
            names: self.names.into_iter().cloned().collect(),
            devices: Arc::default(),
        }
    }
}

/// Vectors of one width in one block, by position: the free capacity of a pass's agents,
/// which every step copies whole (one allocation, not one per agent).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Rows {
    width: usize,
    rows: usize,
    data: Vec<u64>,
}

impl Rows {
    /// Room for `rows` vectors of `width` dimensions, none in yet.
    pub fn with_capacity(width: usize, rows: usize) -> Self {
        Rows {
            width,
            rows: 0,
            data: Vec::with_capacity(width * rows),
        }
    }

    /// `rows` of the vectors of `vectors`, each `width` long.
    pub fn of<'a>(width: usize, vectors: impl IntoIterator<Item = &'a [u64]>) -> Self {
        let vectors = vectors.into_iter();
        let mut rows = Rows::with_capacity(width, vectors.size_hint().0);
        for v in vectors {
            rows.push(v);
        }
        rows
    }

    pub fn push(&mut self, v: &[u64]) {
        assert_eq!(v.len(), self.width, "a row of another width");
        self.data.extend_from_slice(v);
        self.rows += 1;
    }

    pub fn len(&self) -> usize {
        self.rows
    }

    pub fn is_empty(&self) -> bool {
        self.rows == 0
    }

    pub fn iter(&self) -> impl ExactSizeIterator<Item = &[u64]> {
        (0..self.rows).map(|i| &self[i])
    }
}

impl std::ops::Index<usize> for Rows {
    type Output = [u64];

    fn index(&self, i: usize) -> &[u64] {
        debug_assert!(i < self.rows, "row {i} of {}", self.rows);
        &self.data[i * self.width..(i + 1) * self.width]
    }
}

impl std::ops::IndexMut<usize> for Rows {
    fn index_mut(&mut self, i: usize) -> &mut [u64] {
        debug_assert!(i < self.rows, "row {i} of {}", self.rows);
        &mut self.data[i * self.width..(i + 1) * self.width]
    }
}

/// `need` fits in `free`, slot by slot.
#[inline]
pub fn fits(need: &[u64], free: &[u64]) -> bool {
    need.iter().zip(free).all(|(n, f)| n <= f)
}

/// `free -= need`; the caller has checked that it fits (device dimensions, which are not
/// amounts, are recomputed from a ledger instead: see `FreeIndex::take`).
#[inline]
pub fn take(free: &mut [u64], need: &[u64]) {
    for (f, n) in free.iter_mut().zip(need) {
        *f -= n;
    }
}

/// `acc += v`, saturating (totals over a whole group only feed ratios).
#[inline]
pub fn add(acc: &mut [u64], v: &[u64]) {
    for (a, x) in acc.iter_mut().zip(v) {
        *a = a.saturating_add(*x);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_through_dense_form() {
        let a: Slots = "cpu=2,gpu=0.5".parse().unwrap();
        let b: Slots = "mem=1GiB,cpu=1".parse().unwrap();
        let index = SlotIndex::of([&a, &b]);
        assert_eq!(
            index.names().iter().map(|n| n.as_str()).collect::<Vec<_>>(),
            ["cpu", "gpu", "mem"]
        );
        assert_eq!(&*index.vector(&a), &[2000, 500, 0]);
        assert_eq!(index.slots(&index.vector(&b)), b);
        assert!(fits(
            &index.vector(&"cpu=1".parse().unwrap()),
            &index.vector(&a)
        ));
        assert!(!fits(&index.vector(&b), &index.vector(&a)));
    }

    #[test]
    fn an_index_of_many_names_holds_each_once_in_order() {
        // Names made apart (not shared), past the few looked among one by one, seen twice.
        let sets: Vec<Slots> = (0..40)
            .chain(0..40)
            .map(|i| format!("cpu=1,s{:02}=1", 39 - i).parse().unwrap())
            .collect();
        let index = SlotIndex::of(&sets);
        let names: Vec<&str> = index.names().iter().map(|n| n.as_str()).collect();
        let mut expected: Vec<String> = (0..40).map(|i| format!("s{i:02}")).collect();
        expected.insert(0, "cpu".into());
        assert_eq!(names, expected);
    }
}
