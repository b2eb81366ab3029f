//! An array's tail: its sessions from `next_index` on, pending and alike but for their index,
//! which have no row yet (migration 0020). Submitting an array stores the array alone; reads
//! make the tail's sessions up from it (`Tail::session`, `Tail::record`); whatever changes one
//! of them stores the tail up to it first (`store_members`), and a pass stores those it places
//! already scheduled. So an array of 100,000 is one row at submission, and each session is
//! written once, when it is placed.

use std::collections::BTreeMap;

use sqlx::any::AnyRow;

use corral_api::arrays::{member_index, member_spec, session_id};
use corral_api::sessions::{HistoryEntry, Spec};
use corral_core::{
    ArrayMember, ArrayRange, DeviceConstraint, Session, SessionId, SessionState, SessionType,
    Slots, Timestamp,
};

use crate::codec::Where;
use crate::codec::{count, name_of, to_json, Fields};
use crate::error::{Result, StoreError};
use crate::sessions::{SessionFilter, SessionRecord};
use crate::Tx;

/// The columns `Tail::from_row` reads.
pub(crate) const TAIL_COLUMNS: &str = "id, group_name, owner, first_index, last_index, step, \
     max_running, priority, request, image, session_type, constraints, submitted_at, spec, \
     next_index, tail_wait_reason, tail_blocked_passes";

/// `arrays` rows whose tail is not empty.
pub(crate) const HAS_TAIL: &str = "next_index <= last_index";

/// How many sessions an `arrays` row's tail holds, in SQL.
pub(crate) const TAIL_LEN: &str =
    "CASE WHEN next_index <= last_index THEN (last_index - next_index) / step + 1 ELSE 0 END";

/// The sessions of an array that have no row yet, with what they share.
#[derive(Debug, Clone)]
pub(crate) struct Tail {
    pub id: String,
    pub group: String,
    pub owner: String,
    pub range: ArrayRange,
    /// The highest index of the range (its last in steps): what ids are padded to.
    pub last: u32,
    /// The first index without a row; past `last` when the tail is empty.
    pub next: u64,
    pub priority: i32,
    pub request: Slots,
    pub image: Option<String>,
    pub kind: SessionType,
    pub constraints: Vec<DeviceConstraint>,
    pub submitted_at: Timestamp,
    /// What was submitted for every index, `{index}` not replaced.
    pub spec: Spec,
    pub wait_reason: Option<String>,
    pub blocked_passes: u32,
}

/// Where a pass places a session of a tail: stored already scheduled there.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Target {
    pub agent: String,
    /// The allocation, as stored.
    pub allocation: String,
    /// The device grants, as stored (JSON).
    pub devices: String,
}

impl Tail {
    pub(crate) fn from_row(row: &AnyRow) -> Result<Tail> {
        let f = Fields::new(row, "array", "id")?;
        let range = ArrayRange {
            first: f.u32("first_index")?,
            last: f.u32("last_index")?,
            step: f.u32("step")?,
            max_running: f.opt_u32("max_running")?,
        };
        let next = f
            .opt_int("next_index")?
            .unwrap_or(i64::from(range.last) + 1);
        Ok(Tail {
            last: range.indices().last().unwrap_or(range.first),
            next: u64::try_from(next).map_err(|_| StoreError::Corrupt(format!("next {next}")))?,
            id: f.text("id")?,
            group: f.text("group_name")?,
            owner: f.text("owner")?,
            range,
            priority: f.i32("priority")?,
            request: f.slots("request")?,
            image: f.opt_text("image")?,
            kind: f.name("session_type")?,
            constraints: f.json("constraints")?,
            submitted_at: f.time("submitted_at")?,
            spec: f.json("spec")?,
            wait_reason: f.opt_text("tail_wait_reason")?,
            blocked_passes: f.u32("tail_blocked_passes")?,
        })
    }

    /// How many sessions it holds.
    pub(crate) fn len(&self) -> u64 {
        match self.next <= u64::from(self.last) {
            true => (u64::from(self.last) - self.next) / u64::from(self.range.step.max(1)) + 1,
            false => 0,
        }
    }

    /// Its last session's index; the tail must not be empty.
    pub(crate) fn last_in_tail(&self) -> u32 {
        self.index_at(self.len().saturating_sub(1))
    }

    /// Its `position`th session's index (0: the first of the tail); `position < len()`.
    pub(crate) fn index_at(&self, position: u64) -> u32 {
        let index = self.next + position * u64::from(self.range.step.max(1));
        u32::try_from(index).unwrap_or(u32::MAX)
    }

    /// The position in the tail of the session with this id, if it is one of the tail's.
    pub(crate) fn position_of(&self, session: &str) -> Option<u64> {
        let index = u64::from(member_index(&self.id, session, self.last)?);
        let step = u64::from(self.range.step.max(1));
        let on_step = index >= self.next && (index - self.next).is_multiple_of(step);
        (on_step && index <= u64::from(self.last)).then(|| (index - self.next) / step)
    }

    /// The indices of its sessions that a listing takes after keyset position `after`
    /// (submission time and id; none: from the start), in the listing's order (newest first
    /// or not), at most `limit`.
    pub(crate) fn listed(
        &self,
        after: Option<(Timestamp, &str)>,
        newest_first: bool,
        limit: Option<u64>,
    ) -> Vec<u32> {
        let len = self.len();
        // Positions [from, to) come after `after` in the listing's order.
        let (from, to) = match after {
            None => (0, len),
            Some((at, _)) if at != self.submitted_at => {
                let taken = (at < self.submitted_at) != newest_first;
                if taken {
                    (0, len)
                } else {
                    (0, 0)
                }
            }
            Some((_, id)) => {
                // Ids grow with position: the first position whose id is `past` `id`.
                let first = |past: &dyn Fn(&str) -> bool| {
                    let (mut lo, mut hi) = (0, len);
                    while lo < hi {
                        let mid = lo + (hi - lo) / 2;
                        if past(&self.session_id(self.index_at(mid))) {
                            hi = mid;
                        } else {
                            lo = mid + 1;
                        }
                    }
                    lo
                };
                match newest_first {
                    true => (0, first(&|s| s >= id)),
                    false => (first(&|s| s > id), len),
                }
            }
        };
        let n = (to - from).min(limit.unwrap_or(u64::MAX));
        let positions: Box<dyn Iterator<Item = u64>> = match newest_first {
            true => Box::new((to - n..to).rev()),
            false => Box::new(from..from + n),
        };
        positions.map(|p| self.index_at(p)).collect()
    }

    pub(crate) fn session_id(&self, index: u32) -> String {
        session_id(&self.id, index, self.last)
    }

    /// The session for `index`, as a pass sees it: pending, with its array's limit.
    pub(crate) fn session(&self, index: u32) -> Session {
        Session {
            id: SessionId(self.session_id(index)),
            group: self.group.clone(),
            owner: self.owner.clone(),
            priority: self.priority,
            request: self.request.clone(),
            image: self.image.clone(),
            kind: self.kind,
            submitted_at: self.submitted_at,
            state: SessionState::Pending,
            agent: None,
            blocked_passes: self.blocked_passes,
            constraints: self.constraints.clone(),
            devices: Vec::new(),
            array: Some(ArrayMember {
                id: self.id.clone(),
                max_running: self.range.max_running,
            }),
        }
    }

    /// The session for `index` as it would be read had it a row: pending since its
    /// submission, with its spec and its one history row.
    pub(crate) fn record(&self, index: u32) -> Result<SessionRecord> {
        let spec = member_spec(&self.spec, &self.id, index);
        Ok(SessionRecord {
            session: self.session(index),
            spec: serde_json::to_value(spec).map_err(|e| StoreError::Corrupt(e.to_string()))?,
            allocation: None,
            wait_reason: self.wait_reason.clone(),
            end_reason: None,
            exit_code: None,
            started_at: None,
            last_activity: None,
            updated_at: self.submitted_at,
            batch_job: None,
            array_index: Some(index),
            history: vec![HistoryEntry {
                at: self.submitted_at,
                state: SessionState::Pending,
                reason: SUBMITTED.into(),
            }],
        })
    }
}

/// The history reason of a session's first row.
pub(crate) const SUBMITTED: &str = "submitted";

/// The array named by a session id of one (`<array>x<index>`), if the id has that form.
pub(crate) fn array_of(session: &str) -> Option<&str> {
    session.rsplit_once('x').map(|(array, _)| array)
}

/// The tail of array `array`, `None` if there is no such array. `for_update` (PostgreSQL
/// only): the array's row is locked until `tx` ends, so two writers store its tail in turn.
pub(crate) async fn read_tail(tx: &mut Tx, array: &str, for_update: bool) -> Result<Option<Tail>> {
    let sql = format!(
        "SELECT {TAIL_COLUMNS} FROM arrays WHERE id = $1{}",
        if for_update { " FOR UPDATE" } else { "" }
    );
    let row = sqlx::query(sqlx::AssertSqlSafe(sql))
        .bind(array)
        .fetch_optional(&mut **tx)
        .await?;
    row.as_ref().map(Tail::from_row).transpose()
}

/// The tail whose session `session` is, and its index, if `session` is one of a tail's
/// (`for_update` as `read_tail`).
pub(crate) async fn tail_member(
    tx: &mut Tx,
    session: &str,
    for_update: bool,
) -> Result<Option<(Tail, u32)>> {
    let Some(array) = array_of(session) else {
        return Ok(None);
    };
    let Some(tail) = read_tail(tx, array, for_update).await? else {
        return Ok(None);
    };
    Ok(tail
        .position_of(session)
        .map(|p| tail.index_at(p))
        .map(|index| (tail, index)))
}

/// The tails (not empty) of the arrays matching `condition` (SQL on `arrays`, with `$1` bound
/// to `arg` when given), by (submitted_at, id).
pub(crate) async fn read_tails(
    tx: &mut Tx,
    condition: &str,
    arg: Option<&str>,
) -> Result<Vec<Tail>> {
    let sql = format!(
        "SELECT {TAIL_COLUMNS} FROM arrays WHERE {HAS_TAIL} AND {condition} \
         ORDER BY submitted_at, id"
    );
    let mut q = sqlx::query(sqlx::AssertSqlSafe(sql));
    if let Some(arg) = arg {
        q = q.bind(arg);
    }
    q.fetch_all(&mut **tx)
        .await?
        .iter()
        .map(Tail::from_row)
        .collect()
}

/// Adds to `records` (a listing by `filter`, keyset position `after`) the sessions of the
/// tails of the arrays `tails` selects that come in its first `limit`, in its order.
pub(crate) async fn add_listed(
    tx: &mut Tx,
    mut tails: Where,
    filter: &SessionFilter,
    after: Option<(Timestamp, &str)>,
    records: &mut Vec<SessionRecord>,
) -> Result<()> {
    tails.and(HAS_TAIL, []);
    let sql = format!(
        "SELECT {TAIL_COLUMNS} FROM arrays{} ORDER BY submitted_at, id",
        tails.sql()
    );
    let arrays = tails.query(sql).fetch_all(&mut **tx).await?;
    if arrays.is_empty() {
        return Ok(());
    }
    let limit = filter.limit.map(u64::from);
    for row in &arrays {
        let tail = Tail::from_row(row)?;
        for index in tail.listed(after, filter.newest_first, limit) {
            records.push(tail.record(index)?);
        }
    }
    records.sort_by(|a, b| {
        let (a, b) = (&a.session, &b.session);
        let order = a.submitted_at.cmp(&b.submitted_at).then(a.id.cmp(&b.id));
        if filter.newest_first {
            order.reverse()
        } else {
            order
        }
    });
    if let Some(limit) = filter.limit {
        records.truncate(limit as usize);
    }
    Ok(())
}

/// Stores the tail's sessions up to index `through` (one of the tail's), each with its
/// "submitted" history row: those in `placed` already scheduled on their target at `now`,
/// with a "scheduled" history row and a `placed` event (`message`), the others pending. The
/// array's `next_index` moves past `through`, guarded by what `tail` read: `Conflict` if
/// another writer stored some of it meanwhile.
pub(crate) async fn store_members(
    tx: &mut Tx,
    tail: &Tail,
    through: u32,
    placed: &BTreeMap<u32, Target>,
    now: Timestamp,
) -> Result<()> {
    let step = u64::from(tail.range.step.max(1));
    if u64::from(through) < tail.next || !(u64::from(through) - tail.next).is_multiple_of(step) {
        return Err(StoreError::Refused(format!(
            "index {through} is not in array {}'s sessions without a row",
            tail.id
        )));
    }
    let after = u64::from(through) + step;
    let done = sqlx::query("UPDATE arrays SET next_index = $2 WHERE id = $1 AND next_index = $3")
        .bind(&tail.id)
        .bind(i64::try_from(after).unwrap_or(i64::MAX))
        .bind(i64::try_from(tail.next).unwrap_or(i64::MAX))
        .execute(&mut **tx)
        .await?;
    if done.rows_affected() == 0 {
        return Err(StoreError::conflict("array", &tail.id));
    }
    // The sessions by where they go (None: pending), each run of rows one statement's worth.
    let mut by_target: BTreeMap<Option<&Target>, Vec<u32>> = BTreeMap::new();
    let mut index = tail.next;
    while index <= u64::from(through) {
        let i = u32::try_from(index).unwrap_or(u32::MAX);
        by_target.entry(placed.get(&i)).or_default().push(i);
        index += step;
    }
    let shared = Shared {
        request: tail.request.to_string(),
        kind: name_of(&tail.kind),
        constraints: to_json(&tail.constraints)?,
        now,
    };
    for (target, indices) in &by_target {
        let (runs, singles) = runs_of(indices, tail.range.step.max(1));
        for (first, last) in runs {
            let source = Indices::Run { first, last };
            insert_rows(tx, tail, target.as_deref(), source, &shared).await?;
        }
        for chunk in singles.chunks(INDICES_PER_LIST) {
            insert_rows(tx, tail, target.as_deref(), Indices::List(chunk), &shared).await?;
        }
    }
    // Their history, oldest first: every one submitted, then those placed scheduled.
    let first = tail.session_id(tail.index_at(0));
    let last = tail.session_id(through);
    let range = "array_id = $1 AND id >= $2 AND id <= $3";
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "INSERT INTO session_history (session, at, state, reason) \
         SELECT id, $4, 'pending', '{SUBMITTED}' FROM sessions \
         WHERE {range} AND state IN ('pending', 'scheduled') ORDER BY id"
    )))
    .bind(&tail.id)
    .bind(&first)
    .bind(&last)
    .bind(tail.submitted_at.0)
    .execute(&mut **tx)
    .await?;
    for target in by_target.keys().flatten() {
        let message = format!("placed on agent {} ({})", target.agent, target.allocation);
        let on_target = format!(
            "{range} AND state = 'scheduled' AND agent = $4 AND allocation = $5 \
             AND devices = $6"
        );
        for sql in [
            format!(
                "INSERT INTO session_history (session, at, state, reason) \
                 SELECT id, $7, 'scheduled', $8 FROM sessions WHERE {on_target} ORDER BY id"
            ),
            format!(
                "INSERT INTO events (at, group_name, session, agent, kind, message) \
                 SELECT $7, group_name, id, agent, 'placed', $8 FROM sessions \
                 WHERE {on_target} ORDER BY id"
            ),
        ] {
            sqlx::query(sqlx::AssertSqlSafe(sql))
                .bind(&tail.id)
                .bind(&first)
                .bind(&last)
                .bind(&target.agent)
                .bind(&target.allocation)
                .bind(&target.devices)
                .bind(now.0)
                .bind(&message)
                .execute(&mut **tx)
                .await?;
        }
    }
    Ok(())
}

/// What every row of a tail's INSERTs shares beside the tail's own fields.
struct Shared {
    request: String,
    kind: String,
    constraints: String,
    now: Timestamp,
}

/// Which indices one INSERT stores: a run on the tail's steps, or a list.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Indices<'a> {
    Run { first: u32, last: u32 },
    List(&'a [u32]),
}

/// Runs shorter than this go into lists rather than statements of their own.
const SHORTEST_RUN: usize = 8;

/// Indices per listed statement: one bound value each, few enough that binding stays cheap on
/// SQLite (see `sessions::ROWS_PER_STATEMENT`).
const INDICES_PER_LIST: usize = 300;

/// `indices` (ascending, on steps of `step`) as runs of consecutive steps, (first, last),
/// and the indices of runs too short to be worth a statement.
fn runs_of(indices: &[u32], step: u32) -> (Vec<(u32, u32)>, Vec<u32>) {
    let (mut runs, mut singles) = (Vec::new(), Vec::new());
    let mut start = 0;
    for k in 1..=indices.len() {
        let continues = k < indices.len()
            && u64::from(indices[k]) == u64::from(indices[k - 1]) + u64::from(step);
        if continues {
            continue;
        }
        let run = &indices[start..k];
        if run.len() >= SHORTEST_RUN {
            runs.push((run[0], run[run.len() - 1]));
        } else {
            singles.extend_from_slice(run);
        }
        start = k;
    }
    (runs, singles)
}

/// One INSERT ... SELECT of the tail's sessions for `indices`, pending or (with a target)
/// scheduled: each row made in SQL from its index (its id the array's, `x`, the index padded
/// as `session_id` pads it), so that a run of thousands binds a few values. Their spec is
/// stored as `null`: the array's, with the index put in, when read (`record_from_row`).
async fn insert_rows(
    tx: &mut Tx,
    tail: &Tail,
    target: Option<&Target>,
    indices: Indices<'_>,
    shared: &Shared,
) -> Result<()> {
    // $1..$18 are the rows' shared values; the indices' from $19.
    let (source, expected) = match indices {
        Indices::Run { first, last } => (
            "SELECT CAST($19 AS BIGINT) UNION ALL SELECT i + $20 FROM idx WHERE i + $20 <= $21"
                .to_string(),
            (u64::from(last) - u64::from(first)) / u64::from(tail.range.step.max(1)) + 1,
        ),
        Indices::List(list) => (
            format!(
                "VALUES {}",
                (0..list.len())
                    .map(|k| format!("(CAST(${} AS BIGINT))", 19 + k))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            list.len() as u64,
        ),
    };
    let sql = format!(
        "WITH RECURSIVE idx(i) AS ({source}) \
         INSERT INTO sessions (id, array_index, spec, group_name, owner, priority, request, \
         image, session_type, submitted_at, constraints, array_id, state, agent, allocation, \
         devices, updated_at, wait_reason, blocked_passes) \
         SELECT $9 || 'x' || substr($17 || i, CAST(length($17 || i) - $18 + 1 AS INTEGER)), \
         i, 'null', \
         $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16 \
         FROM idx WHERE true ON CONFLICT (id) DO NOTHING"
    );
    let (state, updated_at) = match target {
        Some(_) => ("scheduled", shared.now),
        None => ("pending", tail.submitted_at),
    };
    let wait_reason = target
        .is_none()
        .then_some(tail.wait_reason.as_deref())
        .flatten();
    let blocked = if target.is_none() {
        tail.blocked_passes
    } else {
        0
    };
    let width = tail.last.to_string().len();
    let mut q = sqlx::query(sqlx::AssertSqlSafe(sql))
        .bind(&tail.group)
        .bind(&tail.owner)
        .bind(i64::from(tail.priority))
        .bind(shared.request.as_str())
        .bind(tail.image.as_deref())
        .bind(shared.kind.as_str())
        .bind(tail.submitted_at.0)
        .bind(shared.constraints.as_str())
        .bind(&tail.id)
        .bind(state)
        .bind(target.map(|t| t.agent.as_str()))
        .bind(target.map(|t| t.allocation.as_str()))
        .bind(target.map_or("[]", |t| t.devices.as_str()))
        .bind(updated_at.0)
        .bind(wait_reason)
        .bind(count(blocked))
        .bind("0".repeat(width))
        .bind(width as i64);
    q = match indices {
        Indices::Run { first, last } => q
            .bind(i64::from(first))
            .bind(i64::from(tail.range.step.max(1)))
            .bind(i64::from(last)),
        Indices::List(list) => list.iter().fold(q, |q, &i| q.bind(i64::from(i))),
    };
    let done = q.execute(&mut **tx).await?;
    if done.rows_affected() != expected {
        return Err(StoreError::conflict(
            "session",
            tail.session_id(tail.index_at(0)),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Array `a1` of `first-last:step`, stored up to (not including) index `next`.
    fn tail(first: u32, last: u32, step: u32, next: u64) -> Tail {
        let range = ArrayRange {
            first,
            last,
            step,
            max_running: None,
        };
        Tail {
            id: "a1".into(),
            group: "g".into(),
            owner: "alice".into(),
            last: range.indices().last().unwrap(),
            range,
            next,
            priority: 0,
            request: "cpu=1".parse().unwrap(),
            image: None,
            kind: SessionType::Batch,
            constraints: Vec::new(),
            submitted_at: Timestamp(100),
            spec: Spec::default(),
            wait_reason: None,
            blocked_passes: 0,
        }
    }

    #[test]
    fn a_tail_holds_the_indices_on_its_steps_from_next_to_the_last() {
        let t = tail(0, 20, 5, 10);
        assert_eq!(t.len(), 3);
        assert_eq!((t.index_at(0), t.last_in_tail()), (10, 20));
        assert_eq!(t.position_of("a1x15"), Some(1));
        assert_eq!(t.position_of("a1x05"), None, "stored already");
        assert_eq!(t.position_of("a1x12"), None, "off its steps");
        assert_eq!(t.position_of("a1x25"), None, "past its last");
        assert_eq!(t.position_of("a2x15"), None, "another array's");
        assert_eq!(tail(0, 20, 5, 25).len(), 0);
        // The last index in steps, not the range's last, sets the width.
        assert_eq!(tail(0, 22, 5, 0).session_id(5), "a1x05");
    }

    #[test]
    fn indices_split_into_runs_on_their_steps_and_the_short_ones_left() {
        let mut indices: Vec<u32> = (0..20).map(|i| i * 3).collect(); // 0, 3, ..., 57
        indices.extend([61, 64, 67]); // a run too short
        indices.extend((0..10).map(|i| 100 + i * 3));
        let (runs, singles) = runs_of(&indices, 3);
        assert_eq!(runs, [(0, 57), (100, 127)]);
        assert_eq!(singles, [61, 64, 67]);
        assert_eq!(runs_of(&[], 1), (vec![], vec![]));
        assert_eq!(runs_of(&[u32::MAX], 1), (vec![], vec![u32::MAX]));
    }

    #[test]
    fn a_listing_takes_what_follows_its_keyset_in_its_order() {
        let t = tail(0, 9, 1, 4); // a1x4 .. a1x9
        let at = t.submitted_at;
        assert_eq!(t.listed(None, false, None), [4, 5, 6, 7, 8, 9]);
        assert_eq!(t.listed(None, false, Some(2)), [4, 5]);
        assert_eq!(t.listed(None, true, Some(2)), [9, 8]);
        assert_eq!(t.listed(Some((at, "a1x6")), false, None), [7, 8, 9]);
        assert_eq!(t.listed(Some((at, "a1x6")), true, None), [5, 4]);
        // An id that sorts between two of its sessions, or before all of them.
        assert_eq!(t.listed(Some((at, "a1x55")), false, Some(1)), [6]);
        assert_eq!(t.listed(Some((at, "a1x55")), true, None), [5, 4]);
        assert_eq!(t.listed(Some((at, "a1x2")), false, Some(1)), [4]);
        assert!(t.listed(Some((at, "a1x2")), true, None).is_empty());
        // A keyset position at another time takes all of it or nothing.
        let (before, after) = (Timestamp(99), Timestamp(101));
        assert_eq!(t.listed(Some((before, "z")), false, None).len(), 6);
        assert!(t.listed(Some((after, "a")), false, None).is_empty());
        assert_eq!(t.listed(Some((after, "a")), true, None).len(), 6);
        assert!(t.listed(Some((before, "z")), true, None).is_empty());
    }

    #[test]
    fn a_made_up_session_is_pending_since_its_submission_with_its_own_spec() {
        let mut t = tail(0, 99, 1, 0);
        t.spec.command = vec!["echo".into(), "{index}".into()];
        t.wait_reason = Some("waits".into());
        let r = t.record(42).unwrap();
        assert_eq!(r.session.id.0, "a1x42");
        assert_eq!(r.session.state, SessionState::Pending);
        assert_eq!(r.array_index, Some(42));
        assert_eq!(r.spec["command"], serde_json::json!(["echo", "42"]));
        assert_eq!(r.wait_reason.as_deref(), Some("waits"));
        assert_eq!((r.updated_at, r.history.len()), (Timestamp(100), 1));
    }
}
