//! Tokens: random secrets shown once, stored as SHA-256 hashes; roles admin, user, agent (acts
//! for one agent) and bootstrap (one join, expiring).

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
    hex::encode(&bytes)
}

/// A fresh id (12 hex digits) and secret. The id is drawn apart from the secret: ids are
/// listed, so one derived from the secret would give part of it away. (Tokens made before
/// this have their secret's first digits as id; they are looked up by hash all the same.)
fn new_token() -> (String, String) {
    (random_hex(6), new_secret())
}

/// How many fresh ids a new token tries: two random 48-bit ids meet rarely, three in a row
/// never.
const ID_TRIES: usize = 3;

pub fn hash(secret: &str) -> String {
    hex::encode(Sha256::digest(secret.as_bytes()))
}

/// Creates a token and returns its id and secret (the secret is stored nowhere).
pub async fn create_token(
    store: &Store,
    role: Role,
    user: &str,
    now: Timestamp,
) -> Result<(String, String), corral_store::StoreError> {
    with_fresh_id(|id, hash| async move { store.insert_token(&id, &hash, role, user, now).await })
        .await
}

/// Creates the token an agent's join answers with; returns its secret. Once it is first used,
/// the agent's older tokens are revoked ([`resolve`]): a self-update or a re-join leaves the
/// agent one token, and one that fails before its successor is used leaves the old one working.
pub async fn create_agent_token(
    store: &Store,
    agent: &str,
    now: Timestamp,
) -> Result<String, corral_store::StoreError> {
    let (_, secret) = with_fresh_id(|id, hash| async move {
        store.insert_successor_token(&id, &hash, agent, now).await
    })
    .await?;
    Ok(secret)
}

/// Makes a token with `insert(id, hash)`, drawing another id if the first is taken; its id and
/// secret.
async fn with_fresh_id<F, Fut>(mut insert: F) -> Result<(String, String), corral_store::StoreError>
where
    F: FnMut(String, String) -> Fut,
    Fut: std::future::Future<Output = Result<(), corral_store::StoreError>>,
{
    let mut tries = 0;
    loop {
        let (id, secret) = new_token();
        match insert(id.clone(), hash(&secret)).await {
            Ok(()) => return Ok((id, secret)),
            Err(corral_store::StoreError::Conflict { .. }) if tries + 1 < ID_TRIES => tries += 1,
            Err(e) => return Err(e),
        }
    }
}

/// At first start (no token at all), creates the admin token and writes it once to
/// `<data_dir>/admin.token`, readable by the owner only. An admin.token without any token in
/// the database means the database is not the one it belongs to (emptied, replaced, or a new
/// file where the old one was lost): the manager refuses to start rather than overwrite the
/// token people hold with one for a database that has lost everything.
pub async fn bootstrap_admin(
    store: &Store,
    data_dir: &Path,
    now: Timestamp,
) -> Result<(), ManagerError> {
    if store.count_tokens().await? > 0 {
        return Ok(());
    }
    let path = data_dir.join("admin.token");
    let io = |source| ManagerError::Io {
        context: path.display().to_string(),
        source,
    };
    if path.try_exists().map_err(io)? {
        return Err(ManagerError::DatabaseWithoutTokens { token: path });
    }
    let (_, secret) = create_token(store, Role::Admin, "admin", now).await?;
    // create_new: whatever happens, an existing token file is never overwritten.
    let mut file = create_private(&path).map_err(io)?;
    file.write_all(format!("{secret}\n").as_bytes())
        .and_then(|()| file.sync_all())
        .map_err(io)?;
    tracing::info!(path = %path.display(), "created the admin token");
    Ok(())
}

/// Creates a file only its owner may read, refusing to replace one that exists.
#[cfg(unix)]
pub(crate) fn create_private(path: &Path) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
}

#[cfg(not(unix))]
pub(crate) fn create_private(path: &Path) -> std::io::Result<std::fs::File> {
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)
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
    resolve(secret, app).await
}

/// A secret's hash and who it belongs to (bootstrap tokens included).
async fn resolve(secret: &str, app: &App) -> Result<(String, Caller), ApiError> {
    let hash = hash(secret);
    let caller = holder(&hash, app).await?;
    Ok((hash, caller))
}

/// Who the token of this hash belongs to, while it is valid (bootstrap tokens included).
async fn holder(hash: &str, app: &App) -> Result<Caller, ApiError> {
    let hash = hash.to_string();
    if let Some(caller) = app.tokens.get(&hash) {
        return Ok(caller);
    }
    let token = app
        .store
        .find_token_by_hash(&hash, crate::now())
        .await?
        .ok_or_else(|| {
            ApiError::new(
                axum::http::StatusCode::UNAUTHORIZED,
                "unauthorized",
                "this token is not valid: unknown, or a bootstrap token that was used already or has \
                 expired",
            )
        })?;
    if token.supersedes {
        // An agent's new token, used for the first time: the tokens it replaces go.
        let hashes = app
            .store
            .supersede_agent_tokens(&token.id, &token.user)
            .await?;
        if !hashes.is_empty() {
            tracing::info!(
                agent = token.user,
                revoked = hashes.len(),
                "an agent's new token is in use; its older tokens are revoked"
            );
        }
        revoked(app, hashes);
    }
    let caller = Caller {
        user: token.user,
        role: token.role,
    };
    // One-time tokens are never cached: each use must reach the database.
    if caller.role != Role::Bootstrap {
        app.tokens.put(hash.clone(), caller.clone());
    }
    Ok(caller)
}

/// The person a secret belongs to (an admin or a user), as people's routes admit them; the
/// dashboard's log-in and its cookie go through this.
pub async fn person(secret: &str, app: &App) -> Result<Caller, ApiError> {
    let (_, caller) = resolve(secret, app).await?;
    people_only(caller)
}

/// The person whose token has this hash, while the token is valid: an app pass names the
/// token it was issued for, so that revoking the token ends the pass too.
pub async fn person_by_hash(hash: &str, app: &App) -> Result<Caller, ApiError> {
    people_only(holder(hash, app).await?)
}

/// The hash of the token a request bears (`Authorization: Bearer`) and its person, if it
/// bears one.
pub async fn bearer_person(parts: &Parts, app: &App) -> Option<Result<(String, Caller), ApiError>> {
    parts.headers.get(axum::http::header::AUTHORIZATION)?;
    Some(match lookup(parts, app).await {
        Ok((hash, caller)) => people_only(caller).map(|c| (hash, c)),
        Err(e) => Err(e),
    })
}

fn people_only(caller: Caller) -> Result<Caller, ApiError> {
    match caller.role {
        Role::Admin | Role::User => Ok(caller),
        Role::Agent => Err(ApiError::forbidden(
            "an agent's token is for its own agent routes (join, sync, uploads) only",
        )),
        Role::Bootstrap => Err(ApiError::forbidden(
            "a bootstrap token only lets an agent join",
        )),
    }
}

impl FromRequestParts<App> for Caller {
    type Rejection = ApiError;

    /// People's routes: an agent's credentials never act as a user (an agent may be called
    /// `bob`), and a bootstrap token only joins.
    async fn from_request_parts(parts: &mut Parts, app: &App) -> Result<Self, ApiError> {
        let (_, caller) = lookup(parts, app).await?;
        people_only(caller)
    }
}

/// A person's caller with the hash of the token they showed (an app's pass names it).
pub struct Bearer {
    pub caller: Caller,
    pub token_hash: String,
}

impl FromRequestParts<App> for Bearer {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, app: &App) -> Result<Self, ApiError> {
        let (token_hash, caller) = lookup(parts, app).await?;
        Ok(Bearer {
            caller: people_only(caller)?,
            token_hash,
        })
    }
}

/// The caller of an agent route (`/agents/{id}/...`): an agent's own token, or an admin's.
/// Which agent it may act as is checked against the path by the route.
pub struct AgentCaller(pub Caller);

impl FromRequestParts<App> for AgentCaller {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, app: &App) -> Result<Self, ApiError> {
        let (_, caller) = lookup(parts, app).await?;
        match caller.role {
            Role::Admin | Role::Agent => Ok(AgentCaller(caller)),
            Role::User => Err(ApiError::forbidden(
                "this route is for agents: it needs an agent's own token",
            )),
            Role::Bootstrap => Err(ApiError::forbidden(
                "a bootstrap token only lets an agent join",
            )),
        }
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
    /// `existing` is the agent of that id the manager knows, if any: a bootstrap token only
    /// creates an agent (or takes an id whose agent was terminated), so it can never take
    /// over a live agent's identity, sessions and environment; re-joining an existing agent
    /// needs its own token or an admin's.
    pub async fn admit(
        &self,
        app: &App,
        agent: &str,
        group: &str,
        existing: Option<&corral_core::Agent>,
    ) -> Result<(), ApiError> {
        match self.caller.role {
            Role::Admin => Ok(()),
            Role::Agent if self.caller.user == agent => Ok(()),
            Role::Bootstrap if self.caller.user != group => Err(ApiError::forbidden(format!(
                "this bootstrap token joins group {:?} only",
                self.caller.user
            ))),
            Role::Bootstrap
                if existing.is_some_and(|a| a.state != corral_core::AgentState::Terminated) =>
            {
                Err(ApiError::new(
                    axum::http::StatusCode::CONFLICT,
                    "conflict",
                    format!(
                        "agent {agent:?} exists already; a bootstrap token joins a new agent \
                         only: re-join with the agent's own token (or an admin's), or pick \
                         another id"
                    ),
                ))
            }
            Role::Bootstrap => match app
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
    let expires = now.plus_secs(ttl.as_secs());
    let (_, secret) = with_fresh_id(|id, hash| async move {
        store
            .insert_bootstrap_token(&id, &hash, group, agent, expires, now)
            .await
    })
    .await?;
    Ok((secret, expires))
}

/// Tokens (their hashes) revoked: dropped from this manager's cache at once, and from the other
/// managers' on the database as soon as they hear of it (within [`TOKEN_TTL`] if they never
/// do).
pub(crate) fn revoked(app: &crate::App, hashes: Vec<String>) {
    if hashes.is_empty() {
        return;
    }
    for hash in &hashes {
        app.tokens.forget(hash);
    }
    app.control.tell_others(corral_store::Wake::Tokens(hashes));
}

/// Tokens recently seen valid, so that a request costs no database read to authenticate.
/// Entries expire, so a token removed from the database stops working within `TOKEN_TTL`.
///
/// Timing: a presented token is never compared with a stored secret. It is hashed (SHA-256)
/// and the hash looked up: here by its first 16 hex digits, in the database by index
/// (`WHERE hash = $1`). How long a lookup takes could at most tell an attacker how far
/// SHA-256 of their guess agrees with a stored hash, which brings them no closer to a token:
/// they cannot steer the digits of a hash without inverting SHA-256. The full hash found under
/// the prefix is still compared in constant time, so no comparison in Rust depends on a
/// secret's bytes.
#[derive(Default)]
pub struct TokenCache(std::sync::Mutex<Cached>);

#[derive(Default)]
struct Cached {
    /// By [`cache_key`]: the whole hash, who it is, when it was found valid.
    tokens: std::collections::HashMap<String, (String, Caller, std::time::Instant)>,
    /// When expired entries were last dropped: once per `TOKEN_TTL`, not at every insert (with
    /// thousands of agents' tokens, a scan at each would cost more than the lookups save).
    pruned: Option<std::time::Instant>,
}

const TOKEN_TTL: std::time::Duration = std::time::Duration::from_secs(30);

/// The part of a token's hash the cache is keyed by.
fn cache_key(hash: &str) -> &str {
    hash.get(..16).unwrap_or(hash)
}

impl TokenCache {
    fn get(&self, hash: &str) -> Option<Caller> {
        use subtle::ConstantTimeEq;
        let cached = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let (stored, caller, at) = cached.tokens.get(cache_key(hash))?;
        let same: bool = stored.as_bytes().ct_eq(hash.as_bytes()).into();
        (same && at.elapsed() < TOKEN_TTL).then(|| caller.clone())
    }

    /// Drops a revoked token at once (see [`revoked`], which also tells the other managers).
    pub fn forget(&self, hash: &str) {
        let mut cached = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if cached
            .tokens
            .get(cache_key(hash))
            .is_some_and(|(stored, _, _)| stored == hash)
        {
            cached.tokens.remove(cache_key(hash));
        }
    }

    fn put(&self, hash: String, caller: Caller) {
        let mut cached = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if cached.pruned.is_none_or(|at| at.elapsed() >= TOKEN_TTL) {
            cached
                .tokens
                .retain(|_, (_, _, at)| at.elapsed() < TOKEN_TTL);
            cached.pruned = Some(std::time::Instant::now());
        }
        cached.tokens.insert(
            cache_key(&hash).to_string(),
            (hash, caller, std::time::Instant::now()),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_token_cache_answers_for_the_whole_hash_only() {
        let cache = TokenCache::default();
        let alice = Caller {
            user: "alice".into(),
            role: Role::User,
        };
        let h = hash("corral_secret");
        cache.put(h.clone(), alice.clone());
        assert_eq!(cache.get(&h), Some(alice));
        // Same cache key (the first 16 digits), another hash: not a hit.
        let mut other = h[..16].to_string();
        other.push_str(&"0".repeat(h.len() - 16));
        assert_ne!(other, h);
        assert_eq!(cache.get(&other), None);
        assert_eq!(cache.get(&hash("corral_other")), None);
        assert_eq!(cache.get(""), None);
    }
}
