//! Support for tests of this crate and of its users: a fresh PostgreSQL database per test, so
//! tests run in parallel on one server.

use sqlx::{AnyConnection, Connection, Executor};

use crate::Result;

/// Creates (dropping any old one) a database named after `test` on the server of `admin_url`
/// (such as `postgres://postgres@127.0.0.1:5432/postgres`) and returns its URL.
pub async fn fresh_database(admin_url: &str, test: &str) -> Result<String> {
    sqlx::any::install_default_drivers();
    let name = database_name(test);
    let mut conn = AnyConnection::connect(admin_url).await?;
    conn.execute(sqlx::AssertSqlSafe(format!(
        "DROP DATABASE IF EXISTS {name} WITH (FORCE)"
    )))
    .await?;
    conn.execute(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
        .await?;
    conn.close().await.ok();
    Ok(with_database(admin_url, &name))
}

/// Leaves instance `id` of `group` claimed for launch since `at`, as a driver that died between
/// its claim and the provider's answer would (on the database of `url`).
pub async fn abandoned_claim(
    url: &str,
    group: &str,
    template: &str,
    id: &str,
    at: corral_core::Timestamp,
) -> Result<()> {
    sqlx::any::install_default_drivers();
    let mut conn = AnyConnection::connect(url).await?;
    sqlx::query(
        "INSERT INTO instances (id, group_name, template, state, requested_at, updated_at, \
         reason) VALUES ($1, $2, $3, 'launching', $4, $4, 'claimed for launch')",
    )
    .bind(id)
    .bind(group)
    .bind(template)
    .bind(at.0)
    .execute(&mut conn)
    .await?;
    conn.close().await.ok();
    Ok(())
}

/// `corral_test_<test>` in lowercase identifier characters, shortened with a hash to
/// PostgreSQL's 63-byte limit so that long test names stay distinct.
fn database_name(test: &str) -> String {
    use std::hash::{Hash, Hasher};
    let clean: String = test
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '_'
            }
        })
        .collect();
    let name = format!("corral_test_{clean}");
    if name.len() <= 63 {
        return name;
    }
    let mut h = std::collections::hash_map::DefaultHasher::new();
    name.hash(&mut h);
    format!("{}_{:08x}", &name[..54], h.finish() as u32)
}

/// The admin URL with its database replaced by `name`.
fn with_database(admin: &str, name: &str) -> String {
    let (base, query) = match admin.split_once('?') {
        Some((b, q)) => (b, Some(q)),
        None => (admin, None),
    };
    let authority_start = base.find("://").map(|i| i + 3).unwrap_or(0);
    let base = match base[authority_start..].find('/') {
        Some(slash) => &base[..authority_start + slash],
        None => base,
    };
    match query {
        Some(q) => format!("{base}/{name}?{q}"),
        None => format!("{base}/{name}"),
    }
}

/// Stores the sessions of array `array` that have no row yet (its tail) up to index `through`
/// (all of them: `None`), pending, as a cancel or an end of one of them would: for tests that
/// then change them behind the store's back.
pub async fn store_array_sessions(
    store: &crate::Store,
    array: &str,
    through: Option<u32>,
) -> Result<()> {
    let mut tx = store.write_tx().await?;
    if let Some(tail) = crate::array_tail::read_tail(&mut tx, array, false).await? {
        if tail.len() > 0 {
            let through = through.unwrap_or_else(|| tail.last_in_tail());
            crate::array_tail::store_members(
                &mut tx,
                &tail,
                through,
                &Default::default(),
                tail.submitted_at,
            )
            .await?;
        }
    }
    tx.commit().await?;
    Ok(())
}
