//! Between rows and domain values. Every read is checked: a value that does not parse is
//! `StoreError::Corrupt` naming the row and column, never a panic.

use serde::de::DeserializeOwned;
use serde::Serialize;
use sqlx::any::AnyRow;
use sqlx::Row;

use corral_core::{Quantity, Slots, Timestamp};

use crate::error::{Result, StoreError};

/// One row being decoded, with a name for error messages (`agent "a1"`).
pub(crate) struct Fields<'a> {
    row: &'a AnyRow,
    what: String,
}

impl<'a> Fields<'a> {
    /// Reads the row's key (text column `key`) to name the row in errors.
    pub(crate) fn new(row: &'a AnyRow, what: &str, key: &str) -> Result<Self> {
        let mut f = Fields {
            row,
            what: what.to_string(),
        };
        let id = f.text(key)?;
        f.what = format!("{what} {id:?}");
        Ok(f)
    }

    /// For rows whose key is a number (events, in-flight launches).
    pub(crate) fn numbered(row: &'a AnyRow, what: &str, key: &str) -> Result<Self> {
        let mut f = Fields {
            row,
            what: what.to_string(),
        };
        let id = f.int(key)?;
        f.what = format!("{what} {id}");
        Ok(f)
    }

    fn corrupt(&self, col: &str, why: impl std::fmt::Display) -> StoreError {
        StoreError::Corrupt(format!("{}, column {col}: {why}", self.what))
    }

    fn get<T>(&self, col: &str) -> Result<T>
    where
        T: for<'r> sqlx::Decode<'r, sqlx::Any> + sqlx::Type<sqlx::Any>,
    {
        self.row.try_get::<T, _>(col).map_err(|e| match e {
            sqlx::Error::ColumnDecode { source, .. } => self.corrupt(col, source),
            other => StoreError::Database(other),
        })
    }

    pub(crate) fn text(&self, col: &str) -> Result<String> {
        self.get(col)
    }

    pub(crate) fn opt_text(&self, col: &str) -> Result<Option<String>> {
        self.get(col)
    }

    pub(crate) fn int(&self, col: &str) -> Result<i64> {
        self.get(col)
    }

    pub(crate) fn opt_int(&self, col: &str) -> Result<Option<i64>> {
        self.get(col)
    }

    pub(crate) fn time(&self, col: &str) -> Result<Timestamp> {
        self.int(col).map(Timestamp)
    }

    pub(crate) fn opt_time(&self, col: &str) -> Result<Option<Timestamp>> {
        Ok(self.opt_int(col)?.map(Timestamp))
    }

    /// BOOLEAN on PostgreSQL; on SQLite an INTEGER 0/1 (which the Any driver reads as a number).
    pub(crate) fn flag(&self, col: &str) -> Result<bool> {
        if let Ok(b) = self.row.try_get::<bool, _>(col) {
            return Ok(b);
        }
        match self.int(col)? {
            0 => Ok(false),
            1 => Ok(true),
            n => Err(self.corrupt(col, format_args!("{n} is not a flag (0 or 1)"))),
        }
    }

    pub(crate) fn u32(&self, col: &str) -> Result<u32> {
        let n = self.int(col)?;
        u32::try_from(n).map_err(|_| self.corrupt(col, format_args!("{n} is out of range")))
    }

    pub(crate) fn opt_u32(&self, col: &str) -> Result<Option<u32>> {
        let Some(n) = self.opt_int(col)? else {
            return Ok(None);
        };
        u32::try_from(n)
            .map(Some)
            .map_err(|_| self.corrupt(col, format_args!("{n} is out of range")))
    }

    pub(crate) fn i32(&self, col: &str) -> Result<i32> {
        let n = self.int(col)?;
        i32::try_from(n).map_err(|_| self.corrupt(col, format_args!("{n} is out of range")))
    }

    pub(crate) fn slots(&self, col: &str) -> Result<Slots> {
        let text = self.text(col)?;
        text.parse()
            .map_err(|e| self.corrupt(col, format_args!("{text:?}: {e}")))
    }

    pub(crate) fn opt_slots(&self, col: &str) -> Result<Option<Slots>> {
        match self.opt_text(col)? {
            None => Ok(None),
            Some(text) => text
                .parse()
                .map(Some)
                .map_err(|e| self.corrupt(col, format_args!("{text:?}: {e}"))),
        }
    }

    pub(crate) fn json<T: DeserializeOwned>(&self, col: &str) -> Result<T> {
        let text = self.text(col)?;
        serde_json::from_str(&text).map_err(|e| self.corrupt(col, e))
    }

    /// An enum stored under its serde name (`alive`, `pending`, ...).
    pub(crate) fn name<T: DeserializeOwned>(&self, col: &str) -> Result<T> {
        let text = self.text(col)?;
        from_name(&text).ok_or_else(|| self.corrupt(col, format_args!("unknown value {text:?}")))
    }
}

/// The serde name of a unit enum variant: `AgentState::Alive` is `alive`.
pub(crate) fn name_of<T: Serialize>(value: &T) -> String {
    match serde_json::to_value(value) {
        Ok(serde_json::Value::String(s)) => s,
        // Only unit variants are stored by name; anything else is a bug caught by the tests.
        other => format!("{other:?}"),
    }
}

pub(crate) fn from_name<T: DeserializeOwned>(name: &str) -> Option<T> {
    serde_json::from_value(serde_json::Value::String(name.to_string())).ok()
}

pub(crate) fn to_json<T: Serialize>(value: &T) -> Result<String> {
    serde_json::to_string(value).map_err(|e| StoreError::Corrupt(format!("cannot encode: {e}")))
}

pub(crate) fn count(n: u32) -> i64 {
    i64::from(n)
}

/// What an agent holds after giving back `taken`; never below zero in any slot, so a peer's
/// bad report cannot make the arithmetic fail.
pub(crate) fn release(allocated: &Slots, taken: &Slots) -> Slots {
    let mut out = allocated.clone();
    for (name, q) in taken.iter() {
        let left = out.get(name.as_str()).milli().saturating_sub(q.milli());
        out.set(name.clone(), Quantity::from_milli(left));
    }
    out
}

/// A value bound to a query built at run time.
pub(crate) enum Arg {
    Text(String),
    Int(i64),
}

/// A `WHERE` clause built from optional filters, with `$n` placeholders (which both databases
/// read; sqlx's `QueryBuilder` writes `?` for the Any driver, which PostgreSQL does not).
#[derive(Default)]
pub(crate) struct Where {
    conditions: Vec<String>,
    args: Vec<Arg>,
}

impl Where {
    /// Adds `condition`, whose `?` marks are replaced, in order, by `args`.
    pub(crate) fn and(&mut self, condition: &str, args: impl IntoIterator<Item = Arg>) {
        let mut sql = String::new();
        let mut args = args.into_iter();
        for (i, part) in condition.split('?').enumerate() {
            if i > 0 {
                if let Some(arg) = args.next() {
                    self.args.push(arg);
                }
                sql.push_str(&format!("${}", self.args.len()));
            }
            sql.push_str(part);
        }
        self.conditions.push(sql);
    }

    /// ` WHERE a AND b`, or nothing.
    pub(crate) fn sql(&self) -> String {
        if self.conditions.is_empty() {
            String::new()
        } else {
            format!(" WHERE {}", self.conditions.join(" AND "))
        }
    }

    /// The query `sql` (built from `self.sql()` and constant text only) with the arguments bound.
    pub(crate) fn query(
        self,
        sql: String,
    ) -> sqlx::query::Query<'static, sqlx::Any, sqlx::any::AnyArguments> {
        let mut q = sqlx::query(sqlx::AssertSqlSafe(sql));
        for arg in self.args {
            q = match arg {
                Arg::Text(s) => q.bind(s),
                Arg::Int(n) => q.bind(n),
            };
        }
        q
    }
}
