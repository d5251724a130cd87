//! What a wire is (its shapes, paths, field and event names) lives in its dialect
//! (`wire/src/dialect/`). Library and binary code elsewhere asks the dialect; it does not
//! name a `Wire` variant to decide something, so a new wire touches one folder. Tests,
//! benches and examples pick wires to exercise and are not checked; neither are a file's
//! `#[cfg(test)]` module and comments.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};

/// Sources allowed to name a variant, and why.
const ALLOWED: [(&str, &str); 6] = [
    (
        "api/src/wire.rs",
        "the enum itself, its list and its command-line / config names",
    ),
    (
        "core/src/cost.rs",
        "prices per provider; core sits below wire and cannot ask a dialect",
    ),
    (
        "proxy/src/economy.rs",
        "the wire a report without one was priced at",
    ),
    (
        "proxy/src/commands/inspect.rs",
        "the wire of an empty view of a session that never had a turn",
    ),
    (
        "plugins/src/llm.rs",
        "the wire of a configured endpoint that names none",
    ),
    (
        "test-kit/src/",
        "test support: builds conversations of a chosen wire",
    ),
];

const VARIANTS: [&str; 4] = ["Anthropic", "OpenAiChat", "OpenAiResponses", "Gemini"];

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The lines of `text` that are code outside a `#[cfg(test)]` module, with their numbers.
fn code_lines(text: &str) -> Vec<(usize, &str)> {
    let mut out = Vec::new();
    let mut lines = text.lines().enumerate().peekable();
    while let Some((n, line)) = lines.next() {
        let t = line.trim_start();
        if t.starts_with("#[cfg(test)]")
            && lines
                .peek()
                .is_some_and(|(_, next)| next.trim_start().starts_with("mod "))
        {
            // Test modules close their file.
            break;
        }
        if t.starts_with("//") {
            continue;
        }
        out.push((n + 1, line));
    }
    out
}

/// Where `line` names a variant (`Wire::Gemini`, `foldwire_core::Wire::Anthropic`, …).
fn names_a_variant(line: &str) -> Option<&'static str> {
    let mut rest = line;
    while let Some(at) = rest.find("Wire::") {
        let after = &rest[at + "Wire::".len()..];
        let ident: String = after
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        let before = rest[..at].chars().last();
        let whole = !before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_');
        if whole && let Some(v) = VARIANTS.iter().find(|v| **v == ident) {
            return Some(v);
        }
        rest = after;
    }
    None
}

/// Every library / binary source outside wire/ that names a variant, as `path:line`.
fn offenders(root: &Path) -> Vec<(String, String)> {
    let mut files = Vec::new();
    for krate in std::fs::read_dir(root).unwrap().flatten() {
        let dir = krate.path();
        if dir.join("Cargo.toml").is_file() && krate.file_name() != "wire" {
            rust_files(&dir.join("src"), &mut files);
        }
    }
    let mut found = Vec::new();
    for f in files {
        let rel = f
            .strip_prefix(root)
            .unwrap()
            .to_string_lossy()
            .replace('\\', "/");
        let text = std::fs::read_to_string(&f).unwrap();
        for (n, line) in code_lines(&text) {
            if let Some(v) = names_a_variant(line) {
                found.push((rel.clone(), format!("{rel}:{n}: Wire::{v}")));
            }
        }
    }
    found
}

#[test]
fn only_the_dialects_name_a_wire_variant() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let found = offenders(&root);
    let outside: Vec<&String> = found
        .iter()
        .filter(|(path, _)| !ALLOWED.iter().any(|(a, _)| path.starts_with(a)))
        .map(|(_, at)| at)
        .collect();
    assert!(
        outside.is_empty(),
        "these decide by naming a Wire variant; ask the wire's dialect \
         (foldwire_wire::dialect, `wire.dialect()`) instead, or add a fact to it: {outside:#?}"
    );
    // Every allowance is still needed: a stale entry would hide a new offender.
    for (allowed, why) in ALLOWED {
        assert!(
            found.iter().any(|(path, _)| path.starts_with(allowed)),
            "{allowed} ({why}) no longer names a variant: drop it from the allow-list"
        );
    }
}

#[test]
fn the_guard_sees_a_variant_in_code_and_not_in_comments_or_tests() {
    let text = "fn a(w: Wire) -> bool {\n    w == Wire::Gemini\n}\n/// Wire::Anthropic in a doc\n\
                let x = foldwire_core::Wire::OpenAiChat;\nlet y = MyWire::Gemini;\n\
                #[cfg(test)]\nmod tests {\n    const W: Wire = Wire::Anthropic;\n}\n";
    let hits: Vec<(usize, &str)> = code_lines(text)
        .into_iter()
        .filter_map(|(n, l)| names_a_variant(l).map(|v| (n, v)))
        .collect();
    assert_eq!(hits, vec![(2, "Gemini"), (5, "OpenAiChat")]);
}
