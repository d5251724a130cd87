#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! The `foldwire` binary as scripts use it: stable flags, exit codes, stdout/stderr.

mod support;

use support::cli::{foldwire, text};

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
    // A component with a typed config says what it does and what it is built with.
    let classify = list.iter().find(|c| c["name"] == "media.classify").unwrap();
    assert!(
        classify["description"]
            .as_str()
            .is_some_and(|d| d.contains("media payload")),
        "{classify}"
    );
    assert_eq!(classify["default_params"], serde_json::json!({}));

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

/// A request that continues a conversation the provider keeps holds only what is new:
/// `run` writes it out as it came (before, pairing repair took the tool output for an
/// orphan and dropped it), saying why, with the failed stage named once.
#[test]
fn run_leaves_a_request_on_a_stored_response_as_it_came() {
    let dir = tempfile::tempdir().unwrap();
    let body = br#"{"model":"m","previous_response_id":"resp_9","input":[{"type":"function_call_output","call_id":"call_1","output":"42 files"}]}"#;
    let out = foldwire(
        &[
            "run",
            "--wire",
            "openai-responses",
            "--session",
            "stored",
            "--state",
            dir.path().to_str().unwrap(),
        ],
        body,
    );
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert_eq!(out.stdout, body, "the body is written out as it came");
    let err = text(&out.stderr);
    assert!(
        err.contains("wire.decode: openai-responses request: previous_response_id is \"resp_9\": the request continues a conversation the provider keeps"),
        "{err}"
    );
    assert!(!err.contains("wire.decode: wire.decode"), "{err}");
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

fn run_ok(args: &[&str], stdin: &[u8]) -> Vec<u8> {
    let out = foldwire(args, stdin);
    assert!(
        out.status.success(),
        "{args:?}: {}{}",
        text(&out.stderr),
        text(&out.stdout)
    );
    out.stdout
}

fn json(bytes: &[u8]) -> serde_json::Value {
    serde_json::from_slice(bytes).unwrap()
}

const TOOLS: &str = include_str!("../../examples/requests/anthropic-tools.json");

#[test]
fn fold_inspect_search_and_restore_a_block_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let st = dir.path().to_str().unwrap();
    // No head window, so the opening exchange is foldable history.
    let run = [
        "run",
        "--wire",
        "anthropic",
        "--session",
        "k1",
        "--state",
        st,
        "--head-tokens",
        "0",
    ];
    run_ok(&run, TOOLS.as_bytes());

    let inspected = json(&run_ok(&["inspect", "--session", "k1", "--state", st], b""));
    assert_eq!(inspected["refs"].as_array().unwrap().len(), 38);
    assert_eq!(inspected["refs"][0]["ref"], "m00001");
    assert!(!inspected["ranges"].as_array().unwrap().is_empty());

    let folded = json(&run_ok(
        &[
            "fold",
            "--session",
            "k1",
            "--state",
            st,
            "--from",
            "m00002",
            "--to",
            "m00009",
            "--summary",
            "Read parts 0-3 of src/auth; every check calls verify().",
            "--topic",
            "auth reading",
        ],
        b"",
    ));
    assert_eq!(folded["blocks_created"][0], "b1");

    // The originals come back exactly as the client sent them.
    let restored = run_ok(
        &["restore", "--session", "k1", "--state", st, "--block", "b1"],
        b"",
    );
    let restored = text(&restored);
    let request: serde_json::Value = serde_json::from_str(TOOLS).unwrap();
    let first_tool_use = serde_json::to_string(&request["messages"][1]["content"][1]).unwrap();
    assert!(restored.lines().any(|l| l == first_tool_use), "{restored}");
    for line in restored.lines() {
        assert!(
            TOOLS.contains(line),
            "restored bytes not in the original: {line}"
        );
    }

    // The originals live in the archive now, not in the state's journal.
    let state_file: String = std::fs::read_dir(dir.path().join("sessions/k1/journal"))
        .unwrap()
        .map(|e| std::fs::read_to_string(e.unwrap().path()).unwrap())
        .collect();
    assert!(!state_file.is_empty(), "no journal entries");
    assert!(
        !state_file.contains("check_0_0(token"),
        "originals left in the state"
    );

    let hits = json(&run_ok(
        &["search", "--session", "k1", "--state", st, "verify"],
        b"",
    ));
    assert_eq!(hits[0]["block"], "b1");
    assert_eq!(hits[0]["span"][0], "m00002");

    // The next turn folds the block in: the summary is on the wire, the originals are not.
    let next = run_ok(&run, TOOLS.as_bytes());
    let next = text(&next);
    assert!(next.contains("[foldwire b1"), "{}", &next[..400]);
    assert!(!next.contains(&first_tool_use));

    // Refs that do not exist are per-range errors, and the command says the fold failed.
    let out = foldwire(
        &[
            "fold",
            "--session",
            "k1",
            "--state",
            st,
            "--from",
            "m09998",
            "--to",
            "m09999",
            "--summary",
            "x",
        ],
        b"",
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stdout).contains("does not exist"),
        "{}",
        text(&out.stdout)
    );
}

#[test]
fn archived_images_restore_byte_identical_by_ref() {
    let Some(fixtures) = foldwire_core::fixtures::dir() else {
        return;
    };
    let fixture = fixtures.join("anthropic/request-image-base64-png-exact-bytes.json");
    let body = std::fs::read(&fixture).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let st = dir.path().to_str().unwrap();
    run_ok(
        &[
            "run",
            "--wire",
            "anthropic",
            "--session",
            "img",
            "--state",
            st,
        ],
        &body,
    );
    let listed = json(&run_ok(
        &[
            "restore",
            "--session",
            "img",
            "--state",
            st,
            "--image-ref",
            "list",
        ],
        b"",
    ));
    let entry = &listed[0];
    assert_eq!(entry["media_type"], "image/png");
    let r = entry["ref"].as_str().unwrap();
    let out_file = dir.path().join("img.bin");
    run_ok(
        &[
            "restore",
            "--session",
            "img",
            "--state",
            st,
            "--image-ref",
            r,
            "-o",
            out_file.to_str().unwrap(),
        ],
        b"",
    );
    let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
    let data = v["messages"][0]["content"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "image")
        .unwrap()["source"]["data"]
        .as_str()
        .unwrap()
        .to_owned();
    use base64::Engine as _;
    let expected = base64::engine::general_purpose::STANDARD
        .decode(data)
        .unwrap();
    assert_eq!(std::fs::read(&out_file).unwrap(), expected);
    assert_eq!(entry["size"], expected.len());
}

#[test]
fn reset_and_replay_report_per_turn_tokens_and_rewrite() {
    let dir = tempfile::tempdir().unwrap();
    let st = dir.path().to_str().unwrap();
    run_ok(
        &[
            "run",
            "--wire",
            "anthropic",
            "--session",
            "r1",
            "--state",
            st,
        ],
        SMALL.as_bytes(),
    );
    let reset = json(&run_ok(
        &[
            "reset",
            "--session",
            "r1",
            "--state",
            st,
            "--transition",
            "New topic: billing.",
        ],
        b"",
    ));
    assert_eq!(reset["reset_generation"], 1);
    let out = foldwire(
        &[
            "reset",
            "--session",
            "nobody",
            "--state",
            st,
            "--transition",
            "x",
        ],
        b"",
    );
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("has no state"),
        "{}",
        text(&out.stderr)
    );

    // Three turns of a growing conversation: the second and third only append.
    let turn = |n: usize| {
        let mut msgs = Vec::new();
        for i in 0..n {
            msgs.push(format!(r#"{{"role":"user","content":"question {i}"}}"#));
            msgs.push(format!(r#"{{"role":"assistant","content":"answer {i}"}}"#));
        }
        msgs.push(r#"{"role":"user","content":"next"}"#.to_owned());
        format!(
            r#"{{"model":"m","max_tokens":64,"messages":[{}]}}"#,
            msgs.join(",")
        )
    };
    let file = dir.path().join("session.jsonl");
    std::fs::write(&file, format!("{}\n{}\n{}\n", turn(1), turn(2), turn(3))).unwrap();
    let rows = json(&run_ok(
        &[
            "replay",
            file.to_str().unwrap(),
            "--json",
            "--wire",
            "anthropic",
        ],
        b"",
    ));
    let rows = rows.as_array().unwrap();
    assert_eq!(rows.len(), 3);
    assert_eq!(rows[0]["wire"], "anthropic");
    assert!(
        rows[1]["request_tokens"].as_u64().unwrap() > rows[0]["request_tokens"].as_u64().unwrap()
    );
    // Cost per turn: the first request is all written, the next ones read what they share
    // with the previous one; the running totals end at the session's totals.
    assert_eq!(rows[0]["cache_read"], 0);
    assert_eq!(rows[0]["cache_write"], rows[0]["request_tokens"]);
    assert_eq!(
        rows[1]["cache_read"].as_u64().unwrap() + rows[1]["cache_write"].as_u64().unwrap(),
        rows[1]["request_tokens"].as_u64().unwrap()
    );
    assert!(rows[1]["cache_read"].as_u64().unwrap() > 0);
    let cost: f64 = rows.iter().map(|r| r["cost"].as_f64().unwrap()).sum();
    assert!((rows[2]["total_cost"].as_f64().unwrap() - cost).abs() < 1e-6);
    assert!(rows[2]["baseline_compaction"].as_f64().unwrap() > 0.0);
    let table = text(&run_ok(
        &["replay", file.to_str().unwrap(), "--wire", "anthropic"],
        b"",
    ));
    assert!(table.contains("summary: 3 turns"), "{table}");
    assert!(
        table.contains("cache-read share") && table.contains("client compaction at 95%"),
        "{table}"
    );
}

/// Issue 14 item 12: the binary allocates with mimalloc, which gave back more of a load's
/// high-water mark than glibc's malloc (`--bench proxy_memory` beside `proxy_memory_system`).
/// mimalloc announces itself on stderr when asked to be verbose; the system allocator reads no
/// such variable.
#[test]
fn the_binary_allocates_with_mimalloc() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_foldwire"))
        .arg("--version")
        .env("MIMALLOC_VERBOSE", "1")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("mimalloc: process init"),
        "mimalloc did not start: {}",
        text(&out.stderr)
    );
}
