//! Session arrays (`POST /sessions` with an `array` range): one submission makes a session per
//! index, each with `CORRAL_ARRAY_ID` and `CORRAL_ARRAY_INDEX` in its environment and `{index}`
//! replaced in its command, inputs and outputs. An array is read (`GET /arrays/{id}`), listed
//! (`GET /arrays`) and cancelled (`POST /arrays/{id}/cancel`) as one; its sessions are listed
//! with `GET /sessions?array={id}`, and the sessions of no array with `GET /sessions?array=none`.

use serde::{Deserialize, Serialize};

use corral_core::arrays::substitute_index;
use corral_core::{SessionState, SessionType, Slots, Timestamp};

use crate::sessions::{Order, Spec};

/// The variable that tells a session of an array its array's id.
pub const ARRAY_ID_VARIABLE: &str = "CORRAL_ARRAY_ID";
/// The variable that tells a session of an array its index (in decimal, not zero-padded).
pub const ARRAY_INDEX_VARIABLE: &str = "CORRAL_ARRAY_INDEX";

/// What `?array=` takes for the sessions of no array (an array's id is never this).
pub const NO_ARRAY: &str = "none";

/// The id of the session of array `array` for `index`, in an array whose highest index is
/// `last`: the array's id, `x`, and the index zero-padded to as many digits as `last` has
/// (`a3f9c1e2b4d5a6f70x0042` in an array of 0-9999), so that the ids of an array sort, as
/// text, in index order. Only `[a-z0-9]`: a session id names files, cgroups and containers.
pub fn session_id(array: &str, index: u32, last: u32) -> String {
    let width = last.to_string().len();
    format!("{array}x{index:0width$}")
}

/// The index that `session` names in array `array` whose highest index is `last`: the inverse
/// of [`session_id`], `None` for an id that `session_id` would not make (another array's, a
/// width other than `last`'s, not a number). Whether the index is one of the array's range is
/// the caller's to check.
pub fn member_index(array: &str, session: &str, last: u32) -> Option<u32> {
    let digits = session.strip_prefix(array)?.strip_prefix('x')?;
    let width = last.to_string().len();
    if digits.len() != width || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// The spec of array `array`'s session for `index`, from what was submitted for every index:
/// `{index}` replaced in its command, inputs and outputs, and `CORRAL_ARRAY_ID` and
/// `CORRAL_ARRAY_INDEX` in its environment.
pub fn member_spec(submitted: &Spec, array: &str, index: u32) -> Spec {
    let each = |texts: &[String]| -> Vec<String> {
        texts.iter().map(|t| substitute_index(t, index)).collect()
    };
    let mut environment = submitted.environment.clone();
    environment.insert(ARRAY_ID_VARIABLE.into(), array.to_string());
    environment.insert(ARRAY_INDEX_VARIABLE.into(), index.to_string());
    Spec {
        command: each(&submitted.command),
        inputs: each(&submitted.inputs),
        outputs: each(&submitted.outputs),
        environment,
        apps: submitted.apps.clone(),
        time_limit_secs: submitted.time_limit_secs,
    }
}

/// What `POST /sessions` answers of the array it made (`Submitted::array`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SubmittedArray {
    /// The array's id (also the answer's `id`).
    pub id: String,
    /// Its range as people write it (`0-9999:2%100`; `corral_core::ArrayRange`'s text form).
    pub range: String,
    /// How many sessions it made: one per index.
    pub sessions: u32,
    /// The id of its first index's session; the others' are made the same way
    /// ([`session_id`]): the array's id, `x`, the index zero-padded to the last index's digits.
    pub first_session: String,
}

/// How many sessions of an array are in each state.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct StateCounts {
    pub pending: u32,
    pub scheduled: u32,
    pub running: u32,
    pub succeeded: u32,
    pub failed: u32,
    pub cancelled: u32,
    pub rejected: u32,
}

impl StateCounts {
    /// `12 pending, 3 running, 85 succeeded`: the states with a session, in lifecycle order
    /// (empty when there is none).
    pub fn text(&self) -> String {
        let parts: Vec<String> = [
            (self.pending, "pending"),
            (self.scheduled, "scheduled"),
            (self.running, "running"),
            (self.succeeded, "succeeded"),
            (self.failed, "failed"),
            (self.cancelled, "cancelled"),
            (self.rejected, "rejected"),
        ]
        .iter()
        .filter(|(n, _)| *n > 0)
        .map(|(n, w)| format!("{n} {w}"))
        .collect();
        parts.join(", ")
    }

    /// Adds `n` sessions in `state`.
    pub fn add(&mut self, state: SessionState, n: u32) {
        let count = match state {
            SessionState::Pending => &mut self.pending,
            SessionState::Scheduled => &mut self.scheduled,
            SessionState::Running => &mut self.running,
            SessionState::Succeeded => &mut self.succeeded,
            SessionState::Failed => &mut self.failed,
            SessionState::Cancelled => &mut self.cancelled,
            SessionState::Rejected => &mut self.rejected,
        };
        *count = count.saturating_add(n);
    }

    /// Those not ended: pending, scheduled or running.
    pub fn active(&self) -> u32 {
        self.pending
            .saturating_add(self.scheduled)
            .saturating_add(self.running)
    }

    /// Every session counted.
    pub fn total(&self) -> u32 {
        (self.active())
            .saturating_add(self.succeeded)
            .saturating_add(self.failed)
            .saturating_add(self.cancelled)
            .saturating_add(self.rejected)
    }
}

/// An array as the API shows it (`GET /arrays`, `GET /arrays/{id}`): what was submitted, and
/// where its sessions are now.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ArrayView {
    pub id: String,
    pub group: String,
    pub owner: String,
    /// Its range as people write it (`0-9999:2%100`; `corral_core::ArrayRange`'s text form).
    pub range: String,
    /// How many of its sessions may be scheduled or running at once (the range's `%N`); null:
    /// as many as fit.
    pub max_running: Option<u32>,
    /// How many sessions it made: one per index.
    pub sessions: u32,
    /// When it was submitted: every session of it has this `submitted_at`.
    pub submitted_at: Timestamp,
    #[serde(rename = "type")]
    pub kind: SessionType,
    pub priority: i32,
    /// What each of its sessions asked for, as submitted.
    pub request: Slots,
    pub image: Option<String>,
    /// What was submitted for every index: `{index}` not yet replaced, the environment without
    /// the variables Corral adds (`CORRAL_ARRAY_ID`, `CORRAL_ARRAY_INDEX`).
    #[serde(flatten)]
    pub spec: Spec,
    /// How many of its sessions are in each state now.
    pub counts: StateCounts,
    /// Whether any of its sessions has not ended (pending, scheduled or running).
    pub active: bool,
    /// The highest exit code its ended sessions exited with; null while none has exited with
    /// one. A session that failed without an exit code (its agent lost it, its outputs were not
    /// saved...) counts in `counts.failed` only.
    pub max_exit_code: Option<i32>,
}

/// `GET /arrays`: every given field must match; `after` continues after that array id.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::IntoParams), into_params(parameter_in = Query))]
#[serde(deny_unknown_fields)]
pub struct ArrayQuery {
    pub group: Option<String>,
    /// Admins only; a user sees their own arrays whatever this says.
    pub owner: Option<String>,
    /// Only arrays with a session not ended (pending, scheduled, running) with `true`; only
    /// those whose sessions have all ended with `false`.
    pub active: Option<bool>,
    /// Clamped to 1..=1000; default 100.
    pub limit: Option<u32>,
    /// An array id: continue after it.
    pub after: Option<String>,
    /// By submission: `oldest` first [default] or `newest` first.
    pub order: Option<Order>,
}

/// The answer to `POST /arrays/{id}/cancel`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ArrayCancelled {
    pub id: String,
    /// How many of its sessions this call cancelled (0 when all had already ended).
    pub cancelled: u32,
    /// How many of its sessions are in each state now.
    pub counts: StateCounts,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn session_ids_sort_in_index_order_and_are_safe_names() {
        let ids: Vec<String> = [0, 7, 42, 9999]
            .iter()
            .map(|&i| session_id("a0123456789abcdef", i, 9999))
            .collect();
        assert_eq!(ids[0], "a0123456789abcdefx0000");
        assert_eq!(ids[2], "a0123456789abcdefx0042");
        let mut sorted = ids.clone();
        sorted.sort();
        assert_eq!(sorted, ids);
        assert_eq!(session_id("a1", 5, 5), "a1x5");
        let longest = session_id("a0123456789abcdef", u32::MAX, u32::MAX);
        assert!(longest.len() <= 64, "{longest}");
        assert!(longest
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit()));
    }

    #[test]
    fn member_index_reads_back_only_what_session_id_makes() {
        for (index, last) in [(0, 0), (7, 9999), (42, 42), (u32::MAX, u32::MAX)] {
            let id = session_id("a1f", index, last);
            assert_eq!(member_index("a1f", &id, last), Some(index), "{id}");
        }
        assert_eq!(member_index("a1f", "a1fx042", 9999), None, "width");
        assert_eq!(member_index("a1f", "a2fx0042", 9999), None, "another array");
        assert_eq!(member_index("a1f", "a1fx+042", 9999), None, "sign");
        assert_eq!(member_index("a1f", "a1fy0042", 9999), None);
        assert_eq!(member_index("a1f", "a1f", 9999), None);
    }

    #[test]
    fn a_member_spec_has_its_index_everywhere_it_was_asked_for() {
        let submitted = Spec {
            command: vec!["train".into(), "--seed".into(), "{index}".into()],
            inputs: vec!["in-{index}.csv".into()],
            outputs: vec!["out/{index}.txt".into()],
            environment: [("MODE".to_string(), "{index}".to_string())].into(),
            apps: Default::default(),
            time_limit_secs: Some(60),
        };
        let spec = member_spec(&submitted, "a1f", 42);
        assert_eq!(spec.command, ["train", "--seed", "42"]);
        assert_eq!(spec.inputs, ["in-42.csv"]);
        assert_eq!(spec.outputs, ["out/42.txt"]);
        assert_eq!(spec.time_limit_secs, Some(60));
        assert_eq!(
            spec.environment["MODE"], "{index}",
            "only the documented fields"
        );
        assert_eq!(spec.environment[ARRAY_ID_VARIABLE], "a1f");
        assert_eq!(spec.environment[ARRAY_INDEX_VARIABLE], "42");
    }

    #[test]
    fn counts_add_up() {
        let mut c = StateCounts::default();
        c.add(SessionState::Pending, 3);
        c.add(SessionState::Running, 2);
        c.add(SessionState::Failed, 1);
        assert_eq!((c.active(), c.total()), (5, 6));
    }
}
