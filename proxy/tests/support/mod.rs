//! A scripted mock provider for the compress-loop tests: speaks the four wires with real
//! SSE framing (or JSON bodies), and answers by the script in `x-mock-script`:
//! - `compress`: first a `compress` call on the first listed range (with some text before
//!   it), then, once the request carries its result, the text `All done.`;
//! - `restore` / `search`: a `restore` call for `b1` / a `search_context` call, then text;
//! - `compress-all`: one `compress` call over every listed range, then text;
//! - `restore-image`: a `restore` call for the ref the first archived-media placeholder
//!   names, then text;
//! - `restore-list`: a `restore` call with the id `list`, then, once the request carries
//!   the listing, the text `Listed.`;
//! - `always`: a `compress` call every time (the round cap must end it);
//! - `client-tool`: a `compress` call and a client `bash` call in the same answer;
//! - `overflow`: the wire's context-overflow error (limit 12000);
//! - `agent`: a `bash` call every turn, with a `compress` call first every 7th client turn;
//! - `sdk`: the SDK suite's conversation (see [`sdk_turn`]): per client turn `Turn N:`, text,
//!   a client `bash` call then text, or text and a `compress` call then text;
//! - `cli`: a real agent CLI's session (see [`cli_script`]): its own shell tool six times,
//!   a `compress` call once a range is listed, then [`CLI_FINAL`];
//! - anything else: the text `ok`.
//!
//! Whatever the script, a request the real provider would refuse (tool calls and results
//! that do not pair up, empty messages, calls back without the model's signed reasoning;
//! see [`provider_rules`]) gets its 400, and a request for a model that reasons (thinking
//! on, encrypted reasoning asked for, a Gemini 3 model) gets answers that start with signed
//! reasoning, as theirs do. With `x-mock-refuse: FIELD`, a request that carries `FIELD`
//! anywhere gets a 400 (a provider that does not take back a field of its own answers; the
//! Anthropic answers carry `caller` on their calls, as the real API's do).
//!
//! Whatever the script, a `summarizer.llm` side request is answered with
//! `TOPIC: side summary` and [`MOCK_LLM_SUMMARY`].
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

pub mod agent;
pub mod cli;
pub mod provider_rules;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use axum::body::Body;
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use bytes::Bytes;
use foldwire_core::Wire;
use foldwire_proxy::serve::{self, ServeConfig, config::Upstreams};
use serde_json::{Value, json};

/// Prompt tokens the mock reports for a request body: what it received, counted the way
/// foldwire's estimator counts (bytes / 4), as a real provider counts what it is sent.
pub fn prompt_tokens(body: &[u8]) -> u64 {
    (body.len() as u64).div_ceil(4)
}

/// What the mock received.
#[derive(Debug, Clone)]
pub struct Received {
    pub path: String,
    pub body: Bytes,
    pub method: String,
    pub headers: HeaderMap,
}

/// A Responses answer the provider stored: the whole input it answered, and its output.
pub type StoredResponse = (Vec<Value>, Vec<Value>);

#[derive(Clone, Default)]
pub struct Mock {
    pub received: Arc<Mutex<Vec<Received>>>,
    /// The script for requests without `x-mock-script` (clients that cannot set headers).
    pub default_script: String,
    /// Why each request the provider's pairing rules refuse was refused.
    pub refused: Arc<Mutex<Vec<String>>>,
    /// The Responses answers the provider stored (`store` not false), by response id: the
    /// whole input they answered and their output, which a later request continues by
    /// naming the id in `previous_response_id`.
    pub stored: Arc<Mutex<std::collections::HashMap<String, StoredResponse>>>,
}

impl Mock {
    pub fn bodies(&self) -> Vec<Bytes> {
        self.received
            .lock()
            .unwrap()
            .iter()
            .map(|r| r.body.clone())
            .collect()
    }
}

pub fn wire_of_path(path: &str) -> Wire {
    if path.contains("/v1/messages") {
        Wire::Anthropic
    } else if path.contains("chat/completions") {
        Wire::OpenAiChat
    } else if path.contains("/responses") {
        Wire::OpenAiResponses
    } else {
        Wire::Gemini
    }
}

/// One piece of an answer.
#[derive(Debug, Clone)]
pub enum Piece {
    Text(String),
    /// Reasoning with its signature: an Anthropic thinking block, a Responses reasoning item
    /// (the signature as its encrypted content), a Gemini thought part whose signature goes
    /// on the next function call.
    Thinking {
        text: String,
        signature: String,
    },
    Call {
        id: String,
        name: String,
        args: Value,
    },
    /// A Responses custom tool call (freeform input), as Codex's `exec` takes JavaScript.
    Custom {
        id: String,
        name: String,
        input: String,
    },
}

/// The first `mNNNNN..mNNNNN` span in a text.
fn first_range(text: &str) -> Option<(String, String)> {
    let b = text.as_bytes();
    let is_ref = |i: usize| {
        b.get(i) == Some(&b'm') && (1..=5).all(|k| b.get(i + k).is_some_and(u8::is_ascii_digit))
    };
    (0..b.len()).find_map(|i| {
        (is_ref(i) && b.get(i + 6..i + 8) == Some(b"..") && is_ref(i + 8))
            .then(|| (text[i..i + 6].to_owned(), text[i + 8..i + 14].to_owned()))
    })
}

fn has_proxy_result(wire: Wire, body: &str) -> bool {
    match wire {
        Wire::Gemini => body.contains("\"functionResponse\":{\"name\":\"compress\""),
        _ => body.contains("fwcall_"),
    }
}

/// What every scripted model summary adds after its first sentence: long enough that the
/// minimum summary length the proxy asks of a model (acp §26 #61, at most 400 characters)
/// never refuses a scripted fold, whatever range it replaces.
const SUMMARY_DETAIL: &str = "It covered how the project is laid out, which build and test commands were run and what they printed, the files that were read and the ones that changed, the errors met on the way and how each of them was settled, and the choices made about what to do next and why; none of it is needed verbatim any more, and whatever still is can be restored by its block id or found again by searching the session's context.";

/// How the mock recognizes a `summarizer.llm` side request: the start of its prompt.
pub const SUMMARY_SIDE_REQUEST: &str = "You write the summary that replaces part of";

/// The text the mock answers a `summarizer.llm` side request with.
pub const MOCK_LLM_SUMMARY: &str =
    "Model summary: the user notes covered lorem ipsum in src/notes.rs; open question: none";

/// A model-written summary: `lead` and [`SUMMARY_DETAIL`].
fn summary(lead: &str) -> String {
    format!("{lead} {SUMMARY_DETAIL}")
}

fn compress_call(n: usize, body: &str) -> Piece {
    let (start, end) = first_range(body).unwrap_or(("m00001".into(), "m00002".into()));
    Piece::Call {
        id: format!("fwcall_{n}"),
        name: "compress".into(),
        args: json!({"ranges": [{"start": start, "end": end, "summary": summary("Early chatter about the setup; nothing needed verbatim."), "topic": "setup"}]}),
    }
}

/// Every `mNNNNN..mNNNNN` span in a text.
fn all_ranges(text: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(r) = first_range(rest) {
        let at = rest.find(&format!("{}..{}", r.0, r.1)).unwrap() + 14;
        out.push(r);
        rest = &rest[at..];
    }
    out
}

/// The first run of summaries the trailing note offers (`- bN..bM:`).
fn first_block_run(text: &str) -> Option<(String, String)> {
    let at = text.find("- b")? + 2;
    let rest = &text[at..];
    let (start, rest) = rest.split_once("..")?;
    let end: String = rest.chars().take_while(|c| *c != ':').collect();
    Some((start.to_owned(), end))
}

/// The ref named by the first `[image mNNNNN archived` placeholder line.
fn archived_ref(text: &str) -> Option<String> {
    let at = text.find("[image m")? + "[image ".len();
    Some(text[at..at + 6].to_owned())
}

fn script(name: &str, wire: Wire, n: usize, body: &str) -> Vec<Piece> {
    if body.contains(SUMMARY_SIDE_REQUEST) {
        // A `summarizer.llm` side request, whatever the script.
        return vec![Piece::Text(format!(
            "TOPIC: side summary\n{MOCK_LLM_SUMMARY} (side request {n})"
        ))];
    }
    let done = has_proxy_result(wire, body);
    match name {
        "compress-all" if !body.contains("folded into b") => {
            let ranges: Vec<Value> = all_ranges(body)
                .into_iter()
                .map(|(start, end)| json!({"start": start, "end": end, "summary": summary("Old notes."), "topic": "notes"}))
                .collect();
            vec![Piece::Call {
                id: format!("fwcall_{n}"),
                name: "compress".into(),
                args: json!({ "ranges": ranges }),
            }]
        }
        "compress-all" => vec![Piece::Text("All done.".into())],
        "restore-image" if !body.contains("restored exactly as sent") => vec![Piece::Call {
            id: format!("fwcall_{n}"),
            name: "restore".into(),
            args: json!({"id": archived_ref(body).unwrap_or_else(|| "m99999".into())}),
        }],
        "restore-image" => vec![Piece::Text("Looked it up.".into())],
        "restore-list" if !body.contains("in this session") => vec![Piece::Call {
            id: format!("fwcall_{n}"),
            name: "restore".into(),
            args: json!({"id": "list"}),
        }],
        "restore-list" => vec![Piece::Text("Listed.".into())],
        "compress" if !done => vec![
            Piece::Text("Let me tidy up.".into()),
            compress_call(n, body),
        ],
        "compress" => vec![Piece::Text("All done.".into())],
        // acp §26 #61: a summary far too short for what it replaces.
        "compress-short" if !done => {
            let (start, end) = first_range(body).unwrap_or(("m00001".into(), "m00002".into()));
            vec![Piece::Call {
                id: format!("fwcall_{n}"),
                name: "compress".into(),
                args: json!({"ranges": [{"start": start, "end": end, "summary": "Old stuff."}]}),
            }]
        }
        "compress-short" => vec![Piece::Text("Understood.".into())],
        "compress-summaries" if !done => match first_block_run(body) {
            Some((start, end)) => vec![Piece::Call {
                id: format!("fwcall_{n}"),
                name: "compress".into(),
                args: json!({"ranges": [{"start": start, "end": end, "summary": summary("Earlier notes, folded again."), "topic": "notes"}]}),
            }],
            None => vec![Piece::Text("Nothing to fold.".into())],
        },
        "compress-summaries" => vec![Piece::Text("All done.".into())],
        "restore" if !done => vec![Piece::Call {
            id: format!("fwcall_{n}"),
            name: "restore".into(),
            args: json!({"id": "b1"}),
        }],
        "search" if !done => vec![Piece::Call {
            id: format!("fwcall_{n}"),
            name: "search_context".into(),
            args: json!({"query": "setup chatter"}),
        }],
        "restore" | "search" => vec![Piece::Text("Looked it up.".into())],
        "always" => vec![Piece::Text(format!("Round {n}.")), compress_call(n, body)],
        "client-tool" => vec![
            compress_call(n, body),
            Piece::Call {
                id: format!("client_{n}"),
                name: "bash".into(),
                args: json!({"cmd": "ls"}),
            },
        ],
        "cli" => cli_script(wire, n, body),
        "cli-lite" => lite_script(n, body),
        "agent" => {
            let turn = match wire {
                Wire::Gemini => body
                    .matches("\"functionResponse\":{\"name\":\"bash\"")
                    .count(),
                _ => body.matches("client_").count(),
            };
            let mut out = Vec::new();
            let last_is_proxy = match wire {
                Wire::Gemini => {
                    body.rfind("\"functionResponse\":{\"name\":\"compress\"")
                        > body.rfind("\"functionResponse\":{\"name\":\"bash\"")
                }
                _ => body.rfind("fwcall_") > body.rfind("client_"),
            };
            if turn % 7 == 3 && !last_is_proxy && offers(body, "compress") {
                out.push(compress_call(n, body));
            } else {
                out.push(Piece::Text(format!("Step {turn}.")));
                out.push(Piece::Call {
                    id: format!("client_{n}"),
                    name: "bash".into(),
                    args: json!({"cmd": format!("step {turn}")}),
                });
            }
            out
        }
        "sdk" => sdk_turn(wire, n, body),
        "side" => vec![Piece::Text("{\"route\": \"main\"}".into())],
        _ => vec![Piece::Text("ok".into())],
    }
}

/// A Gemini search result carried back to the model.
const SEARCH_RESULT: &str = "\"functionResponse\":{\"name\":\"search_context\"";

/// The answer text of SDK-suite turn `t` (tests/sdk/clients.py computes the same).
pub fn sdk_answer(t: usize) -> String {
    format!("Answer {t}. {}", "lorem ipsum dolor sit amet ".repeat(40))
}

/// One answer of the SDK suite's conversation. The turn is the highest `Turn N:` in the
/// request; by `N % 5`: 1 a client `bash` call (`Running step N.`), answered with
/// `Ran step N.` once its result is back; 3 `Let me tidy up. ` and a `compress` call (a
/// `search_context` call after `Let me look back. ` when `N % 10 == 8`), then the answer
/// once the proxy's result is back (when the request offers those tools; else the answer);
/// otherwise the answer.
fn sdk_turn(wire: Wire, n: usize, body: &str) -> Vec<Piece> {
    let t = body
        .match_indices("Turn ")
        .filter_map(|(i, _)| {
            let digits: String = body[i + 5..]
                .chars()
                .take_while(char::is_ascii_digit)
                .collect();
            (body[i + 5 + digits.len()..].starts_with(':')).then(|| digits.parse::<usize>().ok())?
        })
        .max()
        .unwrap_or(0);
    let step = format!("step-{t}-run");
    match if t % 10 == 8 { 8 } else { t % 5 } {
        1 if body.contains(&step) => vec![Piece::Text(format!("Ran step {t}."))],
        1 => vec![
            Piece::Text(format!("Running step {t}.")),
            Piece::Call {
                id: format!("client_{n}"),
                name: "bash".into(),
                args: json!({ "cmd": step }),
            },
        ],
        3 if !has_proxy_result(wire, body) && offers(body, "compress") => {
            vec![
                Piece::Text("Let me tidy up. ".into()),
                compress_call(n, body),
            ]
        }
        8 if !body.contains("fwcall_")
            && !body.contains(SEARCH_RESULT)
            && offers(body, "search_context") =>
        {
            vec![
                Piece::Text("Let me look back. ".into()),
                Piece::Call {
                    id: format!("fwcall_{n}"),
                    name: "search_context".into(),
                    args: json!({"query": "step"}),
                },
            ]
        }
        _ => vec![Piece::Text(sdk_answer(t))],
    }
}

/// Whether a request offers the model the tool `name` (as the proxy writes its tools: a
/// model calls only what it is offered).
fn offers(body: &str, name: &str) -> bool {
    body.contains(&format!("\"name\":\"{name}\""))
}

/// What the CLI script's model writes before its compress call.
pub const CLI_BEFORE_COMPRESS: &str = "Tidying up first. ";

/// The steps of a `cli-lite` session.
pub const LITE_STEPS: usize = 8;

/// The last text of a `cli-lite` session.
pub const LITE_FINAL: &str = "Finished: eight steps through exec.";

/// What the output of `cli-lite` step `k` holds (the command prints it in capitals, so the
/// call's own input, in lower case, never matches).
pub fn lite_done(k: usize) -> String {
    format!("FW-LITE-{k}-DONE")
}

/// Codex's default ("Responses lite") session: each step runs through Codex's `exec` tool
/// (JavaScript calling its nested `exec_command`), with an output large enough that folds
/// come, then [`LITE_FINAL`]. The next step follows the highest one whose output the
/// request holds: the latest output is always in the recent window, earlier ones may be
/// folded.
fn lite_script(n: usize, body: &str) -> Vec<Piece> {
    let done = (1..=LITE_STEPS)
        .filter(|k| body.contains(&lite_done(*k)))
        .max()
        .unwrap_or(0);
    if done == LITE_STEPS {
        return vec![Piece::Text(LITE_FINAL.into())];
    }
    let k = done + 1;
    let js = format!(
        "const r = await tools.exec_command({{cmd: \"echo fw-lite-{k}-done | tr a-z A-Z; seq 1 3000\"}});\ntext(typeof r === 'string' ? r : JSON.stringify(r));"
    );
    vec![
        Piece::Text(format!("Running step {k}.")),
        Piece::Custom {
            id: format!("client_{n}"),
            name: "exec".into(),
            input: js,
        },
    ]
}

/// The last text of a `cli` session.
pub const CLI_FINAL: &str = "Finished: six shell steps and one compress.";
/// Shell names of the agent CLIs: Claude Code, Codex CLI (three generations), Gemini CLI.
const CLI_SHELLS: [&str; 5] = [
    "Bash",
    "shell",
    "shell_command",
    "exec_command",
    "run_shell_command",
];

/// The CLI's shell tool in a request (any wire): its name and parameter schema.
pub fn cli_shell(request: &Value) -> Option<(String, Value)> {
    let tools = request["tools"].as_array()?;
    let decls = tools.iter().flat_map(|t| {
        let nested = t["functionDeclarations"].as_array().cloned();
        nested.unwrap_or_else(|| vec![t["function"].clone(), t.clone()])
    });
    decls
        .filter_map(|d| {
            let name = d["name"].as_str()?;
            let schema = ["input_schema", "parameters", "parametersJsonSchema"]
                .iter()
                .map(|k| d[*k].clone())
                .find(Value::is_object)
                .unwrap_or_default();
            Some((name.to_owned(), schema))
        })
        .find(|(name, _)| CLI_SHELLS.contains(&name.as_str()))
}

/// The call id prefix of the `cli` script's tool search.
pub const CLI_SEARCH_ID: &str = "call_tool_search_";
/// The deferred tool the `cli` script loads through a CLI's tool search.
pub const CLI_LOADED_TOOL: &str = "WebFetch";

/// Shell steps of a `cli` session.
pub const CLI_STEPS: usize = 6;

/// `cli`: step k prints `fw-step-k-42` and some 8 kB of numbers with the CLI's own shell
/// tool (by `printf`, so the marker is in the history only if the CLI ran the command); the
/// step is known from the markers in the history. After step 3, a CLI that offers a
/// `ToolSearch` tool gets one call to it, loading [`CLI_LOADED_TOOL`]. From step 3 on (step 5
/// after a tool search, once it left the recent window), the first request that
/// lists a compressible range (or the last step's, listed or not) gets
/// [`CLI_BEFORE_COMPRESS`] and a `compress` call on it, once (the proxy answers it; its
/// summary stays in the history; a model that reasons thinks again between the two); after
/// the last step, the text [`CLI_FINAL`]. Shell calls come without text. Side requests (no shell tool: titles, Gemini CLI's routing)
/// get JSON that fits their response schema, else `ok`.
fn cli_script(wire: Wire, n: usize, body: &str) -> Vec<Piece> {
    let request: Value = serde_json::from_str(body).unwrap_or_default();
    let Some((tool, schema)) = cli_shell(&request) else {
        let schema = [
            "/generationConfig/responseJsonSchema",
            "/generationConfig/responseSchema",
        ]
        .iter()
        .find_map(|p| request.pointer(p));
        return vec![Piece::Text(match schema {
            Some(schema) => fitting(schema).to_string(),
            None => "ok".into(),
        })];
    };
    let step = (1..=CLI_STEPS)
        .rev()
        .find(|k| body.contains(&format!("fw-step-{k}-42")))
        .unwrap_or(0);
    let compressed = has_proxy_result(wire, body) || body.contains("Early chatter about the setup");
    // After step 3, a CLI with a tool search (Claude Code's `ToolSearch`) loads a deferred
    // tool, once: past the head window, where a fold two steps later would take it.
    let searched = body.contains(CLI_SEARCH_ID);
    if step == 3
        && !searched
        && request["tools"]
            .to_string()
            .contains("\"name\":\"ToolSearch\"")
    {
        return vec![Piece::Call {
            id: format!("{CLI_SEARCH_ID}{n}"),
            name: "ToolSearch".into(),
            args: json!({ "query": format!("select:{CLI_LOADED_TOOL}") }),
        }];
    }
    let compress_from = if searched { 5 } else { 3 };
    if step >= compress_from && !compressed && (first_range(body).is_some() || step == CLI_STEPS) {
        // With a word first, so a model that reasons thinks again before the call.
        return vec![
            Piece::Text(CLI_BEFORE_COMPRESS.into()),
            compress_call(n, body),
        ];
    }
    if step == CLI_STEPS {
        return vec![Piece::Text(CLI_FINAL.into())];
    }
    let command = format!(
        "printf 'fw-step-%s-%s\\n' {} 42; seq -s ' ' 1000 2600",
        step + 1
    );
    let props = &schema["properties"];
    let mut args = if props.get("cmd").is_some() {
        json!({ "cmd": command })
    } else if props["command"]["type"] == "array" {
        json!({ "command": ["bash", "-lc", command] })
    } else {
        json!({ "command": command })
    };
    if props.get("description").is_some() {
        args["description"] = json!("Print the step marker");
    }
    vec![Piece::Call {
        id: format!("call_cli_{n}"),
        name: tool,
        args,
    }]
}

/// A value that fits a JSON schema: required properties filled, the first enum value,
/// 1 for numbers.
fn fitting(schema: &Value) -> Value {
    if let Some(first) = schema["enum"].get(0) {
        return first.clone();
    }
    match schema["type"]
        .as_str()
        .map(str::to_ascii_lowercase)
        .as_deref()
    {
        Some("object") => {
            let required = schema["required"].as_array().cloned().unwrap_or_default();
            let fields = required
                .iter()
                .filter_map(Value::as_str)
                .map(|k| (k.to_owned(), fitting(&schema["properties"][k])));
            Value::Object(fields.collect())
        }
        Some("array") => json!([]),
        Some("integer" | "number") => json!(1),
        Some("boolean") => json!(false),
        _ => json!("ok"),
    }
}

fn sse(name: Option<&str>, data: &Value) -> String {
    match name {
        Some(n) => format!("event: {n}\ndata: {data}\n\n"),
        None => format!("data: {data}\n\n"),
    }
}

/// A model that reasons starts every answer with its reasoning, signed; when it wrote
/// something before its first call, it thinks again right before the call (interleaved
/// thinking), so the answer's order matters to whoever sends it back.
fn think_between(pieces: &mut Vec<Piece>, n: usize) {
    let thought = |text: String| Piece::Thinking {
        signature: provider_rules::sign(&text),
        text,
    };
    let first_call = pieces
        .iter()
        .position(|p| matches!(p, Piece::Call { .. } | Piece::Custom { .. }));
    if let Some(at) = first_call.filter(|at| *at > 0) {
        pieces.insert(at, thought(format!("Choosing a call for request {n}.")));
    }
    pieces.insert(0, thought(format!("Thinking about request {n}.")));
}

fn has_calls(pieces: &[Piece]) -> bool {
    pieces
        .iter()
        .any(|p| matches!(p, Piece::Call { .. } | Piece::Custom { .. }))
}

fn anthropic(pieces: &[Piece], stream: bool, n: usize, prompt: u64) -> String {
    let stop = if has_calls(pieces) {
        "tool_use"
    } else {
        "end_turn"
    };
    if !stream {
        let content: Vec<Value> = pieces
            .iter()
            .map(|p| match p {
                Piece::Text(t) => json!({"type": "text", "text": t}),
                Piece::Thinking { text, signature } => {
                    json!({"type": "thinking", "thinking": text, "signature": signature})
                }
                Piece::Call { id, name, args } => {
                    json!({"type": "tool_use", "id": id, "name": name, "input": args, "caller": {"type": "direct"}})
                }
                Piece::Custom { .. } => unreachable!("a custom tool call is a Responses item"),
            })
            .collect();
        return json!({"id": format!("msg_{n}"), "type": "message", "role": "assistant", "model": "m", "content": content, "stop_reason": stop, "usage": {"input_tokens": prompt, "output_tokens": 9}}).to_string();
    }
    let mut out = sse(
        Some("message_start"),
        &json!({"type": "message_start", "message": {"id": format!("msg_{n}"), "type": "message", "role": "assistant", "model": "m", "content": [], "stop_reason": null, "usage": {"input_tokens": prompt, "output_tokens": 1}}}),
    );
    out += &sse(Some("ping"), &json!({"type": "ping"}));
    for (i, p) in pieces.iter().enumerate() {
        match p {
            Piece::Text(t) => {
                out += &sse(
                    Some("content_block_start"),
                    &json!({"type": "content_block_start", "index": i, "content_block": {"type": "text", "text": ""}}),
                );
                out += &sse(
                    Some("content_block_delta"),
                    &json!({"type": "content_block_delta", "index": i, "delta": {"type": "text_delta", "text": t}}),
                );
            }
            Piece::Thinking { text, signature } => {
                out += &sse(
                    Some("content_block_start"),
                    &json!({"type": "content_block_start", "index": i, "content_block": {"type": "thinking", "thinking": "", "signature": ""}}),
                );
                out += &sse(
                    Some("content_block_delta"),
                    &json!({"type": "content_block_delta", "index": i, "delta": {"type": "thinking_delta", "thinking": text}}),
                );
                out += &sse(
                    Some("content_block_delta"),
                    &json!({"type": "content_block_delta", "index": i, "delta": {"type": "signature_delta", "signature": signature}}),
                );
            }
            Piece::Custom { .. } => unreachable!("a custom tool call is a Responses item"),
            Piece::Call { id, name, args } => {
                out += &sse(
                    Some("content_block_start"),
                    &json!({"type": "content_block_start", "index": i, "content_block": {"type": "tool_use", "id": id, "name": name, "input": {}, "caller": {"type": "direct"}}}),
                );
                out += &sse(
                    Some("content_block_delta"),
                    &json!({"type": "content_block_delta", "index": i, "delta": {"type": "input_json_delta", "partial_json": args.to_string()}}),
                );
            }
        }
        out += &sse(
            Some("content_block_stop"),
            &json!({"type": "content_block_stop", "index": i}),
        );
    }
    out += &sse(
        Some("message_delta"),
        &json!({"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": null}, "usage": {"output_tokens": 9}}),
    );
    out += &sse(Some("message_stop"), &json!({"type": "message_stop"}));
    out
}

fn chat(pieces: &[Piece], stream: bool, n: usize, prompt: u64) -> String {
    let cid = format!("chatcmpl-{n}");
    let finish = if has_calls(pieces) {
        "tool_calls"
    } else {
        "stop"
    };
    let text: String = pieces
        .iter()
        .filter_map(|p| match p {
            Piece::Text(t) => Some(t.as_str()),
            _ => None,
        })
        .collect();
    let calls: Vec<Value> = pieces
        .iter()
        .filter_map(|p| match p {
            Piece::Call { id, name, args } => Some((id, name, args)),
            _ => None,
        })
        .enumerate()
        .map(|(k, (id, name, args))| json!({"index": k, "id": id, "type": "function", "function": {"name": name, "arguments": args.to_string()}}))
        .collect();
    // Thoughts as OpenRouter sends a signing model's: `reasoning_details` entries, one per
    // thought, each signed.
    let details: Vec<Value> = pieces
        .iter()
        .filter_map(|p| match p {
            Piece::Thinking { text, signature } => Some((text, signature)),
            _ => None,
        })
        .enumerate()
        .map(|(k, (text, signature))| json!({"type": "reasoning.text", "text": text, "signature": signature, "format": "anthropic-claude-v1", "index": k}))
        .collect();
    let usage =
        json!({"prompt_tokens": prompt, "completion_tokens": 9, "total_tokens": prompt + 9});
    if !stream {
        let mut message = json!({"role": "assistant", "content": if text.is_empty() { Value::Null } else { Value::from(text) }});
        if !details.is_empty() {
            message["reasoning_details"] = Value::from(details);
        }
        if !calls.is_empty() {
            let calls: Vec<Value> = calls
                .into_iter()
                .map(|mut c| {
                    c.as_object_mut().unwrap().remove("index");
                    c
                })
                .collect();
            message["tool_calls"] = Value::from(calls);
        }
        return json!({"id": cid, "object": "chat.completion", "choices": [{"index": 0, "message": message, "finish_reason": finish}], "usage": usage}).to_string();
    }
    let chunk = |delta: Value, finish: Value| {
        sse(
            None,
            &json!({"id": cid, "object": "chat.completion.chunk", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}),
        )
    };
    let mut out = chunk(json!({"role": "assistant", "content": ""}), Value::Null);
    for d in details {
        // Each entry in three deltas: two halves of its text, then its signature.
        let text = d["text"].as_str().unwrap();
        let half = text.len() / 2;
        for piece in [&text[..half], &text[half..]] {
            let mut part = d.clone();
            part["text"] = Value::from(piece);
            part.as_object_mut().unwrap().remove("signature");
            out += &chunk(
                json!({"reasoning": piece, "reasoning_details": [part]}),
                Value::Null,
            );
        }
        let signed =
            json!({"type": "reasoning.text", "signature": d["signature"], "index": d["index"]});
        out += &chunk(json!({"reasoning_details": [signed]}), Value::Null);
    }
    if !text.is_empty() {
        out += &chunk(json!({"content": text}), Value::Null);
    }
    for c in calls {
        out += &chunk(json!({"tool_calls": [c]}), Value::Null);
    }
    out += &chunk(json!({}), Value::from(finish));
    out += &sse(
        None,
        &json!({"id": cid, "object": "chat.completion.chunk", "choices": [], "usage": usage}),
    );
    out += "data: [DONE]\n\n";
    out
}

/// A Responses request that names a stored response (`previous_response_id`) as the API
/// reads it: the stored response's input and output, then its own input. The calls the
/// stored response ended with must be answered in its input. `None` when it names none.
fn responses_chain(mock: &Mock, body: &Value) -> Option<Result<Value, String>> {
    let previous = body["previous_response_id"].as_str()?;
    let Some((input, output)) = mock.stored.lock().unwrap().get(previous).cloned() else {
        return Some(Err(format!(
            "Previous response with id '{previous}' not found."
        )));
    };
    let new = match &body["input"] {
        Value::String(text) => vec![json!({"role": "user", "content": text})],
        Value::Array(items) => items.clone(),
        _ => Vec::new(),
    };
    let unanswered = output.iter().find(|item| {
        item["type"] == "function_call"
            && !new
                .iter()
                .any(|i| i["type"] == "function_call_output" && i["call_id"] == item["call_id"])
    });
    if let Some(call) = unanswered {
        return Some(Err(format!(
            "No tool output found for function call {}.",
            call["call_id"].as_str().unwrap_or_default()
        )));
    }
    let mut whole = body.clone();
    whole["input"] = Value::Array(input.into_iter().chain(output).chain(new).collect());
    whole
        .as_object_mut()
        .unwrap()
        .remove("previous_response_id");
    Some(Ok(whole))
}

/// The output items of a Responses answer.
fn responses_items(pieces: &[Piece], n: usize) -> Vec<Value> {
    pieces
        .iter()
        .enumerate()
        .map(|(i, p)| match p {
            Piece::Text(t) => json!({"type": "message", "id": format!("msg_{n}_{i}"), "role": "assistant", "status": "completed", "content": [{"type": "output_text", "text": t, "annotations": []}]}),
            Piece::Thinking { text, signature } => json!({"type": "reasoning", "id": format!("rs_{n}_{i}"), "summary": [{"type": "summary_text", "text": text}], "encrypted_content": signature}),
            Piece::Call { id, name, args } => json!({"type": "function_call", "id": format!("fc_{n}_{i}"), "call_id": id, "name": name, "arguments": args.to_string(), "status": "completed"}),
            Piece::Custom { id, name, input } => json!({"type": "custom_tool_call", "id": format!("ctc_{n}_{i}"), "call_id": id, "name": name, "input": input, "status": "completed"}),
        })
        .collect()
}

fn responses(pieces: &[Piece], stream: bool, n: usize, prompt: u64) -> String {
    let items = responses_items(pieces, n);
    let usage = json!({"input_tokens": prompt, "output_tokens": 9, "total_tokens": prompt + 9});
    let rid = format!("resp_{n}");
    let whole = json!({"id": rid, "object": "response", "created_at": 0, "model": "m", "status": "completed", "output": items, "usage": usage});
    if !stream {
        return whole.to_string();
    }
    let mut seq = 0;
    let mut ev = |v: Value| {
        let mut v = v;
        v["sequence_number"] = Value::from(seq);
        seq += 1;
        let name = v["type"].as_str().unwrap().to_owned();
        sse(Some(&name), &v)
    };
    let mut out = ev(
        json!({"type": "response.created", "response": {"id": rid, "object": "response", "created_at": 0, "model": "m", "status": "in_progress", "output": []}}),
    );
    out += &ev(
        json!({"type": "response.in_progress", "response": {"id": rid, "object": "response", "created_at": 0, "model": "m", "status": "in_progress", "output": []}}),
    );
    for (i, (p, item)) in pieces.iter().zip(&items).enumerate() {
        match p {
            Piece::Text(t) => {
                let (mid, part) = (
                    format!("msg_{n}_{i}"),
                    json!({"type": "output_text", "text": "", "annotations": []}),
                );
                out += &ev(
                    json!({"type": "response.output_item.added", "output_index": i, "item": {"type": "message", "id": mid, "role": "assistant", "status": "in_progress", "content": []}}),
                );
                out += &ev(
                    json!({"type": "response.content_part.added", "item_id": mid, "output_index": i, "content_index": 0, "part": part}),
                );
                out += &ev(
                    json!({"type": "response.output_text.delta", "item_id": mid, "output_index": i, "content_index": 0, "delta": t}),
                );
                out += &ev(
                    json!({"type": "response.output_text.done", "item_id": mid, "output_index": i, "content_index": 0, "text": t}),
                );
                out += &ev(
                    json!({"type": "response.content_part.done", "item_id": mid, "output_index": i, "content_index": 0, "part": {"type": "output_text", "text": t, "annotations": []}}),
                );
            }
            Piece::Thinking { .. } => {
                out += &ev(
                    json!({"type": "response.output_item.added", "output_index": i, "item": {"type": "reasoning", "id": format!("rs_{n}_{i}"), "summary": []}}),
                );
            }
            Piece::Custom { id, name, input } => {
                let item_id = format!("ctc_{n}_{i}");
                out += &ev(
                    json!({"type": "response.output_item.added", "output_index": i, "item": {"type": "custom_tool_call", "id": item_id, "call_id": id, "name": name, "input": "", "status": "in_progress"}}),
                );
                out += &ev(
                    json!({"type": "response.custom_tool_call_input.delta", "item_id": item_id, "output_index": i, "delta": input}),
                );
                out += &ev(
                    json!({"type": "response.custom_tool_call_input.done", "item_id": item_id, "output_index": i, "input": input}),
                );
            }
            Piece::Call { id, name, args } => {
                out += &ev(
                    json!({"type": "response.output_item.added", "output_index": i, "item": {"type": "function_call", "id": format!("fc_{n}_{i}"), "call_id": id, "name": name, "arguments": "", "status": "in_progress"}}),
                );
                out += &ev(
                    json!({"type": "response.function_call_arguments.delta", "item_id": format!("fc_{n}_{i}"), "output_index": i, "delta": args.to_string()}),
                );
                out += &ev(
                    json!({"type": "response.function_call_arguments.done", "item_id": format!("fc_{n}_{i}"), "output_index": i, "arguments": args.to_string()}),
                );
            }
        }
        out += &ev(json!({"type": "response.output_item.done", "output_index": i, "item": item}));
    }
    out += &ev(json!({"type": "response.completed", "response": whole}));
    out
}

fn gemini(pieces: &[Piece], stream: bool, n: usize, prompt: u64) -> String {
    let rid = format!("gresp-{n}");
    let usage = json!({"promptTokenCount": prompt, "candidatesTokenCount": 9, "totalTokenCount": prompt + 9});
    // A thought's signature rides on the function call after it, as Gemini 3 sends it.
    let mut signed: Option<&str> = None;
    let parts: Vec<Value> = pieces
        .iter()
        .map(|p| match p {
            Piece::Text(t) => json!({"text": t}),
            Piece::Thinking { text, signature } => {
                signed = Some(signature);
                json!({"text": text, "thought": true})
            }
            Piece::Custom { .. } => unreachable!("a custom tool call is a Responses item"),
            Piece::Call { name, args, .. } => {
                let mut part = json!({"functionCall": {"name": name, "args": args}});
                if let Some(signature) = signed.take() {
                    part["thoughtSignature"] = Value::from(signature);
                }
                part
            }
        })
        .collect();
    if !stream {
        return json!({"candidates": [{"content": {"role": "model", "parts": parts}, "finishReason": "STOP", "index": 0}], "usageMetadata": usage, "responseId": rid}).to_string();
    }
    let mut out = String::new();
    let n = parts.len();
    for (i, part) in parts.into_iter().enumerate() {
        let mut c = json!({"candidates": [{"content": {"role": "model", "parts": [part]}, "index": 0}], "responseId": rid});
        if i + 1 == n {
            c["candidates"][0]["finishReason"] = json!("STOP");
            c["usageMetadata"] = usage.clone();
        }
        out += &sse(None, &c);
    }
    out
}

/// A provider's 400 body for an invalid request, in its wire's error shape.
fn invalid_request(wire: Wire, message: &str) -> Value {
    match wire {
        Wire::Anthropic => {
            json!({"type": "error", "error": {"type": "invalid_request_error", "message": message}})
        }
        Wire::OpenAiChat | Wire::OpenAiResponses => {
            json!({"error": {"message": message, "type": "invalid_request_error", "param": "messages", "code": null}})
        }
        Wire::Gemini => {
            json!({"error": {"code": 400, "message": message, "status": "INVALID_ARGUMENT"}})
        }
    }
}

fn overflow(wire: Wire) -> (StatusCode, String) {
    let body = match wire {
        Wire::Anthropic => {
            json!({"type": "error", "error": {"type": "invalid_request_error", "message": "prompt is too long: 30120 tokens > 12000 maximum"}})
        }
        Wire::OpenAiChat | Wire::OpenAiResponses => {
            json!({"error": {"message": "This model's maximum context length is 12000 tokens. However, your messages resulted in 30120 tokens.", "type": "invalid_request_error", "param": "messages", "code": "context_length_exceeded"}})
        }
        Wire::Gemini => {
            json!({"error": {"code": 400, "message": "The input token count (30120) exceeds the maximum number of tokens allowed (12000).", "status": "INVALID_ARGUMENT"}})
        }
    };
    (StatusCode::BAD_REQUEST, body.to_string())
}

async fn handler(
    axum::extract::State(mock): axum::extract::State<Mock>,
    method: axum::http::Method,
    uri: axum::http::Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let n = {
        let mut r = mock.received.lock().unwrap();
        r.push(Received {
            path: uri.to_string(),
            body: body.clone(),
            method: method.to_string(),
            headers: headers.clone(),
        });
        r.len()
    };
    if method != axum::http::Method::POST {
        // Model listings in the shapes of all three providers' SDKs, naming what was asked.
        let list = json!({"object": "list", "data": [{"id": "m", "object": "model", "created": 0, "owned_by": "mock", "type": "model", "display_name": "m", "created_at": "2025-01-01T00:00:00Z"}], "has_more": false, "first_id": "m", "last_id": "m", "models": [{"name": "models/g", "displayName": "g"}], "asked": format!("{method} {uri}")});
        return Response::builder()
            .header("content-type", "application/json")
            .header("x-mock-answered", "listing")
            .body(Body::from(list.to_string()))
            .unwrap();
    }
    let path = uri.to_string();
    let wire = wire_of_path(&path);
    let text = String::from_utf8_lossy(&body).to_string();
    let name = headers
        .get("x-mock-script")
        .and_then(|v| v.to_str().ok())
        .unwrap_or(&mock.default_script)
        .to_owned();
    if name == "overflow" {
        let (status, body) = overflow(wire);
        return Response::builder()
            .status(status)
            .header("content-type", "application/json")
            .body(Body::from(body))
            .unwrap();
    }
    let mut parsed: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let mut text = text;
    // A Responses request continuing a stored response is read as the whole conversation.
    match (wire, responses_chain(&mock, &parsed)) {
        (Wire::OpenAiResponses, Some(Ok(whole))) => {
            text = whole.to_string();
            parsed = whole;
        }
        (Wire::OpenAiResponses, Some(Err(message))) => return refuse(&mock, wire, &path, message),
        _ => {}
    }
    // `x-mock-refuse`: a provider that does not take some field its own answers carry.
    let unaccepted = headers
        .get("x-mock-refuse")
        .and_then(|v| v.to_str().ok())
        .filter(|field| text.contains(&format!("\"{field}\":")))
        .map(|field| format!("messages: {field}: Extra inputs are not permitted"));
    if let Some(message) = unaccepted.or_else(|| provider_rules::refusal(wire, &path, &parsed)) {
        return refuse(&mock, wire, &path, message);
    }
    // The token-count endpoints answer the count of the body they were sent (the mock's
    // estimate, bytes / 4), in each provider's shape.
    let bare = path.split('?').next().unwrap_or_default();
    let count = if bare.ends_with("/messages/count_tokens") {
        Some(json!({"input_tokens": prompt_tokens(&body)}))
    } else if bare.ends_with("/responses/input_tokens") {
        Some(json!({"object": "response.input_tokens", "input_tokens": prompt_tokens(&body)}))
    } else if bare.ends_with(":countTokens") {
        Some(json!({"totalTokens": prompt_tokens(&body)}))
    } else {
        None
    };
    if let Some(count) = count {
        return Response::builder()
            .header("content-type", "application/json")
            .body(Body::from(count.to_string()))
            .unwrap();
    }
    let json_mime = parsed["generationConfig"]["responseMimeType"] == "application/json";
    if wire == Wire::Gemini
        && json_mime
        && parsed["tools"].as_array().is_some_and(|t| !t.is_empty())
    {
        // What real Gemini answers (Gemini CLI's routing call hit it).
        let error = json!({"error": {"code": 400, "message": "Function calling with a response mime type: 'application/json' is unsupported", "status": "INVALID_ARGUMENT"}});
        return Response::builder()
            .status(StatusCode::BAD_REQUEST)
            .header("content-type", "application/json")
            .body(Body::from(error.to_string()))
            .unwrap();
    }
    if let Some(fixture) = headers.get("x-mock-fixture").and_then(|v| v.to_str().ok()) {
        let bytes = std::fs::read(fixture).unwrap();
        let content_type = if fixture.ends_with(".sse") {
            "text/event-stream"
        } else {
            "application/json"
        };
        return Response::builder()
            .header("content-type", content_type)
            .body(Body::from_stream(futures::stream::iter(uneven(bytes))))
            .unwrap();
    }
    let stream = parsed["stream"] == json!(true) || path.contains("alt=sse");
    let mut pieces = script(&name, wire, n, &text);
    if provider_rules::thinks(wire, &path, &parsed) {
        think_between(&mut pieces, n);
    }
    let prompt = prompt_tokens(text.as_bytes());
    if wire == Wire::OpenAiResponses && parsed["store"] != json!(false) {
        let input = parsed["input"]
            .as_array()
            .cloned()
            .unwrap_or_else(|| vec![json!({"role": "user", "content": parsed["input"].clone()})]);
        let output = responses_items(&pieces, n);
        mock.stored
            .lock()
            .unwrap()
            .insert(format!("resp_{n}"), (input, output));
    }
    let out = match wire {
        Wire::Anthropic => anthropic(&pieces, stream, n, prompt),
        Wire::OpenAiChat => chat(&pieces, stream, n, prompt),
        Wire::OpenAiResponses => responses(&pieces, stream, n, prompt),
        Wire::Gemini => gemini(&pieces, stream, n, prompt),
    };
    let content_type = if stream {
        "text/event-stream"
    } else {
        "application/json"
    };
    // Streams and JSON bodies alike, in odd sizes with a yield per chunk, so they reach the
    // proxy as separate reads.
    let chunks =
        futures::StreamExt::then(futures::stream::iter(uneven(out.into_bytes())), |c| async {
            tokio::task::yield_now().await;
            c
        });
    Response::builder()
        .header("content-type", content_type)
        .body(Body::from_stream(chunks))
        .unwrap()
}

/// What the real provider answers a request it refuses (400, its error shape); noted in
/// `mock.refused`.
fn refuse(mock: &Mock, wire: Wire, path: &str, message: String) -> Response {
    eprintln!("mock provider: refused {path}: {message}");
    let body = invalid_request(wire, &message).to_string();
    mock.refused.lock().unwrap().push(message);
    Response::builder()
        .status(StatusCode::BAD_REQUEST)
        .header("content-type", "application/json")
        .body(Body::from(body))
        .unwrap()
}

/// The proxy's `/metrics` text.
pub async fn metrics(proxy: SocketAddr) -> String {
    reqwest::get(format!("http://{proxy}/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}

/// The proxy's list of the sessions it served (`/admin/sessions`).
pub async fn sessions(proxy: SocketAddr) -> Value {
    reqwest::get(format!("http://{proxy}/admin/sessions"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

/// The turns made over every session the proxy served.
pub async fn turns_made(proxy: SocketAddr) -> u64 {
    sessions(proxy).await["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["turns"].as_u64().unwrap())
        .sum()
}

/// Uneven chunks (1..=97 bytes) that split lines, events and UTF-8 sequences.
fn uneven(bytes: Vec<u8>) -> Vec<Result<Bytes, std::io::Error>> {
    let mut chunks = Vec::new();
    let (mut at, mut step) = (0, 1);
    while at < bytes.len() {
        let end = (at + step).min(bytes.len());
        chunks.push(Ok(Bytes::copy_from_slice(&bytes[at..end])));
        at = end;
        step = step * 7 % 97 + 1;
    }
    chunks
}

pub async fn start_mock() -> (SocketAddr, Mock) {
    start_mock_scripted("").await
}

/// A mock that runs `script` for requests that name none.
pub async fn start_mock_scripted(script: &str) -> (SocketAddr, Mock) {
    let mock = Mock {
        default_script: script.to_owned(),
        ..Mock::default()
    };
    // Real providers take bodies of tens of megabytes (Anthropic's limit is 32 MB), not
    // axum's default of 2 MB.
    let app = axum::Router::new()
        .fallback(axum::routing::any(handler))
        .layer(axum::extract::DefaultBodyLimit::max(32 << 20))
        .with_state(mock.clone());
    (serve_upstream(app).await, mock)
}

/// Serves `app` as an upstream provider on a loopback port, with TCP_NODELAY as real
/// providers' servers set it: without it Nagle holds each small write after the first
/// until the proxy's delayed ACK (40 ms), so every answer took 40 ms and a stream's
/// chunks arrived merged.
pub async fn serve_upstream(app: axum::Router) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let listener = axum::serve::ListenerExt::tap_io(listener, |tcp| {
        let _ = tcp.set_nodelay(true);
    });
    tokio::spawn(async move { axum::serve(listener, app).await });
    addr
}

pub async fn start_proxy_with(
    upstream: SocketAddr,
    state: &std::path::Path,
    edit: impl FnOnce(&mut ServeConfig),
) -> SocketAddr {
    let base = format!("http://{upstream}");
    let mut config = ServeConfig {
        listen: "127.0.0.1:0".parse().unwrap(),
        state: Some(state.display().to_string()),
        pipeline: "default".into(),
        upstreams: Upstreams {
            anthropic: base.clone(),
            openai: base.clone(),
            gemini: base,
        },
        workers: 2,
        identity_key: Some("test-key".into()),
        ..ServeConfig::default()
    };
    edit(&mut config);
    serve::start(config).await.unwrap().addr
}

/// The provider path of a wire (streaming or not).
pub fn path_of(wire: Wire, stream: bool) -> &'static str {
    match (wire, stream) {
        (Wire::Anthropic, _) => "/v1/messages",
        (Wire::OpenAiChat, _) => "/v1/chat/completions",
        (Wire::OpenAiResponses, _) => "/v1/responses",
        (Wire::Gemini, true) => "/v1beta/models/g:streamGenerateContent?alt=sse",
        (Wire::Gemini, false) => "/v1beta/models/g:generateContent",
    }
}

/// A request body with `turns` old user/assistant exchanges of `chars` characters each,
/// then a new user question.
pub fn history_body(wire: Wire, turns: usize, chars: usize, stream: bool) -> Value {
    let filler = |i: usize, who: &str| {
        format!(
            "{who} note {i}: {}",
            "lorem ipsum dolor ".repeat(chars / 18)
        )
    };
    let mut msgs = Vec::new();
    for i in 0..turns {
        msgs.push(("user", filler(i, "user")));
        msgs.push(("assistant", filler(i, "assistant")));
    }
    msgs.push(("user", "Now please finish the task.".to_owned()));
    match wire {
        Wire::Anthropic => {
            let m: Vec<Value> = msgs
                .iter()
                .map(|(r, t)| json!({"role": r, "content": t}))
                .collect();
            json!({"model": "m", "max_tokens": 64, "stream": stream, "system": "You are helpful.", "messages": m})
        }
        Wire::OpenAiChat => {
            let mut m = vec![json!({"role": "system", "content": "You are helpful."})];
            m.extend(msgs.iter().map(|(r, t)| json!({"role": r, "content": t})));
            json!({"model": "m", "stream": stream, "messages": m})
        }
        Wire::OpenAiResponses => {
            let m: Vec<Value> = msgs
                .iter()
                .map(|(r, t)| json!({"role": r, "content": t}))
                .collect();
            json!({"model": "m", "stream": stream, "instructions": "You are helpful.", "input": m})
        }
        Wire::Gemini => {
            let m: Vec<Value> = msgs
                .iter()
                .map(|(r, t)| json!({"role": if *r == "assistant" { "model" } else { "user" }, "parts": [{"text": t}]}))
                .collect();
            json!({"contents": m, "systemInstruction": {"parts": [{"text": "You are helpful."}]}})
        }
    }
}

/// The admin view of a session.
pub async fn admin(proxy: SocketAddr, session: &str) -> Value {
    reqwest::get(format!("http://{proxy}/admin/sessions/{session}"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

/// The admin view of a session once `ready` holds for it (state written after the response,
/// such as usage, lands a moment after the client has its answer), or the last view after
/// five seconds.
pub async fn admin_when(proxy: SocketAddr, session: &str, ready: impl Fn(&Value) -> bool) -> Value {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        let view = admin(proxy, session).await;
        if ready(&view) || std::time::Instant::now() > deadline {
            return view;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

/// Sends one request through the proxy with the mock's `script`; returns status and body.
pub async fn post(
    proxy: SocketAddr,
    wire: Wire,
    stream: bool,
    session: &str,
    script: &str,
    body: &Value,
) -> (u16, Bytes) {
    let resp = reqwest::Client::new()
        .post(format!("http://{proxy}{}", path_of(wire, stream)))
        .header("x-foldwire-session", session)
        .header("x-mock-script", script)
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .await
        .unwrap();
    (resp.status().as_u16(), resp.bytes().await.unwrap())
}
