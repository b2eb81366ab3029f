//! The vendor half of each group's scaling driver at work. Passes decide launches and
//! terminations and write them as instance rows; a driver task per group carries them out with
//! the group's provider, outside the pass, so a slow cloud API never holds up scheduling:
//!
//! - requested instances are launched, each with a one-time bootstrap token for its agent id;
//! - failures back the template off (the core's governor), so the next pass picks another;
//! - instances that do not join within the provisioning time are terminated, as failures;
//! - instances of agents the cycle let go are terminated;
//! - every `reconcile_secs`, the provider's list is compared with what the manager knows:
//!   unknown instances carrying the group's tag are terminated after a grace period (where the
//!   tag proves nothing, a batch job's name, only ids recorded at launch are acted on), and
//!   agents whose instance disappeared are lost (their sessions follow `on_agent_lost`) and
//!   terminated.
//!
//! Here: the driver task and its connection to the provider. What to do about the instances the
//! driver reads (too late, claims to settle, orphans, vanished) is decided in `reconcile`, pure
//! and tested there, and carried out in `instances`; launching, and a failure's backoff, are in
//! `launch`.

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use corral_core::{Governor, LaunchLimit, LaunchSettings, Timestamp};
use corral_provider::{Context, Provider, ProviderConfig, ProviderError};
use corral_store::{InstancePhase, NewEvent, Store, StoreError};
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::control::Control;
use crate::now;

mod instances;
mod launch;
mod reconcile;

/// Where drivers find what local providers need.
#[derive(Debug, Clone)]
pub struct DriverConfig {
    /// Where launched agents reach the manager.
    pub manager_url: String,
    /// The `corral` executable the process provider starts.
    pub corral_binary: PathBuf,
    /// Providers keep their files under `<dir>/<group>`.
    pub state_dir: PathBuf,
    /// Opens the provider secrets the store holds sealed.
    pub secrets: Arc<crate::secrets::SecretKey>,
}

/// Per group: the launch governor and the driver task's wake-up.
#[derive(Default)]
pub struct GroupDriver {
    notify: Notify,
    governor: Mutex<(Governor, LaunchSettings)>,
    /// A join reset a backoff since the governor was last saved.
    unsaved: AtomicBool,
}

impl GroupDriver {
    /// The driver of a group this manager took, going on from the governor its last owner
    /// left.
    pub(crate) fn with(governor: Governor) -> Self {
        GroupDriver {
            notify: Notify::new(),
            governor: Mutex::new((governor, LaunchSettings::default())),
            unsaved: AtomicBool::new(false),
        }
    }

    /// Writes the governor as it is now (through the owner's fenced store), so that the next
    /// owner goes on from it.
    pub(crate) async fn save(&self, store: &Store, group: &str) -> Result<(), StoreError> {
        self.unsaved.store(false, Ordering::SeqCst);
        let governor = self
            .governor
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .0
            .clone();
        store.put_governor(group, &governor, now()).await
    }

    /// What the next pass may launch of each template.
    pub fn limits(&self, now: Timestamp) -> BTreeMap<String, LaunchLimit> {
        let g = self.governor.lock().unwrap_or_else(|p| p.into_inner());
        g.0.limits(&g.1, now)
    }

    /// When a template's backoff or budget next lets more be launched.
    fn next_release(&self, now: Timestamp) -> Option<Timestamp> {
        let g = self.governor.lock().unwrap_or_else(|p| p.into_inner());
        g.0.next_release(&g.1, now)
    }

    /// A pass decided these launches: they count against the templates' budgets.
    pub fn launched(&self, launches: &[corral_core::Launch], now: Timestamp) {
        let mut g = self.governor.lock().unwrap_or_else(|p| p.into_inner());
        let (governor, settings) = &mut *g;
        for l in launches {
            governor.launched(settings, &l.template, l.count, now);
        }
    }

    /// Runs a round soon.
    pub fn kick(&self) {
        self.notify.notify_one();
    }

    fn settings(&self) -> LaunchSettings {
        self.governor
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .1
            .clone()
    }

    /// Records a failure of `template`; returns until when it backs off and how many failures in
    /// a row it has had.
    fn failed(&self, template: &str, fatal: bool, error: &str, now: Timestamp) -> (Timestamp, u32) {
        let mut g = self.governor.lock().unwrap_or_else(|p| p.into_inner());
        let (governor, settings) = &mut *g;
        let until = governor.failed(settings, template, fatal, error, now);
        let failures = governor.failures().get(template).copied().unwrap_or(1);
        (until, failures)
    }

    /// An instance of `template` joined: its backoff ends (and is saved at the next round).
    pub(crate) fn succeeded(&self, template: &str) {
        let mut g = self.governor.lock().unwrap_or_else(|p| p.into_inner());
        if g.0.succeeded(template) {
            self.unsaved.store(true, Ordering::SeqCst);
        }
    }
}

/// The provider a driver holds, and the configuration it was built from.
struct Connected {
    key: String,
    /// `None` when connecting failed: tried again every `reconcile_secs` (the configuration
    /// may be fine and the vendor briefly unreachable, or a plugin not installed yet).
    provider: Option<Box<dyn Provider>>,
    /// Why there is no provider.
    error: Option<String>,
    at: Instant,
}

/// One group's driver task: runs rounds, writing through `store` (fenced with the group's
/// lease), until the group is gone or this manager no longer runs it.
pub(crate) async fn drive(
    control: Arc<Control>,
    group: String,
    term: u64,
    me: Arc<GroupDriver>,
    store: Store,
) {
    let mut driver = Driver {
        store,
        config: control.driver_config().clone(),
        group,
        me,
        connected: None,
        orphans: HashMap::new(),
        next_reconcile: Instant::now(),
        metrics: control.metrics.clone(),
        provider_name: String::new(),
        joins_seen_until: now(),
    };
    // The next end of a backoff (or of a budget window) the driver waits for.
    let mut release = None;
    loop {
        let wait = match driver.round(&control).await {
            Ok(wait) => wait,
            Err(StoreError::NotFound { .. }) => return,
            Err(e @ StoreError::Fenced { .. }) => {
                tracing::warn!(group = driver.group, error = %e, "stopping the group's driver");
                control.step_down(&driver.group, term);
                return;
            }
            Err(e) => {
                tracing::warn!(group = driver.group, error = %e, "scaling round failed");
                Duration::from_secs(1)
            }
        };
        // Disowned (and maybe owned again since): stop.
        if !control.runs(&driver.group, term) {
            return;
        }
        // A backoff that ends (during the round, or while the driver waits) lets a pass launch
        // what waits then, not at its next tick.
        if release.take().is_some_and(|at| now() >= at) {
            control.wake(&driver.group);
        }
        release = driver.me.next_release(now());
        let wait = release.map_or(wait, |at| {
            wait.min(Duration::from_millis(now().ms_until(at)))
        });
        tokio::select! {
            _ = driver.me.notify.notified() => {}
            _ = tokio::time::sleep(wait) => {}
        }
        if release.is_some_and(|at| now() >= at) {
            release = None;
            control.wake(&driver.group);
        }
    }
}

struct Driver {
    store: Store,
    config: DriverConfig,
    group: String,
    me: Arc<GroupDriver>,
    connected: Option<Connected>,
    /// Unknown instances carrying the group's tag, by vendor id: when first seen.
    orphans: HashMap<String, Timestamp>,
    next_reconcile: Instant,
    metrics: Arc<crate::metrics::Metrics>,
    /// The provider's name (`aws`, `exec`...), for the metrics of its calls.
    provider_name: String,
    /// Joins up to then are counted as their templates' successes.
    joins_seen_until: Timestamp,
}

impl Driver {
    /// A call to the provider, bounded by `timeout` and timed in the metrics.
    async fn call<T>(
        &self,
        timeout: Duration,
        call: &'static str,
        f: impl Future<Output = Result<T, ProviderError>>,
    ) -> Result<T, ProviderError> {
        let started = std::time::Instant::now();
        let result = bounded(timeout, call, f).await;
        let labels = crate::metrics::ProviderCallLabels {
            provider: self.provider_name.clone(),
            call,
        };
        self.metrics
            .provider_calls
            .get_or_create(&labels)
            .observe(started.elapsed().as_secs_f64());
        result
    }

    /// One round; returns how long to wait before the next one when nothing wakes the driver.
    async fn round(&mut self, control: &Arc<Control>) -> Result<Duration, StoreError> {
        self.connect().await?;
        self.count_joins().await?;
        let settings = self.me.settings();
        // Held apart from `self` for the round, so reconciliation may update `self`.
        let connected = self.connected.take();
        let done = self.work(connected.as_ref(), &settings, control).await;
        self.connected = connected;
        done?;
        let busy = !self
            .store
            .list_instances(
                &self.group,
                &[
                    InstancePhase::Requested,
                    InstancePhase::Launching,
                    InstancePhase::Provisioning,
                    InstancePhase::Terminating,
                ],
            )
            .await?
            .is_empty();
        Ok(if busy {
            Duration::from_secs(1)
        } else {
            self.next_reconcile
                .saturating_duration_since(Instant::now())
        })
    }

    async fn work(
        &mut self,
        connected: Option<&Connected>,
        settings: &LaunchSettings,
        control: &Arc<Control>,
    ) -> Result<(), StoreError> {
        let Some(provider) = connected.and_then(|c| c.provider.as_deref()) else {
            // Not connected: what nothing can launch fails now, so that its templates back off
            // and waiting sessions say why; in-flight rows still time out, so the policy can go
            // on; the next try to connect is a reconcile interval away.
            self.next_reconcile = Instant::now() + Duration::from_secs(settings.reconcile_secs);
            let why = connected
                .and_then(|c| c.error.as_deref())
                .unwrap_or("no provider");
            self.unlaunchable(why, control).await?;
            return self.time_out(None, settings, control).await;
        };
        self.launch(provider, settings, control).await?;
        self.terminate(provider, settings).await?;
        self.time_out(Some(provider), settings, control).await?;
        if Instant::now() >= self.next_reconcile {
            self.next_reconcile = Instant::now() + Duration::from_secs(settings.reconcile_secs);
            self.reconcile(provider, settings, control).await?;
        }
        Ok(())
    }

    /// An instance's agent joining is its template's success, whichever manager handled the
    /// join: the backoff ends, and the governor is kept so.
    async fn count_joins(&mut self) -> Result<(), StoreError> {
        let joins = self
            .store
            .joined_since(&self.group, self.joins_seen_until)
            .await?;
        if let Some((_, last)) = joins.last() {
            self.joins_seen_until = *last;
        }
        for (template, _) in &joins {
            self.me.succeeded(template);
        }
        match self.me.unsaved.load(Ordering::SeqCst) {
            true => self.me.save(&self.store, &self.group).await,
            false => Ok(()),
        }
    }

    /// (Re)builds the provider when the group's configuration or templates changed.
    async fn connect(&mut self) -> Result<(), StoreError> {
        let stored = self.store.get_group_provider(&self.group).await?;
        let group = self
            .store
            .get_group(&self.group)
            .await?
            .ok_or_else(|| StoreError::not_found("group", &self.group))?;
        let key = format!(
            "{}\n{}",
            stored.as_deref().unwrap_or(""),
            serde_json::to_string(&group.templates).unwrap_or_default()
        );
        let retry = Duration::from_secs(self.me.settings().reconcile_secs);
        let current =
            |c: &Connected| c.key == key && (c.provider.is_some() || c.at.elapsed() < retry);
        if self.connected.as_ref().is_some_and(current) {
            return Ok(());
        }
        let opened = crate::secrets::parse_stored(&self.group, stored.as_deref())
            .map_err(|e| e.to_string())
            .and_then(|mut config| {
                crate::secrets::open_config(&self.config.secrets, &mut config, &self.group)
                    .map_err(|e| e.to_string())?;
                Ok(config)
            });
        let config: ProviderConfig = match opened {
            Ok(config) => config,
            Err(e) => {
                self.event("provider", None, e.clone()).await?;
                self.connected = Some(Connected {
                    key,
                    provider: None,
                    error: Some(e),
                    at: Instant::now(),
                });
                return Ok(());
            }
        };
        {
            let mut g = self.me.governor.lock().unwrap_or_else(|p| p.into_inner());
            g.1 = config.launch.clone();
        }
        let context = Context {
            group: self.group.clone(),
            manager_url: self.config.manager_url.clone(),
            templates: group.templates,
            corral_binary: self.config.corral_binary.clone(),
            state_dir: self.config.state_dir.join(&self.group),
        };
        let timeout = Duration::from_secs(config.launch.call_timeout_secs);
        let templates: Vec<String> = context.templates.iter().map(|t| t.name.clone()).collect();
        self.provider_name = config.name.clone();
        let (provider, error) = match self
            .call(
                timeout,
                "connect",
                corral_provider::connect(&config, context),
            )
            .await
        {
            Ok(p) => {
                tracing::info!(group = self.group, provider = config.name, "provider ready");
                self.check_templates(p.as_ref(), &config.name, &templates, timeout)
                    .await?;
                (Some(p), None)
            }
            Err(e) => {
                let error = format!("provider {}: {e}", config.name);
                self.event("provider", None, error.clone()).await?;
                (None, Some(error))
            }
        };
        self.connected = Some(Connected {
            key,
            provider,
            error,
            at: Instant::now(),
        });
        Ok(())
    }

    /// Says so when the provider offers templates and some of the group's are not among them
    /// (a plugin that knows its own): their launches would fail.
    async fn check_templates(
        &self,
        provider: &dyn Provider,
        name: &str,
        templates: &[String],
        timeout: Duration,
    ) -> Result<(), StoreError> {
        let offered = match self.call(timeout, "templates", provider.templates()).await {
            Ok(offered) => offered,
            Err(e) => {
                tracing::warn!(group = self.group, error = %e, "asking the provider for its templates failed");
                return Ok(());
            }
        };
        if offered.is_empty() {
            return Ok(());
        }
        let unknown: Vec<&str> = templates
            .iter()
            .filter(|t| !offered.iter().any(|o| &o.name == *t))
            .map(String::as_str)
            .collect();
        if !unknown.is_empty() {
            let known: Vec<&str> = offered.iter().map(|o| o.name.as_str()).collect();
            let message = format!(
                "provider {name} does not offer template(s) {}; it offers {}",
                unknown.join(", "),
                known.join(", ")
            );
            self.event("provider", None, message).await?;
        }
        Ok(())
    }

    async fn event(
        &self,
        kind: &str,
        agent: Option<&str>,
        message: String,
    ) -> Result<(), StoreError> {
        tracing::info!(group = self.group, kind, "{message}");
        self.store
            .record_event(&self.new_event(kind, agent, message))
            .await?;
        Ok(())
    }

    fn new_event(&self, kind: &str, agent: Option<&str>, message: String) -> NewEvent {
        NewEvent {
            at: now(),
            group: Some(self.group.clone()),
            session: None,
            agent: agent.map(str::to_string),
            kind: kind.to_string(),
            message,
        }
    }
}

/// A provider call bounded by `timeout`: running over is a transient failure.
async fn bounded<T>(
    timeout: Duration,
    call: &'static str,
    f: impl Future<Output = Result<T, ProviderError>>,
) -> Result<T, ProviderError> {
    tokio::time::timeout(timeout, f).await.unwrap_or_else(|_| {
        Err(ProviderError::transient(format!(
            "{call} took longer than {} s",
            timeout.as_secs()
        )))
    })
}
