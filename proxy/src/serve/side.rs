//! Side requests: calls whose output the client constrains (structured output, JSON mode),
//! whose tool use it forces, or that forbid tools. Agents make them beside the conversation
//! (Gemini CLI's routing call, a title or summary call); the proxy's tools and notes would
//! break them (Gemini refuses function calling with a JSON response type) or change what
//! they answer, so the compress loop leaves them alone: `tools.inject` tells them by their
//! frame ([`foldwire_wire::dialect::Dialect::side_request`]) and adds nothing. The pipeline
//! still runs on them.
//!
//! Side requests foldwire makes itself — `summarizer.llm` asking the session's own upstream
//! for a summary — are addressed by [`summarizer_upstream`].

use axum::http::HeaderMap;
use foldwire_core::{ComponentKind, Pipeline, Wire};
use foldwire_plugins::llm::{self, Upstream};
use foldwire_wire::dialect::WireDialect;

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
) -> Option<Upstream> {
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
    let dialect = wire.dialect();
    for (name, value) in dialect.required_headers() {
        if !creds.iter().any(|(n, _)| n == name) {
            creds.push(((*name).to_owned(), (*value).to_owned()));
        }
    }
    let model = if dialect.model_in_path() {
        route.model.clone()
    } else {
        model_of(body)
    };
    Some(Upstream {
        wire,
        base_url: route.upstream.clone(),
        path: path.to_owned(),
        model,
        headers: creds,
    })
}

/// The body's top-level `model`, read without building the rest of the document.
fn model_of(body: &[u8]) -> Option<String> {
    #[derive(serde::Deserialize)]
    struct ModelOnly {
        model: Option<String>,
    }
    serde_json::from_slice::<ModelOnly>(body).ok()?.model
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
            assert!(
                wire.dialect().side_request(&body).is_some(),
                "{wire}: {body}"
            );
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
            assert!(
                wire.dialect().side_request(&body).is_none(),
                "{wire}: {body}"
            );
        }
    }
}
