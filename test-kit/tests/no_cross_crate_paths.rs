//! Tests share helpers through this crate, not by including another crate's test files with
//! `#[path = "../../…"]` (which compiles them twice, outside their crate's lints and
//! dependencies, and breaks silently when that crate moves a file).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name();
        if path.is_dir() {
            // Build output and VCS data hold no sources of ours.
            if name != "target" && name != ".git" {
                rust_files(&path, out);
            }
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn no_source_includes_a_file_of_another_crate_by_path() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut files = Vec::new();
    for krate in std::fs::read_dir(&root).unwrap().flatten() {
        if krate.path().join("Cargo.toml").is_file() {
            rust_files(&krate.path(), &mut files);
        }
    }
    assert!(files.len() > 50, "found only {} sources", files.len());
    let offenders: Vec<String> = files
        .iter()
        .filter_map(|f| {
            let text = std::fs::read_to_string(f).ok()?;
            text.lines()
                .any(|l| {
                    let l = l.trim_start();
                    l.starts_with("#[path") && l.contains("../")
                })
                .then(|| f.display().to_string())
        })
        .collect();
    assert!(
        offenders.is_empty(),
        "these include files from outside their directory by #[path]; put shared helpers in \
         foldwire-test-kit instead: {offenders:?}"
    );
}
