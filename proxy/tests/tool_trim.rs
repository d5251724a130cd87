#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! `tool.trim` on each wire (issue 16, item 3): through the default pipeline, a bulky tool
//! result outside the recent window keeps its head and tail and a line naming its ref; its
//! original is archived first and restores byte-identical (the library call the model's
//! `restore` tool and `foldwire restore --ref` use, and the CLI itself); later turns send
//! it trimmed the same way, and results in the recent window or under the threshold stay
//! whole.

use std::process::Command;

use bytes::Bytes;
use foldwire_core::{Engine, MessageKind, Ref, SessionId, StageCx, TurnRequest, Wire};
use foldwire_proxy::setup;
use foldwire_stages::tool_trim::{TrimState, restore_trimmed, trimmed_key};
use serde_json::{Value, json};

/// A tool output of `chars` characters whose middle is recognizable.
fn output(i: usize, chars: usize) -> String {
    let mut s = format!("BEGIN output {i}\n");
    let mut line = 0;
    while s.len() < chars {
        s.push_str(&format!(
            "line {line} of output {i}: MIDDLE-{i}-{line} checks passed\n"
        ));
        line += 1;
    }
    s.truncate(chars - 12);
    s.push_str(&format!("\nEND out {i:02}"));
    s
}

/// A tool-loop body on `wire`: a task, then `sizes.len()` tool calls with their results
/// of those sizes, then a last user question.
fn body(wire: Wire, sizes: &[usize]) -> Value {
    let mut msgs: Vec<Value> = Vec::new();
    let user = |t: &str| match wire {
        Wire::Gemini => json!({"role": "user", "parts": [{"text": t}]}),
        _ => json!({"role": "user", "content": t}),
    };
    msgs.push(user("Fix the failing build."));
    for (i, &size) in sizes.iter().enumerate() {
        let id = format!("call_{i:03}");
        let out = output(i, size);
        match wire {
            Wire::Anthropic => {
                msgs.push(json!({"role": "assistant", "content": [{"type": "tool_use", "id": id, "name": "bash", "input": {"cmd": format!("make {i}")}}]}));
                msgs.push(json!({"role": "user", "content": [{"type": "tool_result", "tool_use_id": id, "content": out}]}));
            }
            Wire::OpenAiChat => {
                msgs.push(json!({"role": "assistant", "content": null, "tool_calls": [{"id": id, "type": "function", "function": {"name": "bash", "arguments": format!("{{\"cmd\":\"make {i}\"}}")}}]}));
                msgs.push(json!({"role": "tool", "tool_call_id": id, "content": out}));
            }
            Wire::OpenAiResponses => {
                msgs.push(json!({"type": "function_call", "call_id": id, "name": "bash", "arguments": format!("{{\"cmd\":\"make {i}\"}}")}));
                msgs.push(json!({"type": "function_call_output", "call_id": id, "output": out}));
            }
            Wire::Gemini => {
                msgs.push(json!({"role": "model", "parts": [{"functionCall": {"name": "bash", "args": {"cmd": format!("make {i}")}}}]}));
                msgs.push(json!({"role": "user", "parts": [{"functionResponse": {"name": "bash", "response": {"output": out}}}]}));
            }
        }
    }
    msgs.push(user("Is the build green now?"));
    match wire {
        Wire::Anthropic => {
            json!({"model": "m", "max_tokens": 64, "system": "You are a coding agent.", "messages": msgs})
        }
        Wire::OpenAiChat => json!({"model": "m", "messages": msgs}),
        Wire::OpenAiResponses => {
            json!({"model": "m", "instructions": "You are a coding agent.", "input": msgs})
        }
        Wire::Gemini => json!({"contents": msgs}),
    }
}

const WIRES: [Wire; 4] = [
    Wire::Anthropic,
    Wire::OpenAiChat,
    Wire::OpenAiResponses,
    Wire::Gemini,
];

/// The exact bytes of each tool result of a body, as the decoder cut them.
fn results(wire: Wire, body: &Bytes) -> Vec<(String, Bytes)> {
    let conv = foldwire_wire::request::decode(wire, body.clone()).unwrap();
    conv.messages
        .iter()
        .filter(|m| m.kind == MessageKind::ToolResult)
        .map(|m| (m.text.to_string(), m.raw.clone()))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bulky_old_tool_results_are_archived_then_trimmed_and_restore_byte_identical() {
    let registry = setup::registry().unwrap();
    // The default pipeline with `tool.trim` right after `fold`.
    let dir = tempfile::tempdir().unwrap();
    let spec_file = dir.path().join("trim.toml");
    std::fs::write(
        &spec_file,
        r#"name = "trim"
stages = ["wire.decode", "media.classify", "archive.spill", "refs.mint", "ranges.build", "fold",
  "tool.trim", "pairing.repair", "layout.head_window", "wire.encode"]"#,
    )
    .unwrap();
    let pipeline = setup::pipeline(spec_file.to_str().unwrap(), &registry).unwrap();
    let state_dir = dir.path().to_str().unwrap().to_owned();
    let backends = setup::backends(Some(&state_dir)).unwrap();
    let media = backends.media.clone();
    let cx = StageCx::new(registry.clone()).with_archive(backends.media);
    let engine = Engine::builder(pipeline, backends.state, registry)
        .context(cx)
        .workers(1)
        .start()
        .unwrap();
    // Results 0–2 open the session (the head window, never trimmed); 3 is bulky and old;
    // 4–11 are under the threshold; 12 is bulky but the newest (the recent window).
    let mut sizes = vec![3_000; 3];
    sizes.push(9_000);
    sizes.extend([2_000; 8]);
    sizes.push(9_000);
    for wire in WIRES {
        let session = SessionId::new(format!("trim-{}", wire.as_str())).unwrap();
        let first = Bytes::from(body(wire, &sizes).to_string());
        let out = engine
            .run_turn(&session, TurnRequest::new(wire, first.clone()))
            .await
            .unwrap();
        assert!(out.report.fail_open.is_none(), "{wire}: {:?}", out.report);
        assert_eq!(
            out.report.counter("tool.trim.trimmed"),
            1,
            "{wire}: {:?}",
            out.report.counters
        );
        let sent = String::from_utf8_lossy(&out.output).into_owned();
        // The old one keeps its head and tail, and names its ref; its middle is gone.
        assert!(
            sent.contains("BEGIN output 3") && sent.contains("END out 03"),
            "{wire}"
        );
        assert!(
            !sent.contains("MIDDLE-3-100"),
            "{wire}: the middle was trimmed"
        );
        assert!(
            sent.contains("characters of this tool output trimmed; restore m"),
            "{wire}"
        );
        // The newest one (in the recent window) and the small ones are whole.
        assert!(
            sent.contains("MIDDLE-12-100") && sent.contains("MIDDLE-4-1"),
            "{wire}"
        );
        // The call stays paired with its (trimmed) result.
        let reparsed = foldwire_wire::request::decode(wire, out.output.clone()).unwrap();
        let kinds: Vec<MessageKind> = reparsed.messages.iter().map(|m| m.kind).collect();
        assert_eq!(
            kinds
                .iter()
                .filter(|k| **k == MessageKind::ToolResult)
                .count(),
            13,
            "{wire}"
        );

        let state = engine.snapshot(&session).await.unwrap();
        let trims = TrimState::load(&state);
        assert_eq!(trims.trims.len(), 1, "{wire}");
        let r: Ref = trims.trims.values().next().unwrap().r#ref;
        assert!(
            sent.contains(&format!("restore {r} returns all of it")),
            "{wire}"
        );
        assert!(trimmed_key(&state, r).is_some());
        // Restored byte for byte: the unit exactly as the client sent it.
        let original = &results(wire, &first)[3];
        assert!(original.0.contains("MIDDLE-3-100"));
        let restored = restore_trimmed(&state, media.as_ref(), &session, r)
            .await
            .unwrap();
        assert_eq!(restored.as_bytes(), &original.1[..], "{wire}");
        // The CLI gives the same bytes.
        let cli = Command::new(env!("CARGO_BIN_EXE_foldwire"))
            .args([
                "restore",
                "--session",
                session.as_str(),
                "--state",
                &state_dir,
                "--ref",
                &r.to_string(),
            ])
            .output()
            .unwrap();
        assert!(
            cli.status.success(),
            "{}",
            String::from_utf8_lossy(&cli.stderr)
        );
        assert_eq!(cli.stdout, original.1.to_vec(), "{wire}");

        // The next turn appends; the trimmed result goes out exactly as before, so the
        // request only appends (no rewrite).
        let mut next = body(wire, &sizes);
        let key = foldwire_wire::request::messages_key(wire);
        let (reply, again) = match wire {
            Wire::Gemini => (
                json!({"role": "model", "parts": [{"text": "Yes, it is green."}]}),
                json!({"role": "user", "parts": [{"text": "Thanks, now the docs."}]}),
            ),
            _ => (
                json!({"role": "assistant", "content": "Yes, it is green."}),
                json!({"role": "user", "content": "Thanks, now the docs."}),
            ),
        };
        let list = next[key].as_array_mut().unwrap();
        list.push(reply);
        list.push(again);
        let second = Bytes::from(next.to_string());
        let out2 = engine
            .run_turn(&session, TurnRequest::new(wire, second))
            .await
            .unwrap();
        assert_eq!(out2.report.counter("tool.trim.reapplied"), 1, "{wire}");
        let sent2 = String::from_utf8_lossy(&out2.output).into_owned();
        assert!(!sent2.contains("MIDDLE-3-100"), "{wire}: still trimmed");
        assert_eq!(
            out2.report.counter("rewritten_tokens"),
            0,
            "{wire}: {:?}",
            out2.report.counters
        );
    }
}

#[test]
fn trim_params_are_checked() {
    let registry = setup::registry().unwrap();
    let spec = foldwire_core::PipelineSpec::parse(
        r#"name = "t"
stages = ["wire.decode", "media.classify", "archive.spill", "refs.mint", "ranges.build", "fold",
  { name = "tool.trim", params = { min_chars = 100, head_chars = 80, tail_chars = 40 } }, "wire.encode"]"#,
        "t.toml",
    )
    .unwrap();
    let err = foldwire_core::Pipeline::from_spec(&spec, &registry)
        .err()
        .unwrap()
        .to_string();
    assert!(err.contains("min_chars"), "{err}");
    // Before fold it is refused: folds must see (and archive) the whole originals.
    let early = foldwire_core::PipelineSpec::parse(
        r#"name = "t"
stages = ["wire.decode", "media.classify", "archive.spill", "refs.mint", "tool.trim", "ranges.build", "fold", "wire.encode"]"#,
        "t.toml",
    )
    .unwrap();
    let err = foldwire_core::Pipeline::from_spec(&early, &registry)
        .err()
        .unwrap()
        .to_string();
    assert!(err.contains("tool.trim requires folded"), "{err}");
}
