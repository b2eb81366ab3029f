//! `corral image`: images, the least each needs to run, and which agent holds which digest.

use anyhow::Result;
use clap::Subcommand;
use corral_api::images::{ImageUpdate, ImageView};
use corral_core::{Image, Slots};
use serde_json::json;

use super::http::{json, parse, Api};
use super::render::{self, fields, or_dash, slots, table, time};
use super::Out;

#[derive(Subcommand)]
pub enum Command {
    /// List images.
    Ls {
        #[command(flatten)]
        out: Out,
    },
    /// Show an image and the digest of it each agent holds.
    Get {
        /// The image's name.
        name: String,
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

/// Each digest agents hold, short, with how many hold it: `sha256:0123456789ab (2 agents)`.
fn digests(image: &ImageView) -> String {
    let mut counts: std::collections::BTreeMap<&str, usize> = Default::default();
    for h in &image.agents {
        *counts.entry(h.digest.as_str()).or_default() += 1;
    }
    if counts.is_empty() {
        return "-".into();
    }
    counts
        .iter()
        .map(|(digest, n)| {
            let short = digest.get(..19).unwrap_or(digest);
            let agents = if *n == 1 { "agent" } else { "agents" };
            format!("{short} ({n} {agents})")
        })
        .collect::<Vec<_>>()
        .join(", ")
}

pub async fn run(api: &Api, command: Command) -> Result<()> {
    match command {
        Command::Ls { out } => {
            let reply = api.get(&["images"], &[]).await?;
            if !render::json(out.output, &reply) {
                let images: Vec<ImageView> = parse(&reply)?;
                let rows: Vec<Vec<String>> = images
                    .iter()
                    .map(|i| vec![i.name.clone(), slots(&i.min_slots), digests(i)])
                    .collect();
                table("images", &["NAME", "MIN SLOTS", "DIGESTS HELD"], &rows);
            }
        }
        Command::Get { name, out } => {
            let reply = api.get(&["images", &name], &[]).await?;
            if !render::json(out.output, &reply) {
                let image: ImageView = parse(&reply)?;
                fields(&[
                    ("name", image.name.clone()),
                    ("min slots", slots(&image.min_slots)),
                    ("digests held", digests(&image)),
                ]);
                let rows: Vec<Vec<String>> = image
                    .agents
                    .iter()
                    .map(|h| {
                        vec![
                            h.agent.clone(),
                            h.group.clone(),
                            h.digest.clone(),
                            or_dash(h.offered.as_deref()),
                            time(h.reported_at.0),
                        ]
                    })
                    .collect();
                table(
                    "agents holding it",
                    &["AGENT", "GROUP", "DIGEST", "REGISTRY OFFERED", "REPORTED"],
                    &rows,
                );
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
