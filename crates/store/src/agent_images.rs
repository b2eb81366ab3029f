//! Image auto-update: which digest of which image each agent holds, as it last reported.

use corral_api::images::{HeldImage, ImageHolding};
use corral_core::Timestamp;
use sqlx::any::AnyRow;

use crate::codec::Fields;
use crate::error::Result;
use crate::Store;

fn holding_from_row(row: &AnyRow) -> Result<(String, ImageHolding)> {
    let f = Fields::new(row, "agent image", "agent")?;
    Ok((
        f.text("image")?,
        ImageHolding {
            agent: f.text("agent")?,
            group: f.text("group_name")?,
            digest: f.text("digest")?,
            offered: f.opt_text("offered")?,
            reported_at: f.time("reported_at")?,
        },
    ))
}

macro_rules! holdings_query {
    ($filter:literal) => {
        concat!(
            "SELECT agent_images.agent, agents.group_name, agent_images.image, \
             agent_images.digest, agent_images.offered, agent_images.reported_at \
             FROM agent_images JOIN agents ON agents.id = agent_images.agent \
             WHERE agents.state <> 'terminated'",
            $filter,
            " ORDER BY agent_images.image, agent_images.agent"
        )
    };
}

impl Store {
    /// Agent `id` holds `images`, and nothing else: what it held before is replaced.
    pub async fn put_agent_images(
        &self,
        id: &str,
        images: &[HeldImage],
        now: Timestamp,
    ) -> Result<()> {
        let mut tx = self.write_tx().await?;
        sqlx::query("DELETE FROM agent_images WHERE agent = $1")
            .bind(id)
            .execute(&mut *tx)
            .await?;
        for held in images {
            sqlx::query(
                "INSERT INTO agent_images (agent, image, digest, offered, reported_at) \
                 VALUES ($1, $2, $3, $4, $5)",
            )
            .bind(id)
            .bind(&held.image)
            .bind(&held.digest)
            .bind(held.offered.as_deref())
            .bind(now.0)
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await?;
        Ok(())
    }

    /// Every image held by an agent not terminated, with the agent holding it, by image.
    pub async fn list_image_holdings(&self) -> Result<Vec<(String, ImageHolding)>> {
        sqlx::query(holdings_query!(""))
            .fetch_all(&self.read)
            .await?
            .iter()
            .map(holding_from_row)
            .collect()
    }

    /// The agents (not terminated) holding `image`.
    pub async fn image_holdings(&self, image: &str) -> Result<Vec<ImageHolding>> {
        sqlx::query(holdings_query!(" AND agent_images.image = $1"))
            .bind(image)
            .fetch_all(&self.read)
            .await?
            .iter()
            .map(|row| holding_from_row(row).map(|(_, h)| h))
            .collect()
    }
}
