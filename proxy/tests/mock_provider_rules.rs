#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! The mock provider refuses, as the real providers do, a request whose tool calls and
//! results do not pair up, whose messages are empty, or whose calls come back without the
//! model's signed reasoning (support/provider_rules.rs); every
//! serve test that expects an answer therefore also checks what foldwire forwarded. These
//! cases pin the rules themselves, so a check that stopped refusing would fail here.

mod support;

use foldwire_core::Wire;
use serde_json::json;
use support::provider_rules::{refusal, sign};

#[test]
fn each_wire_refuses_a_dropped_result_and_a_stray_one() {
    let anthropic_ok = json!({"messages": [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": [{"type": "text", "text": "t"}, {"type": "tool_use", "id": "a", "name": "x", "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "a", "content": "r"}, {"type": "text", "text": "more"}]}
    ]});
    assert_eq!(refusal(Wire::Anthropic, "", &anthropic_ok), None);
    let mut late = anthropic_ok.clone();
    late["messages"][2]["content"] = json!([{"type": "text", "text": "more"}, {"type": "tool_result", "tool_use_id": "a", "content": "r"}]);
    assert!(refusal(Wire::Anthropic, "", &late).is_some());
    let mut stray = anthropic_ok.clone();
    stray["messages"][1]["content"] = json!([{"type": "text", "text": "t"}]);
    assert!(refusal(Wire::Anthropic, "", &stray).is_some());

    let chat_ok = json!({"messages": [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": null, "tool_calls": [{"id": "a"}, {"id": "b"}]},
        {"role": "tool", "tool_call_id": "a", "content": "r"},
        {"role": "tool", "tool_call_id": "b", "content": "r"},
        {"role": "user", "content": "more"}
    ]});
    assert_eq!(refusal(Wire::OpenAiChat, "", &chat_ok), None);
    let mut dropped = chat_ok.clone();
    dropped["messages"].as_array_mut().unwrap().remove(3);
    assert!(refusal(Wire::OpenAiChat, "", &dropped).is_some());
    let mut orphan = chat_ok.clone();
    orphan["messages"].as_array_mut().unwrap().remove(1);
    assert!(refusal(Wire::OpenAiChat, "", &orphan).is_some());

    let responses_ok = json!({"input": [
        {"role": "user", "content": "go"},
        {"type": "reasoning", "id": "rs_1", "summary": []},
        {"type": "function_call", "call_id": "a", "name": "x", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "a", "output": "r"},
        {"role": "user", "content": "more"}
    ]});
    assert_eq!(refusal(Wire::OpenAiResponses, "", &responses_ok), None);
    let mut no_output = responses_ok.clone();
    no_output["input"].as_array_mut().unwrap().remove(3);
    assert!(refusal(Wire::OpenAiResponses, "", &no_output).is_some());
    let mut no_call = responses_ok.clone();
    no_call["input"].as_array_mut().unwrap().remove(2);
    assert!(refusal(Wire::OpenAiResponses, "", &no_call).is_some());

    let gemini_ok = json!({"contents": [
        {"role": "user", "parts": [{"text": "go"}]},
        {"role": "model", "parts": [{"functionCall": {"name": "x", "args": {}}}, {"functionCall": {"name": "y", "args": {}}}]},
        {"role": "user", "parts": [{"functionResponse": {"name": "x", "response": {}}}, {"functionResponse": {"name": "y", "response": {}}}]},
        {"role": "user", "parts": [{"text": "more"}]}
    ]});
    assert_eq!(refusal(Wire::Gemini, "", &gemini_ok), None);
    let mut short = gemini_ok.clone();
    short["contents"][2]["parts"].as_array_mut().unwrap().pop();
    assert!(refusal(Wire::Gemini, "", &short).is_some());
    let mut orphan = gemini_ok.clone();
    orphan["contents"].as_array_mut().unwrap().remove(1);
    assert!(refusal(Wire::Gemini, "", &orphan).is_some());
}

#[test]
fn empty_messages_and_parts_are_refused_where_the_provider_refuses_them() {
    let anthropic = |content: serde_json::Value, last: serde_json::Value| json!({"messages": [{"role": "user", "content": "go"}, {"role": "assistant", "content": content}, last]});
    let next = json!({"role": "user", "content": "more"});
    assert_eq!(
        refusal(Wire::Anthropic, "", &anthropic(json!("ok"), next.clone())),
        None
    );
    assert!(refusal(Wire::Anthropic, "", &anthropic(json!(""), next.clone())).is_some());
    assert!(refusal(Wire::Anthropic, "", &anthropic(json!([]), next.clone())).is_some());
    let empty_text = json!([{"type": "text", "text": ""}]);
    assert!(refusal(Wire::Anthropic, "", &anthropic(empty_text, next)).is_some());
    // A prefill: the final assistant message may be empty.
    let prefill = json!({"messages": [{"role": "user", "content": "go"}, {"role": "assistant", "content": ""}]});
    assert_eq!(refusal(Wire::Anthropic, "", &prefill), None);

    let gemini = json!({"contents": [{"role": "user", "parts": [{"text": "go"}]}, {"role": "model", "parts": []}]});
    assert!(refusal(Wire::Gemini, "", &gemini).is_some());
}

#[test]
fn signed_reasoning_goes_back_where_the_provider_requires_it() {
    let with_first = |first: serde_json::Value, thinking: &str| {
        json!({"thinking": {"type": thinking, "budget_tokens": 1024}, "messages": [
            {"role": "user", "content": "go"},
            {"role": "assistant", "content": [first, {"type": "tool_use", "id": "a", "name": "x", "input": {}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "a", "content": "r"}]}
        ]})
    };
    let signed = json!({"type": "thinking", "thinking": "hm", "signature": "c2ln"});
    let text = json!({"type": "text", "text": "t"});
    assert_eq!(
        refusal(Wire::Anthropic, "", &with_first(signed, "enabled")),
        None
    );
    let refused = refusal(Wire::Anthropic, "", &with_first(text.clone(), "enabled")).unwrap();
    assert!(
        refused.contains("must start with a thinking block"),
        "{refused}"
    );
    let unsigned = json!({"type": "thinking", "thinking": "hm", "signature": ""});
    assert!(refusal(Wire::Anthropic, "", &with_first(unsigned, "adaptive")).is_some());
    assert_eq!(
        refusal(Wire::Anthropic, "", &with_first(text, "disabled")),
        None
    );
    // A thought the mock signed comes back with the text it signed, or is refused.
    let thought = |text: &str, signed: &str| json!({"type": "thinking", "thinking": text, "signature": sign(signed)});
    assert_eq!(
        refusal(
            Wire::Anthropic,
            "",
            &with_first(thought("hm", "hm"), "enabled")
        ),
        None
    );
    let changed = refusal(
        Wire::Anthropic,
        "",
        &with_first(thought("hm!", "hm"), "enabled"),
    );
    assert!(
        changed
            .as_deref()
            .is_some_and(|r| r.contains("Invalid `signature`")),
        "{changed:?}"
    );

    let gemini = |call: serde_json::Value| {
        json!({"contents": [
            {"role": "user", "parts": [{"text": "go"}]},
            {"role": "model", "parts": [{"text": "hm", "thought": true}, call]},
            {"role": "user", "parts": [{"functionResponse": {"name": "x", "response": {}}}]}
        ]})
    };
    let three = "/v1beta/models/gemini-3-pro-preview:generateContent";
    let signed = json!({"functionCall": {"name": "x", "args": {}}, "thoughtSignature": "c2ln"});
    let bare = json!({"functionCall": {"name": "x", "args": {}}});
    assert_eq!(refusal(Wire::Gemini, three, &gemini(signed)), None);
    assert!(refusal(Wire::Gemini, three, &gemini(bare.clone())).is_some());
    assert_eq!(
        refusal(
            Wire::Gemini,
            "/v1beta/models/gemini-2.5-pro:generateContent",
            &gemini(bare)
        ),
        None
    );
}

#[test]
fn anthropic_cache_markers_are_refused_past_four_or_out_of_ttl_order() {
    let marked = |ttl: &str| json!({"type": "ephemeral", "ttl": ttl});
    let body = |system: Vec<serde_json::Value>, user: Vec<serde_json::Value>| {
        let blocks = |ccs: Vec<serde_json::Value>| -> Vec<serde_json::Value> {
            ccs.into_iter()
                .map(|cc| json!({"type": "text", "text": "t", "cache_control": cc}))
                .collect()
        };
        json!({"system": blocks(system), "messages": [{"role": "user", "content": blocks(user)}]})
    };
    let four = body(
        vec![marked("1h"), marked("1h")],
        vec![marked("5m"), marked("5m")],
    );
    assert_eq!(refusal(Wire::Anthropic, "", &four), None);
    let five = body(vec![marked("1h"), marked("5m")], vec![marked("5m"); 3]);
    let refused = refusal(Wire::Anthropic, "", &five).unwrap();
    assert!(refused.contains("Found 5"), "{refused}");
    // A marker nested in a tool result counts too.
    let text = json!({"type": "text", "text": "t", "cache_control": marked("5m")});
    let nested = json!({"messages": [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "a", "name": "x", "input": {}}]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "a", "content": [text.clone(), text.clone()]},
            text.clone(), text.clone(), text
        ]}
    ]});
    let refused = refusal(Wire::Anthropic, "", &nested).unwrap();
    assert!(refused.contains("Found 5"), "{refused}");
    // The top-level automatic marker counts, last.
    let mut automatic = four.clone();
    automatic["cache_control"] = marked("5m");
    let refused = refusal(Wire::Anthropic, "", &automatic).unwrap();
    assert!(refused.contains("Found 5"), "{refused}");
    let mut automatic = body(vec![marked("5m")], vec![serde_json::Value::Null]);
    automatic["cache_control"] = marked("1h");
    let refused = refusal(Wire::Anthropic, "", &automatic).unwrap();
    assert!(refused.contains("must not come after"), "{refused}");
    let unordered = body(vec![marked("5m")], vec![marked("1h")]);
    let refused = refusal(Wire::Anthropic, "", &unordered).unwrap();
    assert!(refused.contains("must not come after"), "{refused}");
}

#[test]
fn responses_without_storage_refuses_an_item_named_only_by_its_id() {
    let with = |store: bool, reasoning: serde_json::Value| {
        json!({"store": store, "input": [
            {"role": "user", "content": "go"},
            reasoning,
            {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "t"}]}
        ]})
    };
    let by_id = json!({"type": "reasoning", "id": "rs_1", "summary": []});
    let carried =
        json!({"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "ZW5j"});
    let refused = refusal(Wire::OpenAiResponses, "", &with(false, by_id.clone())).unwrap();
    assert!(
        refused.contains("Item with id 'rs_1' not found"),
        "{refused}"
    );
    assert_eq!(refusal(Wire::OpenAiResponses, "", &with(true, by_id)), None);
    assert_eq!(
        refusal(Wire::OpenAiResponses, "", &with(false, carried)),
        None
    );
}

#[test]
fn anthropic_refuses_a_conversation_opening_with_the_assistant_or_a_cached_thought() {
    let opening = json!({"messages": [
        {"role": "assistant", "content": "earlier"},
        {"role": "user", "content": "go"}
    ]});
    let refused = refusal(Wire::Anthropic, "", &opening).unwrap();
    assert!(
        refused.contains("first message must use the \"user\" role"),
        "{refused}"
    );
    let cached = |cc: serde_json::Value| {
        json!({"messages": [
            {"role": "user", "content": "go"},
            {"role": "assistant", "content": [{"type": "thinking", "thinking": "hm", "signature": "c2ln", "cache_control": cc}, {"type": "text", "text": "t"}]},
            {"role": "user", "content": "more"}
        ]})
    };
    let refused = refusal(Wire::Anthropic, "", &cached(json!({"type": "ephemeral"}))).unwrap();
    assert!(refused.contains("thinking.cache_control"), "{refused}");
    assert_eq!(
        refusal(Wire::Anthropic, "", &cached(serde_json::Value::Null)),
        None
    );
}

#[test]
fn anthropic_refuses_a_server_tools_call_or_result_left_alone() {
    let with = |content: serde_json::Value| {
        json!({"messages": [
            {"role": "user", "content": "find it"},
            {"role": "assistant", "content": content},
            {"role": "user", "content": "thanks"}
        ]})
    };
    let call = json!({"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {"query": "x"}});
    let result =
        json!({"type": "web_search_tool_result", "tool_use_id": "srvtoolu_1", "content": []});
    let text = json!({"type": "text", "text": "Found."});
    assert_eq!(
        refusal(Wire::Anthropic, "", &with(json!([call, result, text]))),
        None
    );
    let refused = refusal(Wire::Anthropic, "", &with(json!([result, text]))).unwrap();
    assert!(
        refused.contains("no corresponding `server_tool_use`"),
        "{refused}"
    );
    let refused = refusal(Wire::Anthropic, "", &with(json!([call, text]))).unwrap();
    assert!(
        refused.contains("no corresponding result block"),
        "{refused}"
    );
    // The final assistant message may end with the call the server goes on with.
    let paused = json!({"messages": [
        {"role": "user", "content": "find it"},
        {"role": "assistant", "content": [call]}
    ]});
    assert_eq!(refusal(Wire::Anthropic, "", &paused), None);
}

/// Real requests the providers accepted pass the mock's rules: they refuse only what the
/// providers refuse.
#[test]
fn captured_provider_requests_pass_the_rules() {
    let Some(_) = foldwire_core::fixtures::dir() else {
        eprintln!("fixtures absent: captured_provider_requests_pass_the_rules not run");
        return;
    };
    let mut checked = 0;
    for wire in [
        Wire::Anthropic,
        Wire::OpenAiChat,
        Wire::OpenAiResponses,
        Wire::Gemini,
    ] {
        for path in foldwire_core::fixtures::files(wire.as_str(), "request-") {
            let body: serde_json::Value =
                serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
            // Gemini's captures are checked as requests to a Gemini 3 model, whose signature
            // rule is the strictest.
            let to = if wire == Wire::Gemini {
                "/v1beta/models/gemini-3-pro-preview:generateContent"
            } else {
                ""
            };
            assert_eq!(refusal(wire, to, &body), None, "{}", path.display());
            checked += 1;
        }
    }
    assert!(checked >= 20, "only {checked} captured requests found");
}

/// Through HTTP: the mock answers a request that breaks the rules with the provider's 400
/// and records why.
#[tokio::test]
async fn the_mock_answers_a_broken_pairing_with_the_providers_400() {
    let (addr, mock) = support::start_mock().await;
    let body = json!({"model": "m", "max_tokens": 10, "messages": [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "x", "input": {}}]},
        {"role": "user", "content": "the result went missing"}
    ]});
    let resp = reqwest::Client::new()
        .post(format!("http://{addr}/v1/messages"))
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 400);
    let error: serde_json::Value = resp.json().await.unwrap();
    assert_eq!(error["error"]["type"], "invalid_request_error");
    assert!(
        error["error"]["message"]
            .as_str()
            .unwrap()
            .contains("tool_result"),
        "{error}"
    );
    assert_eq!(mock.refused.lock().unwrap().len(), 1);
}
