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
    append_round(wire, body, &TurnReasoning::default(), text, calls, results)
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
            &TurnReasoning::default(),
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
}

/// The reasoning a captured stream carries, read event by event as the proxy reads it.
fn reasoning_of(wire: Wire, file: &str) -> Option<TurnReasoning> {
    let path = foldwire_core::fixtures::files(wire.as_str(), file).pop()?;
    let bytes = std::fs::read(path).ok()?;
    let events = crate::stream::parse_stream(wire, &bytes).ok()?;
    let kept: Vec<&str> = events
        .iter()
        .filter_map(|e| e.data.as_deref())
        .filter(|data| TurnReasoning::may_hold(wire, data))
        .collect();
    Some(TurnReasoning::from_payloads(wire, kept))
}

/// The follow-up body of a round, read back.
fn round_value(
    wire: Wire,
    body: &[u8],
    reasoning: &TurnReasoning,
    calls: &[HiddenCall],
    results: &[CallOutput<'_>],
) -> Value {
    let out = append_round(wire, body, reasoning, "", calls, results).unwrap();
    serde_json::from_slice(&out).unwrap()
}

#[test]
fn a_rounds_reasoning_from_captured_streams_goes_back_as_it_came() {
    let calls = [call("c1", "compress", "{}")];
    let results = [CallOutput {
        text: "done",
        media: Vec::new(),
    }];
    let Some(anthropic) = reasoning_of(Wire::Anthropic, "stream-thinking-then-tool-use") else {
        eprintln!(
            "fixtures absent: a_rounds_reasoning_from_captured_streams_goes_back_as_it_came not run"
        );
        return;
    };
    // One thinking block, its text and signature put together from the deltas.
    assert_eq!(anthropic.items.len(), 1, "{anthropic:?}");
    let block = &anthropic.items[0];
    assert_eq!(block["type"], "thinking");
    assert!(
        block["signature"]
            .as_str()
            .unwrap()
            .starts_with("EoQDCm0IDhgCKkCDzGs2")
    );
    assert!(!block["thinking"].as_str().unwrap().is_empty());
    let v = round_value(
        Wire::Anthropic,
        br#"{"messages":[{"role":"user","content":"go"}]}"#,
        &anthropic,
        &calls,
        &results,
    );
    assert_eq!(&v["messages"][1]["content"][0], block);
    assert_eq!(v["messages"][1]["content"][1]["type"], "tool_use");

    let gemini = reasoning_of(Wire::Gemini, "stream-sse-function-call-thought-signature").unwrap();
    let signature = gemini.call_signatures[0].clone().unwrap();
    let v = round_value(
        Wire::Gemini,
        br#"{"contents":[{"role":"user","parts":[{"text":"go"}]}]}"#,
        &gemini,
        &calls,
        &results,
    );
    assert_eq!(
        v["contents"][1]["parts"][0]["thoughtSignature"],
        Value::from(signature)
    );

    let responses = reasoning_of(
        Wire::OpenAiResponses,
        "stream-reasoning-commentary-phase-function-call",
    )
    .unwrap();
    // The answer's items in order, each reasoning item right before what it produced.
    let kinds: Vec<&str> = responses
        .items
        .iter()
        .map(|i| i["type"].as_str().unwrap())
        .collect();
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
    for (sent, answered) in sent[..n].iter().zip(&responses.items) {
        assert_eq!(sent["type"], answered["type"]);
        match answered["type"].as_str().unwrap() {
            "reasoning" => assert_eq!(sent, answered),
            _ => assert_eq!(sent.get("id"), None, "{sent}"),
        }
    }
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
    let chat = reasoning_of(Wire::OpenAiChat, "stream-deepseek-reasoning-content").unwrap();
    assert!(
        chat.text.starts_with("Hmm, the user just said \"Hello\"."),
        "{}",
        chat.text
    );
    assert!(chat.text.ends_with("and that's okay too."), "{}", chat.text);
    let v = round_value(
        Wire::OpenAiChat,
        br#"{"messages":[{"role":"user","content":"go"}]}"#,
        &chat,
        &calls,
        &results,
    );
    assert_eq!(
        v["messages"][1]["reasoning_content"],
        Value::from(chat.text.as_str())
    );
    // An answer without reasoning leaves a round as it was.
    let out = plain_round(
        Wire::OpenAiChat,
        br#"{"messages":[{"role":"user","content":"go"}]}"#,
        "",
        &calls,
        &results,
    )
    .unwrap();
    let v: Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(v["messages"][1].get("reasoning_content"), None);
}
