//! `corral agent-build`: the builds of corral the manager serves to agents that update
//! themselves (admin; docs/agent-update.md).

use anyhow::{bail, Context, Result};
use clap::Subcommand;
use corral_api::agent_builds::AgentBuild;
use serde_json::json;

use super::http::{parse, Api};
use super::render::{self, table};
use super::Out;

#[derive(Subcommand)]
pub enum Command {
    /// Upload a build of corral. Its version is what `FILE --version` says (FILE itself is run,
    /// never a program of that name on PATH), and its platform this machine's, where it just
    /// ran; give both for a build that cannot run here. A --version that a build which runs
    /// here contradicts is refused.
    Put {
        /// The corral binary.
        file: std::path::PathBuf,
        /// The version it reports (when it cannot run here).
        #[arg(long, value_name = "VERSION")]
        version: Option<String>,
        /// OS-ARCH, e.g. linux-x86_64 (default: this machine's).
        #[arg(long, value_name = "PLATFORM")]
        platform: Option<String>,
        #[command(flatten)]
        out: Out,
    },
    /// List the builds.
    Ls {
        #[command(flatten)]
        out: Out,
    },
    /// Forget a build; refused while a group's agent update targets its version.
    Rm {
        version: String,
        /// OS-ARCH (default: this machine's).
        #[arg(long, value_name = "PLATFORM")]
        platform: Option<String>,
        #[command(flatten)]
        out: Out,
    },
}

pub async fn run(api: &Api, command: Command) -> Result<()> {
    match command {
        Command::Put {
            file,
            version,
            platform,
            out,
        } => {
            // The file named, never a program of that name on PATH (`put corral` is ./corral).
            let file = std::path::absolute(&file)
                .with_context(|| format!("finding {}", file.display()))?;
            let version = match version {
                Some(given) => {
                    // A build that runs here must say the version it is uploaded as; one that
                    // cannot (another platform) is taken at its word.
                    if let Ok(said) = version_of(&file) {
                        if said != given {
                            bail!(
                                "{} says it is version {said}, not {given} as --version says: \
                                 upload it as {said}, or give the file of {given}",
                                file.display()
                            );
                        }
                    }
                    given
                }
                None => version_of(&file)?,
            };
            let platform = platform.unwrap_or_else(corral_api::agent_builds::platform);
            let data =
                std::fs::read(&file).with_context(|| format!("reading {}", file.display()))?;
            let reply = api
                .put_file(&["agent-builds", &version, &platform], data)
                .await?;
            if !render::json(out.output, &reply) {
                let b: AgentBuild = parse(&reply)?;
                println!(
                    "agent build {} for {}: {} bytes, SHA-256 {}",
                    b.version, b.platform, b.size, b.sha256
                );
            }
        }
        Command::Ls { out } => {
            let reply = api.get(&["agent-builds"], &[]).await?;
            if !render::json(out.output, &reply) {
                let builds: Vec<AgentBuild> = parse(&reply)?;
                let rows: Vec<Vec<String>> = builds
                    .iter()
                    .map(|b| {
                        vec![
                            b.version.clone(),
                            b.platform.clone(),
                            b.size.to_string(),
                            b.sha256.clone(),
                        ]
                    })
                    .collect();
                table(
                    "agent builds",
                    &["VERSION", "PLATFORM", "SIZE", "SHA256"],
                    &rows,
                );
            }
        }
        Command::Rm {
            version,
            platform,
            out,
        } => {
            let platform = platform.unwrap_or_else(corral_api::agent_builds::platform);
            let reply = api.delete(&["agent-builds", &version, &platform]).await?;
            let done = json!({"deleted": "agent build", "version": version, "platform": platform});
            if !render::json_or(out.output, &reply, || done) {
                println!("agent build {version} for {platform} removed");
            }
        }
    }
    Ok(())
}

/// What `file --version` says it is: `corral VERSION`.
fn version_of(file: &std::path::Path) -> Result<String> {
    let output = std::process::Command::new(file)
        .arg("--version")
        .output()
        .with_context(|| {
            format!(
                "running {} --version to read its version (give --version and --platform for \
                 a build that cannot run here)",
                file.display()
            )
        })?;
    let said = String::from_utf8_lossy(&output.stdout);
    match said.trim().strip_prefix("corral ") {
        Some(v) if output.status.success() && !v.is_empty() => Ok(v.to_string()),
        _ => bail!(
            "{} --version said {:?}, not `corral VERSION`: is it a build of corral? (give \
             --version and --platform to upload it anyway)",
            file.display(),
            said.trim()
        ),
    }
}
