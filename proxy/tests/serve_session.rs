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
