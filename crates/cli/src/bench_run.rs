//! `corral bench run`: `corral session run` against Slurm's `srun`, side by side in one run, as
//! a user times them at a prompt: wall time of the command, from exec to exit. Corral runs as
//! `corral dev` (a child process: manager and agent on embedded SQLite), the command is this
//! binary; `srun` is whatever Slurm this host runs (`.ci/slurm.sh` starts one).

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

/// The commands timed: a name for the figure, and the command both run.
const CASES: [(&str, &[&str]); 2] = [
    ("true", &["true"]),
    ("echo_sleep", &["sh", "-c", "echo hello; sleep 0.2"]),
];

/// Runs of each command before the timed ones (caches, connections, Slurm's first step).
const WARM_UP: usize = 3;

pub fn run(runs: usize) -> Result<()> {
    let dir = tempfile::tempdir().context("temporary directory")?;
    let config = dir.path().join("config.toml");
    let dev = Dev::start(dir.path(), &config)?;
    let srun = srun_works();
    if !srun {
        eprintln!("# srun is not here or no Slurm answers (.ci/slurm.sh starts one): corral alone");
    }
    let corral = std::env::current_exe().context("finding this executable")?;
    for (name, command) in CASES {
        let mut corral_ms = Vec::with_capacity(runs);
        let mut srun_ms = Vec::with_capacity(runs);
        // Interleaved, so that the machine's moments of noise fall on both alike.
        for i in 0..WARM_UP + runs {
            let mut ours = Command::new(&corral);
            ours.env("CORRAL_CONFIG", &config)
                .args(["session", "run", "--"])
                .args(command);
            let ms = timed(&mut ours)?;
            if i >= WARM_UP {
                corral_ms.push(ms);
            }
            if srun {
                let mut theirs = Command::new("srun");
                theirs.arg("--quiet").args(command);
                let ms = timed(&mut theirs)?;
                if i >= WARM_UP {
                    srun_ms.push(ms);
                }
            }
        }
        report(&format!("run_{name}"), &mut corral_ms);
        if srun {
            report(&format!("srun_{name}"), &mut srun_ms);
        }
    }
    drop(dev);
    Ok(())
}

/// Wall milliseconds of one command, which must succeed (its output is dropped).
fn timed(command: &mut Command) -> Result<f64> {
    let started = Instant::now();
    let status = command
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .with_context(|| format!("running {command:?}"))?;
    let ms = started.elapsed().as_secs_f64() * 1e3;
    if !status.success() {
        bail!("{command:?} failed: {status}");
    }
    Ok(ms)
}

/// `<name>_median_ms` and, for reading, the spread.
fn report(name: &str, ms: &mut [f64]) {
    ms.sort_by(f64::total_cmp);
    let at = |p: f64| ms[((ms.len() - 1) as f64 * p).round() as usize];
    println!("{name}_median_ms {:.1} ms", at(0.5));
    eprintln!(
        "# {name}: {} runs, min {:.1}, p90 {:.1}, max {:.1} ms",
        ms.len(),
        at(0.0),
        at(0.9),
        at(1.0)
    );
}

/// Whether `srun` exists and a Slurm controller answers.
fn srun_works() -> bool {
    Command::new("sinfo")
        .arg("--noheader")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// `corral dev` as a child, stopped when dropped.
pub(crate) struct Dev(Child);

impl Dev {
    /// Starts it on a free port and waits until its agent has joined (it then writes `config`).
    pub(crate) fn start(dir: &Path, config: &Path) -> Result<Dev> {
        let port = std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port();
        let log = std::fs::File::create(dir.join("dev.log"))?;
        let child = Command::new(std::env::current_exe()?)
            .env("CORRAL_CONFIG", config)
            .arg("dev")
            .arg("--data-dir")
            .arg(dir.join("data"))
            .args(["--listen", &format!("127.0.0.1:{port}")])
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .context("starting corral dev")?;
        let mut dev = Dev(child);
        let deadline = Instant::now() + Duration::from_secs(60);
        // Set-up, not a measurement: the file appears once the agent has joined.
        while !config.exists() {
            if let Some(status) = dev.0.try_wait()? {
                bail!(
                    "corral dev ended ({status}): {}",
                    std::fs::read_to_string(dir.join("dev.log")).unwrap_or_default()
                );
            }
            if Instant::now() > deadline {
                bail!("corral dev did not write {} within 60 s", config.display());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(dev)
    }
}

impl Dev {
    pub(crate) fn pid(&self) -> u32 {
        self.0.id()
    }
}

impl Drop for Dev {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
