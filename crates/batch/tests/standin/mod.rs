//! Stand-ins for a scheduler's commands, for the adaptors whose scheduler cannot run on the test
//! host (PBS, LSF): each command is a link, in a directory of the test's own, to one `/bin/sh`
//! script that records how it was called (arguments, standard input, `TZ`) and answers what the
//! test told it (standard output, standard error, exit status), or hangs. The adaptor is given
//! the directory as its `bin_dir`.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Duration;

use corral_batch::Commands;

/// One script for every stand-in: it knows which command it is by the name it was called by.
/// `NAME.K.out` (`.err`, `.code`) answers the K-th call of NAME, `NAME.out` any other.
const SCRIPT: &str = r#"#!/bin/sh
dir=$(dirname "$0")
name=$(basename "$0")
n=$(( $(cat "$dir/calls/count" 2>/dev/null || echo 0) + 1 ))
echo "$n" > "$dir/calls/count"
k=$(( $(cat "$dir/calls/$name.count" 2>/dev/null || echo 0) + 1 ))
echo "$k" > "$dir/calls/$name.count"
printf '%s' "$name" > "$dir/calls/$n.program"
: > "$dir/calls/$n.args"
for word in "$@"; do printf '%s\0' "$word" >> "$dir/calls/$n.args"; done
printf '%s' "${TZ-}" > "$dir/calls/$n.tz"
cat > "$dir/calls/$n.stdin"
if [ -e "$dir/$name.hang" ]; then
    sleep 600 &
    echo $! > "$dir/$name.pid"
    wait
fi
answer() { if [ -e "$dir/$name.$k.$1" ]; then cat "$dir/$name.$k.$1"; elif [ -e "$dir/$name.$1" ]; then cat "$dir/$name.$1"; fi; }
answer out
answer err >&2
code=$(answer code)
exit "${code:-0}"
"#;

/// The script, written once per test binary before any stand-in runs, so that no command is
/// started while it is open for writing (which would make running it fail with "text file
/// busy").
fn script() -> &'static Path {
    static SCRIPT_PATH: OnceLock<PathBuf> = OnceLock::new();
    SCRIPT_PATH.get_or_init(|| {
        let path = Path::new(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("standin-{}.sh", env!("CARGO_CRATE_NAME")));
        if std::fs::read_to_string(&path).ok().as_deref() != Some(SCRIPT) {
            corral_testkit::write_executable(&path, SCRIPT);
        }
        path
    })
}

/// How a stand-in was called.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Call {
    pub program: String,
    pub args: Vec<String>,
    pub stdin: String,
    /// `TZ` as the command saw it ("" when unset).
    pub tz: String,
}

pub struct StandIns {
    dir: tempfile::TempDir,
}

impl StandIns {
    /// Stand-ins for `programs`; any other command is missing.
    pub fn new(programs: &[&str]) -> StandIns {
        let script = script();
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("calls")).unwrap();
        for program in programs {
            std::os::unix::fs::symlink(script, dir.path().join(program)).unwrap();
        }
        StandIns { dir }
    }

    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Commands run from the stand-ins' directory.
    pub fn commands(&self) -> Commands {
        Commands {
            bin_dir: Some(self.dir.path().to_path_buf()),
            timeout: Duration::from_secs(20),
            ..Commands::default()
        }
    }

    fn write(&self, name: String, text: &str) {
        std::fs::write(self.dir.path().join(name), text).unwrap();
    }

    /// `program` prints `stdout` and succeeds.
    pub fn answer(&self, program: &str, stdout: &str) {
        self.write(format!("{program}.out"), stdout);
    }

    /// The `nth` call (from 1) of `program` prints `stdout` and succeeds.
    pub fn answer_call(&self, program: &str, nth: u32, stdout: &str) {
        self.write(format!("{program}.{nth}.out"), stdout);
        self.write(format!("{program}.{nth}.code"), "0");
    }

    /// `program` prints `stderr` and exits with `code`.
    pub fn fail(&self, program: &str, code: i32, stderr: &str) {
        self.write(format!("{program}.err"), stderr);
        self.write(format!("{program}.code"), &code.to_string());
    }

    /// The `nth` call of `program` prints `stderr` and exits with `code`.
    pub fn fail_call(&self, program: &str, nth: u32, code: i32, stderr: &str) {
        self.write(format!("{program}.{nth}.err"), stderr);
        self.write(format!("{program}.{nth}.code"), &code.to_string());
    }

    /// `program` starts a child and waits for it, never answering.
    pub fn hang(&self, program: &str) {
        self.write(format!("{program}.hang"), "");
    }

    /// The child a hanging `program` started.
    pub fn hung_child(&self, program: &str) -> i32 {
        let text = std::fs::read_to_string(self.dir.path().join(format!("{program}.pid")))
            .expect("the hanging stand-in wrote its child's pid");
        text.trim().parse().unwrap()
    }

    /// The calls so far, in order.
    pub fn calls(&self) -> Vec<Call> {
        let calls = self.dir.path().join("calls");
        let count: usize = std::fs::read_to_string(calls.join("count"))
            .map(|c| c.trim().parse().unwrap())
            .unwrap_or(0);
        (1..=count)
            .map(|n| {
                let read = |what: &str| {
                    std::fs::read_to_string(calls.join(format!("{n}.{what}"))).unwrap()
                };
                let args = read("args");
                Call {
                    program: read("program"),
                    args: args.split_terminator('\0').map(str::to_string).collect(),
                    stdin: read("stdin"),
                    tz: read("tz"),
                }
            })
            .collect()
    }

    /// The calls so far, each as its command line (`qsub -h`), for asserting many at once.
    pub fn command_lines(&self) -> Vec<String> {
        self.calls()
            .into_iter()
            .map(|c| {
                std::iter::once(c.program)
                    .chain(c.args)
                    .collect::<Vec<_>>()
                    .join(" ")
            })
            .collect()
    }
}

/// A recorded output (`tests/recorded/...`).
pub fn recorded(path: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/recorded")
        .join(path);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}
