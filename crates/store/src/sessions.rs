//! Sessions: what users submit, their state changes and their history.

use std::collections::BTreeMap;

use serde::Serialize;
use sqlx::any::AnyRow;

use corral_core::{AgentId, ArrayMember, Session, SessionId, SessionState, Slots, Timestamp};

use corral_api::arrays::member_spec;

use crate::array_tail::{store_members, tail_member, HAS_TAIL, TAIL_LEN};
use crate::codec::{count, name_of, release, to_json, Arg, Fields, Where};
use crate::error::{Result, StoreError};
use crate::events::{insert_event, NewEvent};
use crate::{locked, Backend, Store, Tx};

/// The columns `session_from_row` reads (what the cycle needs). Its array's limit is not one
/// of them: the snapshot reads it with the group's capped arrays, `session_columns` with a
/// sub-query.
macro_rules! core_session_columns {
    () => {
        "id, group_name, owner, priority, request, image, session_type, state, agent, \
         blocked_passes, submitted_at, constraints, devices, array_id"
    };
}
pub(crate) use core_session_columns;

/// The columns `record_from_row` reads, in one place so every query selects the same.
macro_rules! session_columns {
    () => {
        concat!(
            $crate::sessions::core_session_columns!(),
            ", allocation, updated_at, wait_reason, end_reason, spec, exit_code, started_at, \
             last_activity, batch_job, array_index, \
             (SELECT max_running FROM arrays WHERE arrays.id = sessions.array_id) \
             AS array_max_running, \
             CASE WHEN sessions.spec = 'null' THEN (SELECT a.spec FROM arrays a \
             WHERE a.id = sessions.array_id) END AS array_spec"
        )
    };
}
pub(crate) use session_columns;

/// A session as stored: the core's view plus what the manager keeps beside it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SessionRecord {
    pub session: Session,
    /// The manager's submit fields (command, env, inputs, outputs), stored as given.
    pub spec: serde_json::Value,
    /// What it holds on its agent while scheduled or running (its required shares when placed).
    pub allocation: Option<Slots>,
    /// Why it waits, from the last pass that left it pending.
    pub wait_reason: Option<String>,
    /// Why it ended (rejected, cancelled, failed...).
    pub end_reason: Option<String>,
    /// The exit code its command ended with, once it ran.
    pub exit_code: Option<i32>,
    /// When its agent reported it running.
    pub started_at: Option<Timestamp>,
    /// The last time someone used it through the API (for the idle policy).
    pub last_activity: Option<Timestamp>,
    /// When its state last changed.
    pub updated_at: Timestamp,
    /// The batch job that runs it, on a group whose sessions run as batch jobs (its key).
    pub batch_job: Option<String>,
    /// Its index in its array (`session.array`), if it is of one.
    pub array_index: Option<u32>,
    /// Its state changes, oldest first; filled by `get_session`, empty in lists.
    pub history: Vec<HistoryEntry>,
}

pub use corral_api::sessions::HistoryEntry;

/// Which sessions `list_sessions` returns: every given field must match. Ordered by
/// (submitted_at, id); `after_id` continues after that session (keyset paging).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SessionFilter {
    pub group: Option<String>,
    pub owner: Option<String>,
    pub state: Option<SessionState>,
    /// Sessions placed on this agent.
    pub agent: Option<String>,
    /// At most this many; `None`: all.
    pub limit: Option<u32>,
    pub after_id: Option<String>,
    /// Newest first (by submission, then id, both descending); `after_id` then continues
    /// towards older ones.
    pub newest_first: bool,
    /// Only those not ended (pending, scheduled, running), or only ended ones.
    pub active: Option<bool>,
    /// Only the sessions of an array, or only those of none.
    pub array: Option<ArraySelect>,
}

/// Which sessions a [`SessionFilter`] takes by their array.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ArraySelect {
    /// The sessions of this array.
    Of(String),
    /// The sessions of no array.
    Outside,
}

pub(crate) fn session_from_row(row: &AnyRow) -> Result<Session> {
    let f = Fields::new(row, "session", "id")?;
    Ok(Session {
        id: SessionId(f.text("id")?),
        group: f.text("group_name")?,
        owner: f.text("owner")?,
        priority: f.i32("priority")?,
        request: f.slots("request")?,
        image: f.opt_text("image")?,
        kind: f.name("session_type")?,
        submitted_at: f.time("submitted_at")?,
        state: f.name("state")?,
        agent: f.opt_text("agent")?.map(AgentId),
        blocked_passes: f.u32("blocked_passes")?,
        constraints: f.json("constraints")?,
        devices: f.json("devices")?,
        // Its limit, where the caller needs it, is read beside (see `core_session_columns`).
        array: f.opt_text("array_id")?.map(|id| ArrayMember {
            id,
            max_running: None,
        }),
    })
}

pub(crate) fn record_from_row(row: &AnyRow) -> Result<SessionRecord> {
    let f = Fields::new(row, "session", "id")?;
    let mut session = session_from_row(row)?;
    if let Some(array) = &mut session.array {
        array.max_running = f.opt_u32("array_max_running")?;
    }
    let mut spec: serde_json::Value = f.json("spec")?;
    let array_index = f.opt_u32("array_index")?;
    // A session of an array stored from its tail keeps no spec of its own: the array's, with
    // its index put in.
    if let (true, Some(array), Some(index)) = (spec.is_null(), &session.array, array_index) {
        let submitted: corral_api::sessions::Spec = f.json("array_spec")?;
        spec = serde_json::to_value(member_spec(&submitted, &array.id, index))
            .map_err(|e| StoreError::Corrupt(e.to_string()))?;
    }
    Ok(SessionRecord {
        session,
        spec,
        allocation: f.opt_slots("allocation")?,
        wait_reason: f.opt_text("wait_reason")?,
        end_reason: f.opt_text("end_reason")?,
        exit_code: f
            .opt_int("exit_code")?
            .map(|c| i32::try_from(c).map_err(|_| StoreError::Corrupt(format!("exit code {c}"))))
            .transpose()?,
        started_at: f.opt_time("started_at")?,
        last_activity: f.opt_time("last_activity")?,
        updated_at: f.time("updated_at")?,
        batch_job: f.opt_text("batch_job")?,
        array_index,
        history: Vec::new(),
    })
}

fn history_from_row(row: &AnyRow) -> Result<HistoryEntry> {
    let f = Fields::numbered(row, "session history", "id")?;
    Ok(HistoryEntry {
        at: f.time("at")?,
        state: f.name("state")?,
        reason: f.text("reason")?,
    })
}

pub(crate) async fn insert_history(
    tx: &mut Tx,
    session: &str,
    at: Timestamp,
    state: SessionState,
    reason: &str,
) -> Result<()> {
    sqlx::query("INSERT INTO session_history (session, at, state, reason) VALUES ($1, $2, $3, $4)")
        .bind(session)
        .bind(at.0)
        .bind(name_of(&state))
        .bind(reason)
        .execute(&mut **tx)
        .await?;
    Ok(())
}

/// Rows per multi-row statement: far below both databases' limits on bound parameters, and few
/// enough that binding stays cheap on SQLite, where sqlx looks each parameter's name up in a
/// list as long as the statement's (`sqlite3_bind_parameter_name`): binding n values costs n²,
/// which at 500 rows of six values was most of a pass that placed 20,000 sessions.
pub(crate) const ROWS_PER_STATEMENT: usize = 100;

/// `($1, $2, ...), ($k, ...)`: placeholders of `rows` rows of `width` values, from `$first`.
pub(crate) fn value_rows(rows: usize, width: usize, first: usize) -> String {
    (0..rows)
        .map(|r| {
            let cells: Vec<String> = (0..width)
                .map(|c| format!("${}", first + r * width + c))
                .collect();
            format!("({})", cells.join(", "))
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// Many history rows, a few statements.
pub(crate) async fn insert_history_many(
    tx: &mut Tx,
    rows: &[(&str, Timestamp, SessionState, String)],
) -> Result<()> {
    for chunk in rows.chunks(ROWS_PER_STATEMENT) {
        let sql = format!(
            "INSERT INTO session_history (session, at, state, reason) VALUES {}",
            value_rows(chunk.len(), 4, 1)
        );
        let mut q = sqlx::query(sqlx::AssertSqlSafe(sql));
        for (session, at, state, reason) in chunk {
            q = q
                .bind(*session)
                .bind(at.0)
                .bind(name_of(state))
                .bind(reason.as_str());
        }
        q.execute(&mut **tx).await?;
    }
    Ok(())
}

async fn load_history(tx: &mut Tx, session: &str) -> Result<Vec<HistoryEntry>> {
    sqlx::query("SELECT id, at, state, reason FROM session_history WHERE session = $1 ORDER BY id")
        .bind(session)
        .fetch_all(&mut **tx)
        .await?
        .iter()
        .map(history_from_row)
        .collect()
}

impl Store {
    /// Stores a submitted session with its spec and a first history row, "submitted".
    /// `NotFound` if its group does not exist, `Conflict` if its id is taken.
    pub async fn insert_session(
        &self,
        session: &Session,
        spec: &serde_json::Value,
        now: Timestamp,
    ) -> Result<()> {
        self.insert_sessions(&[(session, spec)], now).await
    }

    /// Stores a submitted session once more after an attempt whose outcome is unknown (the
    /// database went away before its commit was answered). `Ok` when that attempt had in fact
    /// stored it: the session under its id has its group, owner, submission time, request and
    /// spec. `Conflict` when another session holds the id.
    pub async fn insert_session_again(
        &self,
        session: &Session,
        spec: &serde_json::Value,
        now: Timestamp,
    ) -> Result<()> {
        match self.insert_session(session, spec, now).await {
            Err(StoreError::Conflict { what, id }) => {
                let stored = self.get_session(&session.id.0).await?;
                match stored {
                    Some(r)
                        if r.session.group == session.group
                            && r.session.owner == session.owner
                            && r.session.submitted_at == session.submitted_at
                            && r.session.request == session.request
                            && r.spec == *spec =>
                    {
                        Ok(())
                    }
                    _ => Err(StoreError::Conflict { what, id }),
                }
            }
            other => other,
        }
    }

    /// Stores several submitted sessions in one transaction (one commit for a burst of
    /// submits): all of them, or, on the first missing group or taken id, none.
    pub async fn insert_sessions(
        &self,
        sessions: &[(&Session, &serde_json::Value)],
        now: Timestamp,
    ) -> Result<()> {
        let mut tx = self.write_tx().await?;
        let mut groups_seen: Vec<&str> = Vec::new();
        for (session, spec) in sessions {
            if !groups_seen.contains(&session.group.as_str()) {
                self.hold_group(&mut tx, &session.group).await?;
                groups_seen.push(&session.group);
            }
            insert_one(&mut tx, session, spec, None, now).await?;
        }
        tx.commit().await?;
        Ok(())
    }

    /// Keeps the group from being deleted until `tx` ends (KEY SHARE: without waiting for
    /// passes); `NotFound` if there is no such group.
    pub(crate) async fn hold_group(&self, tx: &mut Tx, group: &str) -> Result<()> {
        let found = sqlx::query(self.locking((
            "SELECT name FROM groups WHERE name = $1",
            "SELECT name FROM groups WHERE name = $1 FOR KEY SHARE",
        )))
        .bind(group)
        .fetch_optional(&mut **tx)
        .await?;
        if found.is_none() {
            return Err(StoreError::not_found("group", group));
        }
        Ok(())
    }

    /// The session with its full history.
    pub async fn get_session(&self, id: &str) -> Result<Option<SessionRecord>> {
        let mut tx = self.read_tx().await?;
        let record = fetch_record(&mut tx, id, false, self).await?;
        tx.commit().await?;
        Ok(record)
    }

    /// Sessions matching the filter, by (submitted_at, id) (or the reverse), without history.
    /// `NotFound` if `after_id` names no session.
    /// How many sessions each group has in each state (`pending`, `running`...): what the
    /// metrics show.
    pub async fn count_sessions(&self) -> Result<Vec<(String, String, i64)>> {
        let mut tx = self.read_tx().await?;
        let rows: Vec<(String, String, i64)> = sqlx::query_as(
            "SELECT group_name, state, COUNT(*) FROM sessions GROUP BY group_name, state",
        )
        .fetch_all(&mut *tx)
        .await?;
        // The arrays' sessions without rows are pending.
        let tails: Vec<(String, i64)> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
            "SELECT group_name, CAST(SUM({TAIL_LEN}) AS BIGINT) FROM arrays WHERE {HAS_TAIL} \
             GROUP BY group_name"
        )))
        .fetch_all(&mut *tx)
        .await?;
        tx.commit().await?;
        let mut counts: BTreeMap<(String, String), i64> =
            rows.into_iter().map(|(g, s, n)| ((g, s), n)).collect();
        for (group, n) in tails {
            *counts.entry((group, "pending".into())).or_default() += n;
        }
        Ok(counts.into_iter().map(|((g, s), n)| (g, s, n)).collect())
    }

    pub async fn list_sessions(&self, filter: &SessionFilter) -> Result<Vec<SessionRecord>> {
        let mut w = Where::default();
        // The arrays whose tails (pending, without rows) the filter takes.
        let mut tails = Where::default();
        if let Some(group) = &filter.group {
            w.and("group_name = ?", [Arg::Text(group.clone())]);
            tails.and("group_name = ?", [Arg::Text(group.clone())]);
        }
        if let Some(owner) = &filter.owner {
            w.and("owner = ?", [Arg::Text(owner.clone())]);
            tails.and("owner = ?", [Arg::Text(owner.clone())]);
        }
        if let Some(state) = &filter.state {
            w.and("state = ?", [Arg::Text(name_of(state))]);
        }
        if let Some(agent) = &filter.agent {
            w.and("agent = ?", [Arg::Text(agent.clone())]);
        }
        match filter.active {
            Some(true) => w.and("state IN ('pending', 'scheduled', 'running')", []),
            Some(false) => w.and("state NOT IN ('pending', 'scheduled', 'running')", []),
            None => {}
        }
        match &filter.array {
            Some(ArraySelect::Of(array)) => {
                w.and("array_id = ?", [Arg::Text(array.clone())]);
                tails.and("id = ?", [Arg::Text(array.clone())]);
            }
            Some(ArraySelect::Outside) => w.and("array_id IS NULL", []),
            None => {}
        }
        let takes_tails = matches!(filter.state, None | Some(SessionState::Pending))
            && filter.agent.is_none()
            && filter.active != Some(false)
            && filter.array != Some(ArraySelect::Outside);
        // An array's sessions share their submission time: by id alone is the same order (by
        // index), and the index on (array_id, state, id) serves it without a sort.
        let one_array = matches!(filter.array, Some(ArraySelect::Of(_)));
        let mut tx = self.read_tx().await?;
        let mut after = None;
        if let Some(after_id) = &filter.after_id {
            let at: Option<i64> =
                sqlx::query_scalar("SELECT submitted_at FROM sessions WHERE id = $1")
                    .bind(after_id)
                    .fetch_optional(&mut *tx)
                    .await?;
            let at = match at {
                Some(at) => at,
                None => tail_member(&mut tx, after_id, false)
                    .await?
                    .map(|(tail, _)| tail.submitted_at.0)
                    .ok_or_else(|| StoreError::not_found("session", after_id))?,
            };
            after = Some((Timestamp(at), after_id.as_str()));
            if one_array {
                let keyset = if filter.newest_first {
                    "id < ?"
                } else {
                    "id > ?"
                };
                w.and(keyset, [Arg::Text(after_id.clone())]);
            } else {
                let keyset = if filter.newest_first {
                    "(submitted_at < ? OR (submitted_at = ? AND id < ?))"
                } else {
                    "(submitted_at > ? OR (submitted_at = ? AND id > ?))"
                };
                w.and(
                    keyset,
                    [Arg::Int(at), Arg::Int(at), Arg::Text(after_id.clone())],
                );
            }
        }
        let order = match (one_array, filter.newest_first) {
            (true, true) => "id DESC",
            (true, false) => "id",
            (false, true) => "submitted_at DESC, id DESC",
            (false, false) => "submitted_at, id",
        };
        let mut sql = format!(
            "SELECT {} FROM sessions{} ORDER BY {order}",
            session_columns!(),
            w.sql()
        );
        if let Some(limit) = filter.limit {
            sql.push_str(&format!(" LIMIT {limit}"));
        }
        let mut records = w
            .query(sql)
            .fetch_all(&mut *tx)
            .await?
            .iter()
            .map(record_from_row)
            .collect::<Result<Vec<_>>>()?;
        if takes_tails {
            crate::array_tail::add_listed(&mut tx, tails, filter, after, &mut records).await?;
        }
        tx.commit().await?;
        Ok(records)
    }

    /// Cancels a pending, scheduled or running session; see [`Store::end_session`].
    pub async fn cancel_session(
        &self,
        id: &str,
        now: Timestamp,
        reason: &str,
    ) -> Result<SessionRecord> {
        self.end_session(id, SessionState::Cancelled, now, reason)
            .await
    }

    /// Ends a pending, scheduled or running session as `state` (succeeded, failed, cancelled or
    /// rejected) with its reason, and in the same transaction frees what it held on its agent,
    /// writes a history row and an event (kind: the new state). `Conflict` if it had already
    /// ended, `NotFound` if there is no such session, `Refused` if `state` is not an end state.
    pub async fn end_session(
        &self,
        id: &str,
        state: SessionState,
        now: Timestamp,
        reason: &str,
    ) -> Result<SessionRecord> {
        self.finish_session(id, state, None, now, reason).await
    }

    /// Ends a session as `end_session` does, recording the exit code its command ended with.
    pub async fn finish_session(
        &self,
        id: &str,
        state: SessionState,
        exit_code: Option<i32>,
        now: Timestamp,
        reason: &str,
    ) -> Result<SessionRecord> {
        if !is_end(state) {
            return Err(StoreError::Refused(format!(
                "{} is not a state a session ends in",
                name_of(&state)
            )));
        }
        let mut tx = self.write_tx().await?;
        let record = fetch_record(&mut tx, id, true, self)
            .await?
            .ok_or_else(|| StoreError::not_found("session", id))?;
        let before = record.session.state;
        if is_end(before) {
            return Err(StoreError::conflict("session", id));
        }
        sqlx::query(
            "UPDATE sessions SET state = $2, end_reason = $3, wait_reason = NULL, updated_at = $4, \
             exit_code = $5 WHERE id = $1",
        )
        .bind(id)
        .bind(name_of(&state))
        .bind(reason)
        .bind(now.0)
        .bind(exit_code.map(i64::from))
        .execute(&mut *tx)
        .await?;
        self.left_state(&mut tx, &record, state, name_of(&state), reason, now)
            .await?;
        let ended = fetch_record(&mut tx, id, false, self)
            .await?
            .ok_or_else(|| StoreError::not_found("session", id))?;
        tx.commit().await?;
        Ok(ended)
    }

    /// Someone used the session through the API: its idle time starts again.
    pub async fn touch_session(&self, id: &str, now: Timestamp) -> Result<()> {
        sqlx::query("UPDATE sessions SET last_activity = $2 WHERE id = $1 AND state = 'running'")
            .bind(id)
            .bind(now.0)
            .execute(&self.write)
            .await?;
        Ok(())
    }

    /// A scheduled session has started on its agent. `Conflict` unless it was scheduled.
    pub async fn start_session(&self, id: &str, now: Timestamp) -> Result<()> {
        let mut tx = self.write_tx().await?;
        let done = sqlx::query(
            "UPDATE sessions SET state = 'running', updated_at = $2, started_at = $2, \
             last_activity = $2 WHERE id = $1 AND state = 'scheduled'",
        )
        .bind(id)
        .bind(now.0)
        .execute(&mut *tx)
        .await?;
        if done.rows_affected() == 0 {
            let exists: Option<String> =
                sqlx::query_scalar("SELECT id FROM sessions WHERE id = $1")
                    .bind(id)
                    .fetch_optional(&mut *tx)
                    .await?;
            return Err(match exists {
                None => StoreError::not_found("session", id),
                Some(_) => StoreError::conflict("session", id),
            });
        }
        insert_history(&mut tx, id, now, SessionState::Running, "started").await?;
        tx.commit().await?;
        Ok(())
    }

    /// Agent `agent` refused a session placed on it that it had not started (its devices
    /// could not hold the grant): puts it back in the queue, freeing what it held there, with
    /// the reason in its history and an event, in one transaction. `Conflict` unless it was
    /// scheduled on that agent.
    pub async fn requeue_session(
        &self,
        id: &str,
        agent: &str,
        now: Timestamp,
        reason: &str,
    ) -> Result<()> {
        self.requeue_from(id, agent, &[SessionState::Scheduled], now, reason)
            .await
    }

    /// A session agent `agent` held (scheduled or running) and stopped goes back to the queue,
    /// as [`Store::requeue_session`] does; `Conflict` if it is no longer held there.
    pub async fn requeue_held_session(
        &self,
        id: &str,
        agent: &str,
        now: Timestamp,
        reason: &str,
    ) -> Result<()> {
        let held = [SessionState::Scheduled, SessionState::Running];
        self.requeue_from(id, agent, &held, now, reason).await
    }

    async fn requeue_from(
        &self,
        id: &str,
        agent: &str,
        from: &[SessionState],
        now: Timestamp,
        reason: &str,
    ) -> Result<()> {
        let mut tx = self.write_tx().await?;
        let record = fetch_record(&mut tx, id, true, self)
            .await?
            .ok_or_else(|| StoreError::not_found("session", id))?;
        let on_agent = record.session.agent.as_ref().is_some_and(|a| a.0 == agent);
        if !from.contains(&record.session.state) || !on_agent {
            return Err(StoreError::conflict("session", id));
        }
        sqlx::query(
            "UPDATE sessions SET state = 'pending', agent = NULL, allocation = NULL, \
             devices = '[]', wait_reason = NULL, blocked_passes = 0, updated_at = $2 \
             WHERE id = $1",
        )
        .bind(id)
        .bind(now.0)
        .execute(&mut *tx)
        .await?;
        let kind = "requeued".to_string();
        self.left_state(&mut tx, &record, SessionState::Pending, kind, reason, now)
            .await?;
        tx.commit().await?;
        Ok(())
    }

    /// Takes `held` off the agent's allocation (never below zero), keeping `idle_since`.
    /// What a session leaving the state `record` read goes with, in the same transaction: its
    /// history row (now in `to`), what it held on its agent given back, and an event of `kind`.
    async fn left_state(
        &self,
        tx: &mut Tx,
        record: &SessionRecord,
        to: SessionState,
        kind: String,
        reason: &str,
        now: Timestamp,
    ) -> Result<()> {
        let session = &record.session;
        insert_history(tx, &session.id.0, now, to, reason).await?;
        if let (true, Some(agent), Some(held)) = (
            session.state.holds_capacity(),
            &session.agent,
            &record.allocation,
        ) {
            self.release(tx, &agent.0, held, now).await?;
        }
        let event = NewEvent {
            at: now,
            group: Some(session.group.clone()),
            session: Some(session.id.0.clone()),
            agent: session.agent.as_ref().map(|a| a.0.clone()),
            kind,
            message: reason.to_string(),
        };
        insert_event(tx, &event).await?;
        Ok(())
    }

    pub(crate) async fn release(
        &self,
        tx: &mut Tx,
        agent: &str,
        held: &Slots,
        now: Timestamp,
    ) -> Result<()> {
        let row =
            sqlx::query(self.locking(locked!("SELECT id, allocated FROM agents WHERE id = $1")))
                .bind(agent)
                .fetch_optional(&mut **tx)
                .await?;
        let Some(row) = row else {
            return Ok(()); // The agent is gone: nothing to free.
        };
        let allocated = Fields::new(&row, "agent", "id")?.slots("allocated")?;
        let left = release(&allocated, held);
        sqlx::query(
            "UPDATE agents SET allocated = $2, \
             idle_since = CASE WHEN $2 = '' THEN COALESCE(idle_since, $3) ELSE NULL END \
             WHERE id = $1",
        )
        .bind(agent)
        .bind(left.to_string())
        .bind(now.0)
        .execute(&mut **tx)
        .await?;
        Ok(())
    }
}

fn is_end(state: SessionState) -> bool {
    !matches!(
        state,
        SessionState::Pending | SessionState::Scheduled | SessionState::Running
    )
}

/// Inserts one submitted session (run by batch job `batch_job`, if given) with its first
/// history row.
pub(crate) async fn insert_one(
    tx: &mut Tx,
    session: &Session,
    spec: &serde_json::Value,
    batch_job: Option<&str>,
    now: Timestamp,
) -> Result<()> {
    let done = sqlx::query(
        "INSERT INTO sessions (id, group_name, owner, priority, request, image, session_type, \
         state, agent, allocation, blocked_passes, submitted_at, updated_at, wait_reason, \
         end_reason, spec, batch_job, constraints) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, NULL, $10, $11, $12, NULL, NULL, $13, $14, \
         $15) \
         ON CONFLICT (id) DO NOTHING",
    )
    .bind(&session.id.0)
    .bind(&session.group)
    .bind(&session.owner)
    .bind(i64::from(session.priority))
    .bind(session.request.to_string())
    .bind(session.image.as_deref())
    .bind(name_of(&session.kind))
    .bind(name_of(&session.state))
    .bind(session.agent.as_ref().map(|a| a.0.as_str()))
    .bind(count(session.blocked_passes))
    .bind(session.submitted_at.0)
    .bind(now.0)
    .bind(to_json(spec)?)
    .bind(batch_job)
    .bind(to_json(&session.constraints)?)
    .execute(&mut **tx)
    .await?;
    if done.rows_affected() == 0 {
        return Err(StoreError::conflict("session", &session.id));
    }
    insert_history(tx, &session.id.0, now, session.state, "submitted").await
}

async fn fetch_record(
    tx: &mut Tx,
    id: &str,
    lock: bool,
    store: &Store,
) -> Result<Option<SessionRecord>> {
    let sql = if lock {
        store.locking(locked!(
            "SELECT ",
            session_columns!(),
            " FROM sessions WHERE id = $1"
        ))
    } else {
        concat!(
            "SELECT ",
            session_columns!(),
            " FROM sessions WHERE id = $1"
        )
    };
    let mut row = sqlx::query(sql).bind(id).fetch_optional(&mut **tx).await?;
    if row.is_none() {
        // One of an array's tail, without a row: made up to read, stored (with those before
        // it) to change.
        let for_update = lock && store.backend == Backend::Postgres;
        let Some((tail, index)) = tail_member(tx, id, for_update).await? else {
            return Ok(None);
        };
        if !lock {
            return tail.record(index).map(Some);
        }
        store_members(tx, &tail, index, &BTreeMap::new(), tail.submitted_at).await?;
        row = sqlx::query(sql).bind(id).fetch_optional(&mut **tx).await?;
    }
    let Some(row) = row else {
        return Ok(None);
    };
    let mut record = record_from_row(&row)?;
    record.history = load_history(tx, id).await?;
    Ok(Some(record))
}
