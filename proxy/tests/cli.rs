#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! The `foldwire` binary as scripts use it: stable flags, exit codes, stdout/stderr.

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

const SMALL: &str =
    r#"{"model":"claude-sonnet-4-5","max_tokens":64,"messages":[{"role":"user","content":"hi"}]}"#;

#[test]
fn plugins_lists_every_linked_stage_and_strategy_as_json() {
    let out = foldwire(&["plugins", "--json"], b"");
    assert!(out.status.success(), "{}", text(&out.stderr));
    let list: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).unwrap();
    let names: Vec<&str> = list.iter().map(|c| c["name"].as_str().unwrap()).collect();
    for expected in ["wire.decode", "wire.encode"] {
        assert!(
            names.contains(&expected),
            "{expected} missing from {names:?}"
        );
    }
    let decode = list.iter().find(|c| c["name"] == "wire.decode").unwrap();
    assert_eq!(decode["kind"], "stage");
    assert_eq!(decode["crate"], "foldwire-stages");

    let table = foldwire(&["plugins"], b"");
    assert!(
        text(&table.stdout)
            .lines()
            .next()
            .unwrap()
            .starts_with("KIND")
    );
}

#[test]
fn run_passthrough_returns_the_body_unchanged_and_persists_the_session() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().to_str().unwrap();
    let report = dir.path().join("report.json");
    for turn in 1..=2 {
        let out = foldwire(
            &[
                "run",
                "--wire",
                "anthropic",
                "--session",
                "cli-1",
                "--state",
                state,
                "--pipeline",
                "passthrough",
                "--report",
                report.to_str().unwrap(),
            ],
            SMALL.as_bytes(),
        );
        assert!(out.status.success(), "{}", text(&out.stderr));
        assert_eq!(out.stdout, SMALL.as_bytes());
        let report: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&report).unwrap()).unwrap();
        assert_eq!(
            report["turn"], turn,
            "the session's state persisted between runs"
        );
        let stages: Vec<&str> = report["stages"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["stage"].as_str().unwrap())
            .collect();
        assert_eq!(stages, ["wire.decode", "wire.encode"]);
    }
}

#[test]
fn run_on_a_malformed_body_exits_non_zero_naming_the_problem() {
    let dir = tempfile::tempdir().unwrap();
    let body = br#"{"model":"m","messages":[{"role":"user","content":42}]}"#;
    let out = foldwire(
        &[
            "run",
            "--wire",
            "anthropic",
            "--session",
            "bad",
            "--state",
            dir.path().to_str().unwrap(),
            "--pipeline",
            "passthrough",
        ],
        body,
    );
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    let err = text(&out.stderr);
    assert!(err.contains("wire.decode"), "{err}");
    assert!(err.contains("messages[0].content"), "{err}");
    assert_eq!(
        out.stdout, body,
        "the body is passed through unchanged, never lost"
    );
}

#[test]
fn run_refuses_bad_arguments_clearly() {
    let out = foldwire(
        &["run", "--wire", "claude", "--session", "x"],
        SMALL.as_bytes(),
    );
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("unknown wire \"claude\""),
        "{}",
        text(&out.stderr)
    );

    let out = foldwire(
        &["run", "--wire", "gemini", "--session", "../etc"],
        SMALL.as_bytes(),
    );
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("session id"),
        "{}",
        text(&out.stderr)
    );

    let out = foldwire(
        &[
            "run",
            "--wire",
            "gemini",
            "--session",
            "x",
            "--pipeline",
            "no-such-pipeline",
        ],
        SMALL.as_bytes(),
    );
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("neither a file nor a built-in pipeline"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn pipeline_check_prints_the_ordering_or_how_to_fix_it() {
    let dir = tempfile::tempdir().unwrap();
    let good = dir.path().join("good.toml");
    std::fs::write(
        &good,
        "name = \"mine\"\nstages = [\"wire.decode\", \"wire.encode\"]\n",
    )
    .unwrap();
    let out = foldwire(&["pipeline", "check", good.to_str().unwrap()], b"");
    assert!(out.status.success(), "{}", text(&out.stderr));
    let shown = text(&out.stdout);
    assert!(shown.contains("pipeline \"mine\" is valid"), "{shown}");
    assert!(shown.contains(" 1. wire.decode"), "{shown}");
    assert!(shown.contains(" 2. wire.encode"), "{shown}");

    let bad = dir.path().join("bad.json");
    std::fs::write(
        &bad,
        r#"{"name":"bad","stages":["wire.encode","wire.decode"]}"#,
    )
    .unwrap();
    let out = foldwire(&["pipeline", "check", bad.to_str().unwrap()], b"");
    assert!(!out.status.success());
    assert!(
        text(&out.stderr)
            .contains("wire.encode requires decoded: put wire.decode before wire.encode"),
        "{}",
        text(&out.stderr)
    );

    let out = foldwire(&["pipeline", "check", "passthrough", "--json"], b"");
    assert!(out.status.success());
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["stages"][1]["requires"][0], "decoded");
}
