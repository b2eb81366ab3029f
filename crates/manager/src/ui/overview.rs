//! The first page: every group with its agents, sessions and capacity per slot, and the
//! newest sessions the viewer may see, an array as one row with its sessions counted by state
//! (`/ui?array=ID` lists the sessions of one array).

use std::collections::BTreeMap;

use axum::extract::State;
use axum::http::StatusCode;
use corral_core::{Agent, AgentState, ScalingGroup, Slots};
use corral_store::{
    ArrayFilter, ArrayRecord, ArraySelect, SessionFilter, SessionRecord, StoreError,
};
use maud::{html, Markup};

use super::layout::{self, session_link, slot_bars};
use super::{html, PageResult, Viewer};
use crate::extract::Query;
use crate::App;

/// Sessions listed on one array's page (`/ui?array=ID`).
const ARRAY_ROWS: u32 = 1000;

#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OverviewPage {
    /// Only the sessions of this array, instead of the newest sessions and arrays.
    array: Option<String>,
}

/// A row of the newest sessions: a session of no array, or an array.
enum Recent {
    Session(Box<SessionRecord>),
    Array(Box<ArrayRecord>),
}

fn session_row(r: &SessionRecord) -> Markup {
    let s = &r.session;
    html! {
        tr.session data-session=(s.id.0) {
            td { (session_link(&s.id.0)) }
            td { a href=(format!("/ui/groups/{}", s.group)) { (s.group) } }
            td { (s.owner) }
            td { (layout::state(&layout::word(&s.state))) }
            td { (s.request) }
            td { (layout::time(s.submitted_at)) }
        }
    }
}

pub(super) fn array_row(a: &ArrayRecord) -> Markup {
    html! {
        tr.array data-array=(a.id) {
            td { a.array-link href=(format!("/ui?array={}", a.id)) { (a.id) }
                 " (array " (a.range) ", " (a.sessions) " sessions)" }
            td { a href=(format!("/ui/groups/{}", a.group)) { (a.group) } }
            td { (a.owner) }
            td.counts { (a.counts.text()) }
            td { (a.request) }
            td { (layout::time(a.submitted_at)) }
        }
    }
}

/// Sessions listed on the first page.
const RECENT: u32 = 20;

/// Capacity and allocation summed over a group's agents that hold capacity (not terminated).
#[derive(Default)]
pub struct Totals {
    pub capacity: Slots,
    pub allocated: Slots,
    pub by_state: BTreeMap<String, usize>,
}

impl Totals {
    pub fn of<'a>(agents: impl IntoIterator<Item = &'a Agent>) -> Totals {
        let mut t = Totals::default();
        for a in agents {
            *t.by_state.entry(a.state.to_string()).or_default() += 1;
            if a.state == AgentState::Terminated {
                continue;
            }
            // Sums of stored amounts; an overflow would be a corrupt row, shown as it was.
            t.capacity = t
                .capacity
                .checked_add(&a.capacity)
                .unwrap_or(t.capacity.clone());
            t.allocated = t
                .allocated
                .checked_add(&a.allocated)
                .unwrap_or(t.allocated.clone());
        }
        t
    }
}

pub async fn page(
    State(app): State<App>,
    Viewer(viewer): Viewer,
    Query(q): Query<OverviewPage>,
) -> PageResult {
    let groups = app.store.list_groups().await?;
    let agents = app.store.list_agents(None).await?;
    let counts = app.store.count_sessions().await?;
    let owner = (!viewer.is_admin()).then(|| viewer.user.clone());
    let recent = match &q.array {
        Some(array) => array_sessions(&app, owner, array).await?,
        None => newest(&app, owner).await?,
    };
    let body = html! {
        (groups_section(&groups, &agents, &counts))
        (recent_section(q.array.as_deref(), viewer.is_admin(), &recent))
    };
    Ok(html(
        StatusCode::OK,
        layout::page("Overview", Some(&viewer), body),
    ))
}

/// The sessions of one array (`owner`'s only, if given), in the store's order.
async fn array_sessions(
    app: &App,
    owner: Option<String>,
    array: &str,
) -> Result<Vec<Recent>, StoreError> {
    Ok(app
        .store
        .list_sessions(&SessionFilter {
            owner,
            limit: Some(ARRAY_ROWS),
            array: Some(ArraySelect::Of(array.to_string())),
            ..Default::default()
        })
        .await?
        .into_iter()
        .map(|s| Recent::Session(Box::new(s)))
        .collect())
}

/// The newest sessions of no array and the newest arrays (`owner`'s only, if given), newest
/// first, at most [`RECENT`] in all.
async fn newest(app: &App, owner: Option<String>) -> Result<Vec<Recent>, StoreError> {
    let sessions = app
        .store
        .list_sessions(&SessionFilter {
            owner: owner.clone(),
            limit: Some(RECENT),
            newest_first: true,
            array: Some(ArraySelect::Outside),
            ..Default::default()
        })
        .await?;
    let arrays = app
        .store
        .list_arrays(&ArrayFilter {
            owner,
            limit: Some(RECENT),
            newest_first: true,
            ..Default::default()
        })
        .await?;
    let mut rows: Vec<Recent> = sessions
        .into_iter()
        .map(|s| Recent::Session(Box::new(s)))
        .collect();
    rows.extend(arrays.into_iter().map(|a| Recent::Array(Box::new(a))));
    // Newest first; stable, so sessions keep the store's order among themselves.
    rows.sort_by_key(|r| {
        std::cmp::Reverse(match r {
            Recent::Session(s) => s.session.submitted_at,
            Recent::Array(a) => a.submitted_at,
        })
    });
    rows.truncate(RECENT as usize);
    Ok(rows)
}

/// Every group with its agents by state, its sessions pending and running (`counts`: per group
/// and state, as the store counts them) and its capacity used.
fn groups_section(
    groups: &[ScalingGroup],
    agents: &[Agent],
    counts: &[(String, String, i64)],
) -> Markup {
    let mut by_group: BTreeMap<&str, Vec<&Agent>> = BTreeMap::new();
    for a in agents {
        by_group.entry(a.group.as_str()).or_default().push(a);
    }
    let count = |group: &str, states: &[&str]| -> i64 {
        counts
            .iter()
            .filter(|(g, s, _)| g == group && states.contains(&s.as_str()))
            .map(|(_, _, n)| n)
            .sum()
    };
    html! {
        h1 { "Scaling groups" }
        @if groups.is_empty() {
            p.empty { "No group yet: " code { "corral group create NAME" } }
        } @else {
            table #groups {
                thead { tr {
                    th { "Group" } th { "Policy" } th { "Agents" } th { "Pending" }
                    th { "Running" } th { "Capacity used" }
                } }
                tbody {
                    @for g in groups {
                        @let totals = Totals::of(by_group.get(g.name.as_str()).into_iter().flatten().copied());
                        tr.group data-group=(g.name) {
                            td { a href=(format!("/ui/groups/{}", g.name)) { (g.name) } }
                            td { (layout::word(&g.policy.kind))
                                 " (" (g.policy.min_nodes) "–" (g.policy.max_nodes) " nodes)" }
                            td.agents {
                                @for (state, n) in &totals.by_state {
                                    @if state != "terminated" {
                                        (layout::state(state)) " " (n) " "
                                    }
                                }
                            }
                            td.pending { (count(&g.name, &["pending"])) }
                            td.running { (count(&g.name, &["scheduled", "running"])) }
                            td { (slot_bars(&totals.allocated, &totals.capacity)) }
                        }
                    }
                }
            }
        }
    }
}

/// The newest sessions, or those of one array (`array`), a session or an array a row.
fn recent_section(array: Option<&str>, admin: bool, recent: &[Recent]) -> Markup {
    html! {
        @if let Some(array) = array {
            h2 { "Sessions of array " (array) }
            p { a href="/ui" { "All sessions" } }
        } @else {
            h2 { @if admin { "Newest sessions" } @else { "Your newest sessions" } }
        }
        @if recent.is_empty() {
            p.empty { "No session yet." }
        } @else {
            table #recent {
                thead { tr { th { "Session" } th { "Group" } th { "Owner" } th { "State" }
                             th { "Request" } th { "Submitted" } } }
                tbody {
                    @for r in recent {
                        @match r {
                            Recent::Session(s) => (session_row(s)),
                            Recent::Array(a) => (array_row(a)),
                        }
                    }
                }
            }
        }
    }
}
