//! The plugin API must not pull in the engine: a strategy crate that depends on
//! `foldwire-api` gets no actor runtime, executor, concurrent map or config parser. Checked
//! from the manifest and the lockfile, so it runs offline and without invoking cargo.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Crates the engine uses that a plugin author must not be made to compile.
const ENGINE_ONLY: &[&str] = &[
    "actix", "actix-rt", "tokio", "dashmap", "toml", "futures", "tracing",
];

/// What the API crate may depend on directly. `foldhash` and `simdutf8` are leaf crates
/// with no dependencies of their own (the state's ref-keyed maps and its UTF-8 checks).
const ALLOWED: &[&str] = &[
    "async-trait",
    "bytes",
    "foldhash",
    "inventory",
    "serde",
    "serde_json",
    "simdutf8",
    "thiserror",
];

/// Names in the `[dependencies]` table of a manifest (not dev- or build-dependencies).
fn normal_dependencies(manifest: &str) -> BTreeSet<String> {
    let mut in_table = false;
    let mut names = BTreeSet::new();
    for line in manifest.lines() {
        let line = line.trim();
        if line.starts_with('[') {
            in_table = line == "[dependencies]";
            continue;
        }
        if !in_table || line.is_empty() || line.starts_with('#') {
            continue;
        }
        if let Some((key, _)) = line.split_once('=') {
            let key = key.trim();
            let name = key.strip_suffix(".workspace").unwrap_or(key);
            names.insert(name.trim().to_owned());
        }
    }
    names
}

/// Each locked package name with the names it depends on.
fn lock_graph(lock: &str) -> BTreeMap<String, Vec<String>> {
    let mut graph: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut current: Option<String> = None;
    let mut in_deps = false;
    for line in lock.lines() {
        let line = line.trim();
        if line == "[[package]]" {
            current = None;
            in_deps = false;
        } else if let Some(name) = line.strip_prefix("name = ") {
            let name = name.trim_matches('"').to_owned();
            graph.entry(name.clone()).or_default();
            current = Some(name);
        } else if line.starts_with("dependencies = [") {
            in_deps = true;
        } else if in_deps && line == "]" {
            in_deps = false;
        } else if in_deps && let Some(name) = &current {
            // `"name"` or `"name 1.2.3"` when several versions are locked.
            let dep = line.trim_matches(|c| c == '"' || c == ',');
            let dep = dep.split(' ').next().unwrap_or(dep).to_owned();
            graph.entry(name.clone()).or_default().push(dep);
        }
    }
    graph
}

fn read(path: &Path) -> std::io::Result<String> {
    std::fs::read_to_string(path)
}

#[test]
fn the_api_crate_depends_only_on_the_allowed_crates() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let direct = normal_dependencies(&read(&dir.join("Cargo.toml")).unwrap());
    assert!(direct.contains("serde"), "manifest not parsed: {direct:?}");
    let extra: Vec<_> = direct
        .iter()
        .filter(|d| !ALLOWED.contains(&d.as_str()))
        .collect();
    assert!(
        extra.is_empty(),
        "foldwire-api gained dependencies {extra:?}; a plugin author compiles every one of \
         them. Put engine code in foldwire-core instead."
    );
}

#[test]
fn no_engine_crate_is_reachable_from_the_api_crate() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let direct = normal_dependencies(&read(&dir.join("Cargo.toml")).unwrap());
    let graph = lock_graph(&read(&dir.join("../Cargo.lock")).unwrap());
    assert!(graph.contains_key("foldwire-core"), "lockfile not parsed");
    let mut seen = BTreeSet::new();
    let mut todo: Vec<String> = direct.into_iter().collect();
    while let Some(name) = todo.pop() {
        if seen.insert(name.clone()) {
            todo.extend(graph.get(&name).into_iter().flatten().cloned());
        }
    }
    let reached: Vec<_> = ENGINE_ONLY.iter().filter(|c| seen.contains(**c)).collect();
    assert!(
        reached.is_empty(),
        "foldwire-api reaches {reached:?} through its dependencies ({seen:?})"
    );
    // The check has teeth: the engine crate does reach them.
    let mut from_core = BTreeSet::new();
    let mut todo = vec!["foldwire-core".to_owned()];
    while let Some(name) = todo.pop() {
        if from_core.insert(name.clone()) {
            todo.extend(graph.get(&name).into_iter().flatten().cloned());
        }
    }
    for engine in ["actix", "tokio", "dashmap", "toml"] {
        assert!(
            from_core.contains(engine),
            "{engine} not found under foldwire-core"
        );
    }
}

#[test]
fn the_example_plugin_crate_needs_only_the_api_and_serde() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/fold-policy");
    let direct = normal_dependencies(&read(&dir.join("Cargo.toml")).unwrap());
    let expected: BTreeSet<String> = ["foldwire-api", "serde"]
        .into_iter()
        .map(str::to_owned)
        .collect();
    assert_eq!(direct, expected);
}
