//! The cycle's read: one consistent snapshot of a group (its writing half is `apply.rs`).

use corral_core::schedule::{by_keys, queue_order, QueueKey};
use std::collections::BTreeMap;

use corral_core::{DeviceGrant, InFlight, Sequencer, Session, Snapshot, Timestamp};

use crate::agents::{agent_columns, agent_from_row};
use crate::array_tail::{read_tails, Tail};
use crate::arrays::CappedArray;
use crate::catalog::{group_from_row, image_from_row};
use crate::codec::Fields;
use crate::error::{Result, StoreError};
use crate::instances::{InstancePhase, InstanceRecord};
use crate::sessions::{core_session_columns, session_from_row};
use crate::{Store, Tx};

pub use corral_core::schedule::MAX_PENDING_PER_PASS;

impl Store {
    /// One consistent read of everything a pass needs about `group`: the group, its agents that
    /// are not terminated, its pending sessions (the first `MAX_PENDING_PER_PASS` in the
    /// sequencer's order, of each array with a limit only those its limit lets be placed; under
    /// DRF also those scheduled or running), how many sessions of each array with a limit and
    /// pending sessions hold capacity (`array_holding`), all images, its launches in flight,
    /// when it last launched, and its agents removed by hand and not back. `NotFound` if there is no such group.
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
        let mut agents = sqlx::query(concat!(
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
        let sequencer = scaling_group.scheduler.sequencer;
        let (mut sessions, capped) = pending_queue(&mut tx, group, sequencer).await?;
        let array_holding = capped.iter().map(|a| (a.id.clone(), a.holding)).collect();
        holding_capacity(&mut tx, group, sequencer, &capped, &mut sessions).await?;
        let held = device_grants(&mut tx, group).await?;
        corral_core::grants::account(
            &mut agents,
            &scaling_group.templates,
            held.iter().map(|(a, g)| (a.as_str(), g.as_slice())),
        );
        let images = sqlx::query("SELECT name, min_slots FROM images ORDER BY name")
            .fetch_all(&mut *tx)
            .await?
            .iter()
            .map(image_from_row)
            .collect::<Result<Vec<_>>>()?;
        let in_flight =
            in_flight(&crate::instances::fetch(&mut tx, group, &InstancePhase::IN_FLIGHT).await?);
        let removed = crate::removed_agents::of_group(&mut tx, group).await?;
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
            array_holding,
            removed,
        })
    }
}

/// The pending queue, at most MAX_PENDING_PER_PASS of it, those `sequencer` serves first (a
/// pass's work stays bounded however long the queue grows), and the group's capped arrays
/// with pending sessions.
async fn pending_queue(
    tx: &mut Tx,
    group: &str,
    sequencer: Sequencer,
) -> Result<(Vec<Session>, Vec<CappedArray>)> {
    let order = queue_order(sequencer)
        .iter()
        .map(|key| match key {
            QueueKey::PriorityDesc => "priority DESC",
            QueueKey::SubmittedAt => "submitted_at",
            QueueKey::SubmittedAtDesc => "submitted_at DESC",
            QueueKey::Id => "id",
        })
        .collect::<Vec<_>>()
        .join(", ");
    // Arrays with a limit (`%N`) are read apart: of each, only the sessions its limit lets
    // be placed (`max_running - holding`), by index, so that a capped array at the head
    // never fills the pass with sessions that would only wait. The others keep their wait
    // reason until a pass reads them.
    let capped = crate::arrays::capped_with_pending(tx, group).await?;
    let not_capped = if capped.is_empty() {
        ""
    } else {
        " AND (array_id IS NULL OR array_id NOT IN (SELECT id FROM arrays \
         WHERE group_name = $1 AND max_running IS NOT NULL))"
    };
    let sql = format!(
        "SELECT {} FROM sessions WHERE group_name = $1 AND state = 'pending' \
         AND batch_job IS NULL{not_capped} ORDER BY {order} LIMIT {MAX_PENDING_PER_PASS}",
        core_session_columns!()
    );
    let mut sessions = sqlx::query(sqlx::AssertSqlSafe(sql))
        .bind(group)
        .fetch_all(&mut **tx)
        .await?
        .iter()
        .map(session_from_row)
        .collect::<Result<Vec<Session>>>()?;
    let keys = queue_order(sequencer);
    // The arrays' sessions without rows (their tails), made up from the arrays: of a
    // capped one those its limit lets be placed, of the others as many as could be among
    // the first MAX_PENDING_PER_PASS.
    let mut tails: BTreeMap<String, Tail> = read_tails(&mut *tx, "group_name = $1", Some(group))
        .await?
        .into_iter()
        .map(|t| (t.id.clone(), t))
        .collect();
    let mut merged = false;
    for array in &capped {
        let mut left = crate::arrays::readable(array);
        if left == 0 {
            tails.remove(&array.id);
            continue;
        }
        // An array's sessions share their priority and submission time: by id is the
        // queue's order among them (their ids sort by index), read off the index.
        let sql = format!(
            "SELECT {} FROM sessions WHERE array_id = $1 AND state = 'pending' \
             AND batch_job IS NULL ORDER BY id LIMIT {left}",
            core_session_columns!()
        );
        let rows = sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(&array.id)
            .fetch_all(&mut **tx)
            .await?;
        for row in &rows {
            sessions.push(session_from_row(row)?);
        }
        left -= rows.len();
        if let Some(tail) = tails.remove(&array.id) {
            let n = (left as u64).min(tail.len());
            sessions.extend((0..n).map(|p| tail.session(tail.index_at(p))));
        }
        merged = true;
    }
    for tail in tails.values() {
        merged |= merge_tail(&mut sessions, tail, keys);
    }
    if merged {
        sessions.sort_by(|a, b| by_keys(keys, a, b));
        sessions.truncate(MAX_PENDING_PER_PASS);
    }
    Ok((sessions, capped))
}

/// Adds to `sessions` those holding capacity where the sequencer reads them (DRF), and gives
/// each session of a capped array its array's limit.
async fn holding_capacity(
    tx: &mut Tx,
    group: &str,
    sequencer: Sequencer,
    capped: &[CappedArray],
    sessions: &mut Vec<Session>,
) -> Result<()> {
    // Sessions holding capacity only matter to fair share (DRF); agents' allocations already
    // say what is taken.
    if sequencer == Sequencer::Drf {
        let holding = sqlx::query(concat!(
            "SELECT ",
            core_session_columns!(),
            " FROM sessions WHERE group_name = $1 \
             AND state IN ('scheduled', 'running') AND batch_job IS NULL \
             ORDER BY submitted_at, id"
        ))
        .bind(group)
        .fetch_all(&mut **tx)
        .await?;
        for row in &holding {
            sessions.push(session_from_row(row)?);
        }
    }
    // Each session of a capped array carries its limit into the pass.
    if !capped.is_empty() {
        let limits: BTreeMap<&str, u32> = capped
            .iter()
            .map(|a| (a.id.as_str(), a.max_running))
            .collect();
        for s in sessions.iter_mut() {
            if let Some(array) = &mut s.array {
                array.max_running = limits.get(array.id.as_str()).copied();
            }
        }
    }
    Ok(())
}

/// What sessions hold on each device: the grants of those holding capacity, by agent (the
/// store keeps devices as reported, grants with sessions, so the two never disagree).
async fn device_grants(tx: &mut Tx, group: &str) -> Result<Vec<(String, Vec<DeviceGrant>)>> {
    sqlx::query(
        "SELECT agent, devices FROM sessions WHERE group_name = $1 \
         AND state IN ('scheduled', 'running') AND devices <> '[]' AND agent IS NOT NULL",
    )
    .bind(group)
    .fetch_all(&mut **tx)
    .await?
    .iter()
    .map(|row| {
        let f = Fields::new(row, "session", "agent")?;
        Ok((f.text("agent")?, f.json::<Vec<DeviceGrant>>("devices")?))
    })
    .collect::<Result<Vec<_>>>()
}

/// Adds to `sessions` (sorted in the queue's order `keys`) the sessions of `tail` that could be
/// among the first `MAX_PENDING_PER_PASS` once merged: in order, until there are as many or,
/// once `sessions` holds as many, until one would come after its last. Whether any was added.
fn merge_tail(sessions: &mut Vec<Session>, tail: &Tail, keys: &[QueueKey]) -> bool {
    let full = sessions.len() >= MAX_PENDING_PER_PASS;
    let bound = full.then(|| sessions[MAX_PENDING_PER_PASS - 1].clone());
    let mut added = false;
    for position in 0..tail.len().min(MAX_PENDING_PER_PASS as u64) {
        let session = tail.session(tail.index_at(position));
        if let Some(bound) = &bound {
            if by_keys(keys, &session, bound).is_ge() {
                break;
            }
        }
        sessions.push(session);
        added = true;
    }
    added
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
