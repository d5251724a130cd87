#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Sandboxed plugins on a running server (issue 15, item 2): added by a file in
//! `<state>/plugins/` or by `POST /admin/plugins`, listed by `GET /admin/plugins` and
//! `foldwire plugins`, named by the next pipeline swap, replaced and removed while turns are
//! in flight — no turn fails, is lost, or mixes two revisions of a plugin.

mod support;

use std::net::SocketAddr;

use foldwire_core::Wire;
use serde_json::{Value, json};
use support::cli::{foldwire, text};
use support::*;

const WINDOW: u64 = 12_000;

fn tagged(tag: &str) -> String {
    format!(
        r#"fn summarize(request) {{ #{{ summary: "plugin {tag}: " + request.units.len() + " units", topic: "{tag}" }} }}"#
    )
}

async fn admin_call(
    method: reqwest::Method,
    proxy: SocketAddr,
    path: &str,
    body: Option<String>,
) -> (u16, Value) {
    let mut request = reqwest::Client::new().request(method, format!("http://{proxy}{path}"));
    if let Some(body) = body {
        request = request.body(body);
    }
    let resp = request.send().await.unwrap();
    let status = resp.status().as_u16();
    (status, resp.json().await.unwrap_or(Value::Null))
}

fn spec_with(summarizer: &str) -> String {
    json!({
        "name": format!("with-{summarizer}"),
        "stages": ["wire.decode", "media.classify", "archive.spill", "refs.mint", "ranges.build",
            {"name": "fold", "params": {"summarizer": summarizer}},
            "pairing.repair", "layout.head_window", "wire.encode"],
    })
    .to_string()
}

async fn turn(proxy: SocketAddr, session: &str, turns: usize) {
    let (status, body) = post(
        proxy,
        Wire::Anthropic,
        false,
        session,
        "plain",
        &history_body(Wire::Anthropic, turns, 1200, false),
    )
    .await;
    assert_eq!(status, 200, "{session}: {}", String::from_utf8_lossy(&body));
}

/// The blocks each turn of a session created, in turn order (block ids are handed out in
/// order, and each report counts the blocks its turn made).
fn blocks_per_turn(view: &Value) -> Vec<Vec<Value>> {
    let mut blocks: Vec<Value> = view["state"]["blocks"].as_array().unwrap().clone();
    blocks.sort_by_key(|b| b["id"].as_str().unwrap()[1..].parse::<u64>().unwrap());
    let mut blocks = blocks.into_iter();
    view["reports"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            let n = r["counters"]["fold.blocks_created"].as_u64().unwrap_or(0);
            blocks.by_ref().take(n as usize).collect()
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plugins_are_hot_added_used_replaced_and_removed_while_turns_run() {
    let (upstream, mock) = start_mock().await;
    let dir = tempfile::tempdir().unwrap();
    let proxy = start_proxy_with(upstream, dir.path(), |c| c.window = WINDOW).await;

    // Added by the admin API, named by the next pipeline swap, used by the next turn.
    let add = |tag: &str| json!({"name": "summarizer.tagged", "source": tagged(tag)}).to_string();
    let (status, added) = admin_call(
        reqwest::Method::POST,
        proxy,
        "/admin/plugins",
        Some(add("v1")),
    )
    .await;
    assert_eq!(status, 200, "{added}");
    assert_eq!(added["added"]["revision"], 1);
    let (status, swapped) = admin_call(
        reqwest::Method::PUT,
        proxy,
        "/admin/pipeline",
        Some(spec_with("summarizer.tagged")),
    )
    .await;
    assert_eq!(status, 200, "{swapped}");
    turn(proxy, "plug-first", 20).await;
    let view = admin(proxy, "plug-first").await;
    assert!(
        view["state"]["blocks"]
            .as_array()
            .unwrap()
            .iter()
            .any(|b| b["summary"].as_str().unwrap().starts_with("plugin v1:")),
        "{view}"
    );
    let forwarded = String::from_utf8_lossy(&mock.bodies()[0]).into_owned();
    assert!(
        forwarded.contains("plugin v1: "),
        "the plugin's summary is on the wire"
    );

    // Turns on several sessions while the plugin is replaced and then removed.
    let sessions: Vec<String> = (0..4).map(|i| format!("plug-{i}")).collect();
    let mut running = Vec::new();
    for session in sessions.clone() {
        running.push(tokio::spawn(async move {
            for turns in 16..=21 {
                turn(proxy, &session, turns).await;
            }
        }));
    }
    let (status, replaced) = admin_call(
        reqwest::Method::POST,
        proxy,
        "/admin/plugins",
        Some(add("v2")),
    )
    .await;
    assert_eq!(
        (status, replaced["added"]["revision"].as_u64()),
        (200, Some(2))
    );
    tokio::task::yield_now().await;
    let (status, removed) = admin_call(
        reqwest::Method::DELETE,
        proxy,
        "/admin/plugins/summarizer.tagged",
        None,
    )
    .await;
    assert_eq!(status, 200, "{removed}");
    for r in running {
        r.await.unwrap();
    }
    for session in &sessions {
        let view = admin(proxy, session).await;
        assert_eq!(
            view["reports"].as_array().unwrap().len(),
            6,
            "{session}: a turn is missing"
        );
        for blocks in blocks_per_turn(&view) {
            let authors: std::collections::BTreeSet<String> = blocks
                .iter()
                .map(|b| {
                    // `plugin v1` / `plugin v2`, or the fallback's name.
                    let s = b["summary"].as_str().unwrap();
                    match s.strip_prefix("plugin ") {
                        Some(rest) => rest.split(':').next().unwrap().to_owned(),
                        None => b["author"].as_str().unwrap().to_owned(),
                    }
                })
                .collect();
            assert!(authors.len() <= 1, "{session}: one turn mixed {authors:?}");
        }
    }

    // Removed: the pipeline that still names it falls back and says so; nothing fails.
    turn(proxy, "plug-after", 20).await;
    let view = admin(proxy, "plug-after").await;
    let reports = view["reports"].to_string();
    assert!(
        reports.contains("strategy_fallback") && reports.contains("removed"),
        "{reports}"
    );
    assert!(
        view["state"]["blocks"][0]["summary"]
            .as_str()
            .unwrap()
            .starts_with("(extractive summary")
    );
    // ...and a swap naming it is refused, saying why; the running pipeline stays.
    let (status, refused) = admin_call(
        reqwest::Method::PUT,
        proxy,
        "/admin/pipeline",
        Some(spec_with("summarizer.tagged")),
    )
    .await;
    assert_eq!(status, 400, "{refused}");
    let why = refused["error"].as_str().unwrap();
    assert!(
        why.contains("\"summarizer.tagged\" was removed while the host ran"),
        "{why}"
    );
    let (_, pipeline) = admin_call(reqwest::Method::GET, proxy, "/admin/pipeline", None).await;
    assert_eq!(pipeline["name"], "with-summarizer.tagged");

    // Added by a file while the server runs: the next swap can name it.
    let plugins = dir.path().join("plugins");
    std::fs::write(plugins.join("summarizer.from_file.rhai"), tagged("file")).unwrap();
    let (status, swapped) = admin_call(
        reqwest::Method::PUT,
        proxy,
        "/admin/pipeline",
        Some(spec_with("summarizer.from_file")),
    )
    .await;
    assert_eq!(status, 200, "{swapped}");
    turn(proxy, "plug-file", 20).await;
    let view = admin(proxy, "plug-file").await;
    assert!(
        view["state"]["blocks"][0]["summary"]
            .as_str()
            .unwrap()
            .starts_with("plugin file:"),
        "{view}"
    );
    let (_, listed) = admin_call(reqwest::Method::GET, proxy, "/admin/plugins", None).await;
    let names: Vec<&str> = listed["plugins"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["summarizer.from_file"], "{listed}");

    // `foldwire plugins` lists it from the same state directory.
    let out = foldwire(
        &["plugins", "--json", "--state", dir.path().to_str().unwrap()],
        b"",
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let list: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap();
    let entry = list
        .iter()
        .find(|c| c["name"] == "summarizer.from_file")
        .unwrap_or_else(|| panic!("{}", text(&out.stdout)));
    assert_eq!(
        (entry["kind"].as_str(), entry["crate"].as_str()),
        (Some("summarizer"), Some("plugin (rhai)"))
    );
    assert_eq!(
        entry["description"], "sandboxed summarizer plugin summarizer.from_file.rhai",
        "{entry}"
    );
    assert!(entry["default_params"].is_object(), "{entry}");

    // A broken file is refused with its reason and never breaks the server.
    std::fs::write(plugins.join("fold.broken.rhai"), "fn choose(").unwrap();
    let (_, listed) = admin_call(reqwest::Method::GET, proxy, "/admin/plugins", None).await;
    assert!(
        listed["problems"][0]
            .as_str()
            .unwrap()
            .contains("fold.broken"),
        "{listed}"
    );
    let (status, refused) = admin_call(
        reqwest::Method::POST,
        proxy,
        "/admin/plugins",
        Some(json!({"name": "fold.bad", "source": "fn nope(r) {}"}).to_string()),
    )
    .await;
    assert_eq!(status, 400);
    assert!(
        refused["error"]
            .as_str()
            .unwrap()
            .contains("fn choose(request)"),
        "{refused}"
    );
}

/// Writes `plugins/` under `state` with a fold policy that folds every range it is offered
/// and a summarizer tagging its summaries `tag`, and a pipeline spec naming both; the spec's
/// path.
fn state_with_plugins(state: &std::path::Path, tag: &str) -> std::path::PathBuf {
    let plugins = state.join("plugins");
    std::fs::create_dir_all(&plugins).unwrap();
    std::fs::write(
        plugins.join("fold.everything.rhai"),
        "fn choose(request) { let picked = []; for i in 0..request.ranges.len() { picked.push(i); } picked }",
    )
    .unwrap();
    std::fs::write(plugins.join("summarizer.tagged.rhai"), tagged(tag)).unwrap();
    let spec = state.join("spec.json");
    let stages = json!({
        "name": "with-plugins",
        "stages": ["wire.decode", "media.classify", "archive.spill", "refs.mint",
            // Small windows, so ranges are offered from the first turn on.
            {"name": "ranges.build", "params": {"protection": {"recent_messages": 2, "recent_tokens": 500}}},
            {"name": "fold", "params": {"policy": "fold.everything", "summarizer": "summarizer.tagged"}},
            "pairing.repair",
            {"name": "layout.head_window", "params": {"head_tokens": 300, "recent_tokens": 500}},
            "wire.encode"],
    });
    std::fs::write(&spec, stages.to_string()).unwrap();
    spec
}

#[test]
fn foldwire_run_loads_the_plugins_of_its_state() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let spec = state_with_plugins(&state, "run");
    let body = serde_json::to_vec(&history_body(Wire::Anthropic, 12, 1200, false)).unwrap();
    let run = |state: &std::path::Path| {
        foldwire(
            &[
                "run",
                "--wire",
                "anthropic",
                "--session",
                "plugged",
                "--state",
                state.to_str().unwrap(),
                "--pipeline",
                spec.to_str().unwrap(),
                "--window",
                "1000000",
            ],
            &body,
        )
    };
    let out = run(&state);
    assert!(out.status.success(), "{}", text(&out.stderr));
    // Far under the window, only the plugin's policy folds; its summarizer wrote the summary.
    let forwarded = text(&out.stdout);
    assert!(
        forwarded.contains("plugin run: "),
        "no plugin summary in {} bytes forwarded",
        forwarded.len()
    );

    // A state without those plugins cannot build the spec, and says which name is missing.
    let bare = dir.path().join("bare");
    let out = run(&bare);
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("fold.everything"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn foldwire_replay_loads_the_plugins_of_its_state() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let spec = state_with_plugins(&state, "replay");
    let recorded = dir.path().join("session.jsonl");
    let lines: Vec<String> = [6, 8, 10]
        .into_iter()
        .map(|turns| history_body(Wire::Anthropic, turns, 1200, false).to_string())
        .collect();
    std::fs::write(&recorded, lines.join("\n")).unwrap();
    let replay = |state: &std::path::Path| {
        foldwire(
            &[
                "replay",
                recorded.to_str().unwrap(),
                "--pipeline",
                spec.to_str().unwrap(),
                "--window",
                "1000000",
                "--json",
                "--state",
                state.to_str().unwrap(),
            ],
            b"",
        )
    };
    let out = replay(&state);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let rows: Value = serde_json::from_slice(&out.stdout).unwrap();
    let rows = rows.as_array().unwrap();
    assert_eq!(rows.len(), 3);
    assert!(rows.iter().all(|r| r["failed"].is_null()));
    // Far under the window, only the plugin's policy folds.
    let created: Vec<u64> = rows
        .iter()
        .map(|r| r["blocks_created"].as_u64().unwrap())
        .collect();
    assert!(created.iter().any(|&n| n > 0), "{created:?}");

    let out = replay(&dir.path().join("bare"));
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("fold.everything"),
        "{}",
        text(&out.stderr)
    );
}
