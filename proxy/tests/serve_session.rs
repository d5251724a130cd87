#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Sessions through a running `foldwire serve`: pipeline swaps that must validate, topic
//! resets, and which session a request belongs to.

mod support;

use serde_json::{Value, json};
use support::{start_mock, start_proxy_with};

/// The default order with `fold` given params, or some stages left out.
fn default_stages(fold: Value, leave_out: &[&str]) -> Vec<Value> {
    foldwire_core::pipeline::DEFAULT_ORDER
        .iter()
        .filter(|s| !leave_out.contains(s))
        .map(|s| {
            if *s == "fold" {
                json!({"name": "fold", "params": fold})
            } else {
                json!(s)
            }
        })
        .collect()
}

#[tokio::test]
async fn put_pipeline_refuses_a_misspelled_strategy_and_unsafe_fold() {
    let (upstream, _mock) = start_mock().await;
    let dir = tempfile::tempdir().unwrap();
    let proxy = start_proxy_with(upstream, dir.path(), |_| {}).await;
    let client = reqwest::Client::new();
    let put = |spec: Value| {
        client
            .put(format!("http://{proxy}/admin/pipeline"))
            .body(spec.to_string())
            .send()
    };

    let typo = json!({"name": "typo", "stages": default_stages(json!({"policy": "fold.oldets_first"}), &[])});
    let resp = put(typo).await.unwrap();
    assert_eq!(resp.status(), 400);
    let err = resp.json::<Value>().await.unwrap()["error"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        err.contains("did you mean \"fold.oldest_first\"?") && err.contains("param policy"),
        "{err}"
    );

    let summarizer = json!({"name": "s", "stages": default_stages(json!({"summarizer": "summariser.extractive"}), &[])});
    let resp = put(summarizer).await.unwrap();
    assert_eq!(resp.status(), 400);
    let err = resp.text().await.unwrap();
    assert!(err.contains("did you mean"), "{err}");

    let unsafe_fold = json!({"name": "nomedia", "stages": default_stages(Value::Null, &["media.classify", "archive.spill"])});
    let resp = put(unsafe_fold).await.unwrap();
    assert_eq!(resp.status(), 400);
    let err = resp.text().await.unwrap();
    assert!(err.contains("fold requires media_classified"), "{err}");

    // Nothing was swapped in.
    let current: Value = client
        .get(format!("http://{proxy}/admin/pipeline"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(current["name"], "default");
}

fn foldwire(args: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_foldwire"))
        .args(args)
        .env_remove("FOLDWIRE_STATE")
        .output()
        .unwrap()
}

fn cli_json(args: &[&str]) -> Value {
    let out = foldwire(args);
    assert!(
        out.status.success(),
        "{args:?}: {}{}",
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(&out.stdout)
    );
    serde_json::from_slice(&out.stdout).unwrap_or(Value::Null)
}

#[tokio::test]
async fn session_commands_work_on_a_session_made_by_serve() {
    let (upstream, _mock) = start_mock().await;
    let dir = tempfile::tempdir().unwrap();
    let st = dir.path().to_str().unwrap().to_owned();
    let proxy = start_proxy_with(upstream, dir.path(), |_| {}).await;
    let body = support::history_body(foldwire_core::Wire::Anthropic, 20, 2000, false);
    let resp = reqwest::Client::new()
        .post(format!("http://{proxy}/v1/messages"))
        .header("x-foldwire-session", "served")
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200, "{}", resp.text().await.unwrap());

    let inspected = cli_json(&["inspect", "--session", "served", "--state", &st]);
    let refs = inspected["refs"].as_array().unwrap();
    assert_eq!(refs.len(), 41, "{inspected}");
    assert_eq!(refs[0]["role"], "user");
    assert!(
        refs[1]["preview"]
            .as_str()
            .unwrap()
            .starts_with("assistant note 0"),
        "{}",
        refs[1]
    );
    let range = &inspected["ranges"][0];
    let (from, to) = (
        range["start"].as_str().unwrap(),
        range["end"].as_str().unwrap(),
    );

    let folded = cli_json(&[
        "fold",
        "--session",
        "served",
        "--state",
        &st,
        "--from",
        from,
        "--to",
        to,
        "--summary",
        "Old lorem notes about the quokka setup.",
        "--topic",
        "quokka",
    ]);
    assert_eq!(folded["blocks_created"][0], "b1", "{folded}");

    let hits = cli_json(&["search", "--session", "served", "--state", &st, "quokka"]);
    assert_eq!(hits[0]["block"], "b1", "{hits}");

    let out = foldwire(&[
        "restore",
        "--session",
        "served",
        "--state",
        &st,
        "--block",
        "b1",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let restored = String::from_utf8(out.stdout).unwrap();
    let sent = body.to_string();
    assert!(!restored.is_empty());
    for line in restored.lines() {
        assert!(sent.contains(line), "restored bytes not sent: {line}");
    }
}
