//! Corral's manager: the REST API under `/api/v1`, the per-group control loop, and auth. All
//! state lives in the store; the manager itself can be killed at any moment.

mod activity;
mod agent_builds;
mod agent_slots;
mod agent_update;
pub mod agents;
pub mod api;
pub mod auth;
mod batch;
mod batch_sessions;
pub mod changes;
pub mod control;
pub mod cookies;
pub mod error;
mod external;
mod extract;
mod files;
mod health;
mod heartbeats;
pub mod history;
mod image_update;
pub mod leases;
pub mod metrics;
pub mod names;
pub mod origin;
mod pilots;
mod registry_logins;
pub mod scaling;
pub mod secrets;
pub mod serve;
mod single;
mod submit;
mod tunnels;
mod ui;
mod views;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
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
    /// How long a group's lease lasts unrenewed: with several managers on one database, a
    /// dead manager's groups are taken over this long after its last renewal.
    pub lease: Duration,
    /// How often agents sync when nothing happens (told to them when they join).
    pub heartbeat: Duration,
    /// An agent silent this long is lost; its sessions follow its group's `on_agent_lost`.
    pub lost_after: Duration,
    /// Terminated agents, ended instances and used or expired bootstrap tokens are forgotten
    /// this long after they ended; `None` keeps them.
    pub retention: Option<Duration>,
    /// Where agents that providers launch reach the manager [default: `http://<listen>`
    /// (`https://` with TLS), with 127.0.0.1 for an unspecified address].
    pub advertise_url: Option<String>,
    /// The `corral` executable the process provider starts [default: this executable].
    pub corral_binary: Option<PathBuf>,
    /// The key that seals provider secrets in the store [default: `<data_dir>/secrets.key`,
    /// created at first start].
    pub secrets_key: secrets::KeySource,
    /// Timeouts and the limit of the API's connections.
    pub connections: serve::Connections,
    /// Serve HTTPS with this certificate and key; `None` serves plain HTTP.
    pub tls: Option<serve::TlsFiles>,
    /// `GET /metrics` answers without a token.
    pub metrics_public: bool,
}

/// How long what ended is kept by default: a week.
pub const DEFAULT_RETENTION: Duration = Duration::from_secs(7 * 24 * 3600);

impl Default for Config {
    fn default() -> Self {
        Config {
            data_dir: PathBuf::from("corral-data"),
            listen: SocketAddr::from(([127, 0, 0, 1], 8470)),
            database_url: None,
            tick: Duration::from_secs(5),
            min_pass_interval: Duration::from_millis(20),
            lease: Duration::from_secs(5),
            heartbeat: Duration::from_secs(5),
            lost_after: Duration::from_secs(30),
            retention: Some(DEFAULT_RETENTION),
            advertise_url: None,
            metrics_public: false,
            corral_binary: None,
            secrets_key: secrets::KeySource::default(),
            connections: serve::Connections::default(),
            tls: None,
        }
    }
}

impl Config {
    fn driver_config(&self, secrets: Arc<secrets::SecretKey>) -> scaling::DriverConfig {
        let manager_url = self.advertise_url.clone().unwrap_or_else(|| {
            let mut addr = self.listen;
            if addr.ip().is_unspecified() {
                addr.set_ip(std::net::Ipv4Addr::LOCALHOST.into());
            }
            let scheme = if self.tls.is_some() { "https" } else { "http" };
            format!("{scheme}://{addr}")
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
            secrets,
        }
    }
}

/// What can stop the manager from starting or serving.
#[derive(Debug, thiserror::Error)]
pub enum ManagerError {
    #[error(transparent)]
    Store(#[from] corral_store::StoreError),
    #[error(transparent)]
    Secrets(#[from] secrets::SecretsError),
    /// The data directory has an admin token but the database has no tokens: it was replaced
    /// or emptied, and a new admin token would overwrite the one people hold.
    #[error(
        "{} exists but the database has no tokens: it is empty, or not the one this data \
         directory was used with. Start with the database the token belongs to (restore it from \
         a backup), or, to start afresh, move admin.token away",
        token.display()
    )]
    DatabaseWithoutTokens { token: PathBuf },
    #[error("{context}: {source}")]
    Io {
        context: String,
        source: std::io::Error,
    },
    /// The TLS certificate or key named cannot be used.
    #[error("TLS: {}: {message}", path.display())]
    Tls { path: PathBuf, message: String },
    /// Another manager runs on this SQLite data directory.
    #[error(
        "{}: another manager{} runs on this data directory, and a SQLite database has one \
         manager: stop it first, or run several managers on one PostgreSQL database \
         (--database-url)",
        dir.display(),
        pid.map(|p| format!(" (pid {p})")).unwrap_or_default()
    )]
    DataDirInUse { dir: PathBuf, pid: Option<i32> },
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
    /// Sessions' inputs, outputs and logs, and agent builds.
    files: files::Files,
    heartbeat: Duration,
    lost_after: Duration,
    metrics_public: bool,
    /// Served over TLS: the dashboard's cookie is marked Secure.
    https: bool,
    activity: Arc<activity::Activity>,
    /// The tunnels agents hold to this manager.
    tunnels: Arc<tunnels::Tunnels>,
    secrets: Arc<secrets::SecretKey>,
    health: Arc<health::Health>,
    serving: Arc<serve::Serving>,
    batches: Arc<batch::Batches>,
    batch_sessions: Arc<batch_sessions::Follower>,
    /// Each group's policy, as agents' syncs read it.
    policies: Arc<views::Policies>,
    /// Each group's registry accounts, as agents' syncs read them.
    registry_logins: Arc<registry_logins::Logins>,
    /// When agents were heard, written in batches.
    heartbeats: Arc<heartbeats::Heartbeats>,
    /// On SQLite: this manager's hold on its data directory ([`single`]).
    _data_dir_lock: Option<Arc<single::DataDirLock>>,
}

pub fn now() -> Timestamp {
    let ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis());
    Timestamp(i64::try_from(ms).unwrap_or(i64::MAX))
}

/// Opens the store, creates the admin token on first start, and starts a worker per group.
pub async fn start(config: &Config) -> Result<App, ManagerError> {
    // First, so that a bad certificate or key stops the start before anything is opened.
    let serving = Arc::new(serve::Serving::new(
        &config.connections,
        config.tls.as_ref(),
    )?);
    protect_data_dir(&config.data_dir)?;
    // Before anything in it is read or written: a second manager on SQLite touches nothing.
    let data_dir_lock = match config.database_url {
        Some(_) => None,
        None => Some(single::take(&config.data_dir)?),
    };
    let (secrets, created_key) = secrets::SecretKey::load(&config.secrets_key, &config.data_dir)?;
    let secrets = Arc::new(secrets);
    let store = match &config.database_url {
        Some(url) => Store::open_with(url, config.lease).await?,
        None => Store::open_sqlite_dir(&config.data_dir).await?,
    };
    auth::bootstrap_admin(&store, &config.data_dir, now()).await?;
    seal_stored_secrets(&store, &secrets, created_key.as_deref()).await?;
    // One manager per SQLite database (the data directory's lock): it takes every lease.
    let single = store.backend() == corral_store::Backend::Sqlite;
    let leases = Arc::new(leases::Leases::new(config.lease, single));
    let control = Control::new(
        store.clone(),
        config.tick,
        config.min_pass_interval,
        config.driver_config(secrets.clone()),
        leases.clone(),
    );
    tokio::spawn(leases::keep(control.clone(), leases.clone(), store.clone()));
    let tokens: Arc<auth::TokenCache> = Arc::default();
    tokio::spawn(leases::listen(
        control.clone(),
        store.clone(),
        tokens.clone(),
    ));
    let submitter = submit::Submitter::start(store.clone(), control.clone());
    let files = files::Files::for_store(&store, &config.data_dir);
    if let files::Files::Database(store) = &files {
        let moved = files::import_local(store, &config.data_dir).await?;
        if moved > 0 {
            tracing::info!(moved, "files of the data directory moved into the database");
        }
    }
    let app = App {
        store,
        control,
        submitter,
        tokens,
        data_dir: config.data_dir.clone(),
        files,
        heartbeat: config.heartbeat,
        lost_after: config.lost_after,
        metrics_public: config.metrics_public,
        https: config.tls.is_some(),
        activity: Arc::default(),
        tunnels: Arc::default(),
        serving,
        secrets,
        health: Arc::default(),
        batches: Arc::default(),
        batch_sessions: Arc::default(),
        policies: Arc::default(),
        registry_logins: Arc::default(),
        heartbeats: Arc::default(),
        _data_dir_lock: data_dir_lock.map(Arc::new),
    };
    tokio::spawn(heartbeats::keep_writing(
        app.heartbeats.clone(),
        app.store.clone(),
    ));
    tokio::spawn(agents::watch_liveness(app.clone()));
    tokio::spawn(agents::watch_termination(app.clone()));
    tokio::spawn(batch_sessions::follow(app.clone()));
    if let Some(retention) = config.retention {
        tokio::spawn(forget_the_ended(app.store.clone(), retention, leases));
    }
    Ok(app)
}

/// Prunes what ended more than `retention` ago, at start and then every ten minutes (or a
/// tenth of the retention, if shorter), when it is this manager's to do (one of those on a
/// database does it).
async fn forget_the_ended(store: Store, retention: Duration, leases: Arc<leases::Leases>) {
    let every = (retention / 10).clamp(Duration::from_secs(1), Duration::from_secs(600));
    loop {
        if !leases.runs_here("retention") {
            tokio::time::sleep(every).await;
            continue;
        }
        let kept = i64::try_from(retention.as_millis()).unwrap_or(i64::MAX);
        let before = Timestamp(now().0.saturating_sub(kept));
        match store.prune(before).await {
            Ok(p) if p == corral_store::Pruned::default() => {}
            Ok(p) => tracing::info!(
                agents = p.agents,
                instances = p.instances,
                tokens = p.tokens,
                "forgot what ended before the retention"
            ),
            Err(e) => tracing::warn!(error = %e, "pruning what ended failed; trying again later"),
        }
        tokio::time::sleep(every).await;
    }
}

/// The data directory holds the database, the admin token and the secrets key: it is created
/// readable by its owner only, and an existing one that others could read is made so.
fn protect_data_dir(dir: &Path) -> Result<(), ManagerError> {
    let io = |source| ManagerError::Io {
        context: format!("data directory {}", dir.display()),
        source,
    };
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
    builder.create(dir).map_err(io)?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(dir).map_err(io)?.permissions().mode() & 0o777;
        if mode & 0o077 != 0 {
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700)).map_err(io)?;
            tracing::warn!(
                dir = %dir.display(),
                was = format!("{mode:o}"),
                "made the data directory readable by its owner only (700): it holds the \
                 database, the admin token and the secrets key"
            );
        }
    }
    Ok(())
}

/// Seals provider secrets an older version stored in plain text, in place, and checks that the
/// key opens those already sealed. A key created by this start cannot open anything sealed
/// before: the manager then refuses to start (and drops that key) rather than run with a key
/// the other managers of the database do not share.
async fn seal_stored_secrets(
    store: &Store,
    key: &secrets::SecretKey,
    created_key: Option<&Path>,
) -> Result<(), ManagerError> {
    let mut sealed = 0;
    for group in store.group_names().await? {
        let Some(text) = store.get_group_provider(&group).await? else {
            continue;
        };
        // One that does not parse is reported by the group's driver.
        let Ok(mut config) = secrets::parse_stored(&group, Some(&text)) else {
            continue;
        };
        if let Err(e) = secrets::open_config(key, &mut config.clone(), &group) {
            if let Some(path) = created_key {
                let _ = std::fs::remove_file(path);
                return Err(e.into());
            }
            tracing::error!(error = %e, "a group's provider secrets cannot be opened");
            continue;
        }
        if secrets::seal_config(key, &mut config) == 0 {
            continue;
        }
        let new = serde_json::to_string(&config)
            .map_err(|e| corral_store::StoreError::Corrupt(e.to_string()))?;
        // Only if unchanged meanwhile (another manager sealing it, or an API call).
        if store.replace_group_provider(&group, &text, &new).await? {
            tracing::info!(
                group = group.as_str(),
                "sealed provider secrets stored in plain text"
            );
            sealed += 1;
        }
    }
    if sealed > 0 {
        // Out of the WAL too: the plaintext was overwritten in its page (secure_delete).
        store.checkpoint().await?;
    }
    Ok(())
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
    tracing::info!(
        listen = %config.listen,
        scheme = app.serving.scheme(),
        data_dir = %config.data_dir.display(),
        "manager serving"
    );
    serve_on(listener, app, shutdown).await
}

/// Serves the API of a started manager on a bound listener until `shutdown` resolves, with
/// the connection limits and TLS of the configuration it was started with; then lets the
/// requests in flight finish.
pub async fn serve_on(
    listener: tokio::net::TcpListener,
    app: App,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<(), ManagerError> {
    let serving = app.serving.clone();
    let control = app.control.clone();
    let store = app.store.clone();
    let served = serve::run(listener, api::router(app), serving, shutdown).await;
    leases::stop(&control, &control.leases, &store).await;
    served
}
