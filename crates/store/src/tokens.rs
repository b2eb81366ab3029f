//! Tokens as admins manage them: listed without their hashes, revoked one by one, and those of
//! an agent removed with it. (Making and checking tokens is `events.rs`.)

use corral_api::tokens::TokenInfo;
use sqlx::any::AnyRow;

use crate::codec::Fields;
use crate::error::{Result, StoreError};
use crate::{locked, Store, Tx};

fn info_from_row(row: &AnyRow) -> Result<TokenInfo> {
    let f = Fields::new(row, "token", "id")?;
    Ok(TokenInfo {
        id: f.text("id")?,
        role: f.name("role")?,
        user: f.text("user_name")?,
        created_at: f.time("created_at")?,
        expires_at: f.opt_time("expires_at")?,
        used_at: f.opt_time("used_at")?,
        agent: f.opt_text("agent_id")?,
    })
}

impl Store {
    /// Every token, oldest first.
    pub async fn list_tokens(&self) -> Result<Vec<TokenInfo>> {
        sqlx::query(
            "SELECT id, role, user_name, created_at, expires_at, used_at, agent_id FROM tokens \
             ORDER BY created_at, id",
        )
        .fetch_all(&self.read)
        .await?
        .iter()
        .map(info_from_row)
        .collect()
    }

    /// Revokes token `id`; returns its hash (for caches to drop). `NotFound` if there is no
    /// such token; `Refused` for the last admin token, without which nobody could manage the
    /// manager.
    pub async fn revoke_token(&self, id: &str) -> Result<String> {
        let mut tx = self.write_tx().await?;
        let row =
            sqlx::query(self.locking(locked!("SELECT id, role, hash FROM tokens WHERE id = $1")))
                .bind(id)
                .fetch_optional(&mut *tx)
                .await?
                .ok_or_else(|| StoreError::not_found("token", id))?;
        let f = Fields::new(&row, "token", "id")?;
        let (role, hash) = (f.text("role")?, f.text("hash")?);
        if role == "admin" {
            // Admin tokens locked, so two revokes at once cannot both pass the count.
            let admins =
                sqlx::query(self.locking(locked!("SELECT id FROM tokens WHERE role = 'admin'")))
                    .fetch_all(&mut *tx)
                    .await?
                    .len();
            if admins <= 1 {
                return Err(StoreError::Refused(format!(
                    "token {id:?} is the last admin token; create another admin token first"
                )));
            }
        }
        sqlx::query("DELETE FROM tokens WHERE id = $1")
            .bind(id)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(hash)
    }
}

/// Deletes agent `agent`'s tokens and the unused bootstrap tokens made for it; their hashes.
pub(crate) async fn revoke_agent_tokens(tx: &mut Tx, agent: &str) -> Result<Vec<String>> {
    sqlx::query_scalar(
        "DELETE FROM tokens WHERE (role = 'agent' AND user_name = $1) \
         OR (role = 'bootstrap' AND agent_id = $1) RETURNING hash",
    )
    .bind(agent)
    .fetch_all(&mut **tx)
    .await
    .map_err(Into::into)
}
