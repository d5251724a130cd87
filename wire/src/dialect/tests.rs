use super::*;

fn call(id: &str, name: &str, arguments: &str) -> HiddenCall {
    HiddenCall {
        index: 0,
        id: id.into(),
        name: name.into(),
        arguments: arguments.into(),
        complete: true,
    }
}

/// A round of a model turn without reasoning.
fn plain_round(
    wire: Wire,
    body: &[u8],
    text: &str,
    calls: &[HiddenCall],
    results: &[CallOutput<'_>],
) -> Result<Bytes, RoundError> {
    append_round(wire, body, &RoundAnswer::default(), text, calls, results)
}

/// A body of each wire whose client bytes hold an escape a `Value` round trip would rewrite,
/// odd spacing, and a field after the conversation.
fn bodies() -> [(Wire, &'static str); 4] {
    [
        (
            Wire::Anthropic,
            r#"{"model":"m",  "messages":[ {"role":"user","content":"caf\u00e9"} ] ,"max_tokens":9}"#,
        ),
        (
            Wire::OpenAiChat,
            r#"{"model":"m","messages":[{"role":"user","content":"caf\u00e9"}],"stream":true}"#,
        ),
        (
            Wire::OpenAiResponses,
            r#"{"model":"m","input":[{"role":"user","content":"caf\u00e9"}],"store":false}"#,
        ),
        (
            Wire::Gemini,
            r#"{"contents":[{"role":"user","parts":[{"text":"caf\u00e9"}]}],"generationConfig":{}}"#,
        ),
    ]
}

#[test]
fn a_round_keeps_the_clients_bytes_and_decodes_on_every_wire() {
    let media = [ResultMedia {
        label: "m00003",
        media_type: "image/png",
        bytes: b"png",
    }];
    let results = [CallOutput {
        text: "done",
        media: media.to_vec(),
    }];
    let calls = [call("c1", "compress", r#"{"ranges":[]}"#)];
    for (wire, body) in bodies() {
        let out = plain_round(wire, body.as_bytes(), "thinking", &calls, &results).unwrap();
        let out = std::str::from_utf8(&out).unwrap();
        // Everything up to the list's closing bracket is the client's, byte for byte, and
        // so is everything after it.
        // Every wire's list is the last array of these bodies.
        let close = body.rfind(']').unwrap();
        assert!(out.starts_with(&body[..close]), "{wire}: {out}");
        assert!(out.ends_with(&body[close..]), "{wire}: {out}");
        assert!(out.contains(r"caf\u00e9"), "{wire}: {out}");
        let decoded = crate::request::decode(wire, Bytes::from(out.to_owned())).unwrap();
        assert!(
            decoded.messages.len() >= 3,
            "{wire}: {}",
            decoded.messages.len()
        );
        let v: Value = serde_json::from_str(out).unwrap();
        let list = v[dialect(wire).messages_key()].as_array().unwrap();
        assert!(list.len() >= 3, "{wire}: {out}");
        assert!(out.contains("cG5n"), "{wire}: the media travels: {out}");
    }
}

#[test]
fn a_round_on_an_empty_list_takes_no_leading_comma() {
    let calls = [call("c1", "restore", "{}")];
    let results = [CallOutput {
        text: "ok",
        media: Vec::new(),
    }];
    let out = plain_round(
        Wire::Anthropic,
        br#"{"messages":[ ]}"#,
        "",
        &calls,
        &results,
    )
    .unwrap();
    let v: Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(v["messages"][0]["content"][0]["type"], "tool_use");
    assert_eq!(v["messages"][1]["content"][0]["tool_use_id"], "c1");
    assert!(out.starts_with(br#"{"messages":[ {"#));
}

#[test]
fn a_responses_string_input_becomes_a_list_and_a_missing_one_is_added() {
    let calls = [call("c1", "compress", "{}")];
    let results = [CallOutput {
        text: "done",
        media: Vec::new(),
    }];
    let out = plain_round(
        Wire::OpenAiResponses,
        br#"{"input":"caf\u00e9","model":"m"}"#,
        "",
        &calls,
        &results,
    )
    .unwrap();
    let text = std::str::from_utf8(&out).unwrap();
    assert!(
        text.starts_with(r#"{"input":[{"role":"user","content":"caf\u00e9"},"#),
        "{text}"
    );
    let v: Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(v["input"][1]["type"], "function_call");
    assert_eq!(v["input"][2]["output"], "done");
    assert_eq!(v["model"], "m");

    let out = plain_round(
        Wire::OpenAiResponses,
        br#"{"model":"m"}"#,
        "",
        &calls,
        &results,
    )
    .unwrap();
    let v: Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(v["input"][0]["type"], "function_call");
    // The other wires have nothing to append to without their list.
    let err = plain_round(Wire::Gemini, br#"{"model":"m"}"#, "", &calls, &results).unwrap_err();
    assert_eq!(
        err,
        RoundError::NoList {
            wire: Wire::Gemini,
            key: "contents"
        }
    );
    assert!(
        append_round(
            Wire::Anthropic,
            b"[1]",
            &RoundAnswer::default(),
            "",
            &calls,
            &results
        )
        .is_err()
    );
}

#[test]
fn every_wire_routes_its_own_path_and_no_other() {
    assert_eq!(route("/v1/messages"), Some((Wire::Anthropic, None)));
    assert_eq!(
        route("/v1/chat/completions"),
        Some((Wire::OpenAiChat, None))
    );
    assert_eq!(route("/v1/responses"), Some((Wire::OpenAiResponses, None)));
    assert_eq!(
        route("/v1beta/models/gemini-2.5:streamGenerateContent"),
        Some((Wire::Gemini, Some("gemini-2.5".to_owned())))
    );
    assert_eq!(route("/v1/models"), None);
    for w in Wire::ALL {
        assert_eq!(w.dialect().wire(), w);
    }
}

#[test]
fn stripping_removes_proxy_calls_and_fixes_the_stop() {
    let is_proxy = |n: &str| matches!(n, "compress" | "search_context");
    let mut a = serde_json::json!({"content": [{"type": "text", "text": "hi"}, {"type": "tool_use", "id": "t", "name": "compress", "input": {}}], "stop_reason": "tool_use"});
    assert!(dialect(Wire::Anthropic).strip_calls(&mut a, &is_proxy));
    assert_eq!(a["content"].as_array().unwrap().len(), 1);
    assert_eq!(a["stop_reason"], "end_turn");
    let mut c = serde_json::json!({"choices": [{"message": {"role": "assistant", "tool_calls": [{"id": "1", "function": {"name": "search_context", "arguments": "{}"}}, {"id": "2", "function": {"name": "bash", "arguments": "{}"}}]}, "finish_reason": "tool_calls"}]});
    assert!(dialect(Wire::OpenAiChat).strip_calls(&mut c, &is_proxy));
    assert_eq!(
        c["choices"][0]["message"]["tool_calls"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
    assert_eq!(c["choices"][0]["finish_reason"], "tool_calls");
    let mut g = serde_json::json!({"candidates": [{"content": {"parts": [{"text": "x"}]}}]});
    assert!(!dialect(Wire::Gemini).strip_calls(&mut g, &is_proxy));
    // Responses: the reasoning item that produced a proxy call goes with it; the one that
    // produced the text stays.
    let mut r = serde_json::json!({"output": [
        {"type": "reasoning", "id": "rs_1"},
        {"type": "function_call", "call_id": "c", "name": "compress", "arguments": "{}"},
        {"type": "reasoning", "id": "rs_2"},
        {"type": "message", "role": "assistant", "content": []}
    ]});
    assert!(dialect(Wire::OpenAiResponses).strip_calls(&mut r, &is_proxy));
    let ids: Vec<&str> = r["output"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["id"].as_str().unwrap_or(i["type"].as_str().unwrap()))
        .collect();
    assert_eq!(ids, ["rs_2", "message"]);
}

/// What a round sends back of a captured stream, read event by event as the proxy reads it.
fn answer_of(wire: Wire, file: &str) -> Option<RoundAnswer> {
    let path = foldwire_core::fixtures::files(wire.as_str(), file).pop()?;
    let bytes = std::fs::read(path).ok()?;
    let events = crate::stream::parse_stream(wire, &bytes).ok()?;
    let kept: Vec<&str> = events
        .iter()
        .filter_map(|e| e.data.as_deref())
        .filter(|data| RoundAnswer::may_hold(wire, data))
        .collect();
    Some(RoundAnswer::from_payloads(wire, kept))
}

/// A Messages / Chat body with one user message.
const MESSAGES_GO: &[u8] = br#"{"messages":[{"role":"user","content":"go"}]}"#;

/// The `type` of each block or item.
fn kinds_of(items: &[Value]) -> Vec<&str> {
    items.iter().map(|i| i["type"].as_str().unwrap()).collect()
}

/// The follow-up body of a round, read back.
fn round_value(
    wire: Wire,
    body: &[u8],
    answer: &RoundAnswer,
    calls: &[HiddenCall],
    results: &[CallOutput<'_>],
) -> Value {
    let out = append_round(wire, body, answer, "", calls, results).unwrap();
    serde_json::from_slice(&out).unwrap()
}

#[test]
fn a_rounds_reasoning_from_captured_streams_goes_back_as_it_came() {
    let calls = [call("c1", "compress", "{}")];
    let results = [CallOutput {
        text: "done",
        media: Vec::new(),
    }];
    let Some(anthropic) = answer_of(Wire::Anthropic, "stream-thinking-then-tool-use") else {
        eprintln!(
            "fixtures absent: a_rounds_reasoning_from_captured_streams_goes_back_as_it_came not run"
        );
        return;
    };
    // The thinking block, its text and signature put together from the deltas, then the
    // call as it was opened.
    let kinds = kinds_of(&anthropic.items);
    assert_eq!(kinds, ["thinking", "tool_use"], "{anthropic:?}");
    let block = &anthropic.items[0];
    assert!(
        block["signature"]
            .as_str()
            .unwrap()
            .starts_with("EoQDCm0IDhgCKkCDzGs2")
    );
    assert!(!block["thinking"].as_str().unwrap().is_empty());
    let body = MESSAGES_GO;
    // When the answer's call is the round's, the answer goes back exactly as it came.
    let id = anthropic.items[1]["id"].as_str().unwrap();
    let own = [call(id, "fixed_version", "{}")];
    let v = round_value(Wire::Anthropic, body, &anthropic, &own, &results);
    assert_eq!(
        v["messages"][1]["content"],
        Value::from(anthropic.items.clone())
    );
    assert_eq!(v["messages"][2]["content"][0]["tool_use_id"], id);
    // Otherwise the thinking still leads, then the round's calls.
    let v = round_value(Wire::Anthropic, body, &anthropic, &calls, &results);
    assert_eq!(&v["messages"][1]["content"][0], block);
    assert_eq!(v["messages"][1]["content"][1]["id"], "c1");

    let gemini = answer_of(Wire::Gemini, "stream-sse-function-call-thought-signature").unwrap();
    let signature = gemini
        .items
        .iter()
        .find(|p| p.get("functionCall").is_some())
        .map(|p| p["thoughtSignature"].clone())
        .unwrap();
    assert!(signature.is_string(), "{gemini:?}");
    let v = round_value(
        Wire::Gemini,
        br#"{"contents":[{"role":"user","parts":[{"text":"go"}]}]}"#,
        &gemini,
        &calls,
        &results,
    );
    let sent = v["contents"][1]["parts"].as_array().unwrap();
    let sent_call = sent
        .iter()
        .find(|p| p.get("functionCall").is_some())
        .unwrap();
    assert_eq!(sent_call["thoughtSignature"], signature);

    let responses = answer_of(
        Wire::OpenAiResponses,
        "stream-reasoning-commentary-phase-function-call",
    )
    .unwrap();
    // The answer's items in order, each reasoning item right before what it produced.
    let kinds = kinds_of(&responses.items);
    assert!(
        kinds.contains(&"reasoning") && kinds.contains(&"function_call"),
        "{kinds:?}"
    );
    let answered: Vec<HiddenCall> = responses
        .items
        .iter()
        .filter(|i| i["type"] == "function_call")
        .map(|i| call(i["call_id"].as_str().unwrap(), "compress", "{}"))
        .collect();
    let outputs = vec![results[0].clone(); answered.len()];
    let v = round_value(
        Wire::OpenAiResponses,
        br#"{"input":[]}"#,
        &responses,
        &answered,
        &outputs,
    );
    let n = responses.items.len();
    let sent = v["input"].as_array().unwrap();
    assert_eq!(
        &sent[..n],
        responses.items.as_slice(),
        "ids and all, as it came"
    );
    assert_eq!(v["input"][n]["type"], "function_call_output");
    // Without the answer's items (or without every call among them) the round is built
    // from the text and calls, as before.
    let v = round_value(
        Wire::OpenAiResponses,
        br#"{"input":[]}"#,
        &responses,
        &calls,
        &results,
    );
    assert_eq!(v["input"][0]["type"], "function_call");

    // DeepSeek's streamed reasoning text goes back on the message with the calls.
    let chat = answer_of(Wire::OpenAiChat, "stream-deepseek-reasoning-content").unwrap();
    let thought = &chat.reasoning_text;
    assert!(
        thought.starts_with("Hmm, the user just said \"Hello\"."),
        "{thought}"
    );
    assert!(thought.ends_with("and that's okay too."), "{thought}");
    let v = round_value(Wire::OpenAiChat, MESSAGES_GO, &chat, &calls, &results);
    assert_eq!(
        v["messages"][1]["reasoning_content"],
        Value::from(thought.as_str())
    );
    // OpenRouter's `reasoning_details`, streamed in pieces, go back as one entry each.
    let openrouter = answer_of(Wire::OpenAiChat, "stream-openrouter-error-midstream").unwrap();
    assert_eq!(
        Value::from(openrouter.items.clone()),
        serde_json::json!([{"type": "reasoning.text", "text": "We need to respond to a greeting. The user", "index": 0, "format": null}])
    );
    for answer in [openrouter.clone(), openrouter.minimal()] {
        let v = round_value(Wire::OpenAiChat, MESSAGES_GO, &answer, &calls, &results);
        assert_eq!(
            v["messages"][1]["reasoning_details"],
            Value::from(openrouter.items.clone())
        );
    }
    // An answer without reasoning leaves a round as it was.
    let out = plain_round(Wire::OpenAiChat, MESSAGES_GO, "", &calls, &results).unwrap();
    let v: Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(v["messages"][1].get("reasoning_content"), None);
}

/// The events of a captured Anthropic stream, as the proxy keeps them, with a `compress`
/// call the model made after the stream's last block.
fn with_compress_call(file: &str) -> Option<(Vec<String>, u64)> {
    let path = foldwire_core::fixtures::files("anthropic", file).pop()?;
    let bytes = std::fs::read(path).ok()?;
    let events = crate::stream::parse_stream(Wire::Anthropic, &bytes).ok()?;
    let mut kept: Vec<String> = events.iter().filter_map(|e| e.data.clone()).collect();
    let next = kept
        .iter()
        .filter_map(|d| serde_json::from_str::<Value>(d).ok())
        .filter_map(|v| v["index"].as_u64())
        .max()?
        + 1;
    let call = [
        serde_json::json!({"type": "content_block_start", "index": next, "content_block": {"type": "tool_use", "id": "toolu_c", "name": "compress", "input": {}}}),
        serde_json::json!({"type": "content_block_delta", "index": next, "delta": {"type": "input_json_delta", "partial_json": "{\"ranges\":"}}),
        serde_json::json!({"type": "content_block_delta", "index": next, "delta": {"type": "input_json_delta", "partial_json": "[]}"}}),
        serde_json::json!({"type": "content_block_stop", "index": next}),
    ];
    kept.extend(call.iter().map(Value::to_string));
    kept.retain(|d| RoundAnswer::may_hold(Wire::Anthropic, d));
    Some((kept, next))
}

#[test]
fn an_anthropic_round_keeps_interleaved_thinking_and_server_tool_blocks_in_order() {
    // A captured answer that thought, wrote, ran code on Anthropic's side and wrote again;
    // here it ends with a compress call, so a round follows.
    let Some((events, call_at)) = with_compress_call("stream-server-tool-code-execution") else {
        eprintln!(
            "fixtures absent: an_anthropic_round_keeps_interleaved_thinking_and_server_tool_blocks_in_order not run"
        );
        return;
    };
    let answer = RoundAnswer::from_payloads(Wire::Anthropic, events.iter().map(String::as_str));
    let kinds = kinds_of(&answer.items);
    assert_eq!(
        kinds,
        [
            "thinking",
            "text",
            "server_tool_use",
            "bash_code_execution_tool_result",
            "text",
            "tool_use"
        ]
    );
    assert_eq!(call_at, 5);
    // The server tool's input, streamed in pieces, is whole JSON again.
    let command = answer.items[2]["input"]["command"].as_str().unwrap();
    assert!(command.contains("6544"), "{command}");
    assert_eq!(answer.items[3]["content"]["stdout"], "-428330955.97745\n");
    assert!(
        answer.items[4]["text"]
            .as_str()
            .unwrap()
            .ends_with("Final Answer: **-428,330,955.97745**")
    );
    let results = [CallOutput {
        text: "done",
        media: Vec::new(),
    }];
    let calls = [call("toolu_c", "compress", r#"{"ranges":[]}"#)];
    let v = round_value(Wire::Anthropic, MESSAGES_GO, &answer, &calls, &results);
    let sent = v["messages"][1]["content"].as_array().unwrap();
    assert_eq!(sent, &answer.items, "every block, in the order it came");
    assert_eq!(sent[5]["input"], serde_json::json!({"ranges": []}));
    assert_eq!(v["messages"][2]["content"][0]["tool_use_id"], "toolu_c");
    // Its minimal form: the thinking, then the calls.
    let v = round_value(
        Wire::Anthropic,
        MESSAGES_GO,
        &answer.minimal(),
        &calls,
        &results,
    );
    let sent = v["messages"][1]["content"].as_array().unwrap();
    assert_eq!(kinds_of(sent), ["thinking", "tool_use"]);

    // The same answer whole (a JSON body) reads the same.
    let whole = serde_json::json!({"type": "message", "role": "assistant", "content": answer.items.clone()});
    let again = RoundAnswer::from_payloads(Wire::Anthropic, [whole.to_string().as_str()]);
    assert_eq!(again.items, answer.items);
}

#[test]
fn a_gemini_rounds_parts_come_back_in_order_with_streamed_text_joined() {
    let chunk = |parts: Value| {
        serde_json::json!({"candidates": [{"content": {"role": "model", "parts": parts}}]})
            .to_string()
    };
    let chunks = [
        chunk(serde_json::json!([{"text": ""}])),
        chunk(serde_json::json!([{"text": "Weigh", "thought": true}])),
        chunk(serde_json::json!([{"text": "ing it.", "thought": true}])),
        chunk(serde_json::json!([{"text": "Let me "}])),
        chunk(serde_json::json!([{"text": "tidy.", "thoughtSignature": "c2lnMQ"}])),
        chunk(
            serde_json::json!([{"functionCall": {"name": "compress", "args": {"ranges": []}}, "thoughtSignature": "c2lnMg"}]),
        ),
        chunk(serde_json::json!([{"text": "", "thoughtSignature": "c2lnMw"}])),
    ];
    let answer = RoundAnswer::from_payloads(Wire::Gemini, chunks.iter().map(String::as_str));
    assert_eq!(
        Value::from(answer.items.clone()),
        serde_json::json!([
            {"text": "Weighing it.", "thought": true},
            {"text": "Let me tidy.", "thoughtSignature": "c2lnMQ"},
            {"functionCall": {"name": "compress", "args": {"ranges": []}}, "thoughtSignature": "c2lnMg"},
            {"text": "", "thoughtSignature": "c2lnMw"},
        ])
    );
    let results = [CallOutput {
        text: "done",
        media: Vec::new(),
    }];
    let body = br#"{"contents":[{"role":"user","parts":[{"text":"go"}]}]}"#;
    let v = round_value(
        Wire::Gemini,
        body,
        &answer,
        &[call("g1", "compress", r#"{"ranges":[]}"#)],
        &results,
    );
    assert_eq!(v["contents"][1]["parts"], Value::from(answer.items.clone()));
    // A round whose calls are not the answer's is rebuilt, each call keeping the
    // signature of the answer's call in its place.
    let v = round_value(
        Wire::Gemini,
        body,
        &answer,
        &[call("g1", "restore", "{}")],
        &results,
    );
    assert_eq!(
        v["contents"][1]["parts"][0]["functionCall"]["name"],
        "restore"
    );
    assert_eq!(v["contents"][1]["parts"][0]["thoughtSignature"], "c2lnMg");
}

#[test]
fn openrouter_reasoning_details_are_put_together_by_index_signature_last() {
    let chunk = |details: Value| {
        serde_json::json!({"choices": [{"index": 0, "delta": {"reasoning_details": details}}]})
            .to_string()
    };
    let chunks = [
        chunk(
            serde_json::json!([{"type": "reasoning.text", "text": "Weigh", "index": 0, "format": "anthropic-claude-v1"}]),
        ),
        chunk(
            serde_json::json!([{"type": "reasoning.text", "text": "ing it.", "index": 0, "format": null}]),
        ),
        chunk(serde_json::json!([{"type": "reasoning.text", "signature": "c2ln", "index": 0}])),
        chunk(serde_json::json!([{"type": "reasoning.encrypted", "data": "ZW5j", "index": 1}])),
        chunk(serde_json::json!([{"type": "reasoning.encrypted", "data": "cnlwdA", "index": 1}])),
        chunk(serde_json::json!([])),
    ];
    let answer = RoundAnswer::from_payloads(Wire::OpenAiChat, chunks.iter().map(String::as_str));
    assert_eq!(
        Value::from(answer.items),
        serde_json::json!([
            {"type": "reasoning.text", "text": "Weighing it.", "index": 0, "format": "anthropic-claude-v1", "signature": "c2ln"},
            {"type": "reasoning.encrypted", "data": "ZW5jcnlwdA", "index": 1},
        ])
    );
}
