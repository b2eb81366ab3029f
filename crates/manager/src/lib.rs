//! Corral's manager: the REST API under `/api/v1`, the per-group control loop, and auth. All
//! state lives in the store; the manager itself can be killed at any moment.

mod activity;
pub mod agents;
pub mod api;
pub mod auth;
pub mod control;
pub mod error;
mod extract;
pub mod scaling;
mod submit;
mod views;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use corral_core::Timestamp;
use corral_store::Store;

use crate::control::Control;

/// How the manager runs.
#[derive(Debug, Clone)]
pub struct Config {
    /// Holds `admin.token` and, without a database URL, `corral.db`.
    pub data_dir: PathBuf,
    pub listen: SocketAddr,
    /// `postgres://...` or `sqlite://...`; `None` means SQLite in the data directory.
    pub database_url: Option<String>,
    /// Passes run at least this often per group, events or not.
    pub tick: Duration,
    /// Passes of one group run at most this often: a burst of events costs one pass.
    pub min_pass_interval: Duration,
    /// How often agents sync when nothing happens (told to them when they join).
    pub heartbeat: Duration,
    /// An agent silent this long is lost; its sessions follow its group's `on_agent_lost`.
    pub lost_after: Duration,
    /// Where agents that providers launch reach the manager [default: `http://<listen>`, with
    /// 127.0.0.1 for an unspecified address].
    pub advertise_url: Option<String>,
    /// The `corral` executable the process provider starts [default: this executable].
    pub corral_binary: Option<PathBuf>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            data_dir: PathBuf::from("corral-data"),
            listen: SocketAddr::from(([127, 0, 0, 1], 8470)),
            database_url: None,
            tick: Duration::from_secs(5),
            min_pass_interval: Duration::from_millis(20),
            heartbeat: Duration::from_secs(5),
            lost_after: Duration::from_secs(30),
            advertise_url: None,
            corral_binary: None,
        }
    }
}

impl Config {
    fn driver_config(&self) -> scaling::DriverConfig {
        let manager_url = self.advertise_url.clone().unwrap_or_else(|| {
            let mut addr = self.listen;
            if addr.ip().is_unspecified() {
                addr.set_ip(std::net::Ipv4Addr::LOCALHOST.into());
            }
            format!("http://{addr}")
        });
        let corral_binary = self
            .corral_binary
            .clone()
            .or_else(|| std::env::current_exe().ok())
            .unwrap_or_else(|| PathBuf::from("corral"));
        scaling::DriverConfig {
            manager_url: manager_url.trim_end_matches('/').to_string(),
            corral_binary,
            state_dir: self.data_dir.join("providers"),
        }
    }
}

/// What can stop the manager from starting or serving.
#[derive(Debug, thiserror::Error)]
pub enum ManagerError {
    #[error(transparent)]
    Store(#[from] corral_store::StoreError),
    #[error("{context}: {source}")]
    Io {
        context: String,
        source: std::io::Error,
    },
}

impl From<std::io::Error> for ManagerError {
    fn from(source: std::io::Error) -> Self {
        ManagerError::Io {
            context: "io".into(),
            source,
        }
    }
}

/// Shared state of the API handlers and the control loop.
#[derive(Clone)]
pub struct App {
    pub store: Store,
    pub control: Arc<Control>,
    submitter: submit::Submitter,
    tokens: Arc<auth::TokenCache>,
    data_dir: PathBuf,
    heartbeat: Duration,
    lost_after: Duration,
    activity: Arc<activity::Activity>,
}

pub fn now() -> Timestamp {
    let ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis());
    Timestamp(i64::try_from(ms).unwrap_or(i64::MAX))
}

/// Opens the store, creates the admin token on first start, and starts a worker per group.
pub async fn start(config: &Config) -> Result<App, ManagerError> {
    let store = match &config.database_url {
        Some(url) => Store::open(url).await?,
        None => Store::open_sqlite_dir(&config.data_dir).await?,
    };
    auth::bootstrap_admin(&store, &config.data_dir, now()).await?;
    let control = Control::new(
        store.clone(),
        config.tick,
        config.min_pass_interval,
        config.driver_config(),
    );
    for group in store.list_groups().await? {
        control.wake(&group.name);
    }
    let submitter = submit::Submitter::start(store.clone(), control.clone());
    let app = App {
        store,
        control,
        submitter,
        tokens: Arc::default(),
        data_dir: config.data_dir.clone(),
        heartbeat: config.heartbeat,
        lost_after: config.lost_after,
        activity: Arc::default(),
    };
    tokio::spawn(agents::watch_liveness(app.clone()));
    tokio::spawn(agents::watch_termination(app.clone()));
    Ok(app)
}

/// Serves the API until `shutdown` resolves.
pub async fn serve(
    config: Config,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<(), ManagerError> {
    let app = start(&config).await?;
    let listener = tokio::net::TcpListener::bind(config.listen)
        .await
        .map_err(|source| ManagerError::Io {
            context: format!("listening on {}", config.listen),
            source,
        })?;
    tracing::info!(listen = %config.listen, data_dir = %config.data_dir.display(), "manager serving");
    serve_on(listener, app, shutdown).await
}

/// Serves the API of a started manager on a bound listener until `shutdown` resolves.
pub async fn serve_on(
    listener: tokio::net::TcpListener,
    app: App,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<(), ManagerError> {
    axum::serve(listener, api::router(app))
        .with_graceful_shutdown(shutdown)
        .await?;
    Ok(())
}
