//! The driver's work on the instances it knows: terminating those the cycle let go, ending
//! those that never joined in time, and reconciling the provider's list with the store
//! (claims left by a driver that died, orphans, agents whose instance vanished), each acting on
//! what `reconcile` decided.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use corral_core::{AgentState, LaunchSettings, OnAgentLost, Timestamp};
use corral_provider::Provider;
use corral_store::{InstancePhase, StoreError};

use super::reconcile::{self, OrphanAct, Vanished};
use super::Driver;
use crate::control::Control;
use crate::now;

impl Driver {
    /// Terminates the instances of agents the cycle let go.
    pub(super) async fn terminate(
        &self,
        provider: &dyn Provider,
        settings: &LaunchSettings,
    ) -> Result<(), StoreError> {
        let rows = self
            .store
            .list_instances(&self.group, &[InstancePhase::Terminating])
            .await?;
        if rows.is_empty() {
            return Ok(());
        }
        let ids: Vec<String> = rows.iter().filter_map(|r| r.provider_id.clone()).collect();
        if !ids.is_empty() {
            let timeout = Duration::from_secs(settings.call_timeout_secs);
            if let Err(e) = self
                .call(timeout, "terminate", provider.terminate(&ids))
                .await
            {
                tracing::warn!(group = self.group, error = %e, "terminate failed; retrying");
                return Ok(());
            }
        }
        let now = now();
        for r in &rows {
            let vendor = r.provider_id.as_deref().unwrap_or("never started");
            let message = format!("instance {vendor} of agent {} terminated", r.id);
            tracing::info!(group = self.group, "{message}");
            self.store
                .move_instance_noting(
                    &r.id,
                    &[InstancePhase::Terminating],
                    InstancePhase::Terminated,
                    None,
                    "its agent was let go",
                    Some(&self.new_event("terminated", Some(&r.id), message)),
                    now,
                )
                .await?;
        }
        Ok(())
    }

    /// Instances that did not join within the provisioning time are terminated and count as
    /// failures of their template.
    pub(super) async fn time_out(
        &self,
        provider: Option<&dyn Provider>,
        settings: &LaunchSettings,
        control: &Arc<Control>,
    ) -> Result<(), StoreError> {
        let now = now();
        let in_flight = self
            .store
            .list_instances(&self.group, &InstancePhase::IN_FLIGHT)
            .await?;
        for late in reconcile::time_out(&in_flight, provider.is_some(), settings, now) {
            if let (Some(provider), Some(id)) = (provider, &late.terminate) {
                let timeout = Duration::from_secs(settings.call_timeout_secs);
                if let Err(e) = self
                    .call(
                        timeout,
                        "terminate",
                        provider.terminate(std::slice::from_ref(id)),
                    )
                    .await
                {
                    tracing::warn!(group = self.group, instance = id, error = %e, "terminating a late instance failed; reconciliation will retry");
                }
            }
            let moved = self
                .store
                .move_instance(
                    &late.id,
                    &InstancePhase::IN_FLIGHT,
                    InstancePhase::Failed,
                    None,
                    &late.reason,
                    now,
                )
                .await?;
            if moved {
                self.failure(&late.template, false, &late.failure, now, control)
                    .await?;
            }
        }
        Ok(())
    }

    /// Compares the provider's list with the instances the manager knows
    /// (`reconcile::reconcile` decides), and carries out what it says.
    pub(super) async fn reconcile(
        &mut self,
        provider: &dyn Provider,
        settings: &LaunchSettings,
        control: &Arc<Control>,
    ) -> Result<(), StoreError> {
        let timeout = Duration::from_secs(settings.call_timeout_secs);
        let listed = match self.call(timeout, "list", provider.list()).await {
            Ok(listed) => listed,
            Err(e) => {
                tracing::warn!(group = self.group, error = %e, "listing instances failed");
                return Ok(());
            }
        };
        let now = now();
        let known = self
            .store
            .list_instances(&self.group, &InstancePhase::LIVE)
            .await?;
        // Whether a listed instance unknown to the manager may be taken for one launched for
        // the group: not where anyone can give it the tag (a batch job named like a pilot).
        let proven = provider.lists_only_its_own();
        let plan = reconcile::reconcile(&known, &listed, proven, &self.orphans, settings, now);
        self.settle_claims(&plan.settle, now).await?;
        self.act_on_orphans(provider, &plan.orphans, settings)
            .await?;
        self.act_on_vanished(&plan.vanished, now, control).await
    }

    /// Instances claimed for launch by a driver that stopped before it said how the launch
    /// went: moved as `reconcile::settle_claims` says, never launched again.
    async fn settle_claims(
        &self,
        settle: &[reconcile::Settle],
        now: Timestamp,
    ) -> Result<(), StoreError> {
        for s in settle {
            self.store
                .move_instance_noting(
                    &s.id,
                    &[InstancePhase::Launching],
                    s.to,
                    s.vendor.as_deref(),
                    s.reason,
                    Some(&self.new_event("launch_settled", Some(&s.id), s.message.clone())),
                    now,
                )
                .await?;
        }
        Ok(())
    }

    /// Remembers when each orphan was first seen (before acting, as a failed event must not
    /// make it said twice), says or terminates those due, and forgets those no longer listed.
    async fn act_on_orphans(
        &mut self,
        provider: &dyn Provider,
        orphans: &[reconcile::Orphan],
        settings: &LaunchSettings,
    ) -> Result<(), StoreError> {
        let timeout = Duration::from_secs(settings.call_timeout_secs);
        for o in orphans {
            self.orphans.insert(o.vendor.clone(), o.first_seen);
            match &o.act {
                OrphanAct::Wait => {}
                OrphanAct::Report(message) => self.event("orphan", None, message.clone()).await?,
                OrphanAct::Terminate(message) => match self
                    .call(
                        timeout,
                        "terminate",
                        provider.terminate(std::slice::from_ref(&o.vendor)),
                    )
                    .await
                {
                    Ok(()) => {
                        self.orphans.remove(&o.vendor);
                        self.event("orphan", None, message.clone()).await?;
                    }
                    Err(e) => {
                        tracing::warn!(group = self.group, instance = o.vendor, error = %e, "terminating an orphan failed")
                    }
                },
            }
        }
        let listed: HashSet<&str> = orphans.iter().map(|o| o.vendor.as_str()).collect();
        self.orphans.retain(|id, _| listed.contains(id.as_str()));
        Ok(())
    }

    /// Ends the known instances the provider's list says have ended.
    async fn act_on_vanished(
        &self,
        vanished: &[Vanished],
        now: Timestamp,
        control: &Arc<Control>,
    ) -> Result<(), StoreError> {
        for v in vanished {
            match v {
                Vanished::Lost { id, vendor } => {
                    self.instance_gone(id, vendor, now, control).await?
                }
                Vanished::Terminated { id } => {
                    self.store
                        .move_instance(
                            id,
                            &[InstancePhase::Terminating],
                            InstancePhase::Terminated,
                            None,
                            "gone",
                            now,
                        )
                        .await?;
                }
                Vanished::Failed {
                    id,
                    template,
                    failure,
                } => {
                    let moved = self
                        .store
                        .move_instance(
                            id,
                            &[InstancePhase::Provisioning],
                            InstancePhase::Failed,
                            None,
                            "ended before joining",
                            now,
                        )
                        .await?;
                    if moved {
                        self.failure(template, false, failure, now, control).await?;
                    }
                }
            }
        }
        Ok(())
    }

    /// An agent's instance disappeared: the agent is lost (its sessions follow the group's
    /// `on_agent_lost`) and, as it cannot come back, terminated.
    async fn instance_gone(
        &self,
        id: &str,
        vendor: &str,
        now: Timestamp,
        control: &Arc<Control>,
    ) -> Result<(), StoreError> {
        let moved = self
            .store
            .move_instance(
                id,
                &[InstancePhase::Joined],
                InstancePhase::Terminated,
                None,
                "the instance disappeared",
                now,
            )
            .await?;
        if !moved {
            return Ok(());
        }
        let requeue = self
            .store
            .get_group(&self.group)
            .await?
            .is_none_or(|g| g.policy.on_agent_lost == OnAgentLost::Requeue);
        let held = self.store.lose_agent(id, requeue, now).await?;
        if let Some(agent) = self.store.get_agent(id).await? {
            if agent.state != AgentState::Terminated {
                self.store
                    .set_agent_state(id, AgentState::Terminated, false, now)
                    .await?;
            }
        }
        let fate = if requeue { "requeued" } else { "failed" };
        let message = format!(
            "instance {vendor} of agent {id} disappeared: the agent is lost and terminated, {} session(s) {fate}",
            held.len()
        );
        self.event("instance_gone", Some(id), message).await?;
        control.wake(&self.group);
        Ok(())
    }
}
