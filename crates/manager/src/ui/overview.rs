//! The first page: every group with its agents, sessions and capacity per slot, and the
//! newest sessions the viewer may see.

use std::collections::BTreeMap;

use axum::extract::State;
use axum::http::StatusCode;
use corral_core::{Agent, AgentState, Slots};
use corral_store::SessionFilter;
use maud::html;

use super::layout::{self, session_link, slot_bars};
use super::{html, PageResult, Viewer};
use crate::App;

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

pub async fn page(State(app): State<App>, Viewer(viewer): Viewer) -> PageResult {
    let groups = app.store.list_groups().await?;
    let agents = app.store.list_agents(None).await?;
    let counts = app.store.count_sessions().await?;
    let recent = app
        .store
        .list_sessions(&SessionFilter {
            owner: (!viewer.is_admin()).then(|| viewer.user.clone()),
            limit: Some(RECENT),
            newest_first: true,
            ..Default::default()
        })
        .await?;
    let mut by_group: BTreeMap<&str, Vec<&Agent>> = BTreeMap::new();
    for a in &agents {
        by_group.entry(a.group.as_str()).or_default().push(a);
    }
    let count = |group: &str, states: &[&str]| -> i64 {
        counts
            .iter()
            .filter(|(g, s, _)| g == group && states.contains(&s.as_str()))
            .map(|(_, _, n)| n)
            .sum()
    };
    let body = html! {
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
                    @for g in &groups {
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
        h2 { @if viewer.is_admin() { "Newest sessions" } @else { "Your newest sessions" } }
        @if recent.is_empty() {
            p.empty { "No session yet." }
        } @else {
            table #recent {
                thead { tr { th { "Session" } th { "Group" } th { "Owner" } th { "State" }
                             th { "Request" } th { "Submitted" } } }
                tbody {
                    @for r in &recent {
                        @let s = &r.session;
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
            }
        }
    };
    Ok(html(
        StatusCode::OK,
        layout::page("Overview", Some(&viewer), body),
    ))
}
