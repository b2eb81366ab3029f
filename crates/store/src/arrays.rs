//! Session arrays: an array and its sessions stored in one transaction with multi-row inserts,
//! read with its sessions counted by state, listed, and cancelled as one; and what a pass reads
//! of the arrays whose limit (`%N`) keeps some of their sessions waiting.

use std::collections::BTreeMap;

use sqlx::any::AnyRow;
use sqlx::Row;

use corral_api::arrays::StateCounts;
use corral_core::schedule::MAX_PENDING_PER_PASS;
use corral_core::{ArrayRange, Session, SessionState, SessionType, Slots, Timestamp};

use crate::array_tail::{read_tail, store_members, HAS_TAIL, TAIL_LEN};
use crate::codec::{from_name, name_of, to_json, Arg, Fields, Where};
use crate::error::{Result, StoreError};
use crate::{Backend, Store, Tx};

/// Ids per statement where a statement names sessions one by one (as cheap to bind).
const IDS_PER_STATEMENT: usize = 300;

/// An array to store: what all its sessions share, and each index's own.
pub struct NewArray<'a> {
    pub id: &'a str,
    pub range: ArrayRange,
    /// What every session of it shares: group, owner, priority, request, image, type,
    /// submission time and constraints (its id, state and array are not read: each session is
    /// pending, with its own id).
    pub session: &'a Session,
    /// What was submitted for every index (`{index}` not replaced), kept with the array.
    pub spec: &'a serde_json::Value,
    /// The wait reason of its sessions until a pass reads them (that of a limit, `%N`);
    /// `None` leaves them without one.
    pub waiting_reason: Option<&'a str>,
}

/// An array as stored, with its sessions counted.
#[derive(Debug, Clone, PartialEq)]
pub struct ArrayRecord {
    pub id: String,
    pub group: String,
    pub owner: String,
    pub range: ArrayRange,
    /// How many sessions it made.
    pub sessions: u32,
    pub priority: i32,
    pub request: Slots,
    pub image: Option<String>,
    pub kind: SessionType,
    /// What was submitted for every index, `{index}` not replaced.
    pub spec: serde_json::Value,
    pub submitted_at: Timestamp,
    /// Its sessions by state now.
    pub counts: StateCounts,
    /// The highest exit code of its ended sessions, if any exited with one.
    pub max_exit_code: Option<i32>,
}

/// Which arrays `list_arrays` returns: every given field must match. Ordered by
/// (submitted_at, id); `after_id` continues after that array (keyset paging).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ArrayFilter {
    pub group: Option<String>,
    pub owner: Option<String>,
    /// Only arrays with a session not ended, or only those whose sessions have all ended.
    pub active: Option<bool>,
    /// At most this many; `None`: all.
    pub limit: Option<u32>,
    pub after_id: Option<String>,
    /// Newest first; `after_id` then continues towards older ones.
    pub newest_first: bool,
}

/// What cancelling an array did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArrayCancel {
    /// The array's group.
    pub group: String,
    /// The sessions it cancelled (those not ended), by id.
    pub cancelled: Vec<String>,
    /// The agents that held some of them (they stop them), by id.
    pub agents: Vec<String>,
    /// Its sessions by state once cancelled.
    pub counts: StateCounts,
}

/// A capped array of a group with pending sessions, as a pass reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CappedArray {
    pub id: String,
    pub max_running: u32,
    /// Its sessions scheduled or running now.
    pub holding: u32,
}

const ARRAY_COLUMNS: &str = "id, group_name, owner, first_index, last_index, step, max_running, \
     sessions, priority, request, image, session_type, spec, submitted_at";

fn array_from_row(row: &AnyRow) -> Result<ArrayRecord> {
    let f = Fields::new(row, "array", "id")?;
    Ok(ArrayRecord {
        id: f.text("id")?,
        group: f.text("group_name")?,
        owner: f.text("owner")?,
        range: ArrayRange {
            first: f.u32("first_index")?,
            last: f.u32("last_index")?,
            step: f.u32("step")?,
            max_running: f.opt_u32("max_running")?,
        },
        sessions: f.u32("sessions")?,
        priority: f.i32("priority")?,
        request: f.slots("request")?,
        image: f.opt_text("image")?,
        kind: f.name("session_type")?,
        spec: f.json("spec")?,
        submitted_at: f.time("submitted_at")?,
        counts: StateCounts::default(),
        max_exit_code: None,
    })
}

/// `$first, $first+1, ...`: `n` placeholders.
fn placeholders(n: usize, first: usize) -> String {
    (first..first + n)
        .map(|i| format!("${i}"))
        .collect::<Vec<_>>()
        .join(", ")
}

impl Store {
    /// Stores an array: one row, its sessions pending in its tail (`array_tail`), stored each
    /// when it is first needed. `NotFound` if its group does not exist, `Conflict` if its id
    /// is taken, `Refused` if its range is not one (`ArrayRange::validate`).
    pub async fn insert_array(&self, array: &NewArray<'_>) -> Result<()> {
        let range = array.range;
        range
            .validate()
            .map_err(|e| StoreError::Refused(e.to_string()))?;
        let s = array.session;
        let mut tx = self.write_tx().await?;
        self.hold_group(&mut tx, &s.group).await?;
        let done = sqlx::query(
            "INSERT INTO arrays (id, group_name, owner, first_index, last_index, step, \
             max_running, sessions, priority, request, image, session_type, spec, submitted_at, \
             next_index, constraints, tail_wait_reason, tail_blocked_passes) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $4, $15, $16, 0) \
             ON CONFLICT (id) DO NOTHING",
        )
        .bind(array.id)
        .bind(&s.group)
        .bind(&s.owner)
        .bind(i64::from(range.first))
        .bind(i64::from(range.last))
        .bind(i64::from(range.step))
        .bind(range.max_running.map(i64::from))
        .bind(range.len() as i64)
        .bind(i64::from(s.priority))
        .bind(s.request.to_string())
        .bind(s.image.as_deref())
        .bind(name_of(&s.kind))
        .bind(to_json(array.spec)?)
        .bind(s.submitted_at.0)
        .bind(to_json(&s.constraints)?)
        .bind(array.waiting_reason)
        .execute(&mut *tx)
        .await?;
        if done.rows_affected() == 0 {
            return Err(StoreError::conflict("array", array.id));
        }
        tx.commit().await?;
        Ok(())
    }

    /// The owner of the array, without counting its sessions (who may see it); `None` if
    /// there is no such array.
    pub async fn array_owner(&self, id: &str) -> Result<Option<String>> {
        Ok(sqlx::query_scalar("SELECT owner FROM arrays WHERE id = $1")
            .bind(id)
            .fetch_optional(&self.read)
            .await?)
    }

    /// The array with its sessions counted by state and its highest exit code.
    pub async fn get_array(&self, id: &str) -> Result<Option<ArrayRecord>> {
        let mut tx = self.read_tx().await?;
        let row = sqlx::query(sqlx::AssertSqlSafe(format!(
            "SELECT {ARRAY_COLUMNS} FROM arrays WHERE id = $1"
        )))
        .bind(id)
        .fetch_optional(&mut *tx)
        .await?;
        let mut arrays = row.iter().map(array_from_row).collect::<Result<Vec<_>>>()?;
        count_sessions_of(&mut tx, &mut arrays).await?;
        tx.commit().await?;
        Ok(arrays.pop())
    }

    /// Arrays matching the filter, by (submitted_at, id) (or the reverse), each with its
    /// sessions counted. `NotFound` if `after_id` names no array.
    pub async fn list_arrays(&self, filter: &ArrayFilter) -> Result<Vec<ArrayRecord>> {
        let mut tx = self.read_tx().await?;
        let mut w = Where::default();
        if let Some(group) = &filter.group {
            w.and("group_name = ?", [Arg::Text(group.clone())]);
        }
        if let Some(owner) = &filter.owner {
            w.and("owner = ?", [Arg::Text(owner.clone())]);
        }
        if let Some(active) = filter.active {
            let exists = "(next_index <= last_index OR EXISTS (SELECT 1 FROM sessions s \
                 WHERE s.array_id = arrays.id AND s.state IN ('pending', 'scheduled', 'running')))";
            if active {
                w.and(exists, []);
            } else {
                w.and(&format!("NOT {exists}"), []);
            }
        }
        if let Some(after) = &filter.after_id {
            let at: Option<i64> =
                sqlx::query_scalar("SELECT submitted_at FROM arrays WHERE id = $1")
                    .bind(after)
                    .fetch_optional(&mut *tx)
                    .await?;
            let at = at.ok_or_else(|| StoreError::not_found("array", after))?;
            let keyset = if filter.newest_first {
                "(submitted_at < ? OR (submitted_at = ? AND id < ?))"
            } else {
                "(submitted_at > ? OR (submitted_at = ? AND id > ?))"
            };
            w.and(
                keyset,
                [Arg::Int(at), Arg::Int(at), Arg::Text(after.clone())],
            );
        }
        let order = if filter.newest_first {
            "submitted_at DESC, id DESC"
        } else {
            "submitted_at, id"
        };
        let mut sql = format!(
            "SELECT {ARRAY_COLUMNS} FROM arrays{} ORDER BY {order}",
            w.sql()
        );
        if let Some(limit) = filter.limit {
            sql.push_str(&format!(" LIMIT {limit}"));
        }
        let mut arrays = w
            .query(sql)
            .fetch_all(&mut *tx)
            .await?
            .iter()
            .map(array_from_row)
            .collect::<Result<Vec<_>>>()?;
        count_sessions_of(&mut tx, &mut arrays).await?;
        tx.commit().await?;
        Ok(arrays)
    }

    /// Cancels every session of the array that has not ended (pending, scheduled or running),
    /// and nothing else, in one transaction: each gets its history row and a `cancelled`
    /// event with `reason`, and what those placed held on their agents is given back.
    /// Cancelling an array whose sessions have all ended changes nothing. `NotFound` if there
    /// is no such array.
    pub async fn cancel_array(
        &self,
        id: &str,
        now: Timestamp,
        reason: &str,
    ) -> Result<ArrayCancel> {
        let mut tx = self.write_tx().await?;
        let group: Option<String> = sqlx::query_scalar(self.locking(crate::locked!(
            "SELECT group_name FROM arrays WHERE id = $1"
        )))
        .bind(id)
        .fetch_optional(&mut *tx)
        .await?;
        let group = group.ok_or_else(|| StoreError::not_found("array", id))?;
        // Its tail stored first (pending), so that every session it cancels has a row.
        let for_update = self.backend == Backend::Postgres;
        if let Some(tail) = read_tail(&mut tx, id, for_update).await? {
            if tail.len() > 0 {
                store_members(&mut tx, &tail, tail.last_in_tail(), &BTreeMap::new(), now).await?;
            }
        }
        // The agents its placed sessions hold capacity on, locked first and in id order, as a
        // pass locks agents before it places sessions: the two wait for each other, never in a
        // cycle.
        if self.backend == Backend::Postgres {
            sqlx::query(
                "SELECT id FROM agents WHERE id IN (SELECT agent FROM sessions \
                 WHERE array_id = $1 AND state IN ('scheduled', 'running')) ORDER BY id \
                 FOR UPDATE",
            )
            .bind(id)
            .fetch_all(&mut *tx)
            .await?;
        }
        let set = "SET state = 'cancelled', end_reason = $2, wait_reason = NULL, updated_at = $3";
        let held = sqlx::query(sqlx::AssertSqlSafe(format!(
            "UPDATE sessions {set} WHERE array_id = $1 AND state IN ('scheduled', 'running') \
             RETURNING id, agent, allocation"
        )))
        .bind(id)
        .bind(reason)
        .bind(now.0)
        .fetch_all(&mut *tx)
        .await?;
        let pending: Vec<String> = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
            "UPDATE sessions {set} WHERE array_id = $1 AND state = 'pending' RETURNING id"
        )))
        .bind(id)
        .bind(reason)
        .bind(now.0)
        .fetch_all(&mut *tx)
        .await?;
        // What the placed ones held, added up per agent.
        let mut freed: BTreeMap<String, Slots> = BTreeMap::new();
        let mut cancelled = Vec::with_capacity(held.len() + pending.len());
        for row in &held {
            let f = Fields::new(row, "session", "id")?;
            cancelled.push(f.text("id")?);
            if let (Some(agent), Some(allocation)) =
                (f.opt_text("agent")?, f.opt_slots("allocation")?)
            {
                let total = freed.entry(agent).or_default();
                if let Ok(sum) = total.checked_add(&allocation) {
                    *total = sum;
                }
            }
        }
        cancelled.extend(pending);
        cancelled.sort();
        for chunk in cancelled.chunks(IDS_PER_STATEMENT) {
            let list = placeholders(chunk.len(), 3);
            for sql in [
                format!(
                    "INSERT INTO session_history (session, at, state, reason) \
                     SELECT id, $1, 'cancelled', $2 FROM sessions WHERE id IN ({list}) \
                     ORDER BY id"
                ),
                format!(
                    "INSERT INTO events (at, group_name, session, agent, kind, message) \
                     SELECT $1, group_name, id, agent, 'cancelled', $2 FROM sessions \
                     WHERE id IN ({list}) ORDER BY id"
                ),
            ] {
                let mut q = sqlx::query(sqlx::AssertSqlSafe(sql))
                    .bind(now.0)
                    .bind(reason);
                for session in chunk {
                    q = q.bind(session.as_str());
                }
                q.execute(&mut *tx).await?;
            }
        }
        for (agent, held) in &freed {
            self.release(&mut tx, agent, held, now).await?;
        }
        let mut counts = BTreeMap::from([(id.to_string(), StateCounts::default())]);
        count_states(&mut tx, &mut counts).await?;
        tx.commit().await?;
        Ok(ArrayCancel {
            group,
            cancelled,
            agents: freed.into_keys().collect(),
            counts: counts.into_values().next().unwrap_or_default(),
        })
    }
}

/// Fills in the counts by state and the highest exit code of each of `arrays`.
async fn count_sessions_of(tx: &mut Tx, arrays: &mut [ArrayRecord]) -> Result<()> {
    if arrays.is_empty() {
        return Ok(());
    }
    let mut counts: BTreeMap<String, StateCounts> = arrays
        .iter()
        .map(|a| (a.id.clone(), StateCounts::default()))
        .collect();
    count_states(tx, &mut counts).await?;
    // Only failed sessions exit with a code other than 0: a succeeded one exited with 0. So
    // the highest code reads the failed ones alone (few, as a rule), not every session.
    let mut codes: BTreeMap<String, i64> = BTreeMap::new();
    let ids: Vec<&str> = arrays.iter().map(|a| a.id.as_str()).collect();
    for chunk in ids.chunks(IDS_PER_STATEMENT) {
        let sql = format!(
            "SELECT array_id, MAX(exit_code) AS code FROM sessions \
             WHERE array_id IN ({}) AND state = 'failed' AND exit_code IS NOT NULL \
             GROUP BY array_id",
            placeholders(chunk.len(), 1)
        );
        let mut q = sqlx::query(sqlx::AssertSqlSafe(sql));
        for id in chunk {
            q = q.bind(*id);
        }
        for row in q.fetch_all(&mut **tx).await? {
            let array: String = row.try_get("array_id")?;
            let code: Option<i64> = row.try_get("code")?;
            if let Some(code) = code {
                codes.insert(array, code);
            }
        }
    }
    for a in arrays.iter_mut() {
        a.counts = counts.get(&a.id).copied().unwrap_or_default();
        let failed = codes.get(&a.id).and_then(|&c| i32::try_from(c).ok());
        let succeeded = (a.counts.succeeded > 0).then_some(0);
        a.max_exit_code = failed.max(succeeded);
    }
    Ok(())
}

/// Adds up the sessions of each array of `counts` by state (from the index on array and state,
/// not the sessions' rows; those of its tail, without rows, are pending).
async fn count_states(tx: &mut Tx, counts: &mut BTreeMap<String, StateCounts>) -> Result<()> {
    let ids: Vec<String> = counts.keys().cloned().collect();
    for chunk in ids.chunks(IDS_PER_STATEMENT) {
        let sql = format!(
            "SELECT id, {TAIL_LEN} AS n FROM arrays WHERE id IN ({}) AND {HAS_TAIL}",
            placeholders(chunk.len(), 1)
        );
        let mut q = sqlx::query(sqlx::AssertSqlSafe(sql));
        for id in chunk {
            q = q.bind(id.as_str());
        }
        for row in q.fetch_all(&mut **tx).await? {
            let array: String = row.try_get("id")?;
            let n: i64 = row.try_get("n")?;
            if let Some(c) = counts.get_mut(&array) {
                c.add(SessionState::Pending, u32::try_from(n).unwrap_or(u32::MAX));
            }
        }
    }
    for chunk in ids.chunks(IDS_PER_STATEMENT) {
        let sql = format!(
            "SELECT array_id, state, COUNT(*) AS n FROM sessions WHERE array_id IN ({}) \
             GROUP BY array_id, state",
            placeholders(chunk.len(), 1)
        );
        let mut q = sqlx::query(sqlx::AssertSqlSafe(sql));
        for id in chunk {
            q = q.bind(id.as_str());
        }
        for row in q.fetch_all(&mut **tx).await? {
            let array: String = row.try_get("array_id")?;
            let state: String = row.try_get("state")?;
            let n: i64 = row.try_get("n")?;
            let state: SessionState = from_name(&state).ok_or_else(|| {
                StoreError::Corrupt(format!("array {array:?}: a session in state {state:?}"))
            })?;
            if let Some(c) = counts.get_mut(&array) {
                c.add(state, u32::try_from(n).unwrap_or(u32::MAX));
            }
        }
    }
    Ok(())
}

/// The group's arrays with a limit and pending sessions, by id, each with how many of its
/// sessions hold capacity now.
pub(crate) async fn capped_with_pending(tx: &mut Tx, group: &str) -> Result<Vec<CappedArray>> {
    let rows = sqlx::query(
        "SELECT a.id, a.max_running, \
         (SELECT COUNT(*) FROM sessions h WHERE h.array_id = a.id \
          AND h.state IN ('scheduled', 'running')) AS holding \
         FROM arrays a WHERE a.group_name = $1 AND a.max_running IS NOT NULL \
         AND (a.next_index <= a.last_index \
              OR EXISTS (SELECT 1 FROM sessions p WHERE p.array_id = a.id AND p.state = 'pending')) \
         ORDER BY a.id",
    )
    .bind(group)
    .fetch_all(&mut **tx)
    .await?;
    rows.iter()
        .map(|row| {
            let f = Fields::new(row, "array", "id")?;
            Ok(CappedArray {
                id: f.text("id")?,
                max_running: f.u32("max_running")?,
                holding: f.u32("holding")?,
            })
        })
        .collect()
}

/// How many pending sessions of a capped array a pass reads: those its limit lets be placed
/// (`max_running - holding`), and never more than a pass reads in all.
pub(crate) fn readable(array: &CappedArray) -> usize {
    (array.max_running.saturating_sub(array.holding) as usize).min(MAX_PENDING_PER_PASS)
}
