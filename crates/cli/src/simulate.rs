//! `corral simulate`: replays a workload trace on one or more group configurations and reports
//! what each would have done (docs/simulate.md).

use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use anyhow::{bail, Context, Result};
use clap::ValueEnum;
use corral_sim::{config::sweep, read, simulate, Format, Outcome, Report, SimConfig, Trace};

#[derive(Clone, Copy, ValueEnum)]
pub enum TraceFormat {
    /// The Standard Workload Format of the Parallel Workloads Archive.
    Swf,
    /// A CSV with a header naming the columns submit,duration,cpu,mem,gpu,owner.
    Csv,
}

#[derive(clap::Args)]
pub struct SimulateArgs {
    /// The workload trace.
    #[arg(long, value_name = "FILE")]
    trace: PathBuf,
    /// The trace's format [default: from its extension, .swf or .csv].
    #[arg(long, value_enum)]
    format: Option<TraceFormat>,
    /// The group to replay it on, as TOML (docs/simulate.md, examples/simulate/).
    #[arg(long, value_name = "GROUP.toml", required_unless_present = "compare")]
    config: Option<PathBuf>,
    /// Several groups over the same trace, side by side (run in parallel).
    #[arg(long, value_name = "GROUP.toml", num_args = 2.., conflicts_with = "config")]
    compare: Vec<PathBuf>,
    /// Vary one setting of --config: a dotted key and its values, e.g.
    /// policy.idle_wait_secs=60,600,3600; one run per value, side by side.
    #[arg(long, value_name = "KEY=V1,V2,...", requires = "config")]
    sweep: Option<String>,
    /// A malformed trace line is an error rather than skipped and counted.
    #[arg(long)]
    strict: bool,
    #[arg(long, short, value_enum, default_value_t)]
    output: crate::Output,
    /// Draws the queue, nodes by kind and utilisation over time as an SVG chart; with
    /// --compare or --sweep, one chart per run, FILE-NAME.svg (NAME the run's).
    #[arg(long, value_name = "FILE.svg")]
    plot: Option<PathBuf>,
}

/// One replay to make: its name in the report and its configuration.
struct Run {
    name: String,
    config: SimConfig,
}

pub fn run(args: SimulateArgs) -> Result<()> {
    let format = match args.format {
        Some(TraceFormat::Swf) => Format::Swf,
        Some(TraceFormat::Csv) => Format::Csv,
        None => Format::from_path(&args.trace).with_context(|| {
            format!(
                "{}: say the trace's format with --format swf|csv (no .swf or .csv extension)",
                args.trace.display()
            )
        })?,
    };
    let trace = read(&args.trace, format, args.strict)?;
    if trace.extra_fields > 0 {
        eprintln!(
            "{}: {} line(s) have more than the 18 fields of SWF: their first 18 were read",
            args.trace.display(),
            trace.extra_fields
        );
    }
    if !trace.malformed.is_empty() {
        // Nothing to replay: not a result, an error.
        if trace.jobs.is_empty() {
            bail!(
                "{}: no job could be read: {} malformed line(s), the first: {}",
                args.trace.display(),
                trace.malformed.len(),
                trace.malformed[0]
            );
        }
        eprintln!(
            "{}: {} malformed line(s) skipped, the first: {}",
            args.trace.display(),
            trace.malformed.len(),
            trace.malformed[0]
        );
    }
    let runs = runs(&args)?;
    let outcomes = replay_all(&trace, &runs)?;
    let reports: Vec<Report> = runs
        .iter()
        .zip(&outcomes)
        .map(|(run, outcome)| Report::of(&run.name, &trace, &run.config, outcome))
        .collect();
    if let Some(plot) = &args.plot {
        for (run, outcome) in runs.iter().zip(&outcomes) {
            let path = match runs.len() {
                1 => plot.clone(),
                _ => plot_of(plot, &run.name),
            };
            let title = format!("{} on {}", run.name, file_name(&args.trace));
            let svg = corral_sim::plot::svg(outcome, &title)?;
            std::fs::write(&path, svg).with_context(|| format!("writing {}", path.display()))?;
            if runs.len() > 1 {
                eprintln!("{}: {}", run.name, path.display());
            }
        }
    }
    match args.output {
        crate::Output::Json => {
            let json = if reports.len() == 1 {
                serde_json::to_string_pretty(&reports[0])?
            } else {
                serde_json::to_string_pretty(&reports)?
            };
            println!("{json}");
        }
        crate::Output::Table => {
            let (header, rows) = corral_sim::side_by_side(&reports);
            let header: Vec<&str> = header.iter().map(String::as_str).collect();
            crate::table::print(&header, &rows);
        }
    }
    Ok(())
}

/// `out.svg` for run `name` of several: `out-NAME.svg`, the name's characters that are not
/// letters, digits, `.`, `_` or `-` made `_` (a sweep's `key=value`).
fn plot_of(plot: &Path, name: &str) -> PathBuf {
    let safe: String = name
        .chars()
        .map(|c| match c {
            'a'..='z' | 'A'..='Z' | '0'..='9' | '.' | '_' | '-' => c,
            _ => '_',
        })
        .collect();
    let stem = plot
        .file_stem()
        .map_or_else(String::new, |s| s.to_string_lossy().into_owned());
    let ext = plot
        .extension()
        .map_or_else(|| "svg".into(), |e| e.to_string_lossy().into_owned());
    plot.with_file_name(format!("{stem}-{safe}.{ext}"))
}

fn file_name(path: &Path) -> String {
    path.file_name().map_or_else(
        || path.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    )
}

/// The configurations to replay: --config (once, or once per --sweep value), or --compare's.
fn runs(args: &SimulateArgs) -> Result<Vec<Run>> {
    let load = |path: &Path, overrides: &[(String, String)]| -> Result<SimConfig> {
        let text =
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        SimConfig::parse(&text, overrides).with_context(|| format!("{}", path.display()))
    };
    let stem = |path: &Path, config: &SimConfig| {
        config.name.clone().unwrap_or_else(|| {
            path.file_stem()
                .map_or_else(|| "group".into(), |s| s.to_string_lossy().into_owned())
        })
    };
    if !args.compare.is_empty() {
        return args
            .compare
            .iter()
            .map(|path| {
                let config = load(path, &[])?;
                Ok(Run {
                    name: stem(path, &config),
                    config,
                })
            })
            .collect();
    }
    let path = args
        .config
        .as_deref()
        .context("--config or --compare is required")?;
    match &args.sweep {
        None => {
            let config = load(path, &[])?;
            Ok(vec![Run {
                name: stem(path, &config),
                config,
            }])
        }
        Some(spec) => {
            let (key, values) = sweep(spec)?;
            values
                .into_iter()
                .map(|value| {
                    let config = load(path, &[(key.clone(), value.clone())])?;
                    Ok(Run {
                        name: format!("{key}={value}"),
                        config,
                    })
                })
                .collect()
        }
    }
}

/// Replays every run, as many at once as there are cores, with one progress bar over all of
/// them on a terminal (nothing when standard error is piped).
fn replay_all(trace: &Trace, runs: &[Run]) -> Result<Vec<Outcome>> {
    let total = trace.jobs.len() * runs.len();
    let bar = ProgressBar::new(total, std::io::stderr().is_terminal());
    let workers = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(runs.len())
        .max(1);
    let next = AtomicUsize::new(0);
    let results: Mutex<Vec<Option<Result<Outcome, corral_sim::SimError>>>> =
        Mutex::new(runs.iter().map(|_| None).collect());
    std::thread::scope(|scope| {
        for _ in 0..workers {
            scope.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(run) = runs.get(i) else { return };
                let mut seen = 0;
                let outcome = simulate(trace, &run.config, &mut |p| {
                    bar.advance(p.done - seen);
                    seen = p.done;
                });
                results.lock().unwrap_or_else(|p| p.into_inner())[i] = Some(outcome);
            });
        }
    });
    bar.finish();
    let results = results.into_inner().unwrap_or_else(|p| p.into_inner());
    runs.iter()
        .zip(results)
        .map(|(run, result)| match result {
            Some(r) => r.with_context(|| format!("replaying {}", run.name)),
            None => bail!("replaying {}: the worker stopped", run.name),
        })
        .collect()
}

/// `[#########...........]  45%  45,000 / 100,000 sessions` on standard error, redrawn in place.
struct ProgressBar {
    total: usize,
    done: AtomicUsize,
    shown: Option<Mutex<usize>>,
}

impl ProgressBar {
    const WIDTH: usize = 30;

    fn new(total: usize, on_terminal: bool) -> Self {
        ProgressBar {
            total: total.max(1),
            done: AtomicUsize::new(0),
            shown: on_terminal.then(|| Mutex::new(usize::MAX)),
        }
    }

    fn advance(&self, by: usize) {
        let done = self.done.fetch_add(by, Ordering::Relaxed) + by;
        let Some(shown) = &self.shown else { return };
        let percent = done * 100 / self.total;
        let mut shown = shown.lock().unwrap_or_else(|p| p.into_inner());
        if *shown == percent {
            return;
        }
        *shown = percent;
        let filled = done * Self::WIDTH / self.total;
        let mut err = std::io::stderr().lock();
        let _ = write!(
            err,
            "\r[{}{}] {percent:>3}%  {done} / {} sessions",
            "#".repeat(filled.min(Self::WIDTH)),
            ".".repeat(Self::WIDTH.saturating_sub(filled)),
            self.total
        );
        let _ = err.flush();
    }

    fn finish(&self) {
        if self.shown.is_some() {
            eprint!("\r{}\r", " ".repeat(Self::WIDTH + 40));
        }
    }
}
