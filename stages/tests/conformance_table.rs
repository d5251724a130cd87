#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Keeps `docs/conformance.md` honest: every test it names exists, every `covered` row names
//! one, every acp-kernel §26 scenario (1–133) has exactly one row, and the totals at the top
//! match the rows.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};

/// The §26 scenarios are numbered 1 to this.
const SCENARIOS: u32 = 133;
const STATUSES: [&str; 4] = ["covered", "partial", "n/a", "open"];

/// The workspace root (the parent of this crate).
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// `seed-NNN.K` or `26.N`.
fn valid_id(id: &str) -> bool {
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if let Some(rest) = id.strip_prefix("seed-") {
        return rest
            .split_once('.')
            .is_some_and(|(seed, rule)| seed.len() == 3 && digits(seed) && digits(rule));
    }
    id.strip_prefix("26.").is_some_and(digits)
}

/// Every `path.rs::name` in a cell, in order.
fn test_refs(cell: &str) -> Vec<(String, String)> {
    let path_char = |c: char| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '/' | '-');
    let name_char = |c: char| c.is_ascii_alphanumeric() || c == '_';
    let mut out = Vec::new();
    let mut from = 0;
    while let Some(at) = cell[from..].find("::").map(|i| i + from) {
        let left = &cell[..at];
        let start = left
            .char_indices()
            .rev()
            .take_while(|(_, c)| path_char(*c))
            .last()
            .map_or(at, |(i, _)| i);
        let path = &cell[start..at];
        let right = &cell[at + 2..];
        let end = right.find(|c: char| !name_char(c)).unwrap_or(right.len());
        let name = &right[..end];
        if path.ends_with(".rs") && !name.is_empty() {
            out.push((path.to_owned(), name.to_owned()));
        }
        from = at + 2;
    }
    out
}

/// Whether `source` defines `fn name` (plain, async or generic).
fn defines_fn(source: &str, name: &str) -> bool {
    let needle = format!("fn {name}");
    source.match_indices(&needle).any(|(i, _)| {
        let before_ok = source[..i]
            .chars()
            .next_back()
            .is_none_or(|c| !(c.is_ascii_alphanumeric() || c == '_'));
        let after = source[i + needle.len()..].trim_start();
        before_ok && (after.starts_with('(') || after.starts_with('<'))
    })
}

/// Every problem of the table `doc`, each naming its row; test files are read under `root`.
fn check(doc: &str, root: &Path) -> Vec<String> {
    let mut problems = Vec::new();
    let mut counts: BTreeMap<&str, u64> = STATUSES.iter().map(|s| (*s, 0)).collect();
    let mut ids = HashSet::new();
    let mut scenarios: HashMap<u32, u32> = HashMap::new();
    let mut sources: HashMap<String, Option<String>> = HashMap::new();
    let mut totals = Vec::new();
    for line in doc.lines() {
        if let Some(rest) = line.strip_prefix("**Totals:**") {
            totals.push(rest.to_owned());
            continue;
        }
        let Some(inner) = line.trim().strip_prefix('|') else {
            continue;
        };
        let cells: Vec<&str> = inner
            .strip_suffix('|')
            .unwrap_or(inner)
            .split('|')
            .map(str::trim)
            .collect();
        let id = cells[0];
        if id == "id" || id.starts_with("---") {
            continue;
        }
        if !valid_id(id) {
            problems.push(format!("row {id:?}: not a seed-NNN.K or 26.N id"));
            continue;
        }
        if cells.len() != 4 {
            problems.push(format!(
                "row {id}: {} cells, want 4 (id, rule, status, tests or reason)",
                cells.len()
            ));
            continue;
        }
        if !ids.insert(id.to_owned()) {
            problems.push(format!("row {id}: appears twice"));
        }
        if let Some(n) = id.strip_prefix("26.").and_then(|n| n.parse::<u32>().ok()) {
            *scenarios.entry(n).or_default() += 1;
        }
        let (rule, status, evidence) = (cells[1], cells[2], cells[3]);
        if rule.is_empty() {
            problems.push(format!("row {id}: no statement of the rule"));
        }
        match counts.get_mut(status) {
            Some(n) => *n += 1,
            None => problems.push(format!(
                "row {id}: status {status:?} is not one of {STATUSES:?}"
            )),
        }
        let refs = test_refs(evidence);
        if status == "covered" && refs.is_empty() {
            problems.push(format!("row {id}: covered without a test (path.rs::name)"));
        }
        if status != "covered" && evidence.is_empty() {
            problems.push(format!(
                "row {id}: {status} without a reason or what is missing"
            ));
        }
        for (path, name) in refs {
            if path.starts_with('/') || path.split('/').any(|s| s == "..") {
                problems.push(format!(
                    "row {id}: {path} must be relative to the workspace"
                ));
                continue;
            }
            let source = sources
                .entry(path.clone())
                .or_insert_with(|| std::fs::read_to_string(root.join(&path)).ok());
            match source {
                None => problems.push(format!("row {id}: {path} does not exist")),
                Some(s) if !defines_fn(s, &name) => {
                    problems.push(format!("row {id}: {path} has no fn {name}"))
                }
                Some(_) => {}
            }
        }
    }
    for n in 1..=SCENARIOS {
        match scenarios.get(&n).copied().unwrap_or(0) {
            1 => {}
            0 => problems.push(format!("row 26.{n}: missing")),
            k => problems.push(format!("row 26.{n}: {k} rows")),
        }
    }
    for n in scenarios.keys().filter(|n| !(1..=SCENARIOS).contains(*n)) {
        problems.push(format!("row 26.{n}: §26 has no scenario {n}"));
    }
    match totals.as_slice() {
        [one] => {
            for (status, n) in &counts {
                let stated = one
                    .split('·')
                    .map(str::trim)
                    .find_map(|part| part.strip_prefix(status)?.trim().parse::<u64>().ok());
                if stated != Some(*n) {
                    problems.push(format!(
                        "totals: {status} is {stated:?} at the top, the rows have {n}"
                    ));
                }
            }
        }
        _ => problems.push(format!(
            "totals: want one `**Totals:** covered N · partial N · n/a N · open N` line, found {}",
            totals.len()
        )),
    }
    problems
}

#[test]
fn the_conformance_table_names_real_tests_and_every_scenario_once() {
    let path = root().join("docs/conformance.md");
    let doc = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    let problems = check(&doc, &root());
    assert!(
        problems.is_empty(),
        "{} problem(s) in docs/conformance.md:\n{}",
        problems.len(),
        problems.join("\n")
    );
}

#[test]
fn the_check_catches_each_kind_of_mistake() {
    let mut rows: Vec<String> = (1..=SCENARIOS)
        .map(|n| format!("| 26.{n} | s | n/a | why |"))
        .collect();
    rows[0] = "| 26.1 | s | covered | `stages/tests/conformance_table.rs::valid_id` |".into();
    let table = |rows: &[String], totals: &str| {
        format!(
            "**Totals:** {totals}\n\n| id | rule | status | tests |\n|---|---|---|---|\n{}\n",
            rows.join("\n")
        )
    };
    let good = "covered 1 · partial 0 · n/a 132 · open 0";
    assert_eq!(check(&table(&rows, good), &root()), Vec::<String>::new());

    let problems = |rows: &[String], totals: &str| check(&table(rows, totals), &root()).join("\n");
    let mut bad = rows.clone();
    bad[0] = "| 26.1 | s | covered | `stages/tests/nowhere.rs::valid_id` |".into();
    assert!(problems(&bad, good).contains("row 26.1: stages/tests/nowhere.rs does not exist"));
    bad[0] = "| 26.1 | s | covered | `stages/tests/conformance_table.rs::no_such_fn` |".into();
    assert!(
        problems(&bad, good)
            .contains("row 26.1: stages/tests/conformance_table.rs has no fn no_such_fn")
    );
    bad[0] = "| 26.1 | s | covered | it works |".into();
    assert!(problems(&bad, good).contains("row 26.1: covered without a test"));
    bad = rows.clone();
    bad[1] = "| 26.1 | s | n/a | why |".into();
    let p = problems(&bad, good);
    assert!(
        p.contains("row 26.1: appears twice") && p.contains("row 26.2: missing"),
        "{p}"
    );
    bad = rows.clone();
    bad.push("| 26.134 | s | n/a | why |".into());
    assert!(
        problems(&bad, "covered 1 · partial 0 · n/a 133 · open 0")
            .contains("§26 has no scenario 134")
    );
    assert!(
        problems(&rows, "covered 2 · partial 0 · n/a 132 · open 0")
            .contains("totals: covered is Some(2)")
    );
    assert!(problems(&rows, "").contains("totals: covered is None"));
    bad = rows.clone();
    bad[2] = "| 26.3 | s | done | why |".into();
    assert!(problems(&bad, good).contains("row 26.3: status \"done\""));
    bad[2] = "| 26.3 | s | open |  |".into();
    assert!(problems(&bad, good).contains("row 26.3: open without a reason"));
    bad[2] = "| 26-3 | s | n/a | why |".into();
    assert!(problems(&bad, good).contains("row \"26-3\": not a seed"));
}
