//! Resource slots: named, exact, non-negative quantities (`cpu=2,mem=4GiB,gpu=0.5`).
//!
//! Amounts are fixed-point integers in thousandths of a unit, so `gpu=0.5` and `cpu=500m` are
//! exact and no float ever enters the arithmetic.

use std::fmt;
use std::str::FromStr;
use std::sync::{Arc, LazyLock};

use serde::de;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

mod json;

pub(crate) use json::AmountText;

/// Thousandths per unit.
pub const SCALE: u64 = 1000;

/// Errors in slot names, amounts and slot arithmetic. Each names the offending part.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SlotError {
    #[error("slot name is empty")]
    EmptyName,
    #[error("invalid slot name {0:?}: use lowercase letters, digits, '.', '_' or '-', starting with a letter, at most 64 characters")]
    InvalidName(String),
    #[error("{0:?}: expected name=amount")]
    MissingEquals(String),
    #[error("slot {0:?} is given twice")]
    Duplicate(String),
    #[error("{slot}: amount is empty")]
    EmptyAmount { slot: String },
    #[error("{slot}: negative amount {text:?}")]
    Negative { slot: String, text: String },
    #[error("{slot}: {text:?} is not a number")]
    NotANumber { slot: String, text: String },
    #[error("{slot}: unknown unit {unit:?} in {text:?} (known: m, k, M, G, T, P, Ki, Mi, Gi, Ti, Pi, each optionally followed by B)")]
    UnknownUnit {
        slot: String,
        unit: String,
        text: String,
    },
    #[error("{slot}: {text:?} is finer than a thousandth of a unit")]
    TooPrecise { slot: String, text: String },
    #[error("{slot}: {text:?} is too large")]
    TooLarge { slot: String, text: String },
    #[error("{slot}: the sum overflows")]
    Overflow { slot: String },
    #[error("{slot}: cannot take {rhs} from {lhs}")]
    Underflow {
        slot: String,
        lhs: String,
        rhs: String,
    },
}

/// A validated slot name such as `cpu`, `mem`, `gpu` or `gpu.a100`.
// Shared, not copied: a pass hands the same few names to every placement it decides, and a
// name compared with a copy of itself is equal without reading it.
#[derive(Debug, Clone, Eq)]
pub struct SlotName(Arc<str>);

// By content, as equality (equal pointers mean equal content).
impl std::hash::Hash for SlotName {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.0.hash(state);
    }
}

impl PartialEq for SlotName {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0) || same_text(&self.0, &other.0)
    }
}

/// Equal texts, compared in line: a pass tells apart short names, ids and models (`cpu`,
/// `gpu`, `n0000012`, an empty model) hundreds of thousands of times, and a call to `memcmp`
/// costs more than their bytes.
pub(crate) fn same_text(a: &str, b: &str) -> bool {
    a.len() == b.len()
        && (std::ptr::eq(a.as_ptr(), b.as_ptr()) || a.bytes().zip(b.bytes()).all(|(x, y)| x == y))
}

/// A short text (an owner) as a key that compares and orders as its `str`, its bytes compared in
/// line: a pass looks owners up by their names hundreds of times.
#[derive(Debug, Clone, Copy)]
pub struct Key<'a>(pub &'a str);

impl PartialEq for Key<'_> {
    fn eq(&self, other: &Self) -> bool {
        same_text(self.0, other.0)
    }
}

impl Eq for Key<'_> {}

impl Ord for Key<'_> {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        let (a, b) = (self.0.as_bytes(), other.0.as_bytes());
        (a.iter().zip(b))
            .map(|(x, y)| x.cmp(y))
            .find(|o| o.is_ne())
            .unwrap_or_else(|| a.len().cmp(&b.len()))
    }
}

impl PartialOrd for Key<'_> {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for SlotName {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        if Arc::ptr_eq(&self.0, &other.0) {
            return std::cmp::Ordering::Equal;
        }
        self.0.cmp(&other.0)
    }
}

impl PartialOrd for SlotName {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Serialize for SlotName {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.0)
    }
}

/// The names nearly every request and agent has, made once: every `cpu` shares one copy, so a
/// pass compares them by pointer.
static COMMON: LazyLock<[SlotName; 4]> =
    LazyLock::new(|| ["cpu", "mem", "gpu", "disk"].map(|n| SlotName(n.into())));

impl SlotName {
    pub fn new(name: &str) -> Result<Self, SlotError> {
        if name.is_empty() {
            return Err(SlotError::EmptyName);
        }
        let mut chars = name.chars();
        let first_ok = chars.next().is_some_and(|c| c.is_ascii_lowercase());
        let rest_ok =
            chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || "._-".contains(c));
        if !first_ok || !rest_ok || name.len() > 64 {
            return Err(SlotError::InvalidName(name.to_string()));
        }
        if let Some(common) = COMMON.iter().find(|c| &*c.0 == name) {
            return Ok(common.clone());
        }
        Ok(SlotName(name.into()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The very same name (one shared copy): equal without reading it. Equal names made apart
    /// are not the same.
    pub fn is(&self, other: &SlotName) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }

    /// Byte-valued slots print with binary units (`4GiB`).
    pub fn is_bytes(&self) -> bool {
        // `mem`, `disk`, `mem.local`; and a device's memory, `gpu.mem`.
        let base = self.0.split('.').next().unwrap_or_default();
        base == "mem" || base == "disk" || self.0.ends_with(".mem")
    }
}

impl fmt::Display for SlotName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for SlotName {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        SlotName::new(&s).map_err(de::Error::custom)
    }
}

/// An exact, non-negative amount, stored in thousandths of a unit.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Quantity(u64);

/// The binary units amounts of bytes are written in, largest first.
pub const BINARY_UNITS: [(&str, u64); 5] = [
    ("PiB", 1 << 50),
    ("TiB", 1 << 40),
    ("GiB", 1 << 30),
    ("MiB", 1 << 20),
    ("KiB", 1 << 10),
];

impl Quantity {
    pub const ZERO: Quantity = Quantity(0);

    pub const fn from_milli(milli: u64) -> Self {
        Quantity(milli)
    }

    /// Whole units; `None` on overflow.
    pub const fn from_units(units: u64) -> Option<Self> {
        match units.checked_mul(SCALE) {
            Some(m) => Some(Quantity(m)),
            None => None,
        }
    }

    pub const fn milli(self) -> u64 {
        self.0
    }

    pub const fn is_zero(self) -> bool {
        self.0 == 0
    }

    /// Parses an amount such as `2`, `0.5`, `500m`, `4GiB` or `16G` for the named slot.
    pub fn parse(slot: &str, text: &str) -> Result<Self, SlotError> {
        let err_text = || text.to_string();
        let t = text.trim();
        if t.is_empty() {
            return Err(SlotError::EmptyAmount { slot: slot.into() });
        }
        if t.starts_with('-') {
            return Err(SlotError::Negative {
                slot: slot.into(),
                text: err_text(),
            });
        }
        let t = t.strip_prefix('+').unwrap_or(t);
        let split = t
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(t.len());
        let (number, unit) = t.split_at(split);
        let multiplier_milli = unit_multiplier(unit).ok_or_else(|| SlotError::UnknownUnit {
            slot: slot.into(),
            unit: unit.to_string(),
            text: err_text(),
        })?;
        let (int_part, frac_part) = match number.split_once('.') {
            Some((i, f)) => (i, f),
            None => (number, ""),
        };
        let digits_ok = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
        if (int_part.is_empty() && frac_part.is_empty())
            || !digits_ok(int_part)
            || !digits_ok(frac_part)
        {
            return Err(SlotError::NotANumber {
                slot: slot.into(),
                text: err_text(),
            });
        }
        let too_large = || SlotError::TooLarge {
            slot: slot.into(),
            text: err_text(),
        };
        // Value = (int_part.frac_part) * multiplier, computed exactly as a fraction.
        let frac_part = frac_part.trim_end_matches('0');
        if frac_part.len() > 30 {
            return Err(SlotError::TooPrecise {
                slot: slot.into(),
                text: err_text(),
            });
        }
        let mut mantissa: u128 = 0;
        for b in int_part.bytes().chain(frac_part.bytes()) {
            mantissa = mantissa
                .checked_mul(10)
                .and_then(|m| m.checked_add(u128::from(b - b'0')))
                .ok_or_else(too_large)?;
        }
        let denominator = 10u128.pow(frac_part.len() as u32);
        let scaled = mantissa
            .checked_mul(u128::from(multiplier_milli))
            .ok_or_else(too_large)?;
        if scaled % denominator != 0 {
            return Err(SlotError::TooPrecise {
                slot: slot.into(),
                text: err_text(),
            });
        }
        u64::try_from(scaled / denominator)
            .map(Quantity)
            .map_err(|_| too_large())
    }

    /// People's form for the named slot: `4GiB` for byte slots when exact, else `0.5`, `2`.
    /// (Tables may round further: the CLI's `render::slots`.)
    pub fn display_for(self, slot: &SlotName) -> String {
        if slot.is_bytes() && self.0.is_multiple_of(SCALE) && self.0 > 0 {
            let bytes = self.0 / SCALE;
            for (suffix, size) in BINARY_UNITS {
                if bytes.is_multiple_of(size) {
                    return format!("{}{}", bytes / size, suffix);
                }
            }
        }
        self.to_string()
    }
}

/// Decimal form, without units: `2`, `0.5`, `1.125`.
impl fmt::Display for Quantity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (int, frac) = (self.0 / SCALE, self.0 % SCALE);
        if frac == 0 {
            write!(f, "{int}")
        } else {
            let frac = format!("{frac:03}");
            write!(f, "{int}.{}", frac.trim_end_matches('0'))
        }
    }
}

/// Multiplier of a unit suffix, in thousandths.
fn unit_multiplier(unit: &str) -> Option<u64> {
    if unit == "m" {
        return Some(1);
    }
    let base = unit.strip_suffix('B').unwrap_or(unit);
    let m = match base {
        "" => 1,
        "k" | "K" => 1_000,
        "M" => 1_000_000,
        "G" => 1_000_000_000,
        "T" => 1_000_000_000_000,
        "P" => 1_000_000_000_000_000,
        "Ki" => 1 << 10,
        "Mi" => 1 << 20,
        "Gi" => 1 << 30,
        "Ti" => 1 << 40,
        "Pi" => 1 << 50,
        _ => return None,
    };
    Some(m * SCALE)
}

/// A set of named amounts. Absent slots are zero; zero amounts are never stored, so two equal
/// sets compare equal.
// In name order, each name once: a pass walks and copies these sets hundreds of thousands of
// times, and a sorted list of a few pairs is one allocation and a plain walk (a B-tree is
// neither).
#[derive(Clone, Default, PartialEq, Eq, Hash)]
pub struct Slots(Vec<(SlotName, Quantity)>);

/// `Slots({name: amount, ...})`, a map of names to amounts.
impl fmt::Debug for Slots {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        struct Map<'a>(&'a Slots);
        impl fmt::Debug for Map<'_> {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.debug_map().entries(self.0.iter()).finish()
            }
        }
        f.debug_tuple("Slots").field(&Map(self)).finish()
    }
}

impl Slots {
    pub fn new() -> Self {
        Slots::default()
    }

    /// Builds from pairs, refusing duplicates.
    pub fn from_pairs<I: IntoIterator<Item = (SlotName, Quantity)>>(
        pairs: I,
    ) -> Result<Self, SlotError> {
        let mut pairs: Vec<(SlotName, Quantity)> = pairs.into_iter().collect();
        pairs.sort_by(|a, b| a.0.cmp(&b.0));
        if let Some(twice) = pairs.windows(2).find(|w| w[0].0 == w[1].0) {
            return Err(SlotError::Duplicate(twice[0].0 .0.to_string()));
        }
        pairs.retain(|(_, q)| !q.is_zero());
        Ok(Slots(pairs))
    }

    pub fn get(&self, name: &str) -> Quantity {
        // Slot names are short; a linear lookup by &str avoids building a SlotName.
        self.0
            .iter()
            .find(|(k, _)| same_text(k.as_str(), name))
            .map(|(_, q)| *q)
            .unwrap_or_default()
    }

    pub fn set(&mut self, name: SlotName, q: Quantity) {
        self.change(&name, |_| q.0);
    }

    /// How many slots have an amount.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn iter(&self) -> impl Iterator<Item = (&SlotName, Quantity)> {
        self.0.iter().map(|(k, v)| (k, *v))
    }

    pub fn names(&self) -> impl Iterator<Item = &SlotName> {
        self.0.iter().map(|(k, _)| k)
    }

    pub fn checked_add(&self, other: &Slots) -> Result<Slots, SlotError> {
        let mut out = self.clone();
        out.try_add(other)?;
        Ok(out)
    }

    pub fn checked_sub(&self, other: &Slots) -> Result<Slots, SlotError> {
        let mut out = self.clone();
        out.try_sub(other)?;
        Ok(out)
    }

    /// Adds `other` in place (an agent's allocation, an owner's sum: no copy of the set, and
    /// the names it has already are not cloned). On overflow, says in which slot and leaves
    /// `self` as it was.
    pub fn try_add(&mut self, other: &Slots) -> Result<(), SlotError> {
        for (name, q) in other.iter() {
            if self.get(name.as_str()).0.checked_add(q.0).is_none() {
                return Err(SlotError::Overflow {
                    slot: name.0.to_string(),
                });
            }
        }
        for (name, q) in other.iter() {
            self.change(name, |have| have + q.0);
        }
        Ok(())
    }

    /// Subtracts `other` in place. When a slot would go below zero, says which and leaves
    /// `self` as it was.
    pub fn try_sub(&mut self, other: &Slots) -> Result<(), SlotError> {
        for (name, q) in other.iter() {
            let have = self.get(name.as_str());
            if have.0 < q.0 {
                return Err(SlotError::Underflow {
                    slot: name.0.to_string(),
                    lhs: have.display_for(name),
                    rhs: q.display_for(name),
                });
            }
        }
        for (name, q) in other.iter() {
            self.change(name, |have| have - q.0);
        }
        Ok(())
    }

    /// Sets slot `name` to what `to` makes of its amount (0 when absent), in place: a zero
    /// amount is removed, a new name inserted in order.
    fn change(&mut self, name: &SlotName, to: impl FnOnce(u64) -> u64) {
        match self.0.binary_search_by(|(n, _)| n.cmp(name)) {
            Ok(at) => match to(self.0[at].1 .0) {
                0 => _ = self.0.remove(at),
                q => self.0[at].1 = Quantity(q),
            },
            Err(at) => match to(0) {
                0 => {}
                q => self.0.insert(at, (name.clone(), Quantity(q))),
            },
        }
    }

    /// Every slot of `self` is at most the same slot of `capacity`.
    pub fn fits_in(&self, capacity: &Slots) -> bool {
        self.iter()
            .all(|(name, q)| q <= capacity.get(name.as_str()))
    }

    /// Per-slot maximum of the two sets.
    pub fn max(&self, other: &Slots) -> Slots {
        let mut out = self.clone();
        for (name, q) in other.iter() {
            if q > out.get(name.as_str()) {
                out.set(name.clone(), q);
            }
        }
        out
    }

    /// The largest fraction `self[s] / total[s]` over all slots: DRF's dominant share.
    pub fn dominant_share(&self, total: &Slots) -> Share {
        self.iter()
            .map(|(name, q)| Share::new(q.0, total.get(name.as_str()).0))
            .max()
            .unwrap_or(Share::ZERO)
    }
}

/// An exact fraction `used / total`, ordered by value; `x / 0` for `x > 0` is infinite.
#[derive(Debug, Clone, Copy)]
pub struct Share {
    used: u64,
    total: u64,
}

impl Share {
    pub const ZERO: Share = Share { used: 0, total: 1 };

    pub fn new(used: u64, total: u64) -> Self {
        if used == 0 {
            Share::ZERO
        } else {
            Share { used, total }
        }
    }

    pub fn as_f64(self) -> f64 {
        if self.total == 0 {
            f64::INFINITY
        } else {
            self.used as f64 / self.total as f64
        }
    }
}

impl PartialEq for Share {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == std::cmp::Ordering::Equal
    }
}
impl Eq for Share {}
impl PartialOrd for Share {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Share {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        // a/b vs c/d  <=>  a*d vs c*b, exact in u128; zero totals are infinite.
        match (self.total == 0, other.total == 0) {
            (true, true) => std::cmp::Ordering::Equal,
            (true, false) => std::cmp::Ordering::Greater,
            (false, true) => std::cmp::Ordering::Less,
            _ => (u128::from(self.used) * u128::from(other.total))
                .cmp(&(u128::from(other.used) * u128::from(self.total))),
        }
    }
}

/// `cpu=2,gpu=0.5,mem=4GiB`, sorted by name; the empty set prints as the empty string.
impl fmt::Display for Slots {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, (name, q)) in self.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{name}={}", q.display_for(name))?;
        }
        Ok(())
    }
}

impl FromStr for Slots {
    type Err = SlotError;

    /// Parses `cpu=2,mem=4GiB,gpu=0.5`; white space around parts is ignored.
    fn from_str(s: &str) -> Result<Self, SlotError> {
        let mut pairs = Vec::new();
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (name, amount) = part
                .split_once('=')
                .ok_or_else(|| SlotError::MissingEquals(part.to_string()))?;
            let name = SlotName::new(name.trim())?;
            let q = Quantity::parse(name.as_str(), amount)?;
            pairs.push((name, q));
        }
        Slots::from_pairs(pairs)
    }
}

#[cfg(test)]
mod tests;
