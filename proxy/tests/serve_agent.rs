#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! A long agent loop through the proxy with a small window: every forwarded request fits
//! and is valid for its provider, the model's compress calls never reach the client, and
//! every folded message restores to the exact bytes the client sent; also with the model's
//! signed reasoning on, on every wire.

mod support;

use foldwire_core::{SessionState, Wire};
use foldwire_stages::kernel::pairing_rules;
use serde_json::{Value, json};
use support::agent::{answer_and_results, assert_blocks_restore, opener, request};
use support::*;

const WINDOW: u64 = 40_000;
/// Turns of the loop on the three wires that run it at the shorter length (Anthropic runs 300).
const TURNS: usize = 80;

/// Turns on the model's reasoning the way each wire's clients do: Anthropic adaptive
/// thinking, Responses encrypted reasoning without storage, a Gemini 3 model, OpenRouter's
/// reasoning switch on Chat. The mock then answers with signed reasoning and refuses what
/// the providers refuse of it.
fn with_reasoning(wire: Wire, body: &mut Value) {
    match wire {
        Wire::Anthropic => body["thinking"] = serde_json::json!({"type": "adaptive"}),
        Wire::OpenAiResponses => {
            body["include"] = serde_json::json!(["reasoning.encrypted_content"]);
            body["store"] = Value::Bool(false);
        }
        Wire::OpenAiChat => body["reasoning"] = serde_json::json!({"enabled": true}),
        Wire::Gemini => {}
    }
}

async fn agent_loop(wire: Wire, turns: usize) {
    agent_loop_with(wire, turns, false).await;
}

async fn agent_loop_with(wire: Wire, turns: usize, reasoning: bool) {
    let session = format!("agent-{}", wire.as_str());
    let path = match (wire, reasoning) {
        (Wire::Gemini, true) => path_of(wire, false).replace("models/g:", "models/gemini-3-pro:"),
        _ => path_of(wire, false).to_owned(),
    };
    let edit = |_: usize, body: &mut Value| {
        if reasoning {
            with_reasoning(wire, body);
        }
    };
    let Driven {
        mock,
        proxy,
        dir,
        last_sent,
        ..
    } = drive(wire, &path, &session, turns, edit, |_, _| {}).await;

    let forwarded = mock.bodies();
    assert!(
        forwarded.len() > turns,
        "{wire}: some turns took a compress round"
    );
    for (i, body) in forwarded.iter().enumerate() {
        assert!(
            (body.len() as u64) / 4 <= WINDOW,
            "{wire}: forwarded request {i} is {} bytes, over the window",
            body.len()
        );
        let conv = foldwire_wire::request::decode(wire, body.clone()).unwrap();
        let v = pairing_rules::violations(wire, &conv.messages);
        assert!(v.is_empty(), "{wire}: forwarded request {i}: {v:?}");
    }
    assert!(
        last_sent.len() as u64 / 4 > WINDOW,
        "{wire}: the client's history outgrew the window ({} bytes)",
        last_sent.len()
    );

    let admin = admin(proxy, &session).await;
    let state: SessionState = serde_json::from_value(admin["state"].clone()).unwrap();
    assert!(!state.blocks.is_empty(), "{wire}: folding happened");
    assert!(
        state
            .blocks
            .iter()
            .any(|b| b.author.as_deref() == Some("model")),
        "{wire}: the model's compress calls made blocks"
    );
    let restored =
        assert_blocks_restore(&state, dir.path().to_str().unwrap(), &session, &last_sent).await;
    assert!(restored > 20, "{wire}: only {restored} units restored");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_300_turn_agent_loop_stays_under_a_small_window_anthropic() {
    agent_loop(Wire::Anthropic, 300).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_eighty_turn_agent_loop_stays_under_a_small_window_openai_chat() {
    agent_loop(Wire::OpenAiChat, TURNS).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_eighty_turn_agent_loop_stays_under_a_small_window_responses() {
    agent_loop(Wire::OpenAiResponses, TURNS).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_eighty_turn_agent_loop_stays_under_a_small_window_gemini() {
    agent_loop(Wire::Gemini, TURNS).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reasoning_models_agent_loop_keeps_its_signed_reasoning_valid_on_every_wire() {
    for wire in [
        Wire::Anthropic,
        Wire::OpenAiChat,
        Wire::OpenAiResponses,
        Wire::Gemini,
    ] {
        agent_loop_with(wire, TURNS, true).await;
    }
}

/// Turn after whose results the client of [`tools_a_client_loaded_stay_loaded_through_folds`]
/// loads tools: well past the head window, with folds to come on both sides of it.
const SEARCH_AFTER: usize = 20;

/// What a client of `wire` appends when its model searches for deferred tools, and the
/// `tools` it then declares. Anthropic: the server tool search's pair, and a client tool
/// search (as Claude Code's `ToolSearch`) answered with `tool_reference` blocks (without the
/// "Tool loaded." text Claude Code adds: the last user text is protected on its own, which
/// would keep the search out of folds whatever its blocks are). Responses:
/// a client-executed `tool_search_call` and its `tool_search_output`.
fn tool_search(wire: Wire) -> (Vec<Value>, Value) {
    let schema = json!({"type": "object", "properties": {}});
    match wire {
        Wire::Anthropic => (
            vec![
                json!({"role": "assistant", "content": [
                    {"type": "server_tool_use", "id": "srvtoolu_01", "name": "tool_search_tool_regex", "input": {"query": "weather"}},
                    {"type": "tool_search_tool_result", "tool_use_id": "srvtoolu_01", "content": {"type": "tool_search_tool_search_result", "tool_references": [{"type": "tool_reference", "tool_name": "get_weather"}]}},
                    {"type": "tool_use", "id": "toolu_search", "name": "ToolSearch", "input": {"query": "select:NotebookEdit"}}
                ]}),
                json!({"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_search", "content": [{"type": "tool_reference", "tool_name": "NotebookEdit"}]}
                ]}),
            ],
            json!([
                {"type": "tool_search_tool_regex_20251119", "name": "tool_search_tool_regex"},
                {"name": "ToolSearch", "description": "Loads deferred tools.", "input_schema": schema},
                {"name": "bash", "description": "Runs a command.", "input_schema": schema},
                {"name": "get_weather", "description": "Weather.", "input_schema": schema, "defer_loading": true},
                {"name": "NotebookEdit", "description": "Edits notebooks.", "input_schema": schema, "defer_loading": true}
            ]),
        ),
        Wire::OpenAiResponses => (
            vec![
                json!({"type": "tool_search_call", "id": "tsc_01", "call_id": "call_search", "execution": "client", "status": "completed", "arguments": {"paths": ["crm"]}}),
                json!({"type": "tool_search_output", "id": "tso_01", "call_id": "call_search", "execution": "client", "status": "completed", "tools": [{"type": "function", "name": "crm_lookup", "description": "Looks up a customer.", "parameters": schema, "defer_loading": true}]}),
            ],
            json!([
                {"type": "tool_search"},
                {"type": "function", "name": "bash", "description": "Runs a command.", "parameters": schema},
                {"type": "function", "name": "crm_lookup", "description": "Looks up a customer.", "parameters": schema, "defer_loading": true}
            ]),
        ),
        _ => unreachable!("Chat and Gemini have no tool search"),
    }
}

/// A client of the `agent` script for `turns` turns through a proxy with a [`WINDOW`]
/// window, at `path`: `edit` may change each turn's body before it is sent, `append` the
/// client's history after each answer. Every turn must be answered with only the client's
/// own tool called, and nothing refused.
async fn drive(
    wire: Wire,
    path: &str,
    session: &str,
    turns: usize,
    mut edit: impl FnMut(usize, &mut Value),
    mut append: impl FnMut(usize, &mut Vec<Value>),
) -> Driven {
    let (upstream, mock) = start_mock().await;
    let dir = tempfile::tempdir().unwrap();
    let proxy = start_proxy_with(upstream, dir.path(), |c| c.window = WINDOW).await;
    let client = reqwest::Client::new();
    let mut history = vec![opener(wire)];
    let mut last_sent = String::new();
    for turn in 0..turns {
        let mut body = request(wire, &history);
        edit(turn, &mut body);
        last_sent = body.to_string();
        let resp = client
            .post(format!("http://{proxy}{path}"))
            .header("x-foldwire-session", session)
            .header("x-mock-script", "agent")
            .body(last_sent.clone())
            .send()
            .await
            .unwrap();
        let status = resp.status();
        let answer: Value = resp.json().await.unwrap();
        assert_eq!(status, 200, "{wire} turn {turn}: {answer}");
        let refused = mock.refused.lock().unwrap().clone();
        assert!(refused.is_empty(), "{wire} turn {turn}: {refused:?}");
        let names = answer_and_results(wire, &mut history, &answer, turn);
        assert_eq!(
            names,
            vec!["bash".to_owned()],
            "{wire} turn {turn}: only client tools reach the client"
        );
        append(turn, &mut history);
    }
    Driven {
        mock,
        proxy,
        dir,
        history,
        last_sent,
    }
}

/// What [`drive`] leaves (the proxy's directory goes when it is dropped: keep `dir`).
struct Driven {
    /// The mock provider: what was forwarded.
    mock: Mock,
    /// The proxy's address.
    proxy: std::net::SocketAddr,
    /// Its state and archive directory.
    dir: tempfile::TempDir,
    /// The client's history.
    history: Vec<Value>,
    /// The client's last request body.
    last_sent: String,
}

/// A session's state, as the admin API shows it.
async fn state_of(proxy: std::net::SocketAddr, session: &str) -> SessionState {
    serde_json::from_value(admin(proxy, session).await["state"].clone()).unwrap()
}

/// Folds took some of what `needle` marks (its count in the forwarded requests went down at
/// least once), and the session holds blocks.
async fn assert_folds_took(mock: &Mock, proxy: std::net::SocketAddr, session: &str, needle: &str) {
    let counts: Vec<usize> = mock
        .bodies()
        .iter()
        .map(|b| String::from_utf8_lossy(b).matches(needle).count())
        .collect();
    assert!(
        counts.windows(2).any(|w| w[1] < w[0]),
        "{session}: folds took none of {needle}: {counts:?}"
    );
    assert!(
        !state_of(proxy, session).await.blocks.is_empty(),
        "{session}: folding happened"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tools_a_client_loaded_stay_loaded_through_folds() {
    for wire in [Wire::Anthropic, Wire::OpenAiResponses] {
        let session = format!("tool-search-{}", wire.as_str());
        let (search, tools) = tool_search(wire);
        let run = drive(
            wire,
            path_of(wire, false),
            &session,
            TURNS,
            |turn, body| {
                if turn > SEARCH_AFTER {
                    body["tools"] = tools.clone();
                }
            },
            |turn, history| {
                if turn == SEARCH_AFTER {
                    history.extend(search.iter().cloned());
                }
            },
        )
        .await;
        let (mock, proxy) = (&run.mock, run.proxy);

        // The blocks (items) of a body, without the cache markers the layout moves.
        let units = |body: &Value| -> Vec<Value> {
            let list = match wire {
                Wire::Anthropic => body["messages"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .flat_map(|m| m["content"].as_array().cloned().unwrap_or_default())
                    .collect(),
                _ => body["input"].as_array().unwrap().clone(),
            };
            list.into_iter()
                .map(|mut u| {
                    if let Some(o) = u.as_object_mut() {
                        o.remove("cache_control");
                    }
                    u
                })
                .collect()
        };
        let loading = units(&json!({"messages": search, "input": search}));
        // Every request forwarded after the search carries its blocks (items) as the client
        // sent them, while folds took turns on both sides of it.
        let forwarded = mock.bodies();
        let after: Vec<&bytes::Bytes> = forwarded
            .iter()
            .filter(|b| String::from_utf8_lossy(b).contains("\"tools\":[{\"type\":\"tool_search"))
            .collect();
        assert!(
            after.len() > 40,
            "{wire}: {} requests after the search",
            after.len()
        );
        for (i, body) in after.iter().enumerate() {
            let sent = units(&serde_json::from_slice(body).unwrap());
            for item in &loading {
                assert!(
                    sent.contains(item),
                    "{wire}: request {i} after the search lost {item}"
                );
            }
        }
        let last = String::from_utf8_lossy(after.last().unwrap()).into_owned();
        for turn in [SEARCH_AFTER - 1, SEARCH_AFTER + 1] {
            assert!(
                !last.contains(&format!("output of turn {turn}:")),
                "{wire}: turn {turn}, next to the search, never folded"
            );
        }
        assert!(
            !state_of(proxy, &session).await.blocks.is_empty(),
            "{wire}: folding happened"
        );
    }
}

/// A call and its result in the history every turn, of a tool the client's own pairing
/// rules do not cover: Anthropic's server tool (the model searched the web first, the call
/// and its result inside the assistant's message), or the Responses built-in shell tool (a
/// `shell_call` item and the client's `shell_call_output`).
fn searched_or_shelled(wire: Wire, turn: usize, history: &mut Vec<Value>) {
    // Varied sizes, so folds and the protected tail fall at every place in the history.
    let filler = "e".repeat(200 + turn * 977 % 6000);
    if wire == Wire::Anthropic {
        let at = history.len() - 2;
        let id = format!("srvtoolu_{turn}");
        let searched = [
            json!({"type": "server_tool_use", "id": id, "name": "web_search", "input": {"query": format!("step {turn}")}}),
            json!({"type": "web_search_tool_result", "tool_use_id": id, "content": [{"type": "web_search_result", "url": "https://example.com", "title": "Example", "encrypted_content": filler}]}),
        ];
        let content = history[at]["content"].as_array_mut().unwrap();
        content.splice(0..0, searched);
    } else {
        let id = format!("call_shell_{turn}");
        history.push(json!({"type": "shell_call", "id": format!("sh_{turn}"), "call_id": id, "action": {"commands": [format!("ls step-{turn}")]}, "status": "completed"}));
        history.push(json!({"type": "shell_call_output", "call_id": id, "output": [{"stdout": filler, "stderr": "", "outcome": {"type": "exit", "exit_code": 0}}]}));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_provider_or_built_in_tools_call_and_result_fold_together() {
    // No fold may leave the call or the result alone, which the provider refuses.
    for (wire, needle) in [
        (Wire::Anthropic, "\"type\":\"server_tool_use\""),
        (Wire::OpenAiResponses, "\"type\":\"shell_call\""),
    ] {
        let session = format!("paired-{}", wire.as_str());
        let run = drive(
            wire,
            path_of(wire, false),
            &session,
            TURNS,
            |_, _| {},
            |turn, history| searched_or_shelled(wire, turn, history),
        )
        .await;
        assert_folds_took(&run.mock, run.proxy, &session, needle).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_count_is_of_the_folded_request_and_keeps_nothing() {
    // A client that counts its request before it sends it (the SDKs' count_tokens /
    // input_tokens / countTokens) is told what the model would be sent: the history as
    // folded, the proxy's tools added where the count takes tools (not Gemini's). Counting
    // is not a turn: the session's state stays as it was, but for one calibration sample.
    for (wire, path, answer) in [
        (Wire::Anthropic, "/v1/messages/count_tokens", "input_tokens"),
        (
            Wire::OpenAiResponses,
            "/v1/responses/input_tokens",
            "input_tokens",
        ),
        (Wire::Gemini, "/v1beta/models/g:countTokens", "totalTokens"),
    ] {
        let session = format!("count-{}", wire.as_str());
        let run = drive(
            wire,
            path_of(wire, false),
            &session,
            40,
            |_, _| {},
            |_, _| {},
        )
        .await;
        let (mock, proxy) = (&run.mock, run.proxy);
        let before = state_of(proxy, &session).await;
        assert!(!before.blocks.is_empty(), "{wire}: folding happened");
        let mut body = request(wire, &run.history);
        if let Some(o) = body.as_object_mut() {
            // The count endpoints take no output settings; Gemini's takes the contents alone.
            o.remove("max_tokens");
            o.remove("systemInstruction");
        }
        let sent = body.to_string();
        let resp = reqwest::Client::new()
            .post(format!("http://{proxy}{path}"))
            .header("x-foldwire-session", &session)
            .body(sent.clone())
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200, "{wire}");
        let counted: Value = resp.json().await.unwrap();
        let received = mock.received.lock().unwrap().last().cloned().unwrap();
        assert!(received.path.starts_with(path), "{wire}: {}", received.path);
        let forwarded = String::from_utf8_lossy(&received.body).into_owned();
        assert_eq!(
            counted[answer],
            json!(prompt_tokens(received.body.as_ref())),
            "{wire}: the answer is the provider's count of what foldwire sent it"
        );
        assert!(
            received.body.len() < sent.len() / 2,
            "{wire}: the counted request ({} bytes) is the folded one, not the client's ({} bytes)",
            received.body.len(),
            sent.len()
        );
        assert!(
            forwarded.contains("[foldwire b"),
            "{wire}: the fold summaries are counted"
        );
        assert_eq!(
            forwarded.contains("\"compress\""),
            wire != Wire::Gemini,
            "{wire}: the proxy's tools are counted where the count takes tools"
        );
        // Gemini's count takes `contents` alone at its top level: nothing is added beside it.
        let top: Vec<String> = serde_json::from_str::<Value>(&forwarded)
            .unwrap()
            .as_object()
            .unwrap()
            .keys()
            .cloned()
            .collect();
        let sent_top: Vec<String> = body.as_object().unwrap().keys().cloned().collect();
        if wire == Wire::Gemini {
            assert_eq!(top, sent_top, "{wire}: fields added to the count body");
        }
        // The provider's count of a body foldwire estimated calibrates its estimator like a
        // turn's usage: it is the session's newest sample.
        let reported = counted[answer].as_u64().unwrap();
        let newest = |v: &Value| {
            v["state"]["usage"]
                .as_array()
                .and_then(|u| u.last())
                .cloned()
        };
        let view = admin_when(proxy, &session, |v| {
            newest(v).is_some_and(|s| s["reported"] == reported)
        })
        .await;
        let sample = newest(&view).unwrap();
        assert_eq!(
            sample["reported"], reported,
            "{wire}: the count is no sample"
        );
        assert!(
            sample["estimated"].as_u64().unwrap() > reported / 2,
            "{wire}: {sample}"
        );
        let after = state_of(proxy, &session).await;
        assert_eq!(after.turns, before.turns, "{wire}: a count is no turn");
        assert_eq!(after.blocks, before.blocks, "{wire}");
        assert_eq!(after.refs.len(), before.refs.len(), "{wire}");
    }
}

/// Codex's "Responses lite" requests (its built-in provider, its default model) send no
/// `tools` and no `instructions`: the model's tools are declared in an `additional_tools`
/// input item at the start. Before, foldwire read that item as an ordinary foldable one (a
/// large, old assistant item, first in line for a fold) and added its own `tools` and note
/// beside it. Now the item is pinned where the client put it, and the request gets none of
/// the proxy's tools (how the provider takes both at once is not known); folds go on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tools_declared_in_an_input_item_are_never_folded() {
    let session = "responses-lite";
    let namespace = |name: &str| {
        json!({"type": "namespace", "name": name, "description": "", "tools": [
            {"type": "custom", "name": format!("{name}_exec"), "description": "Run code. ".repeat(400)},
            {"type": "function", "name": format!("{name}_wait"), "description": "Wait. ".repeat(200), "parameters": {"type": "object", "properties": {}}},
        ]})
    };
    let declared = json!({"type": "additional_tools", "id": "at_1", "role": "developer",
        "tools": [namespace("functions"), namespace("collaboration")]});
    let run = drive(
        Wire::OpenAiResponses,
        path_of(Wire::OpenAiResponses, false),
        session,
        TURNS,
        |_, body| {
            let body = body.as_object_mut().unwrap();
            body.remove("instructions");
            body["input"]
                .as_array_mut()
                .unwrap()
                .insert(0, declared.clone());
        },
        |_, _| {},
    )
    .await;
    let forwarded = run.mock.bodies();
    for (i, body) in forwarded.iter().enumerate() {
        let body: Value = serde_json::from_slice(body).unwrap();
        assert_eq!(
            body["input"][0], declared,
            "request {i} moved or lost the tools"
        );
        for added in ["tools", "instructions"] {
            assert!(
                body.get(added).is_none(),
                "request {i} got the proxy's {added}"
            );
        }
    }
    assert_eq!(forwarded.len(), TURNS, "one round a turn: no proxy calls");
    assert_folds_took(&run.mock, run.proxy, session, "output of turn").await;
}
