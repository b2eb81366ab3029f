//! The cycle's two database steps: one consistent read of a group, and one guarded transaction
//! that writes a pass's decisions.

use std::collections::btree_map::Entry;
use std::collections::{BTreeMap, HashMap, HashSet};

use serde::Serialize;

use corral_core::{
    Agent, AgentState, Decisions, HeadOfLine, InFlight, Sequencer, Session, SessionState, Slots,
    Snapshot, Timestamp, WaitReason,
};

use crate::agents::{agent_columns, agent_from_row};
use crate::catalog::{group_from_row, image_from_row};
use crate::codec::{count, name_of, Fields};
use crate::error::{Result, StoreError};
use crate::events::{insert_event, insert_events_many, NewEvent};
use crate::instances::{insert_requested, terminate_for_agents, InstancePhase, InstanceRecord};
use crate::sessions::{
    core_session_columns, insert_history, insert_history_many, session_from_row, ROWS_PER_STATEMENT,
};
use crate::Store;

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

/// Most pending sessions one pass reads: bounds a pass's time (the core places 100,000 in well
/// under a second) however long the queue grows.
pub const MAX_PENDING_PER_PASS: usize = 20_000;

impl Store {
    /// One consistent read of everything a pass needs about `group`: the group, its agents that
    /// are not terminated, its pending sessions (the first `MAX_PENDING_PER_PASS` in the
    /// sequencer's order; under DRF also those scheduled or running), all
    /// images, its launches in flight, and when it last launched. `NotFound` if there is no such
    /// group.
    pub async fn snapshot(&self, group: &str, now: Timestamp) -> Result<Snapshot> {
        let mut tx = self.read_tx().await?;
        let row = sqlx::query(
            "SELECT name, policy, scheduler, templates, last_scale_out FROM groups \
             WHERE name = $1",
        )
        .bind(group)
        .fetch_optional(&mut *tx)
        .await?
        .ok_or_else(|| StoreError::not_found("group", group))?;
        let scaling_group = group_from_row(&row)?;
        let last_scale_out = Fields::new(&row, "group", "name")?.opt_time("last_scale_out")?;
        let agents = sqlx::query(concat!(
            "SELECT ",
            agent_columns!(),
            " FROM agents WHERE group_name = $1 AND state <> 'terminated' ORDER BY id"
        ))
        .bind(group)
        .fetch_all(&mut *tx)
        .await?
        .iter()
        .map(agent_from_row)
        .collect::<Result<Vec<_>>>()?;
        // The pending queue, at most MAX_PENDING_PER_PASS of it, those the sequencer serves
        // first: a pass's work stays bounded however long the queue grows.
        let order = match scaling_group.scheduler.sequencer {
            Sequencer::Lifo => "submitted_at DESC, id",
            Sequencer::Priority => "priority DESC, submitted_at, id",
            Sequencer::Fifo | Sequencer::Drf => "submitted_at, id",
        };
        let sql = format!(
            "SELECT {} FROM sessions WHERE group_name = $1 AND state = 'pending' \
             ORDER BY {order} LIMIT {MAX_PENDING_PER_PASS}",
            core_session_columns!()
        );
        let mut sessions = sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(group)
            .fetch_all(&mut *tx)
            .await?
            .iter()
            .map(session_from_row)
            .collect::<Result<Vec<Session>>>()?;
        // Sessions holding capacity only matter to fair share (DRF); agents' allocations already
        // say what is taken.
        if scaling_group.scheduler.sequencer == Sequencer::Drf {
            let holding = sqlx::query(concat!(
                "SELECT ",
                core_session_columns!(),
                " FROM sessions WHERE group_name = $1 \
                 AND state IN ('scheduled', 'running') ORDER BY submitted_at, id"
            ))
            .bind(group)
            .fetch_all(&mut *tx)
            .await?;
            for row in &holding {
                sessions.push(session_from_row(row)?);
            }
        }
        let images = sqlx::query("SELECT name, min_slots FROM images ORDER BY name")
            .fetch_all(&mut *tx)
            .await?
            .iter()
            .map(image_from_row)
            .collect::<Result<Vec<_>>>()?;
        let in_flight =
            in_flight(&crate::instances::fetch(&mut tx, group, &InstancePhase::IN_FLIGHT).await?);
        tx.commit().await?;
        Ok(Snapshot {
            now,
            group: scaling_group,
            agents,
            sessions,
            images,
            in_flight,
            last_scale_out,
            launch_limits: Default::default(),
        })
    }

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
    /// sessions get their wait reason; those that found no room (not those held behind another)
    /// count one more blocked pass. Those guards are soft: a session that ended meanwhile is
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

        let mut tx = self.write_tx().await?;
        let mut applied = Applied::default();
        let event =
            |kind: &str, session: Option<&str>, agent: Option<&str>, message: String| NewEvent {
                at: now,
                group: Some(group.to_string()),
                session: session.map(str::to_string),
                agent: agent.map(str::to_string),
                kind: kind.to_string(),
                message,
            };
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

        // 1. Admission.
        for r in &decisions.rejections {
            let reason = r.reason.to_string();
            let done = sqlx::query(
                "UPDATE sessions SET state = 'rejected', end_reason = $3, wait_reason = NULL, \
                 updated_at = $4 WHERE id = $1 AND group_name = $2 AND state = 'pending'",
            )
            .bind(&r.session.0)
            .bind(group)
            .bind(&reason)
            .bind(now.0)
            .execute(&mut *tx)
            .await?;
            if done.rows_affected() == 0 {
                return Err(StoreError::conflict("session", &r.session));
            }
            insert_history(&mut tx, &r.session.0, now, SessionState::Rejected, &reason).await?;
            insert_event(
                &mut tx,
                &event("rejected", Some(&r.session.0), None, reason),
            )
            .await?;
            applied.rejected += 1;
            applied.events += 1;
        }

        // 2. Scaling: launches, then every agent's new state and allocation, in id order.
        if !decisions.launches.is_empty() {
            let done = sqlx::query(
                "UPDATE groups SET last_scale_out = $2 WHERE name = $1 \
                 AND (last_scale_out = $3 OR (last_scale_out IS NULL AND $3 IS NULL))",
            )
            .bind(group)
            .bind(now.0)
            .bind(snapshot.last_scale_out.map(|t| t.0))
            .execute(&mut *tx)
            .await?;
            if done.rows_affected() == 0 {
                return Err(StoreError::conflict("group", group));
            }
        }
        for launch in &decisions.launches {
            insert_requested(&mut tx, group, &launch.template, launch.count, now).await?;
            let message = format!("{} × {}: {}", launch.count, launch.template, launch.reason);
            insert_event(&mut tx, &event("launch", None, None, message)).await?;
            applied.launched += u64::from(launch.count);
            applied.events += 1;
        }
        for (id, change) in &changes {
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
            .bind(now.0)
            .bind(group)
            .bind(name_of(&before.state))
            .bind(before.allocated.to_string())
            .bind(before.capacity.to_string())
            .bind(before.drained_by_hand)
            .execute(&mut *tx)
            .await?;
            if done.rows_affected() == 0 {
                return Err(StoreError::conflict("agent", id));
            }
        }
        for (kind, list) in [
            ("unmark", &decisions.unmarks),
            ("mark", &decisions.marks),
            ("terminate", &decisions.terminations),
        ] {
            for d in list {
                let e = event(kind, None, Some(&d.agent.0), d.reason.clone());
                insert_event(&mut tx, &e).await?;
                applied.events += 1;
            }
        }
        applied.unmarked = decisions.unmarks.len();
        applied.marked = decisions.marks.len();
        applied.terminated = decisions.terminations.len();
        let let_go: Vec<&str> = decisions
            .terminations
            .iter()
            .map(|d| d.agent.0.as_str())
            .collect();
        terminate_for_agents(&mut tx, &let_go, now).await?;

        // 3. Scheduling: one guarded UPDATE per (agent, allocation) and multi-row inserts, so
        //    a pass that places thousands of sessions costs tens of statements, not thousands.
        let mut by_target: BTreeMap<(&str, String), Vec<&str>> = BTreeMap::new();
        for p in &decisions.placements {
            by_target
                .entry((p.agent.0.as_str(), p.slots.to_string()))
                .or_default()
                .push(p.session.0.as_str());
        }
        for ((agent, slots), ids) in &by_target {
            for chunk in ids.chunks(ROWS_PER_STATEMENT) {
                let list: Vec<String> = (0..chunk.len()).map(|i| format!("${}", i + 5)).collect();
                let sql = format!(
                    "UPDATE sessions SET state = 'scheduled', agent = $1, allocation = $2, \
                     wait_reason = NULL, updated_at = $3 \
                     WHERE group_name = $4 AND state = 'pending' AND id IN ({})",
                    list.join(", ")
                );
                let mut q = sqlx::query(sqlx::AssertSqlSafe(sql))
                    .bind(*agent)
                    .bind(slots.as_str())
                    .bind(now.0)
                    .bind(group);
                for id in chunk {
                    q = q.bind(*id);
                }
                let done = q.execute(&mut *tx).await?;
                if done.rows_affected() != chunk.len() as u64 {
                    return Err(StoreError::conflict("session", chunk[0]));
                }
            }
        }
        let mut history = Vec::with_capacity(decisions.placements.len());
        let mut events = Vec::with_capacity(decisions.placements.len());
        for p in &decisions.placements {
            let message = format!("placed on agent {} ({})", p.agent, p.slots);
            history.push((
                p.session.0.as_str(),
                now,
                SessionState::Scheduled,
                message.clone(),
            ));
            events.push(event(
                "placed",
                Some(&p.session.0),
                Some(&p.agent.0),
                message,
            ));
        }
        insert_history_many(&mut tx, &history).await?;
        insert_events_many(&mut tx, &events).await?;
        applied.placed += decisions.placements.len();
        applied.events += events.len();
        // Waiting sessions, grouped by what changes, one UPDATE per group of ids. Blocked
        // passes only count where backfill reads them, and never past `skip_after`.
        let scheduler = &snapshot.group.scheduler;
        let counts_passes = scheduler.head_of_line == HeadOfLine::Backfill;
        let mut by_change: BTreeMap<(String, u32, u32), Vec<&str>> = BTreeMap::new();
        for w in &decisions.waiting {
            let Some(session) = pending.get(w.session.0.as_str()) else {
                continue; // Not pending in the snapshot: nothing of it to update.
            };
            let blocked = !matches!(w.reason, WaitReason::HeldBehind { .. });
            let before = session.blocked_passes;
            let passes = if counts_passes && blocked && before < scheduler.skip_after {
                before + 1
            } else {
                before
            };
            by_change
                .entry((w.reason.to_string(), passes, before))
                .or_default()
                .push(w.session.0.as_str());
        }
        for ((reason, passes, before), ids) in &by_change {
            for chunk in ids.chunks(ROWS_PER_STATEMENT) {
                let list: Vec<String> = (0..chunk.len()).map(|i| format!("${}", i + 5)).collect();
                let sql = format!(
                    "UPDATE sessions SET wait_reason = $1, blocked_passes = $2 \
                     WHERE group_name = $3 AND state = 'pending' AND blocked_passes = $4 \
                     AND id IN ({})",
                    list.join(", ")
                );
                let mut q = sqlx::query(sqlx::AssertSqlSafe(sql))
                    .bind(reason.as_str())
                    .bind(count(*passes))
                    .bind(group)
                    .bind(count(*before));
                for id in chunk {
                    q = q.bind(*id);
                }
                let done = q.execute(&mut *tx).await?;
                applied.waiting += usize::try_from(done.rows_affected()).unwrap_or(usize::MAX);
            }
        }

        tx.commit().await?;
        Ok(applied)
    }
}

/// In-flight instances as the cycle counts them: per template, how many and since when.
fn in_flight(rows: &[InstanceRecord]) -> Vec<InFlight> {
    let mut by_template: BTreeMap<&str, InFlight> = BTreeMap::new();
    for r in rows {
        let f = by_template.entry(&r.template).or_insert_with(|| InFlight {
            template: r.template.clone(),
            count: 0,
            since: r.requested_at,
        });
        f.count += 1;
        f.since = f.since.min(r.requested_at);
    }
    by_template.into_values().collect()
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
