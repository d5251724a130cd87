//! Where tests find the shared captured provider traffic.
//!
//! The fixtures are not part of the repository: tests read them from `$FOLDWIRE_FIXTURES` or
//! from `../shared/fixtures` beside the workspace. Where neither exists (a clone outside the
//! workspace) [`dir`] prints that the fixture tests were not run and returns `None`.

use std::path::PathBuf;

/// The fixtures folder, if present.
pub fn dir() -> Option<PathBuf> {
    let candidate = match std::env::var_os("FOLDWIRE_FIXTURES") {
        Some(p) => PathBuf::from(p),
        None => PathBuf::from(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../shared/fixtures"
        )),
    };
    if candidate.is_dir() {
        Some(candidate)
    } else {
        eprintln!(
            "fixtures not found at {}: fixture tests were not run (set FOLDWIRE_FIXTURES)",
            candidate.display()
        );
        None
    }
}

/// The files of one wire's fixture folder (`anthropic`, `openai-chat`, …) whose names start
/// with `prefix`, sorted; empty when the fixtures are absent.
pub fn files(wire_dir: &str, prefix: &str) -> Vec<PathBuf> {
    let Some(root) = dir() else {
        return Vec::new();
    };
    let Ok(entries) = std::fs::read_dir(root.join(wire_dir)) else {
        return Vec::new();
    };
    let mut out: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with(prefix))
        })
        .collect();
    out.sort();
    out
}
