#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! The session commands on every session, whichever way it was made, and the refs they take.

mod support;

use support::cli::{foldwire, text};

fn run_ok(args: &[&str], stdin: &[u8]) -> serde_json::Value {
    let out = foldwire(args, stdin);
    assert!(
        out.status.success(),
        "{args:?}: {}{}",
        text(&out.stderr),
        text(&out.stdout)
    );
    serde_json::from_slice(&out.stdout).unwrap_or(serde_json::Value::Null)
}

const TOOLS: &str = include_str!("../../examples/requests/anthropic-tools.json");

#[test]
fn fold_takes_refs_in_any_case_and_with_surrounding_space() {
    let dir = tempfile::tempdir().unwrap();
    let st = dir.path().to_str().unwrap();
    let run = [
        "run",
        "--wire",
        "anthropic",
        "--session",
        "case",
        "--state",
        st,
        "--head-tokens",
        "0",
    ];
    run_ok(&run, TOOLS.as_bytes());
    let folded = run_ok(
        &[
            "fold",
            "--session",
            "case",
            "--state",
            st,
            "--from",
            "M00002",
            "--to",
            " m00009 ",
            "--summary",
            "Read parts 0-3 of src/auth.",
        ],
        b"",
    );
    assert_eq!(folded["blocks_created"][0], "b1", "{folded}");
    // A block id in upper case names the same block.
    let out = foldwire(
        &[
            "restore",
            "--session",
            "case",
            "--state",
            st,
            "--block",
            "B1",
        ],
        b"",
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(!out.stdout.is_empty());
}

/// The default pipeline with one stage's params replaced or some stages left out.
fn spec_file(dir: &std::path::Path, name: &str, stages: &[serde_json::Value]) -> String {
    let path = dir.join(name);
    let spec = serde_json::json!({ "name": name, "stages": stages });
    std::fs::write(&path, serde_json::to_vec(&spec).unwrap()).unwrap();
    path.display().to_string()
}

fn misspelled_policy() -> Vec<serde_json::Value> {
    foldwire_core::pipeline::DEFAULT_ORDER
        .iter()
        .map(|s| {
            if *s == "fold" {
                serde_json::json!({"name": "fold", "params": {"policy": "fold.oldets_first"}})
            } else {
                serde_json::json!(s)
            }
        })
        .collect()
}

fn fold_without_media_stages() -> Vec<serde_json::Value> {
    foldwire_core::pipeline::DEFAULT_ORDER
        .iter()
        .filter(|s| !matches!(**s, "media.classify" | "archive.spill"))
        .map(|s| serde_json::json!(s))
        .collect()
}

#[test]
fn pipeline_check_refuses_a_misspelled_strategy_and_fold_without_media_safety() {
    let dir = tempfile::tempdir().unwrap();
    let typo = spec_file(dir.path(), "typo", &misspelled_policy());
    let out = foldwire(&["pipeline", "check", &typo], b"");
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stdout));
    let err = text(&out.stderr);
    assert!(
        err.contains("\"fold.oldets_first\"")
            && err.contains("did you mean \"fold.oldest_first\"?")
            && err.contains("fold"),
        "{err}"
    );

    let unsafe_fold = spec_file(dir.path(), "nomedia", &fold_without_media_stages());
    let out = foldwire(&["pipeline", "check", &unsafe_fold], b"");
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stdout));
    let err = text(&out.stderr);
    assert!(
        err.contains("fold requires media_classified: add media.classify before fold"),
        "{err}"
    );

    // The default order still validates.
    let out = foldwire(&["pipeline", "check", "default"], b"");
    assert!(out.status.success(), "{}", text(&out.stderr));
}

#[test]
fn run_refuses_a_misspelled_layout_as_a_bad_argument() {
    let dir = tempfile::tempdir().unwrap();
    let out = foldwire(
        &[
            "run",
            "--wire",
            "anthropic",
            "--session",
            "lay",
            "--state",
            dir.path().to_str().unwrap(),
            "--layout",
            "layout.head_frist",
        ],
        TOOLS.as_bytes(),
    );
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let err = text(&out.stderr);
    assert!(
        err.contains("--layout") && err.contains("did you mean \"layout.head_first\"?"),
        "{err}"
    );
}
