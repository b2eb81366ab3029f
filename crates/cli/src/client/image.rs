//! `corral image`: images and the least each needs to run.

use anyhow::Result;
use clap::Subcommand;
use corral_core::Slots;
use serde::Deserialize;
use serde_json::json;

use super::http::{parse, Api};
use super::render::{self, slots, table};
use super::Out;

#[derive(Subcommand)]
pub enum Command {
    /// List images.
    Ls {
        #[command(flatten)]
        out: Out,
    },
    /// Create or replace an image (admin).
    Put {
        /// The image's name.
        name: String,
        /// The least a session on this image gets, whatever it asks, e.g. mem=2GiB.
        #[arg(long, value_name = "SLOTS")]
        min_slots: Option<String>,
        #[command(flatten)]
        out: Out,
    },
    /// Delete an image (admin).
    Delete {
        /// The image's name.
        name: String,
        #[command(flatten)]
        out: Out,
    },
}

#[derive(Deserialize)]
struct ImageView {
    /// The image's name.
    name: String,
    #[serde(default)]
    min_slots: Slots,
}

pub async fn run(api: &Api, command: Command) -> Result<()> {
    match command {
        Command::Ls { out } => {
            let reply = api.get(&["images"], &[]).await?;
            if !render::json(out.output, &reply) {
                let images: Vec<ImageView> = parse(&reply)?;
                let rows: Vec<Vec<String>> = images
                    .iter()
                    .map(|i| vec![i.name.clone(), slots(&i.min_slots)])
                    .collect();
                table("images", &["NAME", "MIN SLOTS"], &rows);
            }
        }
        Command::Put {
            name,
            min_slots,
            out,
        } => {
            let body = match min_slots {
                Some(s) => json!({"min_slots": s}),
                None => json!({}),
            };
            let reply = api.put(&["images", &name], &body).await?;
            if !render::json(out.output, &reply) {
                let image: ImageView = parse(&reply)?;
                println!(
                    "image {} (min slots {})",
                    image.name,
                    slots(&image.min_slots)
                );
            }
        }
        Command::Delete { name, out } => {
            let reply = api.delete(&["images", &name]).await?;
            if !render::json(out.output, &reply) {
                println!("deleted image {name}");
            }
        }
    }
    Ok(())
}
