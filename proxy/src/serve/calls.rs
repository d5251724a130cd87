//! Running the model's calls to the proxy tools, and the request/response edits around them:
//! the follow-up request that carries the results back to the model, and the removal of the
//! calls from a non-streamed answer.

use std::sync::Arc;

use base64::Engine as _;
use foldwire_archive::{RestoreError, RestoredMedia, restore_media_part};
use foldwire_core::{AnyRef, BlockId, Conversation, Engine, Ref, SessionId, Wire};
use foldwire_stages::kernel::{
    CompressConfig, CompressRequest, apply_compression, restore, restore_with_archive, search,
};
use foldwire_wire::stream::HiddenCall;
use serde::Deserialize;
use serde_json::{Value, json};

use super::tools::{self, COMPRESS, LIST, NAMES, RESTORE, SEARCH};

/// Most search hits returned to the model.
const MAX_HITS: usize = 8;

#[derive(Debug, Deserialize)]
struct CompressArgs {
    ranges: Vec<RangeArg>,
}

#[derive(Debug, Deserialize)]
struct RangeArg {
    start: String,
    end: String,
    summary: String,
    #[serde(default)]
    topic: Option<String>,
}

/// What a proxy call gives back to the model: its text, and the media it restored.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CallResult {
    /// The tool result's text.
    pub text: String,
    /// Archived payloads restored by ref, attached to the result in the wire's shape.
    pub media: Vec<RestoredMedia>,
}

impl From<String> for CallResult {
    fn from(text: String) -> Self {
        CallResult {
            text,
            media: Vec::new(),
        }
    }
}

/// Runs one proxy call and returns what the model gets back as the tool result.
/// Failures are results too (the model reads them and can correct itself).
pub async fn run(
    engine: &Engine,
    session: &SessionId,
    view: Option<&Arc<Conversation>>,
    call: &HiddenCall,
) -> CallResult {
    let args: Value = match serde_json::from_str(&call.arguments) {
        Ok(v) => v,
        Err(e) => {
            return format!("error: the arguments of {} are not JSON: {e}", call.name).into();
        }
    };
    match call.name.as_str() {
        COMPRESS => compress(engine, session, view, args).await.into(),
        RESTORE => {
            let id = args.get("id").and_then(Value::as_str).unwrap_or_default();
            if id.trim().eq_ignore_ascii_case(LIST) {
                return list_media(engine, session).await.into();
            }
            // Placeholders of units with several payloads name one: `m00014 part 1`.
            let (name, part) = match id.split_once(" part ") {
                Some((name, part)) => (name, part.trim().parse::<usize>().ok()),
                None => (id, None),
            };
            match name.trim().parse::<AnyRef>() {
                Ok(AnyRef::Block(block)) => restore_block(engine, session, block).await.into(),
                Ok(AnyRef::Message(r)) => match restore_trimmed(engine, session, r).await {
                    Some(text) => text.into(),
                    None => restore_media_ref(engine, session, r, part).await,
                },
                Err(_) => format!(
                    "error: {id:?} is neither a block id (b1, b2, ...) nor a media ref (m00012, or m00012 part 1)"
                )
                .into(),
            }
        }
        SEARCH => search_blocks(engine, session, &args).await.into(),
        other => format!("error: {other} is not a foldwire tool").into(),
    }
}

async fn compress(
    engine: &Engine,
    session: &SessionId,
    view: Option<&Arc<Conversation>>,
    args: Value,
) -> String {
    let Some(view) = view.cloned() else {
        return "error: this request could not be indexed, so nothing can be compressed now"
            .to_owned();
    };
    let args: CompressArgs = match serde_json::from_value(args) {
        Ok(a) => a,
        Err(e) => {
            return format!(
                "error: compress expects {{\"ranges\":[{{\"start\",\"end\",\"summary\",\"topic\"?}}]}}: {e}"
            );
        }
    };
    let mut requests = Vec::new();
    let mut problems = Vec::new();
    for r in args.ranges {
        match (r.start.parse::<AnyRef>(), r.end.parse::<AnyRef>()) {
            (Ok(start), Ok(end)) => requests.push(CompressRequest {
                start,
                end,
                summary: r.summary,
                topic: r.topic,
                author: Some("model".to_owned()),
            }),
            _ => problems.push(format!(
                "{}..{}: refs look like m00012 or b3",
                r.start, r.end
            )),
        }
    }
    let estimator = engine.context().estimator.clone();
    let outcome = engine
        .update(
            session,
            Box::new(move |state| {
                let result = apply_compression(
                    state,
                    &view,
                    &requests,
                    &CompressConfig::default(),
                    estimator.as_ref(),
                );
                serde_json::to_value(&result).unwrap_or(Value::Null)
            }),
        )
        .await;
    let result = match outcome {
        Ok(v) => v,
        Err(e) => return format!("error: the session could not be updated: {e}"),
    };
    let mut lines = Vec::new();
    for r in result
        .get("ranges")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let span = format!(
            "{}..{}",
            r.get("start").and_then(Value::as_str).unwrap_or("?"),
            r.get("end").and_then(Value::as_str).unwrap_or("?")
        );
        match r.get("block").and_then(Value::as_str) {
            Some(b) => lines.push(format!("{span}: folded into {b}")),
            None => lines.push(format!(
                "{span}: not folded: {}",
                r.get("message")
                    .and_then(Value::as_str)
                    .map(str::to_owned)
                    .or_else(|| r.get("error").map(Value::to_string))
                    .unwrap_or_default()
            )),
        }
    }
    lines.extend(problems);
    if lines.is_empty() {
        "no ranges given".to_owned()
    } else {
        lines.join("\n")
    }
}

async fn restore_block(engine: &Engine, session: &SessionId, block: BlockId) -> String {
    let state = match engine.snapshot(session).await {
        Ok(s) => s,
        Err(e) => return format!("error: the session could not be read: {e}"),
    };
    // Originals live in the session's archive once the fold stage stored them; the state
    // holds only those not archived yet.
    let restored = match &engine.context().archive {
        Some(archive) => restore_with_archive(&state, archive.as_ref(), session, block, true).await,
        None => restore(&state, block, true),
    };
    match restored {
        Ok(restored) => restored
            .units
            .iter()
            .map(|u| format!("[{}] {}", u.r#ref, u.raw))
            .collect::<Vec<_>>()
            .join("\n"),
        Err(e) => format!("error: {e}"),
    }
}

/// The whole output of a tool result `tool.trim` trimmed, exactly as sent (`None` when
/// `r` was not trimmed: it may name archived media instead).
async fn restore_trimmed(engine: &Engine, session: &SessionId, r: Ref) -> Option<String> {
    let state = match engine.snapshot(session).await {
        Ok(s) => s,
        Err(e) => return Some(format!("error: the session could not be read: {e}")),
    };
    foldwire_stages::tool_trim::trimmed_key(&state, r)?;
    let Some(archive) = engine.context().archive.clone() else {
        return Some(format!(
            "error: this proxy has no archive, so {r} cannot be restored"
        ));
    };
    Some(
        match foldwire_stages::tool_trim::restore_trimmed(&state, archive.as_ref(), session, r)
            .await
        {
            Ok(raw) => format!("[{r}] {raw}"),
            Err(e) => format!("error: {e}"),
        },
    )
}

/// The archived media of the session, one line per payload (`m00012: image/png, 149
/// bytes`), named as placeholders and `restore` name them; payloads whose unit has no ref
/// cannot be asked for by ref and are left out.
async fn list_media(engine: &Engine, session: &SessionId) -> String {
    let state = match engine.snapshot(session).await {
        Ok(s) => s,
        Err(e) => return format!("error: the session could not be read: {e}"),
    };
    let lines: Vec<String> = foldwire_archive::list_media(&state)
        .iter()
        .filter_map(|m| {
            let r = m.r#ref?;
            let name = match m.part {
                0 => r.to_string(),
                part => format!("{r} part {part}"),
            };
            Some(format!("{name}: {}, {} bytes", m.media_type, m.size))
        })
        .collect();
    if lines.is_empty() {
        return "no archived media in this session".to_owned();
    }
    format!(
        "{} archived media item(s) in this session; restore one with its ref:\n{}",
        lines.len(),
        lines.join("\n")
    )
}

/// Archived payload `part` of the unit named by `r`, or all of them (an image or document
/// that a fold took off the wire and left a placeholder line for).
async fn restore_media_ref(
    engine: &Engine,
    session: &SessionId,
    r: Ref,
    part: Option<usize>,
) -> CallResult {
    let Some(archive) = engine.context().archive.clone() else {
        return format!("error: this proxy has no archive, so {r} cannot be restored").into();
    };
    let state = match engine.snapshot(session).await {
        Ok(s) => s,
        Err(e) => return format!("error: the session could not be read: {e}").into(),
    };
    let mut media = Vec::new();
    let mut next = part.unwrap_or(0);
    loop {
        match restore_media_part(archive.as_ref(), &state, session, r, next).await {
            Ok(m) => media.push((next, m)),
            Err(RestoreError::NoSuchPart { .. }) if !media.is_empty() => break,
            Err(e) => return format!("error: {e}").into(),
        }
        if part.is_some() {
            break;
        }
        next += 1;
    }
    let lines: Vec<String> = media
        .iter()
        .map(|(part, m)| {
            format!(
                "[{r} part {part}] {}, {} bytes, restored exactly as sent (attached)",
                m.media_type,
                m.bytes.len()
            )
        })
        .collect();
    CallResult {
        text: lines.join("\n"),
        media: media.into_iter().map(|(_, m)| m).collect(),
    }
}

async fn search_blocks(engine: &Engine, session: &SessionId, args: &Value) -> String {
    let query = args
        .get("query")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let state = match engine.snapshot(session).await {
        Ok(s) => s,
        Err(e) => return format!("error: the session could not be read: {e}"),
    };
    let hits = search(&state, query);
    if hits.is_empty() {
        return format!("no folded context matches {query:?}");
    }
    hits.iter()
        .take(MAX_HITS)
        .map(|h| {
            format!(
                "{} ({}..{}{}): {}",
                h.block,
                h.span.0,
                h.span.1,
                h.topic
                    .as_deref()
                    .map(|t| format!(", {t}"))
                    .unwrap_or_default(),
                h.snippet
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Appends the model's turn (its text and proxy calls) and the call results to a request,
/// in `wire`'s shape, so the next round continues where the model left off. Restored media
/// goes inside the tool result where the wire allows it (Anthropic, Responses), beside it in
/// the same turn on Gemini, and in a user message after the tool messages on Chat, whose
/// tool messages carry text only.
pub fn append_round(
    wire: Wire,
    body: &mut Value,
    text: &str,
    calls: &[HiddenCall],
    results: &[CallResult],
) {
    let Some(obj) = body.as_object_mut() else {
        return;
    };
    match wire {
        Wire::Anthropic => {
            let mut content = Vec::new();
            if !text.is_empty() {
                content.push(json!({"type": "text", "text": text}));
            }
            for c in calls {
                let input: Value = serde_json::from_str(&c.arguments).unwrap_or_else(|_| json!({}));
                content
                    .push(json!({"type": "tool_use", "id": c.id, "name": c.name, "input": input}));
            }
            let outputs: Vec<Value> = calls
                .iter()
                .zip(results)
                .map(|(c, r)| {
                    json!({"type": "tool_result", "tool_use_id": c.id, "content": anthropic_result(r)})
                })
                .collect();
            if let Some(messages) = obj.get_mut("messages").and_then(Value::as_array_mut) {
                messages.push(json!({"role": "assistant", "content": content}));
                messages.push(json!({"role": "user", "content": outputs}));
            }
        }
        Wire::OpenAiChat => {
            let tool_calls: Vec<Value> = calls
                .iter()
                .map(|c| {
                    json!({"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}})
                })
                .collect();
            if let Some(messages) = obj.get_mut("messages").and_then(Value::as_array_mut) {
                let content = if text.is_empty() {
                    Value::Null
                } else {
                    Value::from(text)
                };
                messages.push(
                    json!({"role": "assistant", "content": content, "tool_calls": tool_calls}),
                );
                for (c, r) in calls.iter().zip(results) {
                    messages.push(json!({"role": "tool", "tool_call_id": c.id, "content": r.text}));
                }
                let media: Vec<Value> = results
                    .iter()
                    .flat_map(|r| r.media.iter().enumerate())
                    .map(|(part, m)| chat_media_part(m, part))
                    .collect();
                if !media.is_empty() {
                    let mut parts = vec![json!({"type": "text", "text": CHAT_MEDIA_NOTE})];
                    parts.extend(media);
                    messages.push(json!({"role": "user", "content": parts}));
                }
            }
        }
        Wire::OpenAiResponses => {
            if let Some(input) = tools::responses_input(obj) {
                if !text.is_empty() {
                    input.push(json!({"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": text}]}));
                }
                for c in calls {
                    input.push(json!({"type": "function_call", "call_id": c.id, "name": c.name, "arguments": c.arguments}));
                }
                for (c, r) in calls.iter().zip(results) {
                    input.push(json!({"type": "function_call_output", "call_id": c.id, "output": responses_output(r)}));
                }
            }
        }
        Wire::Gemini => {
            let mut parts = Vec::new();
            if !text.is_empty() {
                parts.push(json!({"text": text}));
            }
            for c in calls {
                let args: Value = serde_json::from_str(&c.arguments).unwrap_or_else(|_| json!({}));
                parts.push(json!({"functionCall": {"name": c.name, "args": args}}));
            }
            let mut outputs = Vec::new();
            for (c, r) in calls.iter().zip(results) {
                outputs.push(
                    json!({"functionResponse": {"name": c.name, "response": {"result": r.text}}}),
                );
                for m in &r.media {
                    outputs.push(
                        json!({"inlineData": {"mimeType": m.media_type, "data": base64_of(m)}}),
                    );
                }
            }
            if let Some(contents) = obj.get_mut("contents").and_then(Value::as_array_mut) {
                contents.push(json!({"role": "model", "parts": parts}));
                contents.push(json!({"role": "user", "parts": outputs}));
            }
        }
    }
}

/// Leads the user message that carries restored media on Chat.
const CHAT_MEDIA_NOTE: &str = "[foldwire] The media restored by the restore call above:";

fn base64_of(m: &RestoredMedia) -> String {
    base64::engine::general_purpose::STANDARD.encode(&m.bytes)
}

fn data_url(m: &RestoredMedia) -> String {
    format!("data:{};base64,{}", m.media_type, base64_of(m))
}

/// A file name for a restored payload: its ref, part and an extension from its type.
fn file_name(m: &RestoredMedia, part: usize) -> String {
    let ext = m
        .media_type
        .split_once('/')
        .map(|(_, sub)| sub.split(['+', ';']).next().unwrap_or(sub))
        .unwrap_or("bin");
    format!("{}-{part}.{ext}", m.r#ref)
}

/// An Anthropic tool result's content: the text alone, or the text and the media as image /
/// document blocks (other types are named in the text: Anthropic has no block for them).
fn anthropic_result(r: &CallResult) -> Value {
    if r.media.is_empty() {
        return Value::from(r.text.as_str());
    }
    let mut text = r.text.clone();
    let mut blocks = Vec::new();
    for m in &r.media {
        let source = json!({"type": "base64", "media_type": m.media_type, "data": base64_of(m)});
        if m.media_type.starts_with("image/") {
            blocks.push(json!({"type": "image", "source": source}));
        } else if m.media_type == "application/pdf" {
            blocks.push(json!({"type": "document", "source": source}));
        } else if m.media_type.starts_with("text/") {
            let data = String::from_utf8_lossy(&m.bytes);
            blocks.push(json!({"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": data}}));
        } else {
            text.push_str(&format!(
                "\n{}: {} cannot travel in an Anthropic tool result; the user can restore it with `foldwire restore --image-ref {}`",
                m.r#ref, m.media_type, m.r#ref
            ));
        }
    }
    let mut content = vec![json!({"type": "text", "text": text})];
    content.extend(blocks);
    Value::Array(content)
}

/// A Chat content part for a restored payload.
fn chat_media_part(m: &RestoredMedia, part: usize) -> Value {
    match m.media_type.as_str() {
        t if t.starts_with("image/") => {
            json!({"type": "image_url", "image_url": {"url": data_url(m)}})
        }
        "audio/wav" | "audio/x-wav" => {
            json!({"type": "input_audio", "input_audio": {"data": base64_of(m), "format": "wav"}})
        }
        "audio/mpeg" | "audio/mp3" => {
            json!({"type": "input_audio", "input_audio": {"data": base64_of(m), "format": "mp3"}})
        }
        _ => {
            json!({"type": "file", "file": {"filename": file_name(m, part), "file_data": data_url(m)}})
        }
    }
}

/// A Responses function output: the text alone, or input parts with the media.
fn responses_output(r: &CallResult) -> Value {
    if r.media.is_empty() {
        return Value::from(r.text.as_str());
    }
    let mut parts = vec![json!({"type": "input_text", "text": r.text})];
    for (part, m) in r.media.iter().enumerate() {
        parts.push(if m.media_type.starts_with("image/") {
            json!({"type": "input_image", "image_url": data_url(m)})
        } else {
            json!({"type": "input_file", "filename": file_name(m, part), "file_data": data_url(m)})
        });
    }
    Value::Array(parts)
}

fn is_proxy_tool(name: Option<&str>) -> bool {
    name.is_some_and(|n| NAMES.contains(&n))
}

/// Removes the proxy's tool calls from a non-streamed answer; when no client tool call is
/// left, a tool-use stop reason becomes a normal end so the client does not wait for calls
/// it cannot see. Returns whether anything changed.
pub fn strip_json(wire: Wire, body: &mut Value) -> bool {
    let mut changed = false;
    match wire {
        Wire::Anthropic => {
            let mut left = 0;
            if let Some(content) = body.get_mut("content").and_then(Value::as_array_mut) {
                let before = content.len();
                content.retain(|b| !is_proxy_tool(b.get("name").and_then(Value::as_str)));
                changed = content.len() != before;
                left = content
                    .iter()
                    .filter(|b| b.get("type").and_then(Value::as_str) == Some("tool_use"))
                    .count();
            }
            if changed && left == 0 && body["stop_reason"] == "tool_use" {
                body["stop_reason"] = json!("end_turn");
            }
        }
        Wire::OpenAiChat => {
            for choice in body
                .get_mut("choices")
                .and_then(Value::as_array_mut)
                .into_iter()
                .flatten()
            {
                let Some(message) = choice.get_mut("message").and_then(Value::as_object_mut) else {
                    continue;
                };
                let mut emptied = false;
                if let Some(calls) = message.get_mut("tool_calls").and_then(Value::as_array_mut) {
                    let before = calls.len();
                    calls.retain(|c| {
                        !is_proxy_tool(
                            c.get("function")
                                .and_then(|f| f.get("name"))
                                .and_then(Value::as_str),
                        )
                    });
                    changed |= calls.len() != before;
                    emptied = calls.is_empty() && before > 0;
                }
                if emptied {
                    message.remove("tool_calls");
                    if choice["finish_reason"] == "tool_calls" {
                        choice["finish_reason"] = json!("stop");
                    }
                }
            }
        }
        Wire::OpenAiResponses => {
            if let Some(output) = body.get_mut("output").and_then(Value::as_array_mut) {
                let before = output.len();
                output.retain(|o| {
                    !(o.get("type").and_then(Value::as_str) == Some("function_call")
                        && is_proxy_tool(o.get("name").and_then(Value::as_str)))
                });
                changed = output.len() != before;
            }
        }
        Wire::Gemini => {
            for candidate in body
                .get_mut("candidates")
                .and_then(Value::as_array_mut)
                .into_iter()
                .flatten()
            {
                if let Some(parts) = candidate
                    .get_mut("content")
                    .and_then(|c| c.get_mut("parts"))
                    .and_then(Value::as_array_mut)
                {
                    let before = parts.len();
                    parts.retain(|p| {
                        !is_proxy_tool(
                            p.get("functionCall")
                                .and_then(|c| c.get("name"))
                                .and_then(Value::as_str),
                        )
                    });
                    changed |= parts.len() != before;
                }
            }
        }
    }
    changed
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A session with one turn through the default pipeline, and the model's view of it.
    async fn session_with_history() -> (Engine, SessionId, Arc<Conversation>, Vec<(Ref, Ref)>) {
        let registry = crate::setup::registry().unwrap();
        let pipeline = crate::setup::pipeline("default", &registry).unwrap();
        let backends = foldwire_archive::Backends::memory();
        let cx = foldwire_core::StageCx::new(registry.clone()).with_archive(backends.media);
        let engine = Engine::builder(pipeline, backends.state, registry.clone())
            .context(cx)
            .workers(1)
            .start()
            .unwrap();
        let mut messages = Vec::new();
        for i in 0..20 {
            messages.push(json!({"role": "user", "content": format!("user note {i}: {}", "lorem ipsum ".repeat(170))}));
            messages.push(json!({"role": "assistant", "content": format!("assistant note {i}: {}", "dolor sit ".repeat(200))}));
        }
        messages.push(json!({"role": "user", "content": "Now finish."}));
        let body = bytes::Bytes::from(
            json!({"model": "m", "max_tokens": 64, "messages": messages}).to_string(),
        );
        let session = SessionId::new("calls-refs").unwrap();
        engine
            .run_turn(
                &session,
                foldwire_core::TurnRequest::new(Wire::Anthropic, body.clone()),
            )
            .await
            .unwrap();
        let state = engine.snapshot(&session).await.unwrap();
        let mut turn = foldwire_core::Turn::new(session.clone(), Wire::Anthropic, body, state);
        crate::setup::view_pipeline(&registry)
            .unwrap()
            .run(&mut turn, engine.context())
            .await
            .unwrap();
        let ranges = turn.ranges.iter().map(|r| (r.start, r.end)).collect();
        (
            engine,
            session,
            Arc::new(turn.conversation.unwrap()),
            ranges,
        )
    }

    fn call(name: &str, arguments: Value) -> HiddenCall {
        HiddenCall {
            index: 0,
            id: "c1".into(),
            name: name.into(),
            arguments: arguments.to_string(),
            complete: true,
        }
    }

    #[tokio::test]
    async fn the_models_refs_are_read_in_any_case_and_with_space_around_them() {
        let (engine, session, view, ranges) = session_with_history().await;
        let (start, end) = ranges[0];
        let args = json!({"ranges": [{
            "start": format!(" {}", start.to_string().to_uppercase()),
            "end": format!("{end} "),
            // Long enough for the minimum a model's summary must reach (acp §26 #61).
            "summary": "Old notes. ".repeat(40),
        }]});
        let folded = run(&engine, &session, Some(&view), &call(COMPRESS, args)).await;
        assert!(folded.text.contains("folded into b1"), "{}", folded.text);
        let restored = run(
            &engine,
            &session,
            Some(&view),
            &call(RESTORE, json!({"id": " B1"})),
        )
        .await;
        assert!(
            restored.text.starts_with(&format!("[{start}]")),
            "{}",
            restored.text
        );
    }

    #[test]
    fn strip_json_removes_proxy_calls_and_fixes_the_stop() {
        let mut a = json!({"content": [{"type": "text", "text": "hi"}, {"type": "tool_use", "id": "t", "name": "compress", "input": {}}], "stop_reason": "tool_use"});
        assert!(strip_json(Wire::Anthropic, &mut a));
        assert_eq!(a["content"].as_array().unwrap().len(), 1);
        assert_eq!(a["stop_reason"], "end_turn");
        let mut c = json!({"choices": [{"message": {"role": "assistant", "tool_calls": [{"id": "1", "function": {"name": "search_context", "arguments": "{}"}}, {"id": "2", "function": {"name": "bash", "arguments": "{}"}}]}, "finish_reason": "tool_calls"}]});
        assert!(strip_json(Wire::OpenAiChat, &mut c));
        assert_eq!(
            c["choices"][0]["message"]["tool_calls"]
                .as_array()
                .unwrap()
                .len(),
            1
        );
        assert_eq!(c["choices"][0]["finish_reason"], "tool_calls");
        let mut g = json!({"candidates": [{"content": {"parts": [{"text": "x"}]}}]});
        assert!(!strip_json(Wire::Gemini, &mut g));
    }

    #[test]
    fn restored_media_travels_in_each_wires_shape() {
        let call = HiddenCall {
            index: 0,
            id: "c1".into(),
            name: "restore".into(),
            arguments: "{\"id\":\"m00003\"}".into(),
            complete: true,
        };
        let media = |media_type: &str, bytes: &'static [u8]| RestoredMedia {
            r#ref: "m00003".parse().unwrap(),
            media_type: media_type.into(),
            bytes: bytes::Bytes::from_static(bytes),
            key: String::new(),
            pointer: String::new(),
        };
        let result = CallResult {
            text: "two parts".into(),
            media: vec![
                media("image/png", b"png"),
                media("application/pdf", b"%PDF"),
            ],
        };
        let results = [result];
        let calls = std::slice::from_ref(&call);

        let mut a = json!({"messages": [{"role": "user", "content": "q"}]});
        append_round(Wire::Anthropic, &mut a, "", calls, &results);
        let content = &a["messages"][2]["content"][0]["content"];
        assert_eq!(content[0]["text"], "two parts");
        assert_eq!(content[1]["source"]["data"], "cG5n");
        assert_eq!(content[2]["type"], "document");
        assert_eq!(content[2]["source"]["media_type"], "application/pdf");

        let mut c = json!({"messages": [{"role": "user", "content": "q"}]});
        append_round(Wire::OpenAiChat, &mut c, "", calls, &results);
        assert_eq!(c["messages"][2]["content"], "two parts");
        let parts = &c["messages"][3]["content"];
        assert_eq!(c["messages"][3]["role"], "user");
        assert_eq!(parts[1]["image_url"]["url"], "data:image/png;base64,cG5n");
        assert_eq!(parts[2]["file"]["filename"], "m00003-1.pdf");
        assert_eq!(
            parts[2]["file"]["file_data"],
            "data:application/pdf;base64,JVBERg=="
        );

        let mut r = json!({"input": "q"});
        append_round(Wire::OpenAiResponses, &mut r, "", calls, &results);
        let output = &r["input"][2]["output"];
        assert_eq!(output[0]["type"], "input_text");
        assert_eq!(output[1]["image_url"], "data:image/png;base64,cG5n");
        assert_eq!(output[2]["type"], "input_file");

        let mut g = json!({"contents": [{"role": "user", "parts": [{"text": "q"}]}]});
        append_round(Wire::Gemini, &mut g, "", calls, &results);
        let parts = &g["contents"][2]["parts"];
        assert_eq!(
            parts[0]["functionResponse"]["response"]["result"],
            "two parts"
        );
        assert_eq!(parts[2]["inlineData"]["mimeType"], "application/pdf");

        // Every follow-up is still a request its wire's decoder accepts.
        for (wire, body) in [
            (Wire::Anthropic, a),
            (Wire::OpenAiChat, c),
            (Wire::OpenAiResponses, r),
            (Wire::Gemini, g),
        ] {
            let bytes = bytes::Bytes::from(serde_json::to_vec(&body).unwrap());
            foldwire_wire::request::decode(wire, bytes).unwrap();
        }
    }

    #[test]
    fn a_round_is_appended_in_each_wires_shape() {
        let call = HiddenCall {
            index: 0,
            id: "c1".into(),
            name: "compress".into(),
            arguments: "{\"ranges\":[]}".into(),
            complete: true,
        };
        let mut a = json!({"messages": [{"role": "user", "content": "q"}]});
        append_round(
            Wire::Anthropic,
            &mut a,
            "thinking",
            std::slice::from_ref(&call),
            &[CallResult::from("done".to_owned())],
        );
        assert_eq!(a["messages"][1]["content"][1]["type"], "tool_use");
        assert_eq!(a["messages"][2]["content"][0]["tool_use_id"], "c1");
        let mut r = json!({"input": "q"});
        append_round(
            Wire::OpenAiResponses,
            &mut r,
            "",
            std::slice::from_ref(&call),
            &[CallResult::from("done".to_owned())],
        );
        assert_eq!(r["input"][1]["type"], "function_call");
        assert_eq!(r["input"][2]["output"], "done");
        let mut g = json!({"contents": [{"role": "user", "parts": [{"text": "q"}]}]});
        append_round(
            Wire::Gemini,
            &mut g,
            "",
            std::slice::from_ref(&call),
            &[CallResult::from("done".to_owned())],
        );
        assert_eq!(
            g["contents"][2]["parts"][0]["functionResponse"]["name"],
            "compress"
        );
    }
}
