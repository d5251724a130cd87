//! `summarizer.llm`: summaries written by a model when foldwire folds on its own.
//!
//! A side request to a provider, in any of the four wires, asks for a summary that keeps the
//! facts, decisions, file paths, identifiers, errors and open questions of the range. By
//! default it goes to the session's own upstream with the client's credentials (the proxy
//! hands an [`Upstream`] over in the turn options' extensions); `base_url`, `wire`, `model` and
//! `api_key` / `api_key_env` configure another endpoint (the CLI, which has no client,
//! needs them). The call is bounded by `timeout_ms` and asks for at most `max_tokens`; a
//! summary longer than the fold's bound is cut at a line. Whenever no usable summary comes
//! back — no endpoint, a timeout, an error status, an answer without text — the extractive
//! summarizer writes it instead, with a `strategy_fallback` warning.

use std::sync::Arc;
use std::time::Duration;

use foldwire_core::{
    BuildCx, BuildError, Component, ComponentConfig, ComponentKind, MessageKind, Params,
    StrategyError, Summarizer, Summary, SummaryRequest, Wire, async_trait,
};
use foldwire_stages::strategy_scope;
use foldwire_wire::dialect::WireDialect;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::fallback::{self, FallbackSpec};
use crate::http::{self, CallError};
use crate::summarizer::Extractive;

/// Registered name.
pub const NAME: &str = LlmConfig::NAME;

/// The instructions the model gets.
pub const PROMPT: &str = "You write the summary that replaces part of a coding agent's conversation \
in its context window. The agent will only see your summary, so keep everything it needs to carry on: \
facts learned, decisions made and why, exact file paths, identifiers (functions, types, variables, \
commands, URLs, ids), error messages, results of tool calls, and open questions or next steps. \
Be dense and literal: copy paths and identifiers exactly, no preamble, no commentary. \
Start with one line `TOPIC: <a few words>`, then the summary.";

/// Where a summary request goes: a provider endpoint, its wire, model and credentials. A host
/// names the session's upstream by putting one in `TurnOptions::extensions`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Upstream {
    /// The wire it speaks.
    pub wire: Wire,
    /// Scheme, host and optional path prefix (`https://api.anthropic.com`).
    pub base_url: String,
    /// The request path (`/v1/messages`); empty for the wire's usual one.
    #[serde(default)]
    pub path: String,
    /// The model.
    #[serde(default)]
    pub model: Option<String>,
    /// Headers carrying credentials and API versions.
    #[serde(default)]
    pub headers: Vec<(String, String)>,
}

/// Params of `summarizer.llm`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LlmConfig {
    /// A fixed endpoint (else the session's upstream).
    pub base_url: Option<String>,
    /// Its wire, as the CLI spells it (`anthropic`, `openai-chat`, `openai-responses`,
    /// `gemini`; default: the session's, else anthropic).
    pub wire: Option<String>,
    /// The model (default: the session's).
    pub model: Option<String>,
    /// An API key for the fixed endpoint.
    pub api_key: Option<String>,
    /// An environment variable holding that key.
    pub api_key_env: Option<String>,
    /// Longest the side request may take, in milliseconds (default 30000).
    pub timeout_ms: Option<u64>,
    /// Most tokens the model may write (default 1024).
    pub max_tokens: Option<u64>,
    /// The extractive summarizer's params, for the fallback.
    pub fallback_params: Params,
}

/// `summarizer.llm`.
#[derive(Debug)]
pub struct LlmSummarizer {
    config: LlmConfig,
    wire: Option<Wire>,
    fallback: Arc<Extractive>,
}

impl LlmSummarizer {
    /// Where this call goes: the configured endpoint, else the session's upstream.
    fn upstream(&self) -> Result<Upstream, String> {
        let session = strategy_scope::extension::<Upstream>();
        let Some(base_url) = self.config.base_url.clone() else {
            let mut up = session.ok_or_else(|| {
                "no endpoint: set base_url (and model, api_key_env) in summarizer_params, or run in the proxy where the session's upstream is used".to_owned()
            })?;
            if let Some(model) = &self.config.model {
                up.model = Some(model.clone());
            }
            return Ok(up);
        };
        let wire = self
            .wire
            .or(session.as_ref().map(|s| s.wire))
            .unwrap_or(Wire::Anthropic);
        let key = match (&self.config.api_key, &self.config.api_key_env) {
            (Some(k), _) => Some(k.clone()),
            (None, Some(var)) => Some(
                std::env::var(var)
                    .map_err(|_| format!("api_key_env {var:?} is not set in the environment"))?,
            ),
            (None, None) => None,
        };
        let model = self
            .config
            .model
            .clone()
            .or_else(|| session.and_then(|s| s.model));
        Ok(Upstream {
            wire,
            base_url,
            path: String::new(),
            model,
            headers: key.map(|k| credential(wire, &k)).into_iter().collect(),
        })
    }
}

/// The header a provider takes its API key in.
fn credential(wire: Wire, key: &str) -> (String, String) {
    wire.dialect().credential(key)
}

/// The range as a transcript the model reads.
pub fn transcript(request: &SummaryRequest<'_>) -> String {
    let mut out = String::new();
    for m in request.messages {
        let role = match m.kind {
            MessageKind::ToolCall => "tool call",
            MessageKind::ToolResult => "tool result",
            _ => match m.role {
                foldwire_core::Role::Assistant => "assistant",
                foldwire_core::Role::System => "system",
                _ => "user",
            },
        };
        let text = m.answer_text().trim();
        if text.is_empty() {
            continue;
        }
        let tool = m
            .tool
            .as_ref()
            .and_then(|t| t.name.as_deref())
            .map(|n| format!(" {n}"))
            .unwrap_or_default();
        out.push_str(&format!("[{role}{tool}]\n{text}\n\n"));
    }
    out
}

/// The URL and body of the side request.
pub fn side_request(
    up: &Upstream,
    transcript: &str,
    max_chars: usize,
    max_tokens: u64,
) -> (String, Value) {
    let model = up.model.clone().unwrap_or_default();
    let ask = format!(
        "Summarize this part of the conversation in at most {max_chars} characters.\n\n<conversation>\n{transcript}</conversation>"
    );
    let base = up.base_url.trim_end_matches('/');
    let (path, body) = up
        .wire
        .dialect()
        .one_shot(&up.path, &model, PROMPT, &ask, max_tokens);
    (format!("{base}{path}"), body)
}

/// The text of a provider's answer.
pub fn answer_text(wire: Wire, answer: &Value) -> Option<String> {
    wire.dialect().answer_text(answer)
}

/// A summary from the model's text: the `TOPIC:` line (when there is one) becomes the
/// topic, and the rest is cut at the last whole line within `max_chars`.
pub fn summary_of(text: &str, max_chars: usize) -> Summary {
    let text = text.trim();
    let (topic, body) = match text.split_once('\n') {
        Some((first, rest))
            if first
                .trim_start()
                .to_ascii_uppercase()
                .starts_with("TOPIC:") =>
        {
            let topic = first.trim_start()[6..].trim().to_owned();
            (Some(topic).filter(|t| !t.is_empty()), rest.trim())
        }
        _ => (None, text),
    };
    let mut out = String::new();
    for line in body.lines() {
        let needed = out.chars().count() + line.chars().count() + usize::from(!out.is_empty());
        if needed > max_chars {
            break;
        }
        if !out.is_empty() {
            out.push('\n');
        }
        out.push_str(line);
    }
    if out.is_empty() {
        // One line longer than the bound: cut it.
        out = body.chars().take(max_chars.saturating_sub(1)).collect();
        out.push('…');
    }
    Summary::new(out, NAME).with_topic(topic)
}

#[async_trait]
impl Summarizer for LlmSummarizer {
    fn name(&self) -> &'static str {
        NAME
    }

    async fn summarize(&self, request: SummaryRequest<'_>) -> Result<Summary, StrategyError> {
        // A dry run (a token count) keeps nothing: no model is paid for a summary it throws
        // away; the extractive one stands in.
        let dry_run = strategy_scope::options(|o| o.dry_run).unwrap_or(false);
        if request.messages.is_empty() || dry_run {
            return self.fallback.summarize(request).await;
        }
        let up = match self.upstream() {
            Ok(up) => up,
            Err(e) => {
                fallback::fell_back(NAME, "no_endpoint", &e, self.fallback.name());
                return self.fallback.summarize(request).await;
            }
        };
        let timeout = Duration::from_millis(self.config.timeout_ms.unwrap_or(30_000).max(1));
        let max_tokens = self.config.max_tokens.unwrap_or(1024).max(1);
        let (url, body) = side_request(&up, &transcript(&request), request.max_chars, max_tokens);
        let answer = http::call(&url, &body, up.headers.clone(), timeout).await;
        let text = answer.and_then(|a| {
            answer_text(up.wire, &a).ok_or_else(|| {
                CallError::Bad(crate::protocol::BadAnswer(format!(
                    "an answer without text ({})",
                    crate::protocol::preview(&a)
                )))
            })
        });
        match text {
            Ok(text) => Ok(summary_of(&text, request.max_chars)),
            Err(e) => {
                let detail = format!("{} {url}: {e}", up.wire);
                fallback::fell_back(NAME, e.reason(), &detail, self.fallback.name());
                self.fallback.summarize(request).await
            }
        }
    }
}

impl ComponentConfig for LlmConfig {
    const KIND: ComponentKind = ComponentKind::Summarizer;
    const NAME: &'static str = "summarizer.llm";
    const DESCRIPTION: &'static str = "Asks a model (the session's upstream, or a fixed endpoint) for each summary; extractive on failure.";

    fn build(self, _cx: &BuildCx<'_>) -> Result<Component, BuildError> {
        let config = self;
        if let Some(url) = &config.base_url {
            let parsed = reqwest::Url::parse(url)
                .map_err(|e| BuildError::new(NAME, format!("base_url {url:?}: {e}")))?;
            if !matches!(parsed.scheme(), "http" | "https") {
                return Err(BuildError::new(
                    NAME,
                    format!("base_url {url:?} must be http or https"),
                ));
            }
        }
        let wire = match &config.wire {
            Some(w) => Some(
                w.parse::<Wire>()
                    .map_err(|e| BuildError::new(NAME, format!("wire: {e}")))?,
            ),
            None => None,
        };
        let fallback = fallback::summarizer(
            NAME,
            &FallbackSpec {
                fallback: None,
                fallback_params: config.fallback_params.clone(),
            },
        )?;
        Ok(Component::Summarizer(Arc::new(LlmSummarizer {
            config,
            wire,
            fallback,
        })))
    }
}

foldwire_core::register_config!(LlmConfig);

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_topic_line_is_split_off_and_the_text_cut_at_a_line() {
        let s = summary_of("TOPIC: login fix\nline one\nline two is longer", 20);
        assert_eq!(s.topic.as_deref(), Some("login fix"));
        assert_eq!(s.text, "line one");
        let s = summary_of("no topic here", 100);
        assert_eq!((s.topic, s.text.as_str()), (None, "no topic here"));
        assert_eq!(summary_of(&"x".repeat(50), 10).text.chars().count(), 10);
    }

    #[test]
    fn each_wire_answer_yields_its_text() {
        let cases = [
            (
                Wire::Anthropic,
                json!({"content": [{"type": "thinking", "thinking": "no"}, {"type": "text", "text": "yes"}]}),
            ),
            (
                Wire::OpenAiChat,
                json!({"choices": [{"message": {"content": "yes"}}]}),
            ),
            (
                Wire::OpenAiResponses,
                json!({"output": [{"type": "reasoning"}, {"type": "message", "content": [{"type": "output_text", "text": "yes"}]}]}),
            ),
            (
                Wire::Gemini,
                json!({"candidates": [{"content": {"parts": [{"text": "no", "thought": true}, {"text": "yes"}]}}]}),
            ),
        ];
        for (wire, answer) in cases {
            assert_eq!(answer_text(wire, &answer).as_deref(), Some("yes"), "{wire}");
            assert_eq!(answer_text(wire, &json!({"error": {}})), None, "{wire}");
        }
    }
}
