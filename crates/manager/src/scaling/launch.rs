//! Launching a group's requested instances with its provider, and what a failed launch costs
//! its template: a backoff in the governor, an event, and a pass that plans without it.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use corral_core::{LaunchSettings, Timestamp};
use corral_provider::{Instance, LaunchRequest, Provider};
use corral_store::{InstancePhase, InstanceRecord, StoreError};

use super::Driver;
use crate::control::Control;
use crate::now;

impl Driver {
    /// Launches requested instances, per template, each with its own bootstrap token.
    pub(super) async fn launch(
        &self,
        provider: &dyn Provider,
        settings: &LaunchSettings,
        control: &Arc<Control>,
    ) -> Result<(), StoreError> {
        let requested = self
            .store
            .list_instances(&self.group, &[InstancePhase::Requested])
            .await?;
        let mut by_template: BTreeMap<&str, Vec<&InstanceRecord>> = BTreeMap::new();
        for r in &requested {
            by_template.entry(&r.template).or_default().push(r);
        }
        let ttl = Duration::from_secs(settings.max_provisioning_secs);
        for (template, rows) in by_template {
            // Claimed first: should another driver read the same rows (a manager that lost
            // the group and does not know it yet), each is launched by one of them.
            let ids: Vec<&str> = rows.iter().map(|r| r.id.as_str()).collect();
            let claimed = self.store.claim_launches(&ids, now()).await?;
            let rows: Vec<&InstanceRecord> = rows
                .into_iter()
                .filter(|r| claimed.contains(&r.id))
                .collect();
            if rows.is_empty() {
                continue;
            }
            let mut requests = Vec::with_capacity(rows.len());
            for r in &rows {
                let (token, _) = crate::auth::create_bootstrap_token(
                    &self.store,
                    &self.group,
                    Some(&r.id),
                    ttl,
                    now(),
                )
                .await?;
                requests.push(LaunchRequest {
                    agent_id: r.id.clone(),
                    token,
                });
            }
            let timeout = Duration::from_secs(settings.call_timeout_secs);
            let result = self
                .call(timeout, "launch", provider.launch(template, &requests))
                .await;
            let now = now();
            match result {
                Ok(instances) => {
                    let started: HashMap<&str, &Instance> = instances
                        .iter()
                        .filter_map(|i| i.agent_id.as_deref().map(|a| (a, i)))
                        .collect();
                    let mut launched = Vec::new();
                    let mut missing = 0;
                    for r in &rows {
                        match started.get(r.id.as_str()) {
                            Some(i) => {
                                // Its agent may have joined already: the id is kept either way.
                                self.store.record_provider_id(&r.id, &i.id).await?;
                                self.store
                                    .move_instance(
                                        &r.id,
                                        &[InstancePhase::Launching],
                                        InstancePhase::Provisioning,
                                        None,
                                        "launched",
                                        now,
                                    )
                                    .await?;
                                launched.push(format!("{} ({})", r.id, i.id));
                            }
                            None => {
                                missing += 1;
                                self.never_started(r, "the provider did not start it", now)
                                    .await?;
                            }
                        }
                    }
                    if !launched.is_empty() {
                        let message = format!(
                            "launched {} × {template}: {}",
                            launched.len(),
                            launched.join(", ")
                        );
                        self.event("launched", None, message).await?;
                    }
                    if missing > 0 {
                        let error =
                            format!("the provider started {} of {}", launched.len(), rows.len());
                        self.failure(template, false, &error, now, control).await?;
                    }
                }
                Err(e) => {
                    for r in &rows {
                        self.never_started(r, &e.to_string(), now).await?;
                    }
                    let what = format!("launching {} × {template} failed ({e})", rows.len());
                    self.failure(
                        template,
                        e.class == corral_provider::ErrorClass::Fatal,
                        &what,
                        now,
                        control,
                    )
                    .await?;
                }
            }
        }
        Ok(())
    }

    /// Without a provider, the requested instances fail at once, each template backing off with
    /// `why`.
    pub(super) async fn unlaunchable(
        &self,
        why: &str,
        control: &Arc<Control>,
    ) -> Result<(), StoreError> {
        let requested = self
            .store
            .list_instances(&self.group, &[InstancePhase::Requested])
            .await?;
        let mut by_template: BTreeMap<&str, usize> = BTreeMap::new();
        let now = now();
        for r in &requested {
            if self.never_started(r, why, now).await? {
                *by_template.entry(&r.template).or_default() += 1;
            }
        }
        for (template, count) in by_template {
            let what = format!("launching {count} × {template} failed ({why})");
            self.failure(template, false, &what, now, control).await?;
        }
        Ok(())
    }

    /// A requested or claimed instance the provider did not start.
    async fn never_started(
        &self,
        r: &InstanceRecord,
        reason: &str,
        now: Timestamp,
    ) -> Result<bool, StoreError> {
        self.store
            .move_instance(
                &r.id,
                &[InstancePhase::Requested, InstancePhase::Launching],
                InstancePhase::Failed,
                None,
                reason,
                now,
            )
            .await
    }

    /// A template failed: back it off, say so, and let the policy plan again without it.
    pub(super) async fn failure(
        &self,
        template: &str,
        fatal: bool,
        what: &str,
        now: Timestamp,
        control: &Arc<Control>,
    ) -> Result<(), StoreError> {
        let (until, failures) = self.me.failed(template, fatal, what, now);
        self.me.save(&self.store, &self.group).await?;
        let labels = crate::metrics::LaunchFailureLabels {
            group: self.group.clone(),
            template: template.to_string(),
            class: if fatal { "fatal" } else { "retryable" },
        };
        self.metrics.launch_failures.get_or_create(&labels).inc();
        let secs = (until.0 - now.0).max(0) / 1000;
        let message = format!(
            "{what}; template {template} backs off for {secs} s (failure {failures} in a row)"
        );
        self.event("launch_failed", None, message).await?;
        control.wake(&self.group);
        Ok(())
    }
}
