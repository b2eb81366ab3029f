//! The cycle's write: one pass's decisions in one guarded transaction, in named steps (reject,
//! launch, agents, placements, waiting), each guarded by what the snapshot read.

use std::collections::btree_map::Entry;
use std::collections::{BTreeMap, HashMap, HashSet};

use serde::Serialize;

use corral_core::{
    Agent, AgentState, Decisions, HeadOfLine, Session, SessionState, Slots, Snapshot, Timestamp,
};

use crate::array_tail::{read_tails, store_members, Tail, Target};
use crate::codec::{count, name_of, to_json};
use crate::error::{Result, StoreError};
use crate::events::{insert_event, NewEvent};
use crate::instances::{insert_requested, terminate_for_agents};
use crate::sessions::{insert_history, ROWS_PER_STATEMENT};
use crate::{Store, Tx};

/// What one `apply` wrote.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Applied {
    pub placed: usize,
    pub rejected: usize,
    /// Pending sessions whose wait reason was written.
    pub waiting: usize,
    /// Instances asked for (the sum of the launches' counts).
    pub launched: u64,
    pub marked: usize,
    pub unmarked: usize,
    pub terminated: usize,
    pub events: usize,
}

/// An agent as the decisions leave it, beside what the snapshot read (the guard).
struct AgentChange<'a> {
    before: &'a Agent,
    state: AgentState,
    allocated: Slots,
    /// Unmarked while idle: its idle time starts again, so scale-in does not mark it at once.
    restart_idle: bool,
}

impl Store {
    /// Writes one pass's decisions, computed from `snapshot`, in one transaction.
    ///
    /// Every write is guarded by what the snapshot read: a placed or rejected session must
    /// still be pending; an agent's state, allocation, capacity and drain flag must be as read
    /// (an agent unmarked by these decisions takes placements as alive); launches need the
    /// group's `last_scale_out` unchanged, so two passes never launch for the same demand. If any
    /// guard fails the whole pass is rolled back and `Conflict` is returned: re-read and retry.
    /// Decisions that contradict the snapshot itself (placing on a marked agent, over its
    /// capacity, marking a busy agent...) are `Refused`: retrying would not help.
    ///
    /// Each decision also writes an event (`placed`, `rejected`, `launch`, `mark`, `unmark`,
    /// `terminate`) with its reason, and each session state change a history row. Waiting
    /// sessions get their wait reason; those that found no room (not those held behind another,
    /// nor those their array's limit keeps waiting: `WaitReason::counts_as_blocked`) count one
    /// more blocked pass. Those guards are soft: a session that ended meanwhile is
    /// skipped.
    pub async fn apply(
        &self,
        group: &str,
        snapshot: &Snapshot,
        decisions: &Decisions,
        now: Timestamp,
    ) -> Result<Applied> {
        if snapshot.group.name != group {
            return Err(StoreError::Refused(format!(
                "the snapshot is of group {:?}, not {group:?}",
                snapshot.group.name
            )));
        }
        let changes = plan_agents(snapshot, decisions)?;
        let pending = check_sessions(snapshot, decisions)?;
        let mut tx = self.write_tx().await?;
        // Passes of one group take turns here (PostgreSQL); they do not wait for submissions.
        let exists = sqlx::query(self.locking((
            "SELECT name FROM groups WHERE name = $1",
            "SELECT name FROM groups WHERE name = $1 FOR NO KEY UPDATE",
        )))
        .bind(group)
        .fetch_optional(&mut *tx)
        .await?;
        if exists.is_none() {
            return Err(StoreError::not_found("group", group));
        }
        let mut pass = Pass {
            tx,
            group,
            now,
            applied: Applied::default(),
        };
        let tails = pass.store_tails(decisions).await?;
        pass.reject(decisions).await?;
        pass.launch(snapshot, decisions).await?;
        pass.update_agents(&changes).await?;
        pass.record_agent_decisions(decisions).await?;
        pass.place(decisions, &tails.placed).await?;
        pass.update_waiting(snapshot, &pending, decisions, &tails.left)
            .await?;
        pass.tx.commit().await?;
        Ok(pass.applied)
    }
}

/// The pending sessions of the snapshot, by id, after checking that every placed or rejected
/// session is one of them and is decided once.
fn check_sessions<'a>(
    snapshot: &'a Snapshot,
    decisions: &'a Decisions,
) -> Result<HashMap<&'a str, &'a Session>> {
    let pending: HashMap<&str, &Session> =
        snapshot.pending().map(|s| (s.id.0.as_str(), s)).collect();
    let mut decided = HashSet::new();
    for id in decisions
        .placements
        .iter()
        .map(|p| &p.session)
        .chain(decisions.rejections.iter().map(|r| &r.session))
    {
        if !pending.contains_key(id.0.as_str()) || !decided.insert(id) {
            return Err(StoreError::Refused(format!(
                "session {id} is not pending in the snapshot, or decided twice"
            )));
        }
    }
    Ok(pending)
}

/// What `store_tails` stored: the sessions it stored scheduled, and the arrays' tails as it
/// left them, by array.
struct StoredTails {
    placed: HashSet<String>,
    left: BTreeMap<String, Tail>,
}

/// One pass being written: its transaction and what it wrote so far.
struct Pass<'g> {
    tx: Tx,
    group: &'g str,
    now: Timestamp,
    applied: Applied,
}

impl Pass<'_> {
    fn event(
        &self,
        kind: &str,
        session: Option<&str>,
        agent: Option<&str>,
        message: String,
    ) -> NewEvent {
        NewEvent {
            at: self.now,
            group: Some(self.group.to_string()),
            session: session.map(str::to_string),
            agent: agent.map(str::to_string),
            kind: kind.to_string(),
            message,
        }
    }

    /// The arrays' sessions without rows (`array_tail`) that this pass decides, stored first:
    /// of each array, its tail up to the last one decided, those placed already scheduled (no
    /// UPDATE follows), the others pending (a rejection then ends them as any session).
    async fn store_tails(&mut self, decisions: &Decisions) -> Result<StoredTails> {
        let mut tails: BTreeMap<String, Tail> =
            read_tails(&mut self.tx, "group_name = $1", Some(self.group))
                .await?
                .into_iter()
                .map(|t| (t.id.clone(), t))
                .collect();
        let mut placed = HashSet::new();
        for tail in tails.values_mut() {
            let index_of = |session: &str| tail.position_of(session).map(|p| tail.index_at(p));
            let mut targets = BTreeMap::new();
            for p in &decisions.placements {
                if let Some(index) = index_of(&p.session.0) {
                    let target = Target {
                        agent: p.agent.0.clone(),
                        allocation: p.slots.to_string(),
                        devices: to_json(&p.devices)?,
                    };
                    targets.insert(index, target);
                    placed.insert(p.session.0.clone());
                }
            }
            let rejected = decisions
                .rejections
                .iter()
                .filter_map(|r| index_of(&r.session.0));
            let Some(through) = targets.keys().copied().chain(rejected).max() else {
                continue;
            };
            store_members(&mut self.tx, tail, through, &targets, self.now).await?;
            tail.next = u64::from(through) + u64::from(tail.range.step.max(1));
        }
        Ok(StoredTails {
            placed,
            left: tails,
        })
    }

    /// Admission: rejected sessions end, with their reason in history and events.
    async fn reject(&mut self, decisions: &Decisions) -> Result<()> {
        for r in &decisions.rejections {
            let reason = r.reason.to_string();
            let done = sqlx::query(
                "UPDATE sessions SET state = 'rejected', end_reason = $3, wait_reason = NULL, \
                 updated_at = $4 WHERE id = $1 AND group_name = $2 AND state = 'pending'",
            )
            .bind(&r.session.0)
            .bind(self.group)
            .bind(&reason)
            .bind(self.now.0)
            .execute(&mut *self.tx)
            .await?;
            if done.rows_affected() == 0 {
                return Err(StoreError::conflict("session", &r.session));
            }
            insert_history(
                &mut self.tx,
                &r.session.0,
                self.now,
                SessionState::Rejected,
                &reason,
            )
            .await?;
            let event = self.event("rejected", Some(&r.session.0), None, reason);
            insert_event(&mut self.tx, &event).await?;
            self.applied.rejected += 1;
            self.applied.events += 1;
        }
        Ok(())
    }

    /// Scaling out: the launches, guarded by the group's `last_scale_out` as read, so two passes
    /// never launch for the same demand.
    async fn launch(&mut self, snapshot: &Snapshot, decisions: &Decisions) -> Result<()> {
        if decisions.launches.is_empty() {
            return Ok(());
        }
        let done = sqlx::query(
            "UPDATE groups SET last_scale_out = $2 WHERE name = $1 \
             AND (last_scale_out = $3 OR (last_scale_out IS NULL AND $3 IS NULL))",
        )
        .bind(self.group)
        .bind(self.now.0)
        .bind(snapshot.last_scale_out.map(|t| t.0))
        .execute(&mut *self.tx)
        .await?;
        if done.rows_affected() == 0 {
            return Err(StoreError::conflict("group", self.group));
        }
        for launch in &decisions.launches {
            insert_requested(
                &mut self.tx,
                self.group,
                &launch.template,
                launch.count,
                self.now,
            )
            .await?;
            let message = format!("{} × {}: {}", launch.count, launch.template, launch.reason);
            let event = self.event("launch", None, None, message);
            insert_event(&mut self.tx, &event).await?;
            self.applied.launched += u64::from(launch.count);
            self.applied.events += 1;
        }
        Ok(())
    }

    /// Every agent's new state and allocation, in id order, each guarded by what was read.
    async fn update_agents(&mut self, changes: &BTreeMap<&str, AgentChange<'_>>) -> Result<()> {
        for (id, change) in changes {
            let before = change.before;
            let done = sqlx::query(
                "UPDATE agents SET state = $2, allocated = $3, \
                 idle_since = CASE WHEN $3 <> '' THEN NULL WHEN $4 = 1 THEN $5 \
                     ELSE COALESCE(idle_since, $5) END \
                 WHERE id = $1 AND group_name = $6 AND state = $7 AND allocated = $8 \
                 AND capacity = $9 AND drained_by_hand = $10",
            )
            .bind(*id)
            .bind(name_of(&change.state))
            .bind(change.allocated.to_string())
            .bind(i64::from(change.restart_idle))
            .bind(self.now.0)
            .bind(self.group)
            .bind(name_of(&before.state))
            .bind(before.allocated.to_string())
            .bind(before.capacity.to_string())
            .bind(before.drained_by_hand)
            .execute(&mut *self.tx)
            .await?;
            if done.rows_affected() == 0 {
                return Err(StoreError::conflict("agent", id));
            }
        }
        Ok(())
    }

    /// Scaling in: the events of unmarks, marks and terminations, and the instances of the
    /// agents let go, to be terminated by the driver.
    async fn record_agent_decisions(&mut self, decisions: &Decisions) -> Result<()> {
        for (kind, list) in [
            ("unmark", &decisions.unmarks),
            ("mark", &decisions.marks),
            ("terminate", &decisions.terminations),
        ] {
            for d in list {
                let event = self.event(kind, None, Some(&d.agent.0), d.reason.clone());
                insert_event(&mut self.tx, &event).await?;
                self.applied.events += 1;
            }
        }
        self.applied.unmarked = decisions.unmarks.len();
        self.applied.marked = decisions.marks.len();
        self.applied.terminated = decisions.terminations.len();
        let let_go: Vec<&str> = decisions
            .terminations
            .iter()
            .map(|d| d.agent.0.as_str())
            .collect();
        terminate_for_agents(&mut self.tx, &let_go, self.now).await
    }

    /// Scheduling: per (agent, allocation), a guarded UPDATE of its sessions by id, and their
    /// history rows and events made from the same ids (INSERT ... SELECT), a hundred sessions a
    /// statement: a pass that places thousands of sessions costs tens of statements, not
    /// thousands, and binds each id once per statement rather than every value of every row.
    /// Those in `stored` were stored already scheduled (`store_tails`).
    async fn place(&mut self, decisions: &Decisions, stored: &HashSet<String>) -> Result<()> {
        // Sessions given the same on the same agent share a statement (those granted devices
        // are each alone: their devices differ).
        let mut by_target: BTreeMap<(&str, String, String), Vec<&str>> = BTreeMap::new();
        for p in decisions
            .placements
            .iter()
            .filter(|p| !stored.contains(&p.session.0))
        {
            by_target
                .entry((
                    p.agent.0.as_str(),
                    p.slots.to_string(),
                    to_json(&p.devices)?,
                ))
                .or_default()
                .push(p.session.0.as_str());
        }
        for ((agent, slots, devices), ids) in &by_target {
            let message = format!("placed on agent {agent} ({slots})");
            for chunk in ids.chunks(ROWS_PER_STATEMENT) {
                // `$first...`: the chunk's ids, after the statement's own values.
                let list = |first: usize| -> String {
                    (0..chunk.len())
                        .map(|i| format!("${}", i + first))
                        .collect::<Vec<_>>()
                        .join(", ")
                };
                // By id alone (the snapshot's sessions are the group's): SQLite would otherwise
                // read the ids through the index on (group, state), every pending session of
                // the group for each statement, rather than the primary key.
                let sql = format!(
                    "UPDATE sessions SET state = 'scheduled', agent = $1, allocation = $2, \
                     wait_reason = NULL, updated_at = $3, devices = $4 \
                     WHERE state = 'pending' AND id IN ({})",
                    list(5)
                );
                let mut q = sqlx::query(sqlx::AssertSqlSafe(sql))
                    .bind(*agent)
                    .bind(slots.as_str())
                    .bind(self.now.0)
                    .bind(devices.as_str());
                for id in chunk {
                    q = q.bind(*id);
                }
                let done = q.execute(&mut *self.tx).await?;
                if done.rows_affected() != chunk.len() as u64 {
                    return Err(StoreError::conflict("session", chunk[0]));
                }
                let history = format!(
                    "INSERT INTO session_history (session, at, state, reason) \
                     SELECT id, $1, 'scheduled', $2 FROM sessions WHERE id IN ({}) ORDER BY id",
                    list(3)
                );
                let mut q = sqlx::query(sqlx::AssertSqlSafe(history))
                    .bind(self.now.0)
                    .bind(message.as_str());
                for id in chunk {
                    q = q.bind(*id);
                }
                q.execute(&mut *self.tx).await?;
                let events = format!(
                    "INSERT INTO events (at, group_name, session, agent, kind, message) \
                     SELECT $1, $2, id, $3, 'placed', $4 FROM sessions WHERE id IN ({}) \
                     ORDER BY id",
                    list(5)
                );
                let mut q = sqlx::query(sqlx::AssertSqlSafe(events))
                    .bind(self.now.0)
                    .bind(self.group)
                    .bind(*agent)
                    .bind(message.as_str());
                for id in chunk {
                    q = q.bind(*id);
                }
                q.execute(&mut *self.tx).await?;
            }
        }
        self.applied.placed += decisions.placements.len();
        self.applied.events += decisions.placements.len();
        Ok(())
    }

    /// Waiting sessions, grouped by what changes, one UPDATE per group of ids. Blocked passes
    /// only count where backfill reads them, and never past `skip_after`. Soft: a session that
    /// ended meanwhile is skipped.
    /// Sessions of arrays' tails (`tails`: without rows) keep theirs on their array: that of
    /// the tail's first one the pass read.
    async fn update_waiting(
        &mut self,
        snapshot: &Snapshot,
        pending: &HashMap<&str, &Session>,
        decisions: &Decisions,
        tails: &BTreeMap<String, Tail>,
    ) -> Result<()> {
        let scheduler = &snapshot.group.scheduler;
        let counts_passes = scheduler.head_of_line == HeadOfLine::Backfill;
        let mut by_change: BTreeMap<(String, u32, u32), Vec<&str>> = BTreeMap::new();
        // Per array with a tail: the first of its tail that waits, with its reason.
        let mut tail_heads: BTreeMap<&str, (u64, String, u32)> = BTreeMap::new();
        for w in &decisions.waiting {
            let Some(session) = pending.get(w.session.0.as_str()) else {
                continue; // Not pending in the snapshot: nothing of it to update.
            };
            let blocked = w.reason.counts_as_blocked();
            let before = session.blocked_passes;
            let passes = if counts_passes && blocked && before < scheduler.skip_after {
                before + 1
            } else {
                before
            };
            let in_tail = session.array.as_ref().and_then(|a| {
                let tail = tails.get(&a.id)?;
                Some((tail.id.as_str(), tail.position_of(&w.session.0)?))
            });
            if let Some((array, position)) = in_tail {
                let head =
                    tail_heads
                        .entry(array)
                        .or_insert((position, w.reason.to_string(), passes));
                if position < head.0 {
                    *head = (position, w.reason.to_string(), passes);
                }
                continue;
            }
            by_change
                .entry((w.reason.to_string(), passes, before))
                .or_default()
                .push(w.session.0.as_str());
        }
        for ((reason, passes, before), ids) in &by_change {
            for chunk in ids.chunks(ROWS_PER_STATEMENT) {
                // By id alone, as `place` (the index on (group, state) would read them all).
                let list: Vec<String> = (0..chunk.len()).map(|i| format!("${}", i + 4)).collect();
                let sql = format!(
                    "UPDATE sessions SET wait_reason = $1, blocked_passes = $2 \
                     WHERE state = 'pending' AND blocked_passes = $3 AND id IN ({})",
                    list.join(", ")
                );
                let mut q = sqlx::query(sqlx::AssertSqlSafe(sql))
                    .bind(reason.as_str())
                    .bind(count(*passes))
                    .bind(count(*before));
                for id in chunk {
                    q = q.bind(*id);
                }
                let done = q.execute(&mut *self.tx).await?;
                self.applied.waiting += usize::try_from(done.rows_affected()).unwrap_or(usize::MAX);
            }
        }
        for (array, (_, reason, passes)) in &tail_heads {
            sqlx::query(
                "UPDATE arrays SET tail_wait_reason = $2, tail_blocked_passes = $3 WHERE id = $1",
            )
            .bind(*array)
            .bind(reason.as_str())
            .bind(count(*passes))
            .execute(&mut *self.tx)
            .await?;
        }
        Ok(())
    }
}

/// Every agent the decisions touch, as they leave it, checked against the snapshot: unmarks
/// first (so an unmarked agent takes placements), then placements, marks and terminations.
/// Keyed by id, so agents are written in one order and concurrent passes cannot deadlock.
fn plan_agents<'a>(
    snapshot: &'a Snapshot,
    decisions: &'a Decisions,
) -> Result<BTreeMap<&'a str, AgentChange<'a>>> {
    let mut changes: BTreeMap<&str, AgentChange> = BTreeMap::new();
    let refuse = |what: &str, id: &str, why: &str| {
        Err(StoreError::Refused(format!(
            "cannot {what} agent {id}: {why}"
        )))
    };
    for d in &decisions.unmarks {
        let c = change_of(&mut changes, snapshot, &d.agent.0)?;
        if c.state != AgentState::Marked || c.before.drained_by_hand {
            return refuse("unmark", &d.agent.0, "it is not marked by the policy");
        }
        c.state = AgentState::Alive;
        c.restart_idle = true;
    }
    for p in &decisions.placements {
        let c = change_of(&mut changes, snapshot, &p.agent.0)?;
        if c.state != AgentState::Alive {
            return refuse("place a session on", &p.agent.0, "it is not alive");
        }
        let allocated = c.allocated.checked_add(&p.slots).ok();
        match allocated {
            Some(a) if a.fits_in(&c.before.capacity) => c.allocated = a,
            _ => {
                let why = format!("{} does not fit its free capacity", p.slots);
                return refuse("place a session on", &p.agent.0, &why);
            }
        }
    }
    for d in &decisions.marks {
        let c = change_of(&mut changes, snapshot, &d.agent.0)?;
        if c.state != AgentState::Alive || !c.allocated.is_empty() {
            return refuse("mark", &d.agent.0, "it is not alive and idle");
        }
        c.state = AgentState::Marked;
    }
    for d in &decisions.terminations {
        let c = change_of(&mut changes, snapshot, &d.agent.0)?;
        // Marked before this pass: never terminated in the pass that marks it.
        if c.state != AgentState::Marked
            || c.before.state != AgentState::Marked
            || !c.allocated.is_empty()
        {
            return refuse("terminate", &d.agent.0, "it is not marked and empty");
        }
        c.state = AgentState::Terminated;
    }
    Ok(changes)
}

fn change_of<'m, 'a>(
    changes: &'m mut BTreeMap<&'a str, AgentChange<'a>>,
    snapshot: &'a Snapshot,
    id: &'a str,
) -> Result<&'m mut AgentChange<'a>> {
    match changes.entry(id) {
        Entry::Occupied(e) => Ok(e.into_mut()),
        Entry::Vacant(e) => {
            let before = snapshot
                .agents
                .iter()
                .find(|a| a.id.0 == id)
                .ok_or_else(|| StoreError::Refused(format!("agent {id} is not in the snapshot")))?;
            Ok(e.insert(AgentChange {
                before,
                state: before.state,
                allocated: before.allocated.clone(),
                restart_idle: false,
            }))
        }
    }
}
