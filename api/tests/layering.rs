//! The API's modules form layers, not circles: component (kinds, params, errors) →
//! strategy → stage → registry → config. A module that names another through `crate::` (in
//! code, not in docs) depends on it; the graph must have no cycle, so each module can be read,
//! and changed, knowing only those below it.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Modules each module of `src` names through `crate::` outside comments and test modules.
fn module_graph(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let mut graph = BTreeMap::new();
    for entry in std::fs::read_dir(src).unwrap().flatten() {
        let path = entry.path();
        let Some(module) = path.file_stem().and_then(|s| s.to_str()) else {
            continue;
        };
        if module == "lib" || path.extension().is_none_or(|e| e != "rs") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        // Unit tests may reach anywhere; they are not part of the layering.
        let code = text.split("#[cfg(test)]").next().unwrap_or_default();
        let mut uses = BTreeSet::new();
        for line in code.lines() {
            let line = line.trim_start();
            if line.starts_with("//") {
                continue;
            }
            for (at, _) in line.match_indices("crate::") {
                let rest = &line[at + "crate::".len()..];
                let name: String = rest
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                // `$crate::` in macros names the crate root's re-exports, not a module.
                let by_macro = at > 0 && line[..at].ends_with('$');
                if !name.is_empty() && name != module && !by_macro {
                    uses.insert(name);
                }
            }
        }
        graph.insert(module.to_owned(), uses);
    }
    graph
}

/// A cycle through `from`, if there is one.
fn cycle_from(graph: &BTreeMap<String, BTreeSet<String>>, from: &str) -> Option<Vec<String>> {
    fn walk(
        graph: &BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<String>,
        seen: &mut BTreeSet<String>,
        target: &str,
    ) -> bool {
        let Some(last) = path.last().cloned() else {
            return false;
        };
        for next in graph.get(&last).into_iter().flatten() {
            if next == target {
                path.push(next.clone());
                return true;
            }
            if seen.insert(next.clone()) {
                path.push(next.clone());
                if walk(graph, path, seen, target) {
                    return true;
                }
                path.pop();
            }
        }
        false
    }
    let mut path = vec![from.to_owned()];
    let mut seen = BTreeSet::new();
    walk(graph, &mut path, &mut seen, from).then_some(path)
}

#[test]
fn the_api_modules_have_no_cycles() {
    let graph = module_graph(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"));
    assert!(
        graph["registry"].contains("stage"),
        "graph not parsed: {graph:?}"
    );
    for module in graph.keys() {
        if let Some(cycle) = cycle_from(&graph, module) {
            panic!("module cycle {}", cycle.join(" -> "));
        }
    }
    // The layers the crate docs promise.
    for (lower, upper) in [
        ("component", "strategy"),
        ("strategy", "stage"),
        ("stage", "registry"),
        ("registry", "config"),
    ] {
        assert!(
            !graph[lower].contains(upper),
            "{lower} must not depend on {upper}"
        );
    }
}
