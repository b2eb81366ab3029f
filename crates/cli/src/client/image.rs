//! `corral image`: images and the least each needs to run.

use anyhow::Result;
use clap::Subcommand;
use corral_api::images::ImageUpdate;
use corral_core::{Image, Slots};
use serde_json::json;

use super::http::{json, parse, Api};
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
        min_slots: Option<Slots>,
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

pub async fn run(api: &Api, command: Command) -> Result<()> {
    match command {
        Command::Ls { out } => {
            let reply = api.get(&["images"], &[]).await?;
            if !render::json(out.output, &reply) {
                let images: Vec<Image> = parse(&reply)?;
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
            let body = ImageUpdate {
                min_slots: min_slots.unwrap_or_default(),
            };
            let reply = api.put(&["images", &name], &json(&body)?).await?;
            if !render::json(out.output, &reply) {
                let image: Image = parse(&reply)?;
                println!(
                    "image {} (min slots {})",
                    image.name,
                    slots(&image.min_slots)
                );
            }
        }
        Command::Delete { name, out } => {
            let reply = api.delete(&["images", &name]).await?;
            if !render::json_or(
                out.output,
                &reply,
                || json!({"deleted": "image", "name": name}),
            ) {
                println!("deleted image {name}");
            }
        }
    }
    Ok(())
}
