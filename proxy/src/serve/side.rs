//! Side requests: calls whose output the client constrains (structured output, JSON mode),
//! whose tool use it forces, or that forbid tools. Agents make them beside the conversation
//! (Gemini CLI's routing call, a title or summary call); the proxy's tools and notes would
//! break them (Gemini refuses function calling with a JSON response type) or change what
//! they answer, so the compress loop leaves them alone. The pipeline still runs on them.
//!
//! Side requests foldwire makes itself — `summarizer.llm` asking the session's own upstream
//! for a summary — are addressed by [`summarizer_upstream`].

use axum::http::HeaderMap;
use foldwire_core::{ComponentKind, Pipeline, Wire};
use foldwire_plugins::llm::{self, Upstream};
use serde_json::Value;

use super::route::Route;

/// Request headers that carry a provider's credentials or API version: what a summary side
/// request to the same upstream needs, and nothing else the client sent.
const CREDENTIAL_HEADERS: [&str; 8] = [
    "authorization",
    "x-api-key",
    "x-goog-api-key",
    "api-key",
    "anthropic-version",
    "openai-organization",
    "openai-project",
    "chatgpt-account-id",
];

/// True when a stage of the pipeline writes summaries with `summarizer.llm`.
pub fn uses_llm_summarizer(pipeline: &Pipeline) -> bool {
    pipeline.stages().iter().any(|s| {
        s.strategies()
            .iter()
            .any(|u| u.kind == ComponentKind::Summarizer && u.name == llm::NAME)
    })
}

/// The turn option that points `summarizer.llm` at the session's own upstream with the
/// client's credentials, when the pipeline uses it (else nothing is read or handed over).
pub fn summarizer_upstream(
    pipeline: &Pipeline,
    route: &Route,
    wire: Wire,
    headers: &HeaderMap,
    body: &[u8],
) -> Option<(String, Value)> {
    if !uses_llm_summarizer(pipeline) {
        return None;
    }
    let (path, query) = match route.path_and_query.split_once('?') {
        Some((p, q)) => (p, Some(q)),
        None => (route.path_and_query.as_str(), None),
    };
    let mut creds: Vec<(String, String)> = CREDENTIAL_HEADERS
        .iter()
        .filter_map(|name| {
            let value = headers.get(*name)?.to_str().ok()?;
            Some(((*name).to_owned(), value.to_owned()))
        })
        .collect();
    // Gemini clients may send the key in the query instead of a header.
    if let Some(key) = query.and_then(|q| {
        q.split('&')
            .find_map(|kv| kv.strip_prefix("key="))
            .map(str::to_owned)
    }) && !creds.iter().any(|(n, _)| n == "x-goog-api-key")
    {
        creds.push(("x-goog-api-key".to_owned(), key));
    }
    if wire == Wire::Anthropic && !creds.iter().any(|(n, _)| n == "anthropic-version") {
        creds.push(("anthropic-version".to_owned(), "2023-06-01".to_owned()));
    }
    let model = match wire {
        Wire::Gemini => route.model.clone(),
        _ => model_of(body),
    };
    let upstream = Upstream {
        wire,
        base_url: route.upstream.clone(),
        path: path.to_owned(),
        model,
        headers: creds,
    };
    Some((
        llm::UPSTREAM_OPTION.to_owned(),
        serde_json::to_value(upstream).ok()?,
    ))
}

/// The body's top-level `model`, read without building the rest of the document.
fn model_of(body: &[u8]) -> Option<String> {
    #[derive(serde::Deserialize)]
    struct ModelOnly {
        model: Option<String>,
    }
    serde_json::from_slice::<ModelOnly>(body).ok()?.model
}

/// Why a request is a side request (shown in logs).
pub fn side_request(wire: Wire, body: &Value) -> Option<&'static str> {
    match wire {
        Wire::Anthropic => anthropic(body),
        Wire::OpenAiChat => chat(body),
        Wire::OpenAiResponses => responses(body),
        Wire::Gemini => gemini(body),
    }
}

fn anthropic(body: &Value) -> Option<&'static str> {
    let format = body
        .get("output_format")
        .or_else(|| body.get("output_config").and_then(|c| c.get("format")));
    if format.is_some_and(|f| !f.is_null()) {
        return Some("structured output");
    }
    forced_or_forbidden(body.get("tool_choice"))
}

fn chat(body: &Value) -> Option<&'static str> {
    let format = body
        .get("response_format")
        .and_then(|f| f.get("type"))
        .and_then(Value::as_str);
    if format.is_some_and(|t| t != "text") {
        return Some("structured output");
    }
    // `function_call` is the older spelling of `tool_choice` (`{"name": …}` or "none").
    forced_or_forbidden(
        body.get("tool_choice")
            .or_else(|| body.get("function_call")),
    )
}

fn responses(body: &Value) -> Option<&'static str> {
    let format = body
        .get("text")
        .and_then(|t| t.get("format"))
        .and_then(|f| f.get("type"))
        .and_then(Value::as_str);
    if format.is_some_and(|t| t != "text") {
        return Some("structured output");
    }
    forced_or_forbidden(body.get("tool_choice"))
}

/// A tool choice other than automatic: a named tool or function, any/required, or none.
fn forced_or_forbidden(choice: Option<&Value>) -> Option<&'static str> {
    let kind = match choice? {
        Value::String(s) => s.as_str(),
        Value::Object(o) => o.get("type").and_then(Value::as_str).unwrap_or("tool"),
        _ => return None,
    };
    match kind {
        "auto" => None,
        "none" => Some("tools forbidden"),
        _ => Some("tool choice forced"),
    }
}

fn gemini(body: &Value) -> Option<&'static str> {
    let config = field(body, "generationConfig", "generation_config");
    let mime = config
        .and_then(|c| field(c, "responseMimeType", "response_mime_type"))
        .and_then(Value::as_str);
    let schema = config.is_some_and(|c| {
        [
            "responseSchema",
            "response_schema",
            "responseJsonSchema",
            "response_json_schema",
        ]
        .iter()
        .any(|k| c.get(*k).is_some_and(|s| !s.is_null()))
    });
    if schema || mime.is_some_and(|m| m != "text/plain") {
        return Some("structured output");
    }
    let mode = field(body, "toolConfig", "tool_config")
        .and_then(|t| field(t, "functionCallingConfig", "function_calling_config"))
        .and_then(|f| f.get("mode"))
        .and_then(Value::as_str)
        .map(str::to_ascii_uppercase);
    match mode.as_deref() {
        Some("ANY") => Some("tool choice forced"),
        Some("NONE") => Some("tools forbidden"),
        _ => None,
    }
}

/// A field under its camelCase or snake_case name (Gemini's REST API takes both).
fn field<'v>(value: &'v Value, camel: &str, snake: &str) -> Option<&'v Value> {
    value.get(camel).or_else(|| value.get(snake))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn constrained_forced_and_tool_free_requests_are_side_requests() {
        let side = [
            (
                Wire::Anthropic,
                json!({"output_format": {"type": "json_schema", "schema": {}}}),
            ),
            (
                Wire::Anthropic,
                json!({"tool_choice": {"type": "tool", "name": "x"}}),
            ),
            (Wire::Anthropic, json!({"tool_choice": {"type": "any"}})),
            (Wire::Anthropic, json!({"tool_choice": {"type": "none"}})),
            (
                Wire::OpenAiChat,
                json!({"response_format": {"type": "json_object"}}),
            ),
            (Wire::OpenAiChat, json!({"tool_choice": "required"})),
            (Wire::OpenAiChat, json!({"tool_choice": "none"})),
            (Wire::OpenAiChat, json!({"function_call": {"name": "x"}})),
            (
                Wire::OpenAiChat,
                json!({"tool_choice": {"type": "function", "function": {"name": "x"}}}),
            ),
            (
                Wire::OpenAiResponses,
                json!({"text": {"format": {"type": "json_schema"}}}),
            ),
            (
                Wire::OpenAiResponses,
                json!({"tool_choice": {"type": "function", "name": "x"}}),
            ),
            (
                Wire::Gemini,
                json!({"generationConfig": {"responseMimeType": "application/json"}}),
            ),
            (
                Wire::Gemini,
                json!({"generation_config": {"response_schema": {"type": "OBJECT"}}}),
            ),
            (
                Wire::Gemini,
                json!({"generationConfig": {"responseJsonSchema": {}}}),
            ),
            (
                Wire::Gemini,
                json!({"toolConfig": {"functionCallingConfig": {"mode": "ANY"}}}),
            ),
            (
                Wire::Gemini,
                json!({"toolConfig": {"functionCallingConfig": {"mode": "NONE"}}}),
            ),
        ];
        for (wire, body) in side {
            assert!(side_request(wire, &body).is_some(), "{wire}: {body}");
        }
        let main = [
            (Wire::Anthropic, json!({"tool_choice": {"type": "auto"}})),
            (
                Wire::OpenAiChat,
                json!({"response_format": {"type": "text"}, "tool_choice": "auto"}),
            ),
            (
                Wire::OpenAiResponses,
                json!({"text": {"format": {"type": "text"}}}),
            ),
            (
                Wire::Gemini,
                json!({"generationConfig": {"responseMimeType": "text/plain"}, "toolConfig": {"functionCallingConfig": {"mode": "AUTO"}}}),
            ),
        ];
        for (wire, body) in main {
            assert!(side_request(wire, &body).is_none(), "{wire}: {body}");
        }
    }
}
