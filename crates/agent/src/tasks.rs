//! Tasks beside the sync loop, so that neither a slow upload nor a slow registry delays a
//! heartbeat: the log pump and the image checks. Each stops with the agent ([`AbortOnDrop`]).

use std::sync::Arc;
use std::time::Duration;

use crate::files::flush_logs;
use crate::{lock, Agent};

/// How often running sessions' new log bytes are sent.
const LOG_PUMP: Duration = Duration::from_millis(500);

/// Sends running sessions' new log bytes every [`LOG_PUMP`], whatever the sync loop is
/// waiting for.
pub(crate) async fn pump_logs(agent: Arc<Agent>) {
    loop {
        tokio::time::sleep(LOG_PUMP).await;
        let ids: Vec<String> = lock(&agent.running).keys().cloned().collect();
        for id in &ids {
            flush_logs(&agent, id).await;
        }
    }
}

/// Checks the images the agent holds whenever the policy says (Docker runtime only), and has
/// what changed or failed reported at once.
pub(crate) async fn keep_images_current(agent: Arc<Agent>) {
    let Some(docker) = agent.runtime.docker() else {
        return;
    };
    let http = corral_api::tls::client_builder(true, agent.config.ca_file.as_deref())
        .map_err(|e| e.to_string())
        .and_then(|b| b.build().map_err(|e| e.to_string()));
    let registries = match http {
        Ok(http) => corral_registry::Registries::new(http, Vec::new()),
        Err(e) => {
            tracing::error!(error = e, "no registry client: images are not kept current");
            return;
        }
    };
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        if agent.images.check_if_due(docker, &registries).await {
            agent.ended.bell.notify_waiters();
        }
    }
}

/// Stops a background task when the agent stops.
pub(crate) struct AbortOnDrop(pub(crate) tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}
