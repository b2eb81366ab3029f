//! Tokens: random secrets shown once, stored as SHA-256 hashes; roles admin and user.

use std::io::Write;
use std::path::Path;

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use corral_core::Timestamp;
use corral_store::{Role, Store};
use sha2::{Digest, Sha256};

use crate::error::ApiError;
use crate::{App, ManagerError};

/// Who is calling.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    pub user: String,
    pub role: Role,
}

impl Caller {
    pub fn is_admin(&self) -> bool {
        self.role == Role::Admin
    }

    /// Sessions are submitted and read by people (and scripts), not by agents' credentials.
    pub fn require_person(&self) -> Result<(), ApiError> {
        if matches!(self.role, Role::Agent | Role::Bootstrap) {
            Err(ApiError::forbidden(
                "an agent's token cannot be used for this",
            ))
        } else {
            Ok(())
        }
    }

    pub fn require_admin(&self) -> Result<(), ApiError> {
        if self.is_admin() {
            Ok(())
        } else {
            Err(ApiError::forbidden("this needs an admin token"))
        }
    }
}

/// A fresh secret: `corral_` and 64 hex digits of the OS's randomness.
pub fn new_secret() -> String {
    format!("corral_{}", random_hex(32))
}

/// `n` bytes of the OS's randomness, in hex.
pub fn random_hex(n: usize) -> String {
    let mut bytes = vec![0u8; n];
    getrandom::fill(&mut bytes).expect("the OS random source works");
    hex(&bytes)
}

/// A fresh secret and the id it is listed under (its first hex digits: the id names the token
/// in logs without giving it away).
fn new_token() -> (String, String) {
    let secret = new_secret();
    let id = secret["corral_".len().."corral_".len() + 12].to_string();
    (id, secret)
}

pub fn hash(secret: &str) -> String {
    hex(&Sha256::digest(secret.as_bytes()))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Creates a token and returns its id and secret (the secret is stored nowhere).
pub async fn create_token(
    store: &Store,
    role: Role,
    user: &str,
    now: Timestamp,
) -> Result<(String, String), corral_store::StoreError> {
    let (id, secret) = new_token();
    store
        .insert_token(&id, &hash(&secret), role, user, now)
        .await?;
    Ok((id, secret))
}

/// At first start (no token at all), creates the admin token and writes it once to
/// `<data_dir>/admin.token`, readable by the owner only.
pub async fn bootstrap_admin(
    store: &Store,
    data_dir: &Path,
    now: Timestamp,
) -> Result<(), ManagerError> {
    if store.count_tokens().await? > 0 {
        return Ok(());
    }
    let (_, secret) = create_token(store, Role::Admin, "admin", now).await?;
    std::fs::create_dir_all(data_dir)?;
    let path = data_dir.join("admin.token");
    let mut file = open_private(&path)?;
    file.write_all(secret.as_bytes())?;
    file.write_all(b"\n")?;
    tracing::info!(path = %path.display(), "created the admin token");
    Ok(())
}

#[cfg(unix)]
fn open_private(path: &Path) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
}

#[cfg(not(unix))]
fn open_private(path: &Path) -> std::io::Result<std::fs::File> {
    std::fs::File::create(path)
}

/// The bearer token's hash and who it belongs to (bootstrap tokens included).
async fn lookup(parts: &Parts, app: &App) -> Result<(String, Caller), ApiError> {
    let header = parts
        .headers
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .ok_or_else(ApiError::unauthorized)?;
    let secret = header
        .strip_prefix("Bearer ")
        .ok_or_else(ApiError::unauthorized)?
        .trim();
    let hash = hash(secret);
    if let Some(caller) = app.tokens.get(&hash) {
        return Ok((hash, caller));
    }
    let token = app
        .store
        .find_token_by_hash(&hash)
        .await?
        .ok_or_else(ApiError::unauthorized)?;
    let caller = Caller {
        user: token.user,
        role: token.role,
    };
    // One-time tokens are never cached: each use must reach the database.
    if caller.role != Role::Bootstrap {
        app.tokens.put(hash.clone(), caller.clone());
    }
    Ok((hash, caller))
}

impl FromRequestParts<App> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, app: &App) -> Result<Self, ApiError> {
        let (_, caller) = lookup(parts, app).await?;
        if caller.role == Role::Bootstrap {
            return Err(ApiError::forbidden(
                "a bootstrap token only lets an agent join",
            ));
        }
        Ok(caller)
    }
}

/// Who may join an agent: an admin, the agent itself, or a one-time bootstrap token (used up
/// here, for its group only).
pub struct Joiner {
    pub caller: Caller,
    hash: String,
}

impl Joiner {
    /// Checks the joiner may join `agent` to `group`; a bootstrap token is used up by this.
    pub async fn admit(&self, app: &App, agent: &str, group: &str) -> Result<(), ApiError> {
        match self.caller.role {
            Role::Admin => Ok(()),
            Role::Agent if self.caller.user == agent => Ok(()),
            Role::Bootstrap if self.caller.user == group => match app
                .store
                .consume_bootstrap_token(&self.hash, agent, crate::now())
                .await?
            {
                Some(_) => Ok(()),
                None => Err(ApiError::new(
                    axum::http::StatusCode::UNAUTHORIZED,
                    "unauthorized",
                    "this bootstrap token was used already or has expired (or joins another agent id)",
                )),
            },
            Role::Bootstrap => Err(ApiError::forbidden(format!(
                "this bootstrap token joins group {:?} only",
                self.caller.user
            ))),
            _ => Err(ApiError::forbidden(format!(
                "this token cannot join agent {agent:?}"
            ))),
        }
    }
}

impl FromRequestParts<App> for Joiner {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, app: &App) -> Result<Self, ApiError> {
        let (hash, caller) = lookup(parts, app).await?;
        Ok(Joiner { caller, hash })
    }
}

/// Creates a one-time bootstrap token for `group` (for agent id `agent` only, when given), good
/// for `ttl`; returns it with its expiry.
pub async fn create_bootstrap_token(
    store: &Store,
    group: &str,
    agent: Option<&str>,
    ttl: std::time::Duration,
    now: Timestamp,
) -> Result<(String, Timestamp), corral_store::StoreError> {
    let (id, secret) = new_token();
    let expires = now.plus_secs(ttl.as_secs());
    store
        .insert_bootstrap_token(&id, &hash(&secret), group, agent, expires, now)
        .await?;
    Ok((secret, expires))
}

/// Tokens recently seen valid, so that a request costs no database read to authenticate.
/// Entries expire, so a token removed from the database stops working within `TOKEN_TTL`.
#[derive(Default)]
pub struct TokenCache(
    std::sync::Mutex<std::collections::HashMap<String, (Caller, std::time::Instant)>>,
);

const TOKEN_TTL: std::time::Duration = std::time::Duration::from_secs(30);

impl TokenCache {
    fn get(&self, hash: &str) -> Option<Caller> {
        let map = self.0.lock().unwrap_or_else(|p| p.into_inner());
        map.get(hash)
            .filter(|(_, at)| at.elapsed() < TOKEN_TTL)
            .map(|(c, _)| c.clone())
    }

    fn put(&self, hash: String, caller: Caller) {
        let mut map = self.0.lock().unwrap_or_else(|p| p.into_inner());
        map.retain(|_, (_, at)| at.elapsed() < TOKEN_TTL);
        map.insert(hash, (caller, std::time::Instant::now()));
    }
}
