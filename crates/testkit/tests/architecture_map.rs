//! ARCHITECTURE.md's code map names every source file: each `crates/NAME/src/**/*.rs` must appear
//! as `` `src/PATH` `` (its path under the crate, in backticks) in the section of its crate, the
//! one under the heading that starts with `` ### `crates/NAME` ``. The failure lists every file
//! missing, so one run says all there is to add. Std only, so it costs no build of its own.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

/// The workspace root, two levels above this crate.
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The text of each crate's section of the code map, by crate directory name: from its
/// `` ### `crates/NAME` `` heading to the next heading of level 2 or 3.
fn sections(map: &str) -> BTreeMap<String, String> {
    let mut sections: BTreeMap<String, String> = BTreeMap::new();
    let mut current: Option<String> = None;
    for line in map.lines() {
        if line.starts_with("## ") || line.starts_with("### ") {
            current = line
                .strip_prefix("### `crates/")
                .and_then(|rest| rest.split('`').next())
                .map(str::to_owned);
            continue;
        }
        if let Some(name) = &current {
            let text = sections.entry(name.clone()).or_default();
            text.push_str(line);
            text.push('\n');
        }
    }
    sections
}

/// Every `.rs` file under `dir`, as `/`-separated paths relative to `base`, sorted.
fn rust_files(base: &Path, dir: &Path, found: &mut Vec<String>) {
    let mut entries: Vec<PathBuf> = fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
        .map(|entry| entry.expect("a directory entry").path())
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            rust_files(base, &path, found);
        } else if path.extension().is_some_and(|ext| ext == "rs") {
            let relative = path.strip_prefix(base).expect("under its base");
            let parts: Vec<String> = relative
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect();
            found.push(parts.join("/"));
        }
    }
}

#[test]
fn every_source_file_is_on_the_map() {
    let root = root();
    let map_path = root.join("ARCHITECTURE.md");
    let map = fs::read_to_string(&map_path)
        .unwrap_or_else(|e| panic!("reading {}: {e}", map_path.display()));
    let sections = sections(&map);

    let mut crates: Vec<PathBuf> = fs::read_dir(root.join("crates"))
        .expect("the workspace's crates directory")
        .map(|entry| entry.expect("a directory entry").path())
        .filter(|path| path.join("src").is_dir())
        .collect();
    crates.sort();
    assert!(
        !crates.is_empty(),
        "no crates under {}",
        root.join("crates").display()
    );

    let mut missing = Vec::new();
    let mut checked = 0;
    for dir in &crates {
        let name = dir
            .file_name()
            .expect("a crate directory")
            .to_string_lossy()
            .into_owned();
        let mut files = Vec::new();
        rust_files(dir, &dir.join("src"), &mut files);
        let section = sections.get(&name).map(String::as_str).unwrap_or("");
        for file in files {
            checked += 1;
            if !section.contains(&format!("`{file}`")) {
                missing.push(format!("crates/{name}/{file}"));
            }
        }
    }
    assert!(
        checked > 0,
        "no source files found under {}",
        root.display()
    );
    assert!(
        missing.is_empty(),
        "ARCHITECTURE.md's code map does not name {} source file(s); add a line \
         \"- `src/PATH` — what it holds\" for each under its crate's heading \
         (### `crates/NAME`):\n  {}",
        missing.len(),
        missing.join("\n  ")
    );
}

#[test]
fn sections_are_read_by_crate() {
    let map = "## Code map\nintro `src/lib.rs`\n### `crates/a` (`corral-a`): A\n- `src/x.rs` — x\n\
               ### `crates/b`\n- `src/y/mod.rs` — y\n## Invariants\n- `src/z.rs`\n";
    let sections = sections(map);
    assert_eq!(sections.len(), 2);
    assert!(sections["a"].contains("`src/x.rs`"));
    assert!(!sections["a"].contains("`src/y/mod.rs`"));
    assert!(sections["b"].contains("`src/y/mod.rs`"));
    assert!(!sections["b"].contains("`src/z.rs`"));
}
