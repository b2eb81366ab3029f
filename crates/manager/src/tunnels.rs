//! The tunnels agents hold to this manager, one per agent: a new one replaces the old (an
//! agent that reconnects), and each is forgotten when its connection ends. Users' terminals,
//! apps and forwarded ports open streams on them; the manager never connects to an agent.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use corral_tunnel::Tunnel;

#[derive(Default)]
pub struct Tunnels {
    by_agent: Mutex<HashMap<String, (u64, Tunnel)>>,
    next: AtomicU64,
}

impl Tunnels {
    /// Holds `agent`'s new tunnel until its connection ends.
    pub async fn hold(&self, agent: &str, tunnel: Tunnel) {
        let generation = self.next.fetch_add(1, Ordering::SeqCst);
        let old = self
            .lock()
            .insert(agent.to_string(), (generation, tunnel.clone()));
        if let Some((_, old)) = old {
            old.shut();
        }
        tracing::info!(agent, "the agent's tunnel is open");
        tunnel.closed().await;
        let mut by_agent = self.lock();
        if by_agent.get(agent).is_some_and(|(g, _)| *g == generation) {
            by_agent.remove(agent);
            tracing::info!(agent, "the agent's tunnel closed");
        }
    }

    /// The agent's tunnel, if it holds one to this manager.
    pub fn get(&self, agent: &str) -> Option<Tunnel> {
        self.lock()
            .get(agent)
            .map(|(_, t)| t.clone())
            .filter(|t| !t.is_closed())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, (u64, Tunnel)>> {
        self.by_agent.lock().unwrap_or_else(|p| p.into_inner())
    }
}
