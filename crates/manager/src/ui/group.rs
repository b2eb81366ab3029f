//! A group's page: capacity per slot, the timeline, its agents with their allocation, its
//! arrays not yet ended (one row each, its sessions counted by state), the pending queue with
//! why each session waits, sessions on agents, and instances on their way.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use corral_api::history::{GroupHistory, HistoryQuery};
use corral_core::{Agent, AgentState, ScalingGroup, SessionState};
use corral_store::{
    ArrayFilter, ArrayRecord, ArraySelect, InstancePhase, InstanceRecord, SessionFilter,
    SessionRecord,
};
use maud::{html, Markup};
use serde::Deserialize;

use super::layout::{self, session_link, slot_bars};
use super::overview::Totals;
use super::{html, PageResult, Viewer};
use crate::error::ApiError;
use crate::extract::Query;
use crate::App;

/// Rows shown per table unless `all` is asked for.
const ROWS: u32 = 200;

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct GroupPage {
    /// The timeline's window (`6h`, `30m`...): as the history route takes it.
    since: Option<String>,
    /// Every agent, not the first [`ROWS`].
    all: Option<bool>,
}

pub async fn page(
    State(app): State<App>,
    Viewer(viewer): Viewer,
    Path(name): Path<String>,
    Query(q): Query<GroupPage>,
) -> PageResult {
    let group = app
        .store
        .get_group(&name)
        .await?
        .ok_or_else(|| ApiError::not_found("group", &name))?;
    let mut agents = app.store.list_agents(Some(&name)).await?;
    agents.retain(|a| a.state != AgentState::Terminated);
    agents.sort_by(|a, b| a.id.0.cmp(&b.id.0));
    let totals = Totals::of(&agents);
    let shown_agents = if q.all == Some(true) {
        agents.len()
    } else {
        agents.len().min(ROWS as usize)
    };
    let mine = (!viewer.is_admin()).then(|| viewer.user.clone());
    let sessions = |state| SessionFilter {
        group: Some(name.clone()),
        owner: mine.clone(),
        state: Some(state),
        limit: Some(ROWS),
        // An array's sessions are its row in the arrays table, not one row each.
        array: Some(ArraySelect::Outside),
        ..Default::default()
    };
    let arrays = app
        .store
        .list_arrays(&ArrayFilter {
            group: Some(name.clone()),
            owner: mine.clone(),
            active: Some(true),
            limit: Some(ROWS),
            newest_first: true,
            ..Default::default()
        })
        .await?;
    let pending = app
        .store
        .list_sessions(&sessions(SessionState::Pending))
        .await?;
    let mut on_agents = app
        .store
        .list_sessions(&sessions(SessionState::Running))
        .await?;
    on_agents.extend(
        app.store
            .list_sessions(&sessions(SessionState::Scheduled))
            .await?,
    );
    let counts = app.store.count_sessions().await?;
    let queued: i64 = counts
        .iter()
        .filter(|(g, s, _)| *g == name && s == "pending")
        .map(|(_, _, n)| n)
        .sum();
    let instances = if viewer.is_admin() {
        app.store
            .list_instances(&name, &InstancePhase::IN_FLIGHT)
            .await?
    } else {
        Vec::new()
    };
    let window = HistoryQuery {
        since: Some(q.since.clone().unwrap_or_else(|| "6h".to_string())),
        ..Default::default()
    };
    let history = crate::api::group_history(&app, &name, &window).await?;

    let body = html! {
        (summary(&group))
        (capacity(&totals))
        (timeline(&group.name, &window, &history))
        (agents_section(&group.name, &agents, shown_agents))
        @if !arrays.is_empty() {
            (arrays_section(&arrays))
        }
        (pending_section(&pending, queued, viewer.is_admin()))
        (on_agents_section(&on_agents))
        @if viewer.is_admin() {
            (instances_section(&instances))
        }
    };
    Ok(html(
        StatusCode::OK,
        layout::page(&format!("Group {name}"), Some(&viewer), body),
    ))
}

/// The title and the group's settings in a line.
fn summary(group: &ScalingGroup) -> Markup {
    html! {
        h1 { "Group " (group.name) }
        p.summary {
            (layout::word(&group.policy.kind)) " policy, "
            (group.policy.min_nodes) " to " (group.policy.max_nodes) " nodes; "
            (layout::word(&group.scheduler.sequencer)) " queue, "
            (layout::word(&group.scheduler.placement)) " placement; "
            (group.templates.len()) " template(s)"
        }
    }
}

/// Capacity per slot, summed over the group's agents, and how much of it is allocated.
fn capacity(totals: &Totals) -> Markup {
    html! {
        section #capacity {
            h2 { "Capacity" }
            (slot_bars(&totals.allocated, &totals.capacity))
        }
    }
}

/// The timeline over the window, with the form and links that choose it.
fn timeline(group: &str, window: &HistoryQuery, history: &GroupHistory) -> Markup {
    html! {
        section #history {
            h2 { "Timeline" }
            form.window method="get" {
                label for="since" { "Last " }
                input #since name="since" value=(window.since.as_deref().unwrap_or("6h")) size="5";
                button type="submit" { "Show" }
                @for window in ["15m", "1h", "6h", "24h", "7d"] {
                    " " a href=(format!("/ui/groups/{group}?since={window}")) { (window) }
                }
            }
            (super::timeline::svg(history))
        }
    }
}

/// The agents not terminated, the first `shown` of them in rows, with their allocation.
fn agents_section(group: &str, agents: &[Agent], shown: usize) -> Markup {
    html! {
        section {
            h2 { "Agents (" (agents.len()) ")" }
            @if agents.is_empty() {
                p.empty { "No agent." }
            } @else {
                table #agents {
                    thead { tr { th { "Agent" } th { "State" } th { "Template" } th { "Allocated" } } }
                    tbody {
                        @for a in &agents[..shown] {
                            tr.agent data-agent=(a.id.0) {
                                td { (a.id.0) @if a.external { " " span.tag { "external" } } }
                                td.state { (layout::state(&a.state.to_string())) }
                                td { (a.template.as_deref().unwrap_or("-")) }
                                td { (slot_bars(&a.allocated, &a.capacity)) }
                            }
                        }
                    }
                }
                @if shown < agents.len() {
                    p { (agents.len() - shown) " more: "
                        a href=(format!("/ui/groups/{group}?all=true")) { "show all" } }
                }
            }
        }
    }
}

/// The group's arrays not yet ended, one row each.
fn arrays_section(arrays: &[ArrayRecord]) -> Markup {
    html! {
        section {
            h2 { "Arrays" }
            table #arrays {
                thead { tr { th { "Array" } th { "Group" } th { "Owner" } th { "Sessions" }
                             th { "Request" } th { "Submitted" } } }
                tbody {
                    @for a in arrays { (super::overview::array_row(a)) }
                }
            }
        }
    }
}

/// The pending sessions shown, with why each waits; `queued` counts the whole queue.
fn pending_section(pending: &[SessionRecord], queued: i64, admin: bool) -> Markup {
    html! {
        section {
            h2 { "Pending (" (queued) " in the queue)" }
            @if !admin { p.note { "Your sessions only." } }
            @if pending.is_empty() {
                p.empty { "Nothing waits." }
            } @else {
                table #pending {
                    thead { tr { th { "Session" } th { "Owner" } th { "Request" }
                                 th { "Submitted" } th { "Why it waits" } } }
                    tbody {
                        @for r in pending {
                            tr.session data-session=(r.session.id.0) {
                                td { (session_link(&r.session.id.0)) }
                                td { (r.session.owner) }
                                td { (r.session.request) }
                                td { (layout::time(r.session.submitted_at)) }
                                td.wait-reason { (r.wait_reason.as_deref().unwrap_or("not yet seen by a pass")) }
                            }
                        }
                    }
                }
            }
        }
    }
}

/// Sessions scheduled or running on the group's agents.
fn on_agents_section(on_agents: &[SessionRecord]) -> Markup {
    html! {
        section {
            h2 { "On agents" }
            @if on_agents.is_empty() {
                p.empty { "Nothing runs." }
            } @else {
                table #running {
                    thead { tr { th { "Session" } th { "Owner" } th { "State" } th { "Agent" }
                                 th { "Holds" } } }
                    tbody {
                        @for r in on_agents {
                            tr.session data-session=(r.session.id.0) {
                                td { (session_link(&r.session.id.0)) }
                                td { (r.session.owner) }
                                td { (layout::state(&layout::word(&r.session.state))) }
                                td { (r.session.agent.as_ref().map_or("-", |a| a.0.as_str())) }
                                td { (r.allocation.as_ref().map(|s| s.to_string()).unwrap_or_default()) }
                            }
                        }
                    }
                }
            }
        }
    }
}

/// Instances requested, launching or provisioning (admins only).
fn instances_section(instances: &[InstanceRecord]) -> Markup {
    html! {
        section {
            h2 { "Instances on their way" }
            @if instances.is_empty() {
                p.empty { "None." }
            } @else {
                table #instances {
                    thead { tr { th { "Agent id" } th { "Template" } th { "Phase" }
                                 th { "Vendor id" } th { "Requested" } } }
                    tbody {
                        @for i in instances {
                            tr.instance {
                                td { (i.id) }
                                td { (i.template) }
                                td { (layout::state(&layout::word(&i.phase))) }
                                td { (i.provider_id.as_deref().unwrap_or("-")) }
                                td { (layout::time(i.requested_at)) }
                            }
                        }
                    }
                }
            }
        }
    }
}
