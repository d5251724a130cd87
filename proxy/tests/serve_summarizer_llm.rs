#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! `summarizer.llm` in the proxy (issue 15, item 3): when a request is over its window before
//! the model compressed anything, the proxy folds on its own and the summary is written by a
//! side request to the session's own upstream, on the session's wire, with the client's
//! credentials. The summary reaches the wire and the folded originals restore exactly. A
//! side request that fails leaves the extractive summarizer to write it, with a warning.

mod support;

use foldwire_core::Wire;
use serde_json::{Value, json};
use support::*;

const WINDOW: u64 = 12_000;

fn spec(dir: &std::path::Path, summarizer_params: Value) -> String {
    let spec = json!({
        "name": "llm-summaries",
        "stages": ["wire.decode", "media.classify", "archive.spill", "refs.mint", "ranges.build",
            {"name": "fold", "params": {"summarizer": "summarizer.llm", "summarizer_params": summarizer_params}},
            "pairing.repair", "layout.head_window", "wire.encode"],
    });
    let path = dir.join("pipeline.json");
    std::fs::write(&path, spec.to_string()).unwrap();
    path.display().to_string()
}

/// The wire's credential header, as its clients send it.
fn credential(wire: Wire) -> (&'static str, &'static str) {
    match wire {
        Wire::Anthropic => ("x-api-key", "sk-ant-test"),
        Wire::OpenAiChat | Wire::OpenAiResponses => ("authorization", "Bearer sk-test"),
        Wire::Gemini => ("x-goog-api-key", "g-test"),
    }
}

async fn send(proxy: std::net::SocketAddr, wire: Wire, session: &str, body: &Value) {
    let (name, value) = credential(wire);
    let resp = reqwest::Client::new()
        .post(format!("http://{proxy}{}", path_of(wire, false)))
        .header("x-foldwire-session", session)
        .header("x-mock-script", "plain")
        .header(name, value)
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200, "{wire} {session}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn automatic_folds_are_summarized_by_the_sessions_upstream_on_every_wire() {
    let (upstream, mock) = start_mock().await;
    let dir = tempfile::tempdir().unwrap();
    let pipeline = spec(dir.path(), Value::Null);
    let proxy = start_proxy_with(upstream, dir.path(), |c| {
        c.window = WINDOW;
        c.pipeline = pipeline;
    })
    .await;
    for wire in [
        Wire::Anthropic,
        Wire::OpenAiChat,
        Wire::OpenAiResponses,
        Wire::Gemini,
    ] {
        mock.received.lock().unwrap().clear();
        let session = format!("llm-{}", wire.as_str());
        let body = history_body(wire, 20, 1200, false);
        send(proxy, wire, &session, &body).await;

        let received = mock.received.lock().unwrap().clone();
        let side: Vec<_> = received
            .iter()
            .filter(|r| String::from_utf8_lossy(&r.body).contains(SUMMARY_SIDE_REQUEST))
            .collect();
        assert!(!side.is_empty(), "{wire}: no summary side request");
        let (name, value) = credential(wire);
        for r in &side {
            assert_eq!(wire_of_path(&r.path), wire, "{wire}: {}", r.path);
            assert!(!r.path.contains("stream"), "{wire}: {}", r.path);
            assert_eq!(r.headers.get(name).unwrap(), value, "{wire}: credentials");
            assert!(
                r.headers.get("x-foldwire-session").is_none()
                    && r.headers.get("x-mock-script").is_none(),
                "{wire}: only credentials are passed on"
            );
            let side_body: Value = serde_json::from_slice(&r.body).unwrap();
            if wire != Wire::Gemini {
                assert_eq!(side_body["model"], "m", "{wire}: the session's model");
            } else {
                assert!(r.path.contains("/models/g:generateContent"), "{}", r.path);
            }
        }
        let main = received
            .iter()
            .find(|r| !String::from_utf8_lossy(&r.body).contains(SUMMARY_SIDE_REQUEST))
            .unwrap();
        let forwarded = String::from_utf8_lossy(&main.body).into_owned();
        assert!(
            forwarded.contains(MOCK_LLM_SUMMARY),
            "{wire}: the model's summary is not on the wire"
        );

        let admin = admin(proxy, &session).await;
        let state: foldwire_core::SessionState =
            serde_json::from_value(admin["state"].clone()).unwrap();
        let block = state
            .blocks
            .iter()
            .find(|b| b.author.as_deref() == Some("summarizer.llm"))
            .unwrap_or_else(|| panic!("{wire}: no block by summarizer.llm: {admin}"));
        assert!(block.summary.contains(MOCK_LLM_SUMMARY), "{wire}");
        assert_eq!(block.topic.as_deref(), Some("side summary"), "{wire}");
        let archive = foldwire_archive::open(dir.path().to_str().unwrap())
            .unwrap()
            .media;
        let restored = foldwire_stages::kernel::restore_with_archive(
            &state,
            archive.as_ref(),
            &foldwire_core::SessionId::new(session.clone()).unwrap(),
            block.id,
            true,
        )
        .await
        .unwrap();
        assert_eq!(restored.units.len(), block.effective.len(), "{wire}");
        let sent = body.to_string();
        for unit in &restored.units {
            assert!(
                sent.contains(&unit.raw),
                "{wire}: {} is not what was sent",
                unit.r#ref
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_side_request_leaves_the_extractive_summary_and_a_warning() {
    let (upstream, mock) = start_mock().await;
    let dir = tempfile::tempdir().unwrap();
    // Nothing listens there: the side request fails at once.
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let pipeline = spec(
        dir.path(),
        json!({"base_url": format!("http://{closed}"), "model": "m", "timeout_ms": 2000}),
    );
    let proxy = start_proxy_with(upstream, dir.path(), |c| {
        c.window = WINDOW;
        c.pipeline = pipeline;
    })
    .await;
    let session = "llm-down";
    send(
        proxy,
        Wire::Anthropic,
        session,
        &history_body(Wire::Anthropic, 20, 1200, false),
    )
    .await;
    let forwarded = String::from_utf8_lossy(&mock.bodies()[0]).into_owned();
    assert!(forwarded.contains("(extractive summary of"), "{forwarded}");
    let admin = admin(proxy, session).await;
    let reports = admin["reports"].to_string();
    assert!(
        reports.contains("strategy_fallback") && reports.contains("summarizer.llm"),
        "{reports}"
    );
    let metrics = metrics(proxy).await;
    assert!(
        metrics.contains(
            "foldwire_strategy_fallbacks_total{strategy=\"summarizer.llm\",reason=\"unreachable\"}"
        ),
        "{metrics}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_count_pays_no_model_for_its_summaries() {
    // A count is a dry run of the turn: it folds as the turn would, but a summary it throws
    // away is written by the extractive summarizer, not by a paid side request.
    let (upstream, mock) = start_mock().await;
    let dir = tempfile::tempdir().unwrap();
    let pipeline = spec(
        dir.path(),
        json!({"base_url": format!("http://{upstream}"), "model": "m"}),
    );
    let proxy = start_proxy_with(upstream, dir.path(), |c| {
        c.window = WINDOW;
        c.pipeline = pipeline;
    })
    .await;
    let body = history_body(Wire::Anthropic, 20, 1200, false);
    let resp = reqwest::Client::new()
        .post(format!("http://{proxy}/v1/messages/count_tokens"))
        .header("x-foldwire-session", "llm-count")
        .header("x-api-key", "sk-ant-test")
        .body(body.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let received = mock.received.lock().unwrap().clone();
    assert_eq!(received.len(), 1, "only the count reached the provider");
    let counted = String::from_utf8_lossy(&received[0].body).into_owned();
    assert!(received[0].path.starts_with("/v1/messages/count_tokens"));
    assert!(counted.contains("(extractive summary of"), "{counted}");
    assert!(
        counted.len() < body.to_string().len(),
        "the count is of the folded request"
    );
    // The turn itself then asks the model for its summary.
    send(proxy, Wire::Anthropic, "llm-count", &body).await;
    let side = mock
        .bodies()
        .iter()
        .filter(|b| String::from_utf8_lossy(b).contains(SUMMARY_SIDE_REQUEST))
        .count();
    assert!(side > 0, "the real turn's fold asked the model");
}

const TOOLS: &str = include_str!("../../examples/requests/anthropic-tools.json");

/// Runs the binary off the async workers (the mock answers on them).
async fn cli(args: Vec<String>, stdin: &'static [u8]) -> std::process::Output {
    tokio::task::spawn_blocking(move || {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        support::cli::foldwire(&args, stdin)
    })
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn foldwire_fold_without_a_summary_asks_a_configured_model_or_falls_back() {
    use support::cli::text;
    let (upstream, mock) = start_mock().await;
    let dir = tempfile::tempdir().unwrap();
    let st = dir.path().to_str().unwrap().to_owned();
    let strings = |a: &[&str]| a.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
    let start = |session: String| {
        let st = st.clone();
        async move {
            let run = cli(
                strings(&[
                    "run",
                    "--wire",
                    "anthropic",
                    "--session",
                    &session,
                    "--state",
                    &st,
                    "--head-tokens",
                    "0",
                ]),
                TOOLS.as_bytes(),
            )
            .await;
            assert!(run.status.success(), "{}", text(&run.stderr));
        }
    };

    for (wire, path) in [
        ("anthropic", "/v1/messages"),
        ("openai-chat", "/v1/chat/completions"),
        ("openai-responses", "/v1/responses"),
        ("gemini", "/v1beta/models/m:generateContent"),
    ] {
        let session = format!("cli-{wire}");
        start(session.clone()).await;
        mock.received.lock().unwrap().clear();
        let params = json!({"base_url": format!("http://{upstream}"), "wire": wire, "model": "m", "api_key": "k"});
        let out = cli(
            strings(&[
                "fold",
                "--session",
                &session,
                "--state",
                &st,
                "--from",
                "m00002",
                "--to",
                "m00009",
                "--summarizer-params",
                &params.to_string(),
            ]),
            b"",
        )
        .await;
        assert!(
            out.status.success(),
            "{wire}: {}{}",
            text(&out.stderr),
            text(&out.stdout)
        );
        let folded: Value = serde_json::from_slice(&out.stdout).unwrap();
        let block = folded["blocks_created"][0].as_str().unwrap().to_owned();
        let received = mock.received.lock().unwrap().clone();
        assert_eq!(received.len(), 1, "{wire}");
        assert_eq!(received[0].path, path, "{wire}");
        let inspect = cli(
            strings(&["inspect", "--session", &session, "--state", &st]),
            b"",
        )
        .await;
        let view: Value = serde_json::from_slice(&inspect.stdout).unwrap();
        let made = view["blocks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|b| b["id"] == block.as_str())
            .unwrap_or_else(|| panic!("{view}"))
            .to_string();
        // The mock's `TOPIC:` line became the block's topic, its author the summarizer.
        assert!(
            made.contains("\"topic\":\"side summary\"") && made.contains("summarizer.llm"),
            "{wire}: {made}"
        );
        // The folded originals come back exactly as they were sent.
        let restored = cli(
            strings(&[
                "restore",
                "--session",
                &session,
                "--state",
                &st,
                "--block",
                &block,
            ]),
            b"",
        )
        .await;
        assert!(restored.status.success(), "{}", text(&restored.stderr));
        let lines = text(&restored.stdout);
        assert!(lines.lines().count() >= 2, "{wire}: {lines}");
        let sent: Value = serde_json::from_str(TOOLS).unwrap();
        for line in lines.lines() {
            let unit: Value = serde_json::from_str(line).unwrap();
            assert!(
                sent.to_string().contains(&unit.to_string()),
                "{wire}: {line} is not what was sent"
            );
        }
    }

    // Without an endpoint the extractive summarizer writes it, and says why on stderr.
    start("cli-plain".to_owned()).await;
    let out = cli(
        strings(&[
            "fold",
            "--session",
            "cli-plain",
            "--state",
            &st,
            "--from",
            "m00002",
            "--to",
            "m00009",
        ]),
        b"",
    )
    .await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("summarizer.llm: no_endpoint"),
        "{}",
        text(&out.stderr)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replay_summarizes_with_the_configured_model() {
    let (upstream, mock) = start_mock().await;
    let dir = tempfile::tempdir().unwrap();
    let pipeline = spec(
        dir.path(),
        json!({"base_url": format!("http://{upstream}"), "wire": "openai-responses", "model": "m"}),
    );
    let lines: Vec<String> = (18..=20)
        .map(|turns| history_body(Wire::Anthropic, turns, 1200, false).to_string())
        .collect();
    let file = dir.path().join("session.jsonl");
    std::fs::write(&file, lines.join("\n")).unwrap();
    let args: Vec<String> = [
        "replay",
        file.to_str().unwrap(),
        "--pipeline",
        &pipeline,
        "--window",
        &WINDOW.to_string(),
        "--json",
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .collect();
    let out = cli(args, b"").await;
    assert!(out.status.success(), "{}", support::cli::text(&out.stderr));
    let side = mock
        .received
        .lock()
        .unwrap()
        .iter()
        .filter(|r| r.path == "/v1/responses")
        .count();
    assert!(side > 0, "replay made no summary side request");
    // The folds of the replay are the model's summaries.
    fn blocks(v: &Value) -> u64 {
        match v {
            Value::Object(m) => m
                .iter()
                .map(|(k, v)| {
                    if k == "blocks_created" {
                        v.as_u64().unwrap_or(0)
                    } else {
                        blocks(v)
                    }
                })
                .sum(),
            Value::Array(a) => a.iter().map(blocks).sum(),
            _ => 0,
        }
    }
    let rows: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(blocks(&rows) > 0, "{rows}");
}
