//! Rules the real providers enforce on a request's history, written from their documented
//! 400 errors, so the mock refuses what they would refuse: tool calls and results that do
//! not pair up; (Responses, `store: false`) an item named only by its id; (Messages API,
//! Gemini) empty messages or parts; (Messages API) a conversation that does not start with
//! a user message, more than four prompt-cache markers, a 1-hour one after a 5-minute one,
//! or one on a thinking block; and, from a model that
//! signs its reasoning, calls sent back without it (Anthropic with thinking on, Gemini 3,
//! OpenRouter's `reasoning_details`) or a signed thought sent back changed.
//! A request foldwire forwards with a call whose result it dropped, a result whose call it
//! dropped, a message a fold emptied or a loop round without the model's thinking then
//! fails every test that expects an answer, as it would fail the user, instead of being
//! answered by a mock that never looked.
//!
//! Each check reads the JSON the mock received, independently of foldwire's own decoder
//! and repair code. Calls that end the request with no message after them are not checked:
//! the rules below speak of the message that follows a call.

use serde_json::Value;

use foldwire_core::Wire;

/// What the provider of `wire` would refuse in `body`, sent to `path`, in its own words, or
/// `None`.
pub fn refusal(wire: Wire, path: &str, body: &Value) -> Option<String> {
    let paired = match wire {
        Wire::Anthropic => first_user(body)
            .or_else(|| anthropic(body))
            .or_else(|| server_pairs(body))
            .or_else(|| cache_markers(body))
            .or_else(|| thinking_uncached(body)),
        Wire::OpenAiChat => chat(body),
        Wire::OpenAiResponses => responses(body),
        Wire::Gemini => gemini(body),
    };
    paired.or_else(|| match wire {
        Wire::Anthropic if thinks(wire, path, body) => {
            thinking_first(body).or_else(|| thinking_intact(body))
        }
        Wire::Gemini if thinks(wire, path, body) => signed_calls(body),
        Wire::OpenAiChat if thinks(wire, path, body) => signed_details(body),
        _ => None,
    })
}

/// Whether the model a request is for reasons and signs its reasoning: Anthropic with
/// thinking on, Responses asking for its encrypted reasoning, a Gemini 3 model.
pub fn thinks(wire: Wire, path: &str, body: &Value) -> bool {
    match wire {
        Wire::Anthropic => matches!(
            body["thinking"]["type"].as_str(),
            Some("enabled" | "adaptive")
        ),
        Wire::OpenAiResponses => body["include"]
            .as_array()
            .is_some_and(|i| i.iter().any(|v| v == "reasoning.encrypted_content")),
        Wire::Gemini => path.contains("gemini-3"),
        // OpenRouter with reasoning on (for a model that signs it).
        Wire::OpenAiChat => body["reasoning"].is_object() && body["reasoning"]["enabled"] != false,
    }
}

/// The prefix of the signatures the mock gives its reasoning.
const MOCK_SIGNATURE: &str = "mocksig_";

/// The signature the mock gives a thought: the text itself, in hex, so a rule can tell a
/// thought that came back changed, as Anthropic's signatures do.
pub fn sign(text: &str) -> String {
    let hex: String = text.bytes().map(|b| format!("{b:02x}")).collect();
    let mut signature = format!("{MOCK_SIGNATURE}{hex}");
    // Whole base64 quanta: the google-genai SDK reads a thought signature as base64 bytes
    // and refuses one whose last symbol leaves bits over (a text of odd length did).
    while signature.len() % 4 != 0 {
        signature.push('A');
    }
    signature
}

/// Messages API: a thinking block the mock signed comes back with the text it was signed
/// with (blocks with other signatures, real ones in the fixtures, are not checked).
fn thinking_intact(body: &Value) -> Option<String> {
    let messages = body["messages"].as_array()?;
    messages.iter().enumerate().find_map(|(at, m)| {
        blocks(m).iter().enumerate().find_map(|(k, b)| {
            let signature = b["signature"].as_str()?;
            let signed = signature.strip_prefix(MOCK_SIGNATURE)?;
            let thinking = b["thinking"].as_str().unwrap_or_default();
            (b["type"] == "thinking" && sign(thinking)[MOCK_SIGNATURE.len()..] != *signed).then(
                || format!("messages.{at}.content.{k}: Invalid `signature` in `thinking` block"),
            )
        })
    })
}

/// Messages API with thinking on: the assistant message that tool results answer (the
/// last one, when the request ends with results) starts with its thinking, signed.
fn thinking_first(body: &Value) -> Option<String> {
    let messages = body["messages"].as_array()?;
    let last = messages.last()?;
    let answers_calls = last["role"] == "user" && blocks(last).first()?["type"] == "tool_result";
    if !answers_calls {
        return None;
    }
    let at = messages.len().checked_sub(2)?;
    let first = blocks(&messages[at]).first()?;
    let kind = first["type"].as_str().unwrap_or_default();
    if kind == "redacted_thinking"
        || (kind == "thinking" && first["signature"].as_str().is_some_and(|s| !s.is_empty()))
    {
        return None;
    }
    Some(format!(
        "messages.{at}.content.0.type: Expected `thinking` or `redacted_thinking`, but found `{kind}`. When `thinking` is enabled, a final `assistant` message must start with a thinking block (preceeding the lastmost set of `tool_use` and `tool_result` blocks)."
    ))
}

/// OpenRouter, reasoning on, for a model that signs its reasoning: a thought the mock signed
/// comes back with its text, in any message, and the assistant message whose calls the
/// request's trailing tool messages answer carries its signed `reasoning_details`.
fn signed_details(body: &Value) -> Option<String> {
    let messages = body["messages"].as_array()?;
    // Every thought the mock signed comes back with its text, in any message.
    let changed = messages.iter().enumerate().find_map(|(at, m)| {
        let details = m["reasoning_details"].as_array()?;
        details.iter().enumerate().find_map(|(k, e)| {
            let mine = e["signature"].as_str()?.strip_prefix(MOCK_SIGNATURE)?;
            let text = e["text"].as_str().unwrap_or_default();
            (sign(text)[MOCK_SIGNATURE.len()..] != *mine)
                .then(|| format!("messages.{at}.reasoning_details.{k}: invalid signature"))
        })
    });
    if changed.is_some() {
        return changed;
    }
    let at = messages.iter().rposition(|m| m["role"] != "tool")?;
    if at + 1 == messages.len() || messages[at]["tool_calls"].as_array().is_none() {
        return None;
    }
    let details = messages[at]["reasoning_details"].as_array();
    let signed = details.is_some_and(|d| d.iter().any(|e| e["signature"].is_string()));
    (!signed).then(|| {
        format!(
            "messages.{at}: the assistant message with tool calls is missing the signed `reasoning_details` it was sent with; pass reasoning_details back unmodified when continuing tool calls"
        )
    })
}

/// Gemini 3: each model turn of calls in the current turn (after the last user text)
/// carries the thought signature on its first function call.
fn signed_calls(body: &Value) -> Option<String> {
    let contents = body["contents"].as_array()?;
    let user_text = |c: &Value| {
        c["role"] != "model"
            && parts(c).iter().any(|p| p.get("text").is_some())
            && count(c, "functionResponse") == 0
    };
    let start = contents.iter().rposition(user_text).map_or(0, |i| i + 1);
    for (i, content) in contents.iter().enumerate().skip(start) {
        let first_call = parts(content)
            .iter()
            .find(|p| p.get("functionCall").is_some());
        if let Some(call) = first_call
            && call.get("thoughtSignature").is_none()
        {
            return Some(format!(
                "Function call `{}` in the contents[{i}] turn is missing a `thought_signature`. Function calls of the current turn must carry the signature they were sent with.",
                call["functionCall"]["name"].as_str().unwrap_or_default()
            ));
        }
    }
    None
}

/// Messages API prompt-cache markers, in prefix order (tools, system, messages; a block's
/// nested content after the block; the top-level automatic marker last): at most four, and
/// a 1-hour one never after a 5-minute one.
fn cache_markers(body: &Value) -> Option<String> {
    fn collect<'a>(v: &'a Value, into: &mut Vec<&'a Value>) {
        if let Some(cc) = v.get("cache_control").filter(|cc| !cc.is_null()) {
            into.push(cc);
        }
        if let Some(nested) = v.get("content").and_then(Value::as_array) {
            for b in nested {
                collect(b, into);
            }
        }
    }
    let mut markers = Vec::new();
    let listed = [&body["tools"], &body["system"]];
    for b in listed.iter().filter_map(|l| l.as_array()).flatten() {
        collect(b, &mut markers);
    }
    for m in body["messages"].as_array().into_iter().flatten() {
        for b in blocks(m) {
            collect(b, &mut markers);
        }
    }
    // The top-level marker: the API puts it on the last cacheable block.
    if body["cache_control"].is_object() {
        markers.push(&body["cache_control"]);
    }
    if markers.len() > 4 {
        return Some(format!(
            "A maximum of 4 blocks with cache_control may be provided. Found {}.",
            markers.len()
        ));
    }
    let long = |cc: &Value| cc["ttl"] == "1h";
    let first_short = markers.iter().position(|cc| !long(cc))?;
    markers[first_short..].iter().any(|cc| long(cc)).then(|| {
        "a ttl='1h' cache_control block must not come after a ttl='5m' cache_control block. Note that blocks are processed in the following order: `tools`, `system`, `messages`.".to_owned()
    })
}

/// Messages API: the conversation starts with a user message.
fn first_user(body: &Value) -> Option<String> {
    let first = body["messages"].as_array()?.first()?;
    (first["role"] != "user")
        .then(|| "messages: first message must use the \"user\" role".to_owned())
}

/// Messages API: a thinking block carries no cache marker.
fn thinking_uncached(body: &Value) -> Option<String> {
    let messages = body["messages"].as_array()?;
    messages.iter().enumerate().find_map(|(at, m)| {
        blocks(m).iter().enumerate().find_map(|(k, b)| {
            let thinking = matches!(b["type"].as_str(), Some("thinking" | "redacted_thinking"));
            (thinking && !b["cache_control"].is_null()).then(|| {
                format!("messages.{at}.content.{k}.thinking.cache_control: Extra inputs are not permitted")
            })
        })
    })
}

fn blocks(message: &Value) -> &[Value] {
    message["content"].as_array().map_or(&[], Vec::as_slice)
}

fn ids<'a>(items: impl Iterator<Item = &'a Value>, kind: &str, field: &str) -> Vec<String> {
    items
        .filter(|b| b["type"] == kind)
        .filter_map(|b| b[field].as_str().map(str::to_owned))
        .collect()
}

/// Messages API: the message after tool_use blocks is a user message that begins with a
/// tool_result for each of them, and a tool_result answers a tool_use of the message just
/// before it.
fn anthropic(body: &Value) -> Option<String> {
    let messages = body["messages"].as_array()?;
    for (i, message) in messages.iter().enumerate() {
        let final_assistant = i + 1 == messages.len() && message["role"] == "assistant";
        let empty = match &message["content"] {
            Value::String(s) => s.is_empty(),
            Value::Array(b) => b.is_empty(),
            _ => false,
        };
        if empty && !final_assistant {
            return Some(format!(
                "messages.{i}: all messages must have non-empty content except for the optional final assistant message"
            ));
        }
        if let Some(at) = blocks(message)
            .iter()
            .position(|b| b["type"] == "text" && b["text"] == "")
        {
            return Some(format!(
                "messages.{i}.content.{at}.text: text content blocks must be non-empty"
            ));
        }
        let results = ids(blocks(message).iter(), "tool_result", "tool_use_id");
        if !results.is_empty() {
            let calls = match i.checked_sub(1).map(|p| &messages[p]) {
                Some(prev) if prev["role"] == "assistant" => {
                    ids(blocks(prev).iter(), "tool_use", "id")
                }
                _ => Vec::new(),
            };
            if let Some(stray) = results.iter().find(|r| !calls.contains(r)) {
                return Some(format!(
                    "messages.{i}.content: unexpected `tool_use_id` found in `tool_result` blocks: {stray}. Each `tool_result` block must have a corresponding `tool_use` block in the previous message."
                ));
            }
        }
        if message["role"] != "assistant" {
            continue;
        }
        let calls = ids(blocks(message).iter(), "tool_use", "id");
        let Some(next) = messages.get(i + 1) else {
            continue;
        };
        if calls.is_empty() {
            continue;
        }
        let leading = blocks(next)
            .iter()
            .take_while(|b| b["type"] == "tool_result")
            .count();
        if next["role"] != "user" || leading < calls.len() {
            return Some(format!(
                "messages.{}: Did not find {} tool_result block(s) at the beginning of this message. Messages following `tool_use` blocks must begin with a matching number of `tool_result` blocks.",
                i + 1,
                calls.len()
            ));
        }
        let answered = ids(blocks(next).iter(), "tool_result", "tool_use_id");
        if let Some(missing) = calls.iter().find(|c| !answered.contains(c)) {
            return Some(format!(
                "messages.{i}: `tool_use` ids were found without `tool_result` blocks immediately after: {missing}. Each `tool_use` block must have a corresponding `tool_result` block in the next message."
            ));
        }
    }
    None
}

/// Messages API: a server tool's result block (`web_search_tool_result`, …) answers a
/// `server_tool_use` (or `mcp_tool_use`) earlier in the same message, and such a call is
/// answered in its message (the final assistant message, which the server goes on with,
/// aside).
fn server_pairs(body: &Value) -> Option<String> {
    let messages = body["messages"].as_array()?;
    for (i, message) in messages.iter().enumerate() {
        let mut open: Vec<&str> = Vec::new();
        for (j, block) in blocks(message).iter().enumerate() {
            let ty = block["type"].as_str().unwrap_or_default();
            if matches!(ty, "server_tool_use" | "mcp_tool_use") {
                open.push(block["id"].as_str().unwrap_or_default());
            } else if ty.ends_with("_tool_result") && ty != "tool_result" {
                let id = block["tool_use_id"].as_str().unwrap_or_default();
                let Some(at) = open.iter().position(|c| *c == id) else {
                    return Some(format!(
                        "messages.{i}.content.{j}: `{ty}` block with `tool_use_id` {id} has no corresponding `server_tool_use` block before it in this message"
                    ));
                };
                open.remove(at);
            }
        }
        if let Some(id) = open.first()
            && i + 1 < messages.len()
        {
            return Some(format!(
                "messages.{i}.content: `server_tool_use` block {id} has no corresponding result block in this message"
            ));
        }
    }
    None
}

/// Chat Completions: an assistant message with tool_calls is followed by one tool message
/// per call, and a tool message answers a call of the assistant message before its run.
fn chat(body: &Value) -> Option<String> {
    let messages = body["messages"].as_array()?;
    let mut open: Option<(usize, Vec<String>)> = None;
    for (i, message) in messages.iter().enumerate() {
        if message["role"] == "tool" {
            let id = message["tool_call_id"].as_str().unwrap_or_default();
            match open.as_mut() {
                Some((_, pending)) if pending.iter().any(|p| p == id) => {
                    pending.retain(|p| p != id);
                }
                _ => {
                    return Some(format!(
                        "Invalid parameter: messages with role 'tool' must be a response to a preceeding message with 'tool_calls'. (messages.[{i}], tool_call_id {id})"
                    ));
                }
            }
            continue;
        }
        if let Some((at, pending)) = open.take()
            && !pending.is_empty()
        {
            return Some(unanswered_calls(at, &pending));
        }
        let calls: Vec<String> = message["tool_calls"]
            .as_array()
            .map_or(&[][..], Vec::as_slice)
            .iter()
            .filter_map(|c| c["id"].as_str().map(str::to_owned))
            .collect();
        if message["role"] == "assistant" && !calls.is_empty() && i + 1 < messages.len() {
            open = Some((i, calls));
        }
    }
    open.filter(|(_, pending)| !pending.is_empty())
        .map(|(at, pending)| unanswered_calls(at, &pending))
}

fn unanswered_calls(at: usize, pending: &[String]) -> String {
    format!(
        "An assistant message with 'tool_calls' must be followed by tool messages responding to each 'tool_call_id'. The following tool_call_ids did not have response messages: {} (messages.[{at}])",
        pending.join(", ")
    )
}

/// The call and output item types of the Responses API, by the field that links them.
const RESPONSES_PAIRS: [(&str, &str); 7] = [
    ("function_call", "function_call_output"),
    ("custom_tool_call", "custom_tool_call_output"),
    ("local_shell_call", "local_shell_call_output"),
    ("shell_call", "shell_call_output"),
    ("apply_patch_call", "apply_patch_call_output"),
    ("program", "program_output"),
    ("computer_call", "computer_call_output"),
];

/// Responses: every call output answers a call earlier in `input`, a function call that
/// has items after it has its output among them, and a reasoning item is followed by the
/// item it produced (not by input, not by an output).
fn responses(body: &Value) -> Option<String> {
    let items = body["input"].as_array()?;
    let mut calls: Vec<(usize, String)> = Vec::new();
    let mut outputs: Vec<String> = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let kind = item["type"].as_str().unwrap_or("message");
        let call_id = item["call_id"].as_str().unwrap_or_default().to_owned();
        if RESPONSES_PAIRS.iter().any(|(call, _)| *call == kind) {
            calls.push((i, call_id));
        } else if RESPONSES_PAIRS.iter().any(|(_, output)| *output == kind) {
            if !calls.iter().any(|(_, c)| *c == call_id) {
                return Some(format!(
                    "No tool call found for function call output with call_id {call_id}. (input[{i}])"
                ));
            }
            outputs.push(call_id);
        } else if kind == "item_reference"
            || (kind == "reasoning" && item.get("encrypted_content").is_none_or(Value::is_null))
        {
            // An item named by id only is looked up in what the API stored.
            if body["store"] == false {
                let id = item["id"].as_str().unwrap_or_default();
                return Some(format!(
                    "Item with id '{id}' not found. Items are not persisted when `store` is set to false. Try again with `store` set to true, or remove this item from your input."
                ));
            }
        }
        if kind == "reasoning" {
            let follower = items.get(i + 1);
            // What a reasoning item produced comes right after it: not another reasoning
            // item, an output, or a user's message.
            let produced = follower.is_some_and(|next| {
                let next_kind = next["type"].as_str().unwrap_or("message");
                !next_kind.ends_with("_output")
                    && next_kind != "reasoning"
                    && (next_kind != "message" || next["role"] == "assistant")
            });
            if !produced {
                let id = item["id"].as_str().unwrap_or_default();
                return Some(format!(
                    "Item '{id}' of type 'reasoning' was provided without its required following item. (input[{i}])"
                ));
            }
        }
    }
    let last = items.len().saturating_sub(1);
    calls
        .iter()
        .find(|(at, id)| *at < last && !outputs.contains(id))
        .map(|(at, id)| format!("No tool output found for function call {id}. (input[{at}])"))
}

fn parts(content: &Value) -> &[Value] {
    content["parts"].as_array().map_or(&[], Vec::as_slice)
}

fn count(content: &Value, key: &str) -> usize {
    parts(content)
        .iter()
        .filter(|p| p.get(key).is_some())
        .count()
}

/// Gemini: a turn of function responses comes right after a model turn of function calls,
/// and answers each of its calls.
fn gemini(body: &Value) -> Option<String> {
    let contents = body["contents"].as_array()?;
    for (i, content) in contents.iter().enumerate() {
        if parts(content).is_empty() {
            return Some(format!("contents[{i}].parts must not be empty."));
        }
        let responses = count(content, "functionResponse");
        let calls_before = i
            .checked_sub(1)
            .map_or(0, |p| count(&contents[p], "functionCall"));
        if responses > 0 && calls_before == 0 {
            return Some(format!(
                "Please ensure that function response turn comes immediately after a function call turn. (contents[{i}])"
            ));
        }
        let calls = count(content, "functionCall");
        if calls > 0
            && let Some(next) = contents.get(i + 1)
            && count(next, "functionResponse") != calls
        {
            return Some(format!(
                "Please ensure that the number of function response parts is equal to the number of function call parts of the function call turn. (contents[{}])",
                i + 1
            ));
        }
    }
    None
}
