//! `corral`: the single binary of Corral.

mod bench;
mod table;

use std::io::Read;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};
use clap::{Parser, Subcommand, ValueEnum};
use corral_core::plan::{plan, PlanOutput, Problem};

#[derive(Parser)]
#[command(
    name = "corral",
    version,
    about = "Corral: a cluster resource manager for compute sessions"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Clone, Copy, Default, ValueEnum)]
enum Output {
    /// Tables for people.
    #[default]
    Table,
    /// JSON for scripts.
    Json,
}

#[derive(Subcommand)]
enum Command {
    /// Dry-run one pass of the cycle on a planning problem and print its decisions.
    Plan {
        /// The problem as JSON (see docs/plan-format.md); `-` reads standard input.
        file: PathBuf,
        #[arg(long, short, value_enum, default_value_t)]
        output: Output,
    },
    /// Run a benchmark and print one `name value unit` line per case.
    Bench {
        #[command(subcommand)]
        target: bench::Target,
    },
}

fn main() -> ExitCode {
    match run(Cli::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> Result<()> {
    match cli.command {
        Command::Plan { file, output } => {
            let text = if file.as_os_str() == "-" {
                let mut s = String::new();
                std::io::stdin()
                    .read_to_string(&mut s)
                    .context("reading standard input")?;
                s
            } else {
                std::fs::read_to_string(&file)
                    .with_context(|| format!("reading {}", file.display()))?
            };
            let problem: Problem = serde_json::from_str(&text)
                .with_context(|| format!("{}: not a valid planning problem", file.display()))?;
            let snapshot = problem
                .into_snapshot()
                .with_context(|| format!("{}: not a valid planning problem", file.display()))?;
            let out = plan(&snapshot);
            match output {
                Output::Json => println!("{}", serde_json::to_string_pretty(&out)?),
                Output::Table => print_plan(&out),
            }
            Ok(())
        }
        Command::Bench { target } => bench::run(target),
    }
}

fn print_plan(out: &PlanOutput) {
    let s = &out.summary;
    let d = &out.decisions;
    let nodes = if s.nodes.is_empty() {
        "none".to_string()
    } else {
        s.nodes
            .iter()
            .map(|(t, n)| format!("{n} x {t}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let bound = s
        .lower_bound_cost
        .map_or("none (a demanded slot is on no template)".into(), |b| {
            format!("{b:.3}/h")
        });
    println!(
        "launch      {nodes} ({} nodes, {:.3}/h; lower bound {bound})",
        s.node_count, s.cost_per_hour
    );
    println!(
        "sessions    {} placed, {} rejected, {} pending",
        s.placed, s.rejected, s.unplaced
    );
    println!(
        "agents      {} marked, {} unmarked, {} terminated",
        s.marked, s.unmarked, s.terminated
    );
    let section = |title: &str, rows: Vec<Vec<String>>, header: &[&str]| {
        if !rows.is_empty() {
            println!("\n{title}");
            table::print(header, &rows);
        }
    };
    section(
        "LAUNCHES",
        d.launches
            .iter()
            .map(|l| vec![l.template.clone(), l.count.to_string(), l.reason.clone()])
            .collect(),
        &["TEMPLATE", "COUNT", "REASON"],
    );
    for (title, list) in [
        ("MARKS", &d.marks),
        ("UNMARKS", &d.unmarks),
        ("TERMINATIONS", &d.terminations),
    ] {
        section(
            title,
            list.iter()
                .map(|a| vec![a.agent.to_string(), a.reason.clone()])
                .collect(),
            &["AGENT", "REASON"],
        );
    }
    section(
        "PLACEMENTS",
        d.placements
            .iter()
            .map(|p| {
                vec![
                    p.session.to_string(),
                    p.agent.to_string(),
                    p.slots.to_string(),
                ]
            })
            .collect(),
        &["SESSION", "AGENT", "SLOTS"],
    );
    section(
        "REJECTIONS",
        d.rejections
            .iter()
            .map(|r| vec![r.session.to_string(), r.reason.to_string()])
            .collect(),
        &["SESSION", "REASON"],
    );
    section(
        "WAITING",
        d.waiting
            .iter()
            .map(|w| vec![w.session.to_string(), w.reason.to_string()])
            .collect(),
        &["SESSION", "REASON"],
    );
}
