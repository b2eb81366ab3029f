//! `corral completions SHELL`: scripts a shell can load, naming the subcommands.
use crate::common;

use common::{text, CORRAL};

fn completions(shell: &str) -> String {
    let out = std::process::Command::new(CORRAL)
        .args(["completions", shell])
        .output()
        .unwrap();
    assert!(out.status.success(), "{shell}: {}", text(&out.stderr));
    text(&out.stdout)
}

#[test]
fn completion_scripts_are_printed_for_bash_zsh_and_fish() {
    let bash = completions("bash");
    assert!(
        bash.contains("complete -F") && bash.contains("session"),
        "{bash}"
    );
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("corral.bash");
    std::fs::write(&file, &bash).unwrap();
    let check = std::process::Command::new("bash")
        .arg("-n")
        .arg(&file)
        .output()
        .unwrap();
    assert!(check.status.success(), "bash -n: {}", text(&check.stderr));

    let zsh = completions("zsh");
    assert!(zsh.starts_with("#compdef corral"), "{zsh}");
    let fish = completions("fish");
    assert!(fish.contains("complete -c corral"), "{fish}");

    let unknown = std::process::Command::new(CORRAL)
        .args(["completions", "tcsh"])
        .output()
        .unwrap();
    assert!(!unknown.status.success());
    assert!(
        text(&unknown.stderr).contains("tcsh"),
        "{}",
        text(&unknown.stderr)
    );
}
