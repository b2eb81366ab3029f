//! The two databases' migrations stay in step: after all migrations, SQLite and PostgreSQL have
//! the same tables, the same columns in each, and the same named indexes. (Types differ by
//! design: `INTEGER` on SQLite is `BIGINT` on PostgreSQL.)

mod common;

use std::collections::BTreeSet;

use sqlx::{AnyConnection, Connection, Row};

/// `table.column` for every column, and `index on table` for every index made by a migration
/// (not those the database makes itself for primary keys and unique constraints).
async fn schema(url: &str, columns_sql: &str, indexes_sql: &str) -> BTreeSet<String> {
    let mut conn = AnyConnection::connect(url).await.expect("connect");
    let mut out = BTreeSet::new();
    for row in sqlx::query(sqlx::AssertSqlSafe(columns_sql))
        .fetch_all(&mut conn)
        .await
        .expect("columns")
    {
        let (t, c): (String, String) = (row.get(0), row.get(1));
        out.insert(format!("column {t}.{c}"));
    }
    for row in sqlx::query(sqlx::AssertSqlSafe(indexes_sql))
        .fetch_all(&mut conn)
        .await
        .expect("indexes")
    {
        let (i, t): (String, String) = (row.get(0), row.get(1));
        out.insert(format!("index {i} on {t}"));
    }
    conn.close().await.ok();
    out
}

#[tokio::test]
async fn sqlite_and_postgres_migrations_make_the_same_schema() {
    let sqlite = common::Db::sqlite().await;
    // Skipped (saying so) without PostgreSQL; fails instead under CI=true.
    let Some(postgres) = common::Db::postgres("schema_in_step").await else {
        return;
    };
    let lite = schema(
        &sqlite.url,
        "SELECT m.name, p.name FROM sqlite_master m JOIN pragma_table_info(m.name) p \
         WHERE m.type = 'table' AND m.name NOT LIKE 'sqlite_%' AND m.name <> '_sqlx_migrations'",
        "SELECT name, tbl_name FROM sqlite_master WHERE type = 'index' \
         AND name NOT LIKE 'sqlite_autoindex_%'",
    )
    .await;
    let pg = schema(
        &postgres.url,
        "SELECT table_name::text, column_name::text FROM information_schema.columns \
         WHERE table_schema = 'public' AND table_name <> '_sqlx_migrations'",
        "SELECT indexname::text, tablename::text FROM pg_indexes WHERE schemaname = 'public' \
         AND tablename <> '_sqlx_migrations' \
         AND indexname NOT IN (SELECT conname FROM pg_constraint)",
    )
    .await;
    for kind in ["column sessions.", "index "] {
        assert!(
            lite.iter().any(|s| s.starts_with(kind)),
            "no {kind}: {lite:?}"
        );
        assert!(pg.iter().any(|s| s.starts_with(kind)), "no {kind}: {pg:?}");
    }
    let only_sqlite: Vec<_> = lite.difference(&pg).collect();
    let only_postgres: Vec<_> = pg.difference(&lite).collect();
    assert!(
        only_sqlite.is_empty() && only_postgres.is_empty(),
        "only in SQLite's migrations: {only_sqlite:?}\nonly in PostgreSQL's: {only_postgres:?}"
    );
}
