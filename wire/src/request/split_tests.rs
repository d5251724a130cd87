//! A messages array decoded in shares on several threads gives exactly what one pass gives.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use bytes::Bytes;
use foldwire_core::{Wire, fixtures};
use serde_json::Value;

use super::{decode_split_from, messages_key};

/// Splits whatever it is given (on a machine with more than one core).
const ALWAYS: usize = 0;
/// Never splits.
const NEVER: usize = usize::MAX;

/// `body` with its messages array repeated until it holds at least `bytes`, each copy's
/// items in order, and a long text of the first item's shape between copies so the shares
/// are uneven.
fn grown(wire: Wire, body: &[u8], bytes: usize) -> Option<Bytes> {
    let mut value: Value = serde_json::from_slice(body).ok()?;
    let key = messages_key(wire);
    let items = value.get(key)?.as_array()?.clone();
    if items.is_empty() {
        return None;
    }
    let size = serde_json::to_vec(&items).ok()?.len().max(1);
    let mut all = Vec::new();
    for copy in 0..bytes.div_ceil(size) {
        all.extend(items.iter().cloned());
        if copy % 3 == 0 {
            let mut long = items.first()?.clone();
            if let Some(text) = long.pointer_mut("/content").filter(|c| c.is_string()) {
                *text = Value::String(format!("copy {copy} {}", "x".repeat(3000)));
            }
            all.push(long);
        }
    }
    *value.get_mut(key)? = Value::Array(all);
    serde_json::to_vec(&value).ok().map(Bytes::from)
}

fn request_fixtures() -> Vec<(Wire, std::path::PathBuf)> {
    [
        (Wire::Anthropic, "anthropic"),
        (Wire::OpenAiChat, "openai-chat"),
        (Wire::OpenAiResponses, "openai-responses"),
        (Wire::Gemini, "gemini"),
    ]
    .into_iter()
    .flat_map(|(wire, dir)| {
        fixtures::files(dir, "request-")
            .into_iter()
            .map(move |f| (wire, f))
    })
    .collect()
}

#[test]
fn a_long_array_decoded_in_shares_is_the_one_pass_decode_on_every_wire() {
    let fixtures = request_fixtures();
    if fixtures.is_empty() {
        println!("shared fixtures not found; the split decode check over fixtures did not run");
        return;
    }
    let mut checked = 0;
    for (wire, path) in fixtures {
        let raw = std::fs::read(&path).unwrap();
        let Some(body) = grown(wire, &raw, 3 << 20) else {
            continue;
        };
        let one = decode_split_from(wire, body.clone(), NEVER)
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let shared = decode_split_from(wire, body.clone(), ALWAYS).unwrap();
        assert!(one.entries.len() > 4, "{}", path.display());
        assert_eq!(shared, one, "{}", path.display());
        // Every unit points at the entry it was cut from.
        for unit in &shared.messages {
            let entry = shared.entries[unit.entry].raw.as_ref().unwrap();
            let (start, end) = (entry.as_ptr().addr(), entry.as_ptr().addr() + entry.len());
            assert!(unit.raw.as_ptr().addr() >= start && unit.raw.as_ptr().addr() <= end);
        }
        checked += 1;
    }
    assert!(checked >= 8, "{checked} fixtures grown and checked");
}

#[test]
fn an_item_that_does_not_decode_is_named_the_same_in_shares() {
    let mut items: Vec<String> = (0..4000)
        .map(|i| {
            format!(
                r#"{{"role":"user","content":"message {i} {}"}}"#,
                "y".repeat(600)
            )
        })
        .collect();
    // Late in the array, so it falls in a later share.
    items[3500] = r#"{"role":"user","content":5}"#.to_owned();
    let body = Bytes::from(format!(
        r#"{{"model":"m","messages":[{}],"max_tokens":10}}"#,
        items.join(",")
    ));
    assert!(body.len() > 2 << 20);
    let one = decode_split_from(Wire::Anthropic, body.clone(), NEVER).unwrap_err();
    let shared = decode_split_from(Wire::Anthropic, body, ALWAYS).unwrap_err();
    assert_eq!(shared.to_string(), one.to_string());
    assert!(one.to_string().contains("messages[3500].content"), "{one}");
}
