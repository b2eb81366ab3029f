//! Agents: the nodes of a group, their capacity and what is allocated on them.

use sqlx::any::AnyRow;

use corral_core::{Agent, AgentId, AgentState, SessionState, Timestamp};

use crate::codec::{name_of, to_json, Fields};
use crate::error::{Result, StoreError};
use crate::events::{insert_event, NewEvent};
use crate::{Store, Tx};

macro_rules! agent_columns {
    () => {
        "id, group_name, template, capacity, allocated, state, labels, external, \
         drained_by_hand, idle_since, devices, version, platform, updating"
    };
}
pub(crate) use agent_columns;

/// What removing an agent did ([`Store::remove_agent`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Removed {
    pub group: String,
    /// The hashes of its tokens, revoked.
    pub revoked: Vec<String>,
    /// The sessions it held, lost, that went with it (requeued or failed).
    pub released: Vec<String>,
}

/// An agent as its sync finds it ([`Store::heard_agent`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Heard {
    pub state: AgentState,
    pub external: bool,
    pub group: String,
    /// Marked to update itself.
    pub updating: bool,
    /// Holds sessions (placed on it, or running there).
    pub holds: bool,
}

pub(crate) fn agent_from_row(row: &AnyRow) -> Result<Agent> {
    let f = Fields::new(row, "agent", "id")?;
    Ok(Agent {
        id: AgentId(f.text("id")?),
        group: f.text("group_name")?,
        template: f.opt_text("template")?,
        capacity: f.slots("capacity")?,
        allocated: f.slots("allocated")?,
        state: f.name("state")?,
        labels: f.json("labels")?,
        external: f.flag("external")?,
        drained_by_hand: f.flag("drained_by_hand")?,
        idle_since: f.opt_time("idle_since")?,
        devices: f.json("devices")?,
        version: f.opt_text("version")?,
        platform: f.opt_text("platform")?,
        updating: f.opt_text("updating")?,
    })
}

impl Store {
    /// Creates or replaces an agent as it reports itself (every field as given) and records it
    /// as seen at `now`. `idle_since` is kept by the store: cleared while anything is allocated,
    /// otherwise the time it became idle (an agent already idle keeps its time; one that just
    /// emptied, or joined empty without a time, gets `now`). `NotFound` if its group does not
    /// exist.
    pub async fn upsert_agent(&self, agent: &Agent, now: Timestamp) -> Result<()> {
        self.upsert_agent_with_event(agent, None, now).await
    }

    /// [`Store::upsert_agent`], with an event written in the same transaction (an agent's
    /// `joined` comes before anything placed on it).
    pub async fn upsert_agent_with_event(
        &self,
        agent: &Agent,
        event: Option<&NewEvent>,
        now: Timestamp,
    ) -> Result<()> {
        let mut tx = self.write_tx().await?;
        self.upsert_agent_in(&mut tx, agent, event, now).await?;
        tx.commit().await?;
        Ok(())
    }

    /// [`Store::upsert_agent_with_event`] within `tx`.
    pub(crate) async fn upsert_agent_in(
        &self,
        tx: &mut Tx,
        agent: &Agent,
        event: Option<&NewEvent>,
        now: Timestamp,
    ) -> Result<()> {
        if let Some(event) = event {
            insert_event(tx, event).await?;
        }
        let group = sqlx::query(self.locking((
            "SELECT name FROM groups WHERE name = $1",
            "SELECT name FROM groups WHERE name = $1 FOR KEY SHARE",
        )))
        .bind(&agent.group)
        .fetch_optional(&mut **tx)
        .await?;
        if group.is_none() {
            return Err(StoreError::not_found("group", &agent.group));
        }
        // Back: no longer awaited as removed.
        crate::removed_agents::forget(tx, &agent.id.0).await?;
        let idle_since = agent
            .allocated
            .is_empty()
            .then(|| agent.idle_since.unwrap_or(now).0);
        sqlx::query(
            "INSERT INTO agents (id, group_name, template, capacity, allocated, state, labels, \
             external, drained_by_hand, idle_since, last_seen, joined_at, devices, version, \
             platform, updating) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $11, $13, $14, $15, $16) \
             ON CONFLICT (id) DO UPDATE SET group_name = excluded.group_name, \
             template = excluded.template, capacity = excluded.capacity, \
             allocated = excluded.allocated, state = excluded.state, labels = excluded.labels, \
             external = excluded.external, drained_by_hand = excluded.drained_by_hand, \
             devices = excluded.devices, version = excluded.version, \
             platform = excluded.platform, updating = excluded.updating, \
             agent_key = CASE WHEN excluded.external THEN agents.agent_key ELSE NULL END, \
             idle_since = CASE WHEN excluded.allocated = '' \
                 THEN COALESCE(agents.idle_since, $12) ELSE NULL END, \
             last_seen = excluded.last_seen",
        )
        .bind(&agent.id.0)
        .bind(&agent.group)
        .bind(agent.template.as_deref())
        .bind(agent.capacity.to_string())
        .bind(agent.allocated.to_string())
        .bind(name_of(&agent.state))
        .bind(to_json(&agent.labels)?)
        .bind(agent.external)
        .bind(agent.drained_by_hand)
        .bind(idle_since)
        .bind(now.0)
        .bind(now.0)
        .bind(to_json(&reported_devices(&agent.devices))?)
        .bind(agent.version.as_deref())
        .bind(agent.platform.as_deref())
        .bind(agent.updating.as_deref())
        .execute(&mut **tx)
        .await?;
        Ok(())
    }

    pub async fn get_agent(&self, id: &str) -> Result<Option<Agent>> {
        sqlx::query(concat!(
            "SELECT ",
            agent_columns!(),
            " FROM agents WHERE id = $1"
        ))
        .bind(id)
        .fetch_optional(&self.read)
        .await?
        .as_ref()
        .map(agent_from_row)
        .transpose()
    }

    /// Agents of one group (or all), terminated ones included, by id.
    pub async fn list_agents(&self, group: Option<&str>) -> Result<Vec<Agent>> {
        let rows = match group {
            Some(group) => {
                sqlx::query(concat!(
                    "SELECT ",
                    agent_columns!(),
                    " FROM agents WHERE group_name = $1 ORDER BY id"
                ))
                .bind(group)
                .fetch_all(&self.read)
                .await?
            }
            None => {
                sqlx::query(concat!(
                    "SELECT ",
                    agent_columns!(),
                    " FROM agents ORDER BY id"
                ))
                .fetch_all(&self.read)
                .await?
            }
        };
        rows.iter().map(agent_from_row).collect()
    }

    /// Sets an agent's state by hand (drain, undrain, lost, terminated). An idle agent that
    /// becomes alive again starts a new idle period at `now`, so scale-in does not mark it at
    /// once. `NotFound` if there is no such agent.
    pub async fn set_agent_state(
        &self,
        id: &str,
        state: AgentState,
        drained_by_hand: bool,
        now: Timestamp,
    ) -> Result<()> {
        let mut tx = self.write_tx().await?;
        let done = sqlx::query(
            "UPDATE agents SET state = $2, drained_by_hand = $3, \
             idle_since = CASE WHEN $2 = 'alive' AND state <> 'alive' AND allocated = '' \
                 THEN $4 ELSE idle_since END \
             WHERE id = $1",
        )
        .bind(id)
        .bind(name_of(&state))
        .bind(drained_by_hand)
        .bind(now.0)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        if done.rows_affected() == 0 {
            return Err(StoreError::not_found("agent", id));
        }
        Ok(())
    }
}

impl Store {
    /// An agent as its sync finds it, or `None` if there is no such agent. A read: when it
    /// was heard is written apart, many agents at once ([`Store::touch_agents`]).
    pub async fn heard_agent(&self, id: &str) -> Result<Option<Heard>> {
        let row = sqlx::query(
            "SELECT state, external, group_name, updating, \
             EXISTS (SELECT 1 FROM sessions s WHERE s.agent = a.id \
                 AND s.state IN ('scheduled', 'running')) AS holds \
             FROM agents a WHERE id = $1",
        )
        .bind(id)
        .fetch_optional(&self.read)
        .await?;
        row.map(|r| {
            let f = Fields::new(&r, "agent", "state")?;
            Ok(Heard {
                state: f.name("state")?,
                external: f.flag("external")?,
                group: f.text("group_name")?,
                updating: f.opt_text("updating")?.is_some(),
                holds: f.flag("holds")?,
            })
        })
        .transpose()
    }

    /// Agents were heard from at these times: each one's heartbeat time (`last_seen`) moves
    /// forward to its time, never back, one statement per 100 agents. Unknown ids are
    /// passed over.
    pub async fn touch_agents(&self, heard: &[(String, Timestamp)]) -> Result<()> {
        for chunk in heard.chunks(crate::sessions::ROWS_PER_STATEMENT) {
            let values = (0..chunk.len())
                .map(|i| format!("(${}, ${})", 2 * i + 1, 2 * i + 2))
                .collect::<Vec<_>>()
                .join(", ");
            // VALUES names its columns column1, column2 on both databases.
            let sql = format!(
                "UPDATE agents SET last_seen = heard.column2 FROM (VALUES {values}) AS heard \
                 WHERE agents.id = heard.column1 AND agents.last_seen < heard.column2"
            );
            // Only placeholders are formatted in; the values are bound.
            let mut query = sqlx::query(sqlx::AssertSqlSafe(sql));
            for (id, at) in chunk {
                query = query.bind(id.as_str()).bind(at.0);
            }
            query.execute(&self.write).await?;
        }
        Ok(())
    }

    /// Agents taking part (alive or marked) that have not been heard from since `before`.
    pub async fn silent_agents(&self, before: Timestamp) -> Result<Vec<(String, String)>> {
        Ok(sqlx::query_as(
            "SELECT id, group_name FROM agents WHERE state IN ('alive', 'marked') AND last_seen < $1 \
             ORDER BY id",
        )
        .bind(before.0)
        .fetch_all(&self.read)
        .await?)
    }

    /// The agent asks to take nothing new, as it is about to go: marks it by hand (so no policy
    /// unmarks it) and records a `drain` event, in one transaction. Alive, lost (back, and
    /// draining: straight to marked, so nothing is placed on it meanwhile) and marked by the
    /// policy agents change; one already marked by hand, terminated or unknown is left as it
    /// is, so asking again records nothing. Returns its group if it changed.
    pub async fn drain_agent(&self, id: &str, now: Timestamp) -> Result<Option<String>> {
        let mut tx = self.write_tx().await?;
        // One conditional update: two syncs at once cannot both record the event.
        let row = sqlx::query(
            "UPDATE agents SET state = 'marked', drained_by_hand = $2 \
             WHERE id = $1 AND (state IN ('alive', 'lost') \
                 OR (state = 'marked' AND drained_by_hand = $3)) \
             RETURNING group_name",
        )
        .bind(id)
        .bind(true)
        .bind(false)
        .fetch_optional(&mut *tx)
        .await?;
        let Some(row) = row else {
            return Ok(None);
        };
        let group = Fields::new(&row, "agent", "group_name")?.text("group_name")?;
        let event = NewEvent {
            at: now,
            group: Some(group.clone()),
            session: None,
            agent: Some(id.to_string()),
            kind: "drain".into(),
            message: format!("agent {id} drains itself: it is about to go"),
        };
        insert_event(&mut tx, &event).await?;
        tx.commit().await?;
        Ok(Some(group))
    }

    /// The agent is gone for good (its instance disappeared), or missed its heartbeats where
    /// its sessions go at once: marks it lost (if it took part, or was lost already) and, in
    /// the same transaction, puts the sessions it held back in the queue (`requeue`) or fails
    /// them, freeing what they held, with a `lost` event. Returns the sessions it held; empty
    /// if it was neither alive, marked nor lost.
    pub async fn lose_agent(&self, id: &str, requeue: bool, now: Timestamp) -> Result<Vec<String>> {
        let mut tx = self.write_tx().await?;
        let group: Option<String> = sqlx::query_scalar(
            "UPDATE agents SET state = 'lost', allocated = '', \
             idle_since = CASE WHEN state = 'lost' THEN idle_since ELSE $2 END \
             WHERE id = $1 AND state IN ('alive', 'marked', 'lost') RETURNING group_name",
        )
        .bind(id)
        .bind(now.0)
        .fetch_optional(&mut *tx)
        .await?;
        let Some(group) = group else {
            return Ok(Vec::new());
        };
        let held = release_held(&mut tx, id, &group, requeue, now).await?;
        let fate = if requeue { "requeued" } else { "failed" };
        let message = format!(
            "agent {id} missed its heartbeats; {} session(s) {fate}",
            held.len()
        );
        insert_event(
            &mut tx,
            &NewEvent::of_agent(now, &group, id, "lost", message),
        )
        .await?;
        tx.commit().await?;
        Ok(held)
    }

    /// The agent missed its heartbeats, and the sessions it holds stay with it for now (they
    /// may still run there): marks it lost, so that nothing new lands on it, with a `lost`
    /// event saying what becomes of them (`fate`), in one transaction. Returns how many it
    /// holds; `None` if it was not alive or marked.
    pub async fn mark_agent_lost(
        &self,
        id: &str,
        now: Timestamp,
        fate: &str,
    ) -> Result<Option<usize>> {
        let mut tx = self.write_tx().await?;
        let group: Option<String> = sqlx::query_scalar(
            "UPDATE agents SET state = 'lost', idle_since = $2 \
             WHERE id = $1 AND state IN ('alive', 'marked') RETURNING group_name",
        )
        .bind(id)
        .bind(now.0)
        .fetch_optional(&mut *tx)
        .await?;
        let Some(group) = group else {
            return Ok(None);
        };
        let held: i64 = sqlx::query_scalar(
            "SELECT COUNT(*) FROM sessions WHERE agent = $1 AND state IN ('scheduled', 'running')",
        )
        .bind(id)
        .fetch_one(&mut *tx)
        .await?;
        let message = format!("agent {id} missed its heartbeats; {held} session(s) {fate}");
        insert_event(
            &mut tx,
            &NewEvent::of_agent(now, &group, id, "lost", message),
        )
        .await?;
        tx.commit().await?;
        Ok(Some(usize::try_from(held).unwrap_or(0)))
    }

    /// Lost agents not heard from since `before` that still hold sessions, with their groups.
    pub async fn lost_agents_holding(&self, before: Timestamp) -> Result<Vec<(String, String)>> {
        Ok(sqlx::query_as(
            "SELECT id, group_name FROM agents a WHERE state = 'lost' AND last_seen < $1 \
             AND EXISTS (SELECT 1 FROM sessions s WHERE s.agent = a.id \
                 AND s.state IN ('scheduled', 'running')) \
             ORDER BY id",
        )
        .bind(before.0)
        .fetch_all(&self.read)
        .await?)
    }

    /// The sessions a lost agent (still lost, and not heard from since `before`) holds leave it:
    /// back in the queue (`requeue`) or failed, in one transaction. Returns them; empty if the
    /// agent is back meanwhile.
    pub async fn release_lost_agent(
        &self,
        id: &str,
        before: Timestamp,
        requeue: bool,
        now: Timestamp,
    ) -> Result<Vec<String>> {
        let mut tx = self.write_tx().await?;
        let group: Option<String> = sqlx::query_scalar(
            "UPDATE agents SET allocated = '' \
             WHERE id = $1 AND state = 'lost' AND last_seen < $2 RETURNING group_name",
        )
        .bind(id)
        .bind(before.0)
        .fetch_optional(&mut *tx)
        .await?;
        let Some(group) = group else {
            return Ok(Vec::new());
        };
        let held = release_held(&mut tx, id, &group, requeue, now).await?;
        tx.commit().await?;
        Ok(held)
    }

    /// Removes agent `id` with its tokens (an agent token, an unused bootstrap token made for
    /// it) and an event, in one transaction: a lost or terminated agent, or any that runs no
    /// session. The sessions a lost agent still holds (its group keeps them while it may come
    /// back) are gone with it: back in the queue (`requeue`, its group's `on_agent_lost`) or
    /// failed. `NotFound` if there is no such agent, `Refused` naming the sessions a taking
    /// part agent runs.
    pub async fn remove_agent(
        &self,
        id: &str,
        requeue: bool,
        remember: bool,
        now: Timestamp,
    ) -> Result<Removed> {
        let mut tx = self.write_tx().await?;
        let row = sqlx::query(self.locking(crate::locked!(
            "SELECT group_name, state, capacity, devices FROM agents WHERE id = $1"
        )))
        .bind(id)
        .fetch_optional(&mut *tx)
        .await?
        .ok_or_else(|| StoreError::not_found("agent", id))?;
        let f = Fields::new(&row, "agent", "group_name")?;
        let group = f.text("group_name")?;
        let state: AgentState = f.name("state")?;
        let released = match state {
            AgentState::Lost | AgentState::Terminated => {
                release_held(&mut tx, id, &group, requeue, now).await?
            }
            AgentState::Alive | AgentState::Marked => Vec::new(),
        };
        let running: Vec<String> = sqlx::query_scalar(
            "SELECT id FROM sessions WHERE agent = $1 AND state IN ('scheduled', 'running') \
             ORDER BY id LIMIT 11",
        )
        .bind(id)
        .fetch_all(&mut *tx)
        .await?;
        if !running.is_empty() {
            let shown = running
                .iter()
                .take(10)
                .cloned()
                .collect::<Vec<_>>()
                .join(", ");
            let more = if running.len() > 10 { ", ..." } else { "" };
            return Err(StoreError::Refused(format!(
                "agent {id:?} runs sessions ({shown}{more}): cancel them, or drain the agent \
                 and wait for them to end"
            )));
        }
        if remember {
            let shape = crate::removed_agents::Shape {
                capacity: f.text("capacity")?,
                devices: f.text("devices")?,
            };
            crate::removed_agents::remember(&mut tx, id, &group, &shape, now).await?;
        }
        sqlx::query("DELETE FROM agents WHERE id = $1")
            .bind(id)
            .execute(&mut *tx)
            .await?;
        sqlx::query("DELETE FROM agent_images WHERE agent = $1")
            .bind(id)
            .execute(&mut *tx)
            .await?;
        let revoked = crate::tokens::revoke_agent_tokens(&mut tx, id).await?;
        let event = NewEvent {
            at: now,
            group: Some(group.clone()),
            session: None,
            agent: Some(id.to_string()),
            kind: "removed".into(),
            message: format!("agent {id} removed ({} token(s) revoked)", revoked.len()),
        };
        insert_event(&mut tx, &event).await?;
        tx.commit().await?;
        Ok(Removed {
            group,
            revoked,
            released,
        })
    }
}

/// An agent's devices as stored: what it has, not what is allocated (a snapshot adds that up
/// from the sessions' grants).
/// The sessions agent `id` holds (scheduled or running) leave it, in `tx`: back in the queue
/// (`requeue`) or failed, each with its history row and event. Returns them.
async fn release_held(
    tx: &mut Tx,
    id: &str,
    group: &str,
    requeue: bool,
    now: Timestamp,
) -> Result<Vec<String>> {
    let held: Vec<String> = sqlx::query_scalar(
        "SELECT id FROM sessions WHERE agent = $1 AND state IN ('scheduled', 'running') ORDER BY id",
    )
    .bind(id)
    .fetch_all(&mut **tx)
    .await?;
    let (state, reason) = if requeue {
        (
            SessionState::Pending,
            format!("requeued: agent {id} was lost"),
        )
    } else {
        (SessionState::Failed, format!("agent {id} was lost"))
    };
    let sql = if requeue {
        "UPDATE sessions SET state = 'pending', agent = NULL, allocation = NULL, devices = '[]', \
         wait_reason = NULL, blocked_passes = 0, updated_at = $2 \
         WHERE agent = $1 AND state IN ('scheduled', 'running')"
    } else {
        "UPDATE sessions SET state = 'failed', end_reason = $3, updated_at = $2 \
         WHERE agent = $1 AND state IN ('scheduled', 'running')"
    };
    sqlx::query(sql)
        .bind(id)
        .bind(now.0)
        .bind(&reason)
        .execute(&mut **tx)
        .await?;
    let history: Vec<_> = held
        .iter()
        .map(|s| (s.as_str(), now, state, reason.clone()))
        .collect();
    crate::sessions::insert_history_many(tx, &history).await?;
    let events: Vec<NewEvent> = held
        .iter()
        .map(|s| NewEvent {
            session: Some(s.clone()),
            ..NewEvent::of_agent(
                now,
                group,
                id,
                if requeue { "requeued" } else { "failed" },
                reason.clone(),
            )
        })
        .collect();
    crate::events::insert_events_many(tx, &events).await?;
    Ok(held)
}

fn reported_devices(devices: &[corral_core::Device]) -> Vec<corral_core::Device> {
    devices
        .iter()
        .map(|d| corral_core::Device {
            allocated: corral_core::Quantity::ZERO,
            allocated_memory: corral_core::Quantity::ZERO,
            ..d.clone()
        })
        .collect()
}
