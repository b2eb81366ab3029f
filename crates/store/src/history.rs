//! What a group's history is computed from: the events that start and end its nodes, and the
//! state changes of its sessions in a window. The series themselves are computed by the caller.

use corral_core::{SessionState, Timestamp};

use crate::codec::{from_name, Fields};
use crate::error::{Result, StoreError};
use crate::events::Event;
use crate::Store;

/// Event kinds that start a node (an agent joined, or was registered by hand) and that end one (let go by a pass, its
/// instance terminated or gone, removed by hand).
pub const NODE_STARTS: &[&str] = &["joined", "registered"];
pub const NODE_ENDS: &[&str] = &["terminate", "terminated", "instance_gone", "removed"];
/// Event kinds a timeline shows: what the scaler and the agents did.
pub const SCALING_KINDS: &[&str] = &[
    "launch",
    "launched",
    "launch_failed",
    "mark",
    "unmark",
    "terminate",
    "terminated",
    "instance_gone",
    "orphan",
    "joined",
    "registered",
    "lost",
    "back",
    "drain",
    "removed",
];

/// A node's start or end with the template it was launched from (`None`: none known, as for an
/// agent registered by hand).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeSpan {
    pub agent: String,
    pub template: Option<String>,
    pub at: Timestamp,
    pub starts: bool,
}

/// A session entering a state at a time (its history rows).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StateChange {
    pub session: String,
    pub at: Timestamp,
    pub state: SessionState,
}

/// What `group_history` read: every node start and end up to `until`, the state changes of
/// every session alive at some time in the window, by session then order, and the window's
/// scaling events, oldest first (at most `max_events`; `events_truncated` if there were more).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HistoryRows {
    pub nodes: Vec<NodeSpan>,
    pub sessions: Vec<StateChange>,
    pub events: Vec<Event>,
    pub events_truncated: bool,
}

fn in_list(kinds: &[&str]) -> String {
    kinds
        .iter()
        .map(|k| format!("'{k}'"))
        .collect::<Vec<_>>()
        .join(", ")
}

impl Store {
    /// The rows group `group`'s history from `since` to `until` is computed from.
    pub async fn group_history(
        &self,
        group: &str,
        since: Timestamp,
        until: Timestamp,
        max_events: u32,
    ) -> Result<HistoryRows> {
        let mut node_kinds: Vec<&str> = NODE_STARTS.to_vec();
        node_kinds.extend_from_slice(NODE_ENDS);
        let nodes_sql = format!(
            "SELECT e.id, e.agent, e.kind, e.at, COALESCE(a.template, i.template) AS template \
             FROM events e LEFT JOIN agents a ON a.id = e.agent \
             LEFT JOIN instances i ON i.id = e.agent \
             WHERE e.group_name = $1 AND e.kind IN ({}) AND e.at <= $2 AND e.agent IS NOT NULL \
             ORDER BY e.at, e.id",
            in_list(&node_kinds)
        );
        let rows = sqlx::query(sqlx::AssertSqlSafe(nodes_sql))
            .bind(group)
            .bind(until.0)
            .fetch_all(&self.read)
            .await?;
        let mut nodes = Vec::with_capacity(rows.len());
        for row in &rows {
            let f = Fields::numbered(row, "event", "id")?;
            let kind = f.text("kind")?;
            nodes.push(NodeSpan {
                agent: f.text("agent")?,
                template: f.opt_text("template")?,
                at: f.time("at")?,
                starts: NODE_STARTS.contains(&kind.as_str()),
            });
        }

        // Sessions not ended before the window (an ended session's updated_at is its end)
        // and submitted before its end.
        let rows = sqlx::query(
            "SELECT h.id, h.session, h.at, h.state FROM session_history h \
             JOIN sessions s ON s.id = h.session \
             WHERE s.group_name = $1 AND s.submitted_at <= $3 \
             AND (s.updated_at >= $2 OR s.state IN ('pending', 'scheduled', 'running')) \
             AND h.at <= $3 \
             ORDER BY h.session, h.id",
        )
        .bind(group)
        .bind(since.0)
        .bind(until.0)
        .fetch_all(&self.read)
        .await?;
        let mut sessions = Vec::with_capacity(rows.len());
        for row in &rows {
            let f = Fields::numbered(row, "session history", "id")?;
            let state = f.text("state")?;
            sessions.push(StateChange {
                session: f.text("session")?,
                at: f.time("at")?,
                state: from_name(&state).ok_or_else(|| {
                    StoreError::Corrupt(format!("session history: unknown state {state:?}"))
                })?,
            });
        }

        let events_sql = format!(
            "SELECT id, at, group_name, session, agent, kind, message FROM events \
             WHERE group_name = $1 AND kind IN ({}) AND at >= $2 AND at <= $3 \
             ORDER BY at DESC, id DESC LIMIT $4",
            in_list(SCALING_KINDS)
        );
        let rows = sqlx::query(sqlx::AssertSqlSafe(events_sql))
            .bind(group)
            .bind(since.0)
            .bind(until.0)
            .bind(i64::from(max_events) + 1)
            .fetch_all(&self.read)
            .await?;
        let mut events = rows
            .iter()
            .map(crate::events::event_from_row)
            .collect::<Result<Vec<_>>>()?;
        let events_truncated = events.len() > max_events as usize;
        events.truncate(max_events as usize);
        events.reverse();
        Ok(HistoryRows {
            nodes,
            sessions,
            events,
            events_truncated,
        })
    }
}
