//! The request/response edits around the model's calls to the proxy tools: the follow-up
//! request that carries the results back to the model, and the removal of the calls from a
//! non-streamed answer. Running the calls is the library's
//! ([`foldwire_stages::tool_loop::run_call`]).

use std::sync::Arc;

use bytes::Bytes;
use foldwire_archive::RestoredMedia;
use foldwire_core::{Conversation, Engine, SessionId, Wire};
pub use foldwire_stages::tool_loop::CallResult;
use foldwire_stages::tool_loop::{CallCx, run_call};
use foldwire_wire::dialect::{self, CallOutput, ResultMedia, RoundAnswer, WireDialect};
use foldwire_wire::stream::HiddenCall;
use serde_json::Value;

use super::tools;

/// Runs one proxy call against the session and the conversation the model saw.
pub async fn run(
    engine: &Engine,
    session: &SessionId,
    view: Option<&Arc<Conversation>>,
    call: &HiddenCall,
) -> CallResult {
    let cx = CallCx {
        engine,
        session,
        view,
    };
    run_call(&cx, &call.name, &call.arguments).await
}

/// The follow-up request of a loop round: `body` with the model's turn (its `answer` as the
/// provider sent it, or its text and proxy calls) and the call results appended in `wire`'s shape, spliced into the bytes
/// ([`foldwire_wire::dialect::append_round`]), so the next round continues where the model
/// left off and the client's prefix goes out as it was. `None` when the body has no
/// conversation list to append to.
pub fn append_round(
    wire: Wire,
    body: &[u8],
    answer: &RoundAnswer,
    text: &str,
    calls: &[HiddenCall],
    results: &[CallResult],
) -> Option<Bytes> {
    let labels: Vec<Vec<String>> = results
        .iter()
        .map(|r| r.media.iter().map(|m| m.r#ref.to_string()).collect())
        .collect();
    let outputs: Vec<CallOutput<'_>> = results
        .iter()
        .zip(&labels)
        .map(|(r, labels)| CallOutput {
            text: &r.text,
            media: r
                .media
                .iter()
                .zip(labels)
                .map(|(m, label)| output_media(m, label))
                .collect(),
        })
        .collect();
    match dialect::append_round(wire, body, answer, text, calls, &outputs) {
        Ok(next) => Some(next),
        Err(e) => {
            tracing::warn!(error = %e, "A compress-loop round could not be appended.");
            None
        }
    }
}

fn output_media<'a>(m: &'a RestoredMedia, label: &'a str) -> ResultMedia<'a> {
    ResultMedia {
        label,
        media_type: &m.media_type,
        bytes: &m.bytes,
    }
}

/// Removes the proxy's tool calls from a non-streamed answer; when no client tool call is
/// left, a tool-use stop reason becomes a normal end so the client does not wait for calls
/// it cannot see. Returns whether anything changed.
pub fn strip_json(wire: Wire, body: &mut Value) -> bool {
    wire.dialect()
        .strip_calls(body, &|name| tools::names().contains(&name))
}

#[cfg(test)]
mod tests {
    use super::*;
    use foldwire_core::Ref;
    use foldwire_stages::tool_loop::{COMPRESS, RESTORE};
    use serde_json::json;

    /// A session with one turn through the proxy's default pipeline (tools injected), and the
    /// conversation the turn produced.
    async fn session_with_history() -> (Engine, SessionId, Arc<Conversation>, Vec<(Ref, Ref)>) {
        let registry = crate::setup::registry().unwrap();
        let spec = crate::setup::with_tool_loop(crate::setup::spec("default").unwrap());
        let pipeline = foldwire_core::Pipeline::from_spec(&spec, &registry).unwrap();
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
        let outcome = engine
            .run_turn(
                &session,
                foldwire_core::TurnRequest::new(Wire::Anthropic, body.clone()),
            )
            .await
            .unwrap();
        assert_eq!(outcome.report.counter("tools.injected"), 1);
        let view = outcome.conversation.unwrap();
        // The ranges the turn offered are in the note it appended.
        let text = String::from_utf8(outcome.output.to_vec()).unwrap();
        let ranges = text
            .split("\\n- ")
            .skip(1)
            .filter_map(|line| {
                let (span, _) = line.split_once(':')?;
                let (a, b) = span.split_once("..")?;
                Some((a.parse().ok()?, b.parse().ok()?))
            })
            .collect::<Vec<(Ref, Ref)>>();
        assert!(!ranges.is_empty(), "{text}");
        (engine, session, view, ranges)
    }

    /// `body` after [`append_round`], read back.
    fn round(
        wire: Wire,
        body: Value,
        text: &str,
        calls: &[HiddenCall],
        results: &[CallResult],
    ) -> Value {
        let bytes = serde_json::to_vec(&body).unwrap();
        let next =
            append_round(wire, &bytes, &RoundAnswer::default(), text, calls, results).unwrap();
        // The request as it was is the prefix of the follow-up (up to its list's end).
        let list_end = bytes.iter().rposition(|b| *b == b']').unwrap_or(0);
        assert_eq!(next[..list_end], bytes[..list_end]);
        serde_json::from_slice(&next).unwrap()
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

        let a = round(
            Wire::Anthropic,
            json!({"messages": [{"role": "user", "content": "q"}]}),
            "",
            calls,
            &results,
        );
        let content = &a["messages"][2]["content"][0]["content"];
        assert_eq!(content[0]["text"], "two parts");
        assert_eq!(content[1]["source"]["data"], "cG5n");
        assert_eq!(content[2]["type"], "document");
        assert_eq!(content[2]["source"]["media_type"], "application/pdf");

        let c = round(
            Wire::OpenAiChat,
            json!({"messages": [{"role": "user", "content": "q"}]}),
            "",
            calls,
            &results,
        );
        assert_eq!(c["messages"][2]["content"], "two parts");
        let parts = &c["messages"][3]["content"];
        assert_eq!(c["messages"][3]["role"], "user");
        assert_eq!(parts[1]["image_url"]["url"], "data:image/png;base64,cG5n");
        assert_eq!(parts[2]["file"]["filename"], "m00003-1.pdf");
        assert_eq!(
            parts[2]["file"]["file_data"],
            "data:application/pdf;base64,JVBERg=="
        );

        let r = round(
            Wire::OpenAiResponses,
            json!({"input": "q"}),
            "",
            calls,
            &results,
        );
        let output = &r["input"][2]["output"];
        assert_eq!(output[0]["type"], "input_text");
        assert_eq!(output[1]["image_url"], "data:image/png;base64,cG5n");
        assert_eq!(output[2]["type"], "input_file");

        let g = round(
            Wire::Gemini,
            json!({"contents": [{"role": "user", "parts": [{"text": "q"}]}]}),
            "",
            calls,
            &results,
        );
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
        let a = round(
            Wire::Anthropic,
            json!({"messages": [{"role": "user", "content": "q"}]}),
            "thinking",
            std::slice::from_ref(&call),
            &[CallResult::from("done".to_owned())],
        );
        assert_eq!(a["messages"][1]["content"][1]["type"], "tool_use");
        assert_eq!(a["messages"][2]["content"][0]["tool_use_id"], "c1");
        let r = round(
            Wire::OpenAiResponses,
            json!({"input": "q"}),
            "",
            std::slice::from_ref(&call),
            &[CallResult::from("done".to_owned())],
        );
        assert_eq!(r["input"][1]["type"], "function_call");
        assert_eq!(r["input"][2]["output"], "done");
        let g = round(
            Wire::Gemini,
            json!({"contents": [{"role": "user", "parts": [{"text": "q"}]}]}),
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
