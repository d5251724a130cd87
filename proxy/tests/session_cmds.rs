#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! The session commands on every session, whichever way it was made, and the refs they take.

use std::io::Write as _;
use std::process::{Command, Output, Stdio};

fn foldwire(args: &[&str], stdin: &[u8]) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_foldwire"))
        .args(args)
        .env_remove("FOLDWIRE_STATE")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(stdin).unwrap();
    child.wait_with_output().unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

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
