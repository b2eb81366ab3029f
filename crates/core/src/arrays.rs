//! Session arrays, as a Slurm user writes `sbatch --array=0-9999:2%100`: one submission makes a
//! session per index of a range, and `%N` caps how many of them hold capacity at once.
//!
//! Here are people's form of a range ([`ArrayRange`]), the `{index}` substitution, what a
//! session of an array carries into a pass ([`ArrayMember`]), and the pass's per-array cap
//! ([`Caps`]): the first `N - holding` sessions of a capped array in queue order may be placed,
//! the others wait and are not demand for scale-out.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::str::FromStr;

use foldhash::fast::FixedState;
use serde::{Deserialize, Serialize};

use crate::model::Session;
use crate::slots::same_text;

/// Most sessions one array makes: a range longer than this is refused (a typo such as
/// `0-99999999` would otherwise make a hundred million sessions).
pub const MAX_ARRAY_SESSIONS: u32 = 1_000_000;

/// The indexes of an array, `first..=last` by `step`, and how many of its sessions may hold
/// capacity at once. People write it `FIRST-LAST[:STEP][%MAX]`, or a single index `N[%MAX]`.
///
/// `last` is kept as written: `0-9:2` is the indexes 0, 2, 4, 6 and 8, and prints as `0-9:2`.
/// A single index with a limit (`7%2`) is accepted, as a script building `N%M` from its
/// variables writes it when N is one index; the limit then changes nothing.
///
/// Deserialising does not check a range: call [`ArrayRange::validate`] (parsing does).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct ArrayRange {
    pub first: u32,
    pub last: u32,
    #[serde(default = "one")]
    #[cfg_attr(feature = "openapi", schema(minimum = 1))]
    pub step: u32,
    /// How many of its sessions may be scheduled or running at once (`%MAX`); `None`: as many
    /// as fit.
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(minimum = 1))]
    pub max_running: Option<u32>,
}

fn one() -> u32 {
    1
}

/// Why a range is not one, naming the range and what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ArrayError {
    #[error(
        "array range {range:?}: expected FIRST-LAST[:STEP][%MAX] or an index N, as in 0-9999:2%100"
    )]
    Form { range: String },
    #[error("array range {range:?}: {part:?} is not a whole number from 0 to 4294967295")]
    NotANumber { range: String, part: String },
    #[error("array range {range}: the last index is below the first")]
    Descending { range: ArrayRange },
    #[error("array range {range}: step 0; the step is 1 or more")]
    ZeroStep { range: ArrayRange },
    #[error("array range {range}: %0: at most 0 running; the limit is 1 or more")]
    ZeroLimit { range: ArrayRange },
    #[error(
        "array range {range}: {sessions} sessions: at most {} in one array",
        grouped(MAX_ARRAY_SESSIONS)
    )]
    TooMany { range: ArrayRange, sessions: u64 },
}

/// `1000000` as people read it: `1,000,000`.
fn grouped(n: u32) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

impl ArrayRange {
    /// How many indexes it holds: none when it is not valid (the last below the first, step 0).
    pub fn len(&self) -> u64 {
        if self.step == 0 || self.last < self.first {
            return 0;
        }
        u64::from((self.last - self.first) / self.step) + 1
    }

    /// Whether it holds no index (only an invalid range holds none).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Its indexes, lowest first.
    pub fn indices(&self) -> Indices {
        Indices {
            next: self.first,
            step: self.step,
            left: self.len(),
        }
    }

    /// Whether the range is one an array may have: the last index not below the first, a step
    /// and a limit of 1 or more, at most [`MAX_ARRAY_SESSIONS`] indexes.
    pub fn validate(&self) -> Result<(), ArrayError> {
        let range = *self;
        if self.last < self.first {
            return Err(ArrayError::Descending { range });
        }
        if self.step == 0 {
            return Err(ArrayError::ZeroStep { range });
        }
        if self.max_running == Some(0) {
            return Err(ArrayError::ZeroLimit { range });
        }
        let sessions = self.len();
        if sessions > u64::from(MAX_ARRAY_SESSIONS) {
            return Err(ArrayError::TooMany { range, sessions });
        }
        Ok(())
    }
}

/// The indexes of an [`ArrayRange`], lowest first.
#[derive(Debug, Clone)]
pub struct Indices {
    next: u32,
    step: u32,
    left: u64,
}

impl Iterator for Indices {
    type Item = u32;

    fn next(&mut self) -> Option<u32> {
        if self.left == 0 {
            return None;
        }
        self.left -= 1;
        let index = self.next;
        // Past the last index only once none is left: the step may reach beyond `u32::MAX`.
        self.next = self.next.saturating_add(self.step);
        Some(index)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let left = usize::try_from(self.left).unwrap_or(usize::MAX);
        (left, Some(left))
    }
}

impl ExactSizeIterator for Indices {}

/// `FIRST-LAST[:STEP][%MAX]` or `N[%MAX]`, blanks around it ignored; the range is validated.
impl FromStr for ArrayRange {
    type Err = ArrayError;

    fn from_str(text: &str) -> Result<Self, ArrayError> {
        let s = text.trim();
        let form = || ArrayError::Form {
            range: text.to_string(),
        };
        let number = |part: &str| -> Result<u32, ArrayError> {
            // Digits only: `u32::from_str` would take a sign.
            let digits = !part.is_empty() && part.bytes().all(|b| b.is_ascii_digit());
            let n = if digits { part.parse().ok() } else { None };
            n.ok_or_else(|| ArrayError::NotANumber {
                range: text.to_string(),
                part: part.to_string(),
            })
        };
        let (indexes, max_running) = match s.split_once('%') {
            Some((indexes, max)) => (indexes, Some(number(max)?)),
            None => (s, None),
        };
        let range = match indexes.split_once('-') {
            Some((first, rest)) => {
                let (last, step) = match rest.split_once(':') {
                    Some((last, step)) => (last, number(step)?),
                    None => (rest, 1),
                };
                ArrayRange {
                    first: number(first)?,
                    last: number(last)?,
                    step,
                    max_running,
                }
            }
            // A step needs a range: `5:2` is not one.
            None if indexes.contains(':') || indexes.is_empty() => return Err(form()),
            None => {
                let n = number(indexes)?;
                ArrayRange {
                    first: n,
                    last: n,
                    step: 1,
                    max_running,
                }
            }
        };
        range.validate()?;
        Ok(range)
    }
}

/// The form [`FromStr`] reads: `N` for one index with step 1, else `FIRST-LAST`, `:STEP` when
/// the step is not 1, `%MAX` when there is a limit.
impl fmt::Display for ArrayRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.first == self.last && self.step == 1 {
            write!(f, "{}", self.first)?;
        } else {
            write!(f, "{}-{}", self.first, self.last)?;
            if self.step != 1 {
                write!(f, ":{}", self.step)?;
            }
        }
        if let Some(max) = self.max_running {
            write!(f, "%{max}")?;
        }
        Ok(())
    }
}

/// `text` with each `{index}` replaced by `index` in decimal. Only that literal is replaced:
/// there is no escape, and other braces (`{}`, `{{index}}`'s outer pair, `${HOME}`) are left
/// as they are.
pub fn substitute_index(text: &str, index: u32) -> String {
    text.replace("{index}", &index.to_string())
}

/// What a session of an array carries into a pass: its array, and the array's limit.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct ArrayMember {
    /// The array's id: the same for all its sessions.
    pub id: String,
    /// How many of its sessions may be scheduled or running at once (`%MAX`); `None`: no limit.
    #[serde(default)]
    pub max_running: Option<u32>,
}

/// One capped array of a pass's queue: its id and limit, how many of its sessions held
/// capacity before the pass, and how many more the pass may place.
#[derive(Debug)]
struct Capped<'s> {
    id: &'s str,
    max_running: u32,
    holding: u32,
    left: u32,
}

/// The per-array caps of one pass over its queue: which sessions the cap keeps waiting.
#[derive(Debug, Default)]
pub(crate) struct Caps<'s> {
    arrays: Vec<Capped<'s>>,
    /// Per session of the queue: its capped array (in `arrays`); empty when no session of the
    /// queue is of a capped array (most passes).
    of: Vec<Option<u32>>,
}

impl<'s> Caps<'s> {
    /// Splits the queue's sessions, in `order` (indexes into `sessions`), into those the pass
    /// may place and those the cap keeps waiting, each in `order`: of each capped array, the
    /// first `max_running - holding` (`holding` as `array_holding` says, 0 when it says
    /// nothing) may be placed. A session of a full array costs a comparison of its array's id
    /// with the last one's, and a look-up when they differ.
    pub(crate) fn split(
        holding: &BTreeMap<String, u32>,
        sessions: &[&'s Session],
        order: &[usize],
    ) -> (Caps<'s>, Vec<usize>, Vec<usize>) {
        let mut caps = Caps::default();
        let mut eligible = Vec::with_capacity(order.len());
        let mut capped = Vec::new();
        let mut known: HashMap<&str, u32, FixedState> = HashMap::default();
        let mut last: Option<(&str, u32)> = None;
        for &k in order {
            let member = sessions[k].array.as_ref();
            let Some((id, max)) = member.and_then(|m| Some((m.id.as_str(), m.max_running?))) else {
                eligible.push(k);
                continue;
            };
            let a = match last {
                Some((seen, a)) if same_text(seen, id) => a,
                _ => *known.entry(id).or_insert_with(|| {
                    let held = holding.get(id).copied().unwrap_or(0);
                    // The limit is its first session's: the store gives all the same.
                    caps.arrays.push(Capped {
                        id,
                        max_running: max,
                        holding: held,
                        left: max.saturating_sub(held),
                    });
                    (caps.arrays.len() - 1) as u32
                }),
            };
            last = Some((id, a));
            if caps.of.is_empty() {
                caps.of.resize(sessions.len(), None);
            }
            caps.of[k] = Some(a);
            let array = &mut caps.arrays[a as usize];
            if array.left > 0 {
                array.left -= 1;
                eligible.push(k);
            } else {
                capped.push(k);
            }
        }
        (caps, eligible, capped)
    }

    /// Per capped array, how many of its sessions hold capacity after the pass: those before
    /// it, and those of `placed` (the queue's sessions the pass placed).
    pub(crate) fn running(&self, placed: impl Iterator<Item = usize>) -> Vec<u32> {
        let mut running: Vec<u32> = self.arrays.iter().map(|a| a.holding).collect();
        if !self.of.is_empty() {
            for k in placed {
                if let Some(a) = self.of[k] {
                    running[a as usize] = running[a as usize].saturating_add(1);
                }
            }
        }
        running
    }

    /// The capped array of the queue's session `k`, with its limit: its id and `max_running`.
    pub(crate) fn array_of(&self, k: usize) -> Option<(&'s str, u32, usize)> {
        let a = self.of.get(k).copied().flatten()? as usize;
        let array = &self.arrays[a];
        Some((array.id, array.max_running, a))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn parse(text: &str) -> Result<ArrayRange, String> {
        text.parse::<ArrayRange>().map_err(|e| e.to_string())
    }

    fn range(first: u32, last: u32, step: u32, max_running: Option<u32>) -> ArrayRange {
        ArrayRange {
            first,
            last,
            step,
            max_running,
        }
    }

    #[test]
    fn people_s_forms_parse() {
        assert_eq!(parse("0-9999:2%100"), Ok(range(0, 9999, 2, Some(100))));
        assert_eq!(parse("0-9"), Ok(range(0, 9, 1, None)));
        assert_eq!(parse("1-10:3"), Ok(range(1, 10, 3, None)));
        assert_eq!(parse("0-9%3"), Ok(range(0, 9, 1, Some(3))));
        assert_eq!(parse(" 7 "), Ok(range(7, 7, 1, None)));
        assert_eq!(
            parse("7%2"),
            Ok(range(7, 7, 1, Some(2))),
            "a limit on one index"
        );
        assert_eq!(parse("5-5"), Ok(range(5, 5, 1, None)));
        assert_eq!(
            parse("0-999999"),
            Ok(range(0, 999_999, 1, None)),
            "the most allowed"
        );
        assert_eq!(parse("4294967295"), Ok(range(u32::MAX, u32::MAX, 1, None)));
    }

    #[test]
    fn bad_forms_say_what_is_wrong() {
        let form = |r: &str| {
            format!(
                "array range {r:?}: expected FIRST-LAST[:STEP][%MAX] or an index N, as in \
                 0-9999:2%100"
            )
        };
        for (text, error) in [
            (
                "9-3",
                "array range 9-3: the last index is below the first".to_string(),
            ),
            (
                "0-9:0",
                "array range 0-9:0: step 0; the step is 1 or more".into(),
            ),
            (
                "0-9%0",
                "array range 0-9%0: %0: at most 0 running; the limit is 1 or more".into(),
            ),
            (
                "0-1000000",
                "array range 0-1000000: 1000001 sessions: at most 1,000,000 in one array".into(),
            ),
            (
                "0-4294967295",
                "array range 0-4294967295: 4294967296 sessions: at most 1,000,000 in one array"
                    .into(),
            ),
            ("", form("")),
            ("5:2", form("5:2")),
            (
                "0-x",
                "array range \"0-x\": \"x\" is not a whole number from 0 to 4294967295".into(),
            ),
            (
                "-3-5",
                "array range \"-3-5\": \"\" is not a whole number from 0 to 4294967295".into(),
            ),
            (
                "0-+5",
                "array range \"0-+5\": \"+5\" is not a whole number from 0 to 4294967295".into(),
            ),
            (
                "0-9%",
                "array range \"0-9%\": \"\" is not a whole number from 0 to 4294967295".into(),
            ),
            (
                "0-9%2:3",
                "array range \"0-9%2:3\": \"2:3\" is not a whole number from 0 to 4294967295"
                    .into(),
            ),
            (
                "0-4294967296",
                "array range \"0-4294967296\": \"4294967296\" is not a whole number from 0 to \
                 4294967295"
                    .into(),
            ),
            (
                "0-9-12",
                "array range \"0-9-12\": \"9-12\" is not a whole number from 0 to 4294967295"
                    .into(),
            ),
        ] {
            assert_eq!(parse(text), Err(error), "{text:?}");
        }
    }

    #[test]
    fn len_and_indices_count_the_same_indexes() {
        let cases = [
            (range(0, 9, 1, None), vec![0, 1, 2, 3, 4, 5, 6, 7, 8, 9]),
            (range(0, 9, 2, None), vec![0, 2, 4, 6, 8]),
            (range(1, 10, 3, None), vec![1, 4, 7, 10]),
            (range(5, 5, 1, None), vec![5]),
            (range(5, 5, 7, None), vec![5]),
            (
                range(u32::MAX - 2, u32::MAX, 2, None),
                vec![u32::MAX - 2, u32::MAX],
            ),
            (range(9, 3, 1, None), vec![]),
            (range(0, 9, 0, None), vec![]),
        ];
        for (r, indexes) in cases {
            assert_eq!(r.len(), indexes.len() as u64, "{r}");
            assert_eq!(r.is_empty(), indexes.is_empty(), "{r}");
            assert_eq!(r.indices().len(), indexes.len(), "{r}");
            assert_eq!(r.indices().collect::<Vec<_>>(), indexes, "{r}");
        }
        assert_eq!(range(0, u32::MAX, 1, None).len(), 1 << 32);
        assert_eq!(range(0, 9999, 2, Some(100)).len(), 5000);
    }

    #[test]
    fn only_the_literal_index_is_replaced() {
        assert_eq!(
            substitute_index("train --seed {index} > out-{index}.txt", 42),
            "train --seed 42 > out-42.txt"
        );
        assert_eq!(
            substitute_index("{{index}} {} ${HOME} {Index}", 7),
            "{7} {} ${HOME} {Index}"
        );
        assert_eq!(substitute_index("no index", 7), "no index");
    }

    #[test]
    fn a_range_reads_from_json_with_step_1_by_default() {
        let r: ArrayRange = serde_json::from_str(r#"{"first": 0, "last": 9}"#).unwrap();
        assert_eq!(r, range(0, 9, 1, None));
        assert!(serde_json::from_str::<ArrayRange>(r#"{"first": 0, "last": 9, "x": 1}"#).is_err());
    }

    proptest! {
        /// What a range prints, parsed, is the range.
        #[test]
        fn display_parses_back(
            first in 0..=u32::MAX,
            extra in 0..MAX_ARRAY_SESSIONS,
            step in prop_oneof![Just(1u32), 1..10u32, 1..=u32::MAX],
            max_running in prop::option::of(1..=u32::MAX),
        ) {
            let last = first.saturating_add(extra);
            let r = range(first, last, step, max_running);
            prop_assume!(r.validate().is_ok());
            prop_assert_eq!(r.to_string().parse::<ArrayRange>(), Ok(r));
        }

        /// A range that parses prints as it reads, once its blanks are gone and a step of 1 and
        /// a range of one index are written the short way.
        #[test]
        fn valid_texts_parse_to_ranges_that_validate(
            first in 0..1000u32, extra in 0..1000u32, step in 1..5u32, max in prop::option::of(1..9u32),
        ) {
            let text = format!("{first}-{}:{step}{}", first + extra, max.map(|m| format!("%{m}")).unwrap_or_default());
            let r: ArrayRange = text.parse().unwrap();
            prop_assert!(r.validate().is_ok());
            prop_assert_eq!(r.len(), u64::from(extra / step) + 1);
            prop_assert_eq!(r.indices().last(), Some(first + extra / step * step));
        }
    }
}
