#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Retention as a user meets it: `foldwire gc [--dry-run]` on a directory, and the server
//! applying the same policy by itself. Age is made by setting files' modification times.

mod support;

use std::path::Path;
use std::time::{Duration, SystemTime};

use serde_json::{Value, json};
use support::cli::foldwire;
use support::metrics;

/// A request with an inline image, so the session has archived media.
fn image_request(text: &str) -> Vec<u8> {
    // A tiny valid PNG header plus filler: the archive stores bytes, it does not decode them.
    let png =
        b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x00\x10\x00\x00\x00\x10\x08\x06\x00\x00\x00";
    use base64::Engine as _;
    let data = base64::engine::general_purpose::STANDARD
        .encode([png.as_slice(), text.as_bytes()].concat());
    serde_json::to_vec(&json!({"model": "m", "max_tokens": 8, "messages": [
        {"role": "user", "content": [
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": data}},
            {"type": "text", "text": text}
        ]}
    ]}))
    .unwrap()
}

fn run_turn(state: &str, session: &str, body: &[u8]) {
    let out = foldwire(
        &[
            "run",
            "--wire",
            "anthropic",
            "--session",
            session,
            "--state",
            state,
        ],
        body,
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Sets every file under `dir` (recursively) to have been modified `days` ago.
fn age(dir: &Path, days: u64) {
    let then = SystemTime::now() - Duration::from_secs(days * 86_400);
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            age(&path, days);
        } else {
            std::fs::File::options()
                .write(true)
                .open(&path)
                .unwrap()
                .set_modified(then)
                .unwrap();
        }
    }
}

fn count_files(dir: &Path) -> usize {
    if !dir.exists() {
        return 0;
    }
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let p = e.unwrap().path();
            if p.is_dir() { count_files(&p) } else { 1 }
        })
        .sum()
}

#[test]
fn gc_removes_idle_sessions_and_orphans_and_keeps_what_is_referenced() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().to_str().unwrap();
    run_turn(state, "old", &image_request("an old screenshot"));
    run_turn(state, "fresh", &image_request("a fresh screenshot"));
    let sessions = dir.path().join("sessions");
    age(&sessions.join("old"), 40);
    // A payload a failed turn spilled and nothing points to, ten days old.
    let orphan = sessions.join("fresh/media").join("ab".repeat(32));
    std::fs::write(&orphan, b"spilled, never referenced").unwrap();
    age(&sessions.join("fresh/media"), 10);
    let fresh_before = count_files(&sessions.join("fresh"));
    let old_before = count_files(&sessions.join("old"));
    assert!(old_before >= 2, "the old session has state and media");

    let dry = foldwire(&["gc", "--state", state, "--dry-run", "--json"], b"");
    assert!(
        dry.status.success(),
        "{}",
        String::from_utf8_lossy(&dry.stderr)
    );
    let report: Value = serde_json::from_slice(&dry.stdout).unwrap();
    assert_eq!(report["dry_run"], true);
    assert_eq!(report["sessions_removed"], json!(["old"]));
    assert_eq!(report["orphans_removed"], 1);
    assert_eq!(
        count_files(&sessions.join("old")),
        old_before,
        "a dry run removed files"
    );
    assert!(orphan.exists());

    let out = foldwire(&["gc", "--state", state], b"");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        said.contains("removed 1 idle sessions and 1 unreferenced objects"),
        "{said}"
    );
    assert_eq!(count_files(&sessions.join("old")), 0);
    assert!(!orphan.exists());
    // Everything of the fresh session that something points to is still there and restores.
    assert_eq!(count_files(&sessions.join("fresh")), fresh_before - 1);
    let listed = foldwire(
        &[
            "restore",
            "--session",
            "fresh",
            "--state",
            state,
            "--image-ref",
            "list",
        ],
        b"",
    );
    assert!(
        listed.status.success(),
        "{}",
        String::from_utf8_lossy(&listed.stderr)
    );
    assert!(String::from_utf8_lossy(&listed.stdout).contains("image/png"));

    let none = foldwire(
        &[
            "gc",
            "--state",
            state,
            "--session-days",
            "0",
            "--media-days",
            "0",
        ],
        b"",
    );
    assert!(!none.status.success());
    assert!(String::from_utf8_lossy(&none.stderr).contains("keep everything"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_server_applies_retention_by_itself() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().to_str().unwrap().to_owned();
    let seeded = state.clone();
    tokio::task::spawn_blocking(move || run_turn(&seeded, "abandoned", &image_request("old")))
        .await
        .unwrap();
    age(&dir.path().join("sessions/abandoned"), 45);
    let (upstream, _mock) = support::start_mock().await;
    let proxy = support::start_proxy_with(upstream, dir.path(), |c| {
        c.retention_session_days = 30;
    })
    .await;
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let metrics = metrics(proxy).await;
        if metrics.contains("foldwire_retention_sessions_removed_total 1") {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "retention never ran:\n{metrics}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(count_files(&dir.path().join("sessions/abandoned")), 0);
}
