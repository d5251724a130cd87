//! The proxy's own tools (`compress`, `restore`, `search_context`): their schemas in each
//! wire's shape, the static system note, the per-turn list of compressible ranges, and the
//! injection of all three into a forwarded request body.
//!
//! The static parts (tool schemas, system note) never change between turns, so the
//! provider's prompt cache stays warm; the per-turn range list is appended as trailing user
//! text, after everything cached.

use foldwire_core::{Conversation, RangeInfo, TokenEstimator, Turn, Wire};
use foldwire_stages::kernel::{Protection, SummaryRun, summary_runs};
use foldwire_stages::ranges_build::PROTECTION_NOTE;
use serde_json::{Map, Value, json};

/// The compress tool's name.
pub const COMPRESS: &str = "compress";
/// The restore tool's name.
pub const RESTORE: &str = "restore";
/// The `restore` argument that lists the session's archived media instead of restoring.
pub const LIST: &str = "list";
/// The search tool's name.
pub const SEARCH: &str = "search_context";
/// All the tool names the proxy owns (and hides from the client).
pub const NAMES: [&str; 3] = [COMPRESS, RESTORE, SEARCH];

/// The system note that explains the tools; stable across turns. It describes refs as
/// `refs.mint` issues them: one per foldable content part (a text, a tool call, a tool
/// result), numbered in first-seen order, with parts that cannot fold left unnumbered.
pub const SYSTEM_NOTE: &str = "Context management (foldwire): earlier conversation content \
is numbered with refs (m00001, m00002, ...), one per content part (a text, a tool call, a tool \
result, an image), so one message can hold several refs. Refs are numbered per session in the \
order parts first arrived and are not shown inside the messages. Parts that cannot be folded \
(system instructions, pinned parts such as media that cannot be archived, items foldwire cannot \
read) get no ref, so the numbers skip them. Folded content appears as one summary headed \
[foldwire bN]; bN is that block's id. When a note after the conversation lists ranges that can \
be compressed (ref spans, or block spans like b2..b5 that fold summaries into one), call \
`compress` with such ranges and a faithful summary; only the ranges listed can fold. The \
originals stay recoverable with `restore` (a block id like b3, or the ref an archived image's \
placeholder names; `list` names every archived image or document) and searchable with `search_context`. These calls are handled for you and \
are not part of the user's task; after them, continue the task.";

/// Names, descriptions and JSON schemas of the three tools.
fn definitions() -> [(&'static str, &'static str, Value); 3] {
    [
        (
            COMPRESS,
            "Fold ranges of earlier messages into summaries to free context. Each range names \
             its first and last ref (message refs like m00003 or block ids like b2).",
            json!({
                "type": "object",
                "properties": {
                    "ranges": {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "properties": {
                                "start": {"type": "string", "description": "first ref"},
                                "end": {"type": "string", "description": "last ref"},
                                "summary": {"type": "string", "description": "what the range held that still matters"},
                                "topic": {"type": "string", "description": "a short topic line"}
                            },
                            "required": ["start", "end", "summary"]
                        }
                    }
                },
                "required": ["ranges"]
            }),
        ),
        (
            RESTORE,
            "Return the exact original messages folded into a block, or an archived image or \
             document by the ref its placeholder line names. With the id `list`, list the \
             session's archived images and documents instead: one line each with its ref, type \
             and size.",
            json!({
                "type": "object",
                "properties": {"id": {"type": "string", "description": "a block id such as b3, a media ref such as m00012, or list"}},
                "required": ["id"]
            }),
        ),
        (
            SEARCH,
            "Search the summaries of folded context; returns matching block ids with snippets.",
            json!({
                "type": "object",
                "properties": {"query": {"type": "string"}},
                "required": ["query"]
            }),
        ),
    ]
}

/// The tool definitions as `wire` lists them in its `tools` field.
pub fn tool_entries(wire: Wire) -> Vec<Value> {
    let defs = definitions();
    match wire {
        Wire::Anthropic => defs
            .into_iter()
            .map(|(n, d, s)| json!({"name": n, "description": d, "input_schema": s}))
            .collect(),
        Wire::OpenAiChat => defs
            .into_iter()
            .map(|(n, d, s)| {
                json!({"type": "function", "function": {"name": n, "description": d, "parameters": s}})
            })
            .collect(),
        Wire::OpenAiResponses => defs
            .into_iter()
            .map(|(n, d, s)| json!({"type": "function", "name": n, "description": d, "parameters": s}))
            .collect(),
        Wire::Gemini => {
            let decls: Vec<Value> = defs
                .into_iter()
                .map(|(n, d, s)| json!({"name": n, "description": d, "parameters": s}))
                .collect();
            vec![json!({ "functionDeclarations": decls })]
        }
    }
}

/// Characters of a range's first message shown in the note.
const PREVIEW_CHARS: usize = 80;

/// The runs of summaries the model may fold a tier up, found in a view turn (the client's
/// conversation with refs, the session's state after the turn, and the protection
/// `ranges.build` recorded), with the same rules automatic folds use.
pub fn summary_runs_of(turn: &Turn, estimator: &dyn TokenEstimator) -> Vec<SummaryRun> {
    let Some(view) = turn.conversation.as_ref() else {
        return Vec::new();
    };
    let protection = turn
        .stage_notes
        .get(PROTECTION_NOTE)
        .and_then(|v| serde_json::from_value::<Protection>(v.clone()).ok())
        .unwrap_or_default();
    summary_runs(view, &turn.state, &protection, estimator)
}

/// The per-turn note: which ranges can be compressed right now, each with a preview of its
/// first message (found in `view`, the conversation with refs) so the model can tell them
/// apart, then the runs of summaries that can fold into one a tier up (by block ids).
pub fn ranges_note(
    ranges: &[RangeInfo],
    runs: &[SummaryRun],
    view: Option<&Conversation>,
) -> Option<String> {
    if ranges.is_empty() && runs.is_empty() {
        return None;
    }
    let mut note = String::from("[foldwire] Compressible ranges now:");
    for r in ranges {
        note.push_str(&format!(
            "\n- {}..{}: {} messages, ~{} tokens",
            r.start, r.end, r.messages, r.tokens
        ));
        if !r.tool_calls.is_empty() {
            let tools: Vec<String> = r
                .tool_calls
                .iter()
                .map(|(name, n)| format!("{name}×{n}"))
                .collect();
            note.push_str(&format!(" (tools: {})", tools.join(", ")));
        }
        let first = view.and_then(|v| v.messages.iter().find(|m| m.r#ref == Some(r.start)));
        if let Some(m) = first {
            let preview: String = m.text.split_whitespace().collect::<Vec<_>>().join(" ");
            let preview: String = preview.chars().take(PREVIEW_CHARS).collect();
            if !preview.is_empty() {
                note.push_str(&format!(" — starts: \"{preview}\""));
            }
        }
    }
    for run in runs {
        let (Some(first), Some(last)) = (run.first(), run.last()) else {
            continue;
        };
        note.push_str(&format!(
            "\n- {first}..{last}: {} summaries, ~{} tokens (folds them into one tier-{} summary)",
            run.blocks.len(),
            run.tokens,
            run.tier
        ));
    }
    Some(note)
}

/// The nudge asks the model a little before the fold stage would fold by itself (with its
/// extractive summarizer): at this share of the schedule's trigger.
pub const NUDGE_EARLY: f64 = 0.8;

/// The fold schedule's record in a session state: the request's size right after its last
/// fold (0 before the first), which the nudges measure growth from.
pub fn schedule_floor(state: &foldwire_core::SessionState) -> u64 {
    foldwire_stages::fold::ScheduleRecord::load(state).floor
}

/// A nudge that follows the fold schedule (`fold.scheduled`'s defaults): none until the
/// request has grown by the schedule's `growth` since the last fold and passed
/// [`NUDGE_EARLY`] of its trigger; "due" from there, "urgent" past the trigger (the proxy
/// folds by itself there if the model does not). So a model is asked rarely, and for one
/// large fold, not on every turn.
pub fn pressure_note(request_tokens: u64, floor: u64, window: u64) -> Option<String> {
    if window == 0 {
        return None;
    }
    let schedule = foldwire_plugins::fold_policy::ScheduleConfig::default();
    let available = foldwire_core::Budget::default()
        .with_window(window)
        .available();
    let early = foldwire_plugins::fold_policy::ScheduleConfig {
        trigger: schedule.trigger * NUDGE_EARLY,
        ..schedule
    };
    let grown = request_tokens.saturating_sub(floor);
    match (
        schedule.due(request_tokens, floor, available),
        early.due(request_tokens, floor, available),
    ) {
        (Some(_), _) => Some(format!(
            "[foldwire] Fold now: the context holds {request_tokens} of {window} tokens and grew by {grown} since the last fold. \
             In one compress call, fold every listed range you no longer need verbatim, oldest first."
        )),
        (None, Some(_)) => Some(format!(
            "[foldwire] Fold due: the context grew by {grown} tokens since the last fold ({request_tokens} of {window}). \
             In one compress call, fold the oldest listed ranges you no longer need verbatim."
        )),
        (None, None) => None,
    }
}

/// The trailing note of a turn: the compressible ranges and, when some are offered and a
/// fold is due on the schedule ([`pressure_note`]), the nudge to compress them. Without a
/// range to offer there is no nudge: the model is never asked for a fold it cannot make.
pub fn turn_note(
    ranges: &[RangeInfo],
    runs: &[SummaryRun],
    view: Option<&Conversation>,
    request_tokens: u64,
    floor: u64,
    window: u64,
) -> Option<String> {
    let listed = ranges_note(ranges, runs, view)?;
    let parts: Vec<String> = pressure_note(request_tokens, floor, window)
        .into_iter()
        .chain(Some(listed))
        .collect();
    Some(parts.join("\n"))
}

/// Tool names the request already declares, whatever the wire.
fn declared_names(wire: Wire, body: &Map<String, Value>) -> Vec<String> {
    let tools = body.get("tools").and_then(Value::as_array);
    let Some(tools) = tools else {
        return Vec::new();
    };
    let mut names = Vec::new();
    for t in tools {
        match wire {
            Wire::Gemini => {
                for key in ["functionDeclarations", "function_declarations"] {
                    let decls = t.get(key).and_then(Value::as_array).into_iter().flatten();
                    names.extend(
                        decls.filter_map(|d| {
                            d.get("name").and_then(Value::as_str).map(str::to_owned)
                        }),
                    );
                }
            }
            _ => {
                let name = t
                    .get("name")
                    .or_else(|| t.get("function").and_then(|f| f.get("name")));
                names.extend(name.and_then(Value::as_str).map(str::to_owned));
            }
        }
    }
    names
}

/// Why the tools were not injected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InjectError {
    /// The body is not a JSON object.
    #[error("the {wire} request body is not a JSON object")]
    NotAnObject {
        /// The wire.
        wire: Wire,
    },
    /// The client already has a tool of one of our names.
    #[error("the client already declares a tool named {0:?}")]
    NameTaken(String),
}

/// Adds the three tools, the system note and (when given) the per-turn ranges note to a
/// request body.
///
/// # Errors
/// A body that is not an object, or a client tool with one of the proxy's names (then the
/// body is left alone and the client's tools work as they always did).
pub fn inject(wire: Wire, body: &mut Value, ranges: Option<&str>) -> Result<(), InjectError> {
    let obj = body
        .as_object_mut()
        .ok_or(InjectError::NotAnObject { wire })?;
    if let Some(taken) = declared_names(wire, obj)
        .into_iter()
        .find(|n| NAMES.contains(&n.as_str()))
    {
        return Err(InjectError::NameTaken(taken));
    }
    let tools = obj
        .entry("tools")
        .or_insert_with(|| Value::Array(Vec::new()));
    if !tools.is_array() {
        *tools = Value::Array(Vec::new());
    }
    if let Some(list) = tools.as_array_mut() {
        list.extend(tool_entries(wire));
    }
    add_system_note(wire, obj);
    if let Some(note) = ranges {
        append_user_text(wire, obj, note);
    }
    Ok(())
}

/// The static note, in the wire's system slot.
fn add_system_note(wire: Wire, obj: &mut Map<String, Value>) {
    match wire {
        Wire::Anthropic => match obj.get_mut("system") {
            Some(Value::String(s)) => {
                let text = std::mem::take(s);
                obj.insert(
                    "system".into(),
                    json!([{"type": "text", "text": text}, {"type": "text", "text": SYSTEM_NOTE}]),
                );
            }
            Some(Value::Array(parts)) => parts.push(json!({"type": "text", "text": SYSTEM_NOTE})),
            _ => {
                obj.insert("system".into(), Value::String(SYSTEM_NOTE.into()));
            }
        },
        Wire::OpenAiChat => {
            if let Some(messages) = obj.get_mut("messages").and_then(Value::as_array_mut) {
                // After the client's own leading system messages, so their prefix is unchanged.
                let at = messages
                    .iter()
                    .take_while(|m| {
                        matches!(
                            m.get("role").and_then(Value::as_str),
                            Some("system" | "developer")
                        )
                    })
                    .count();
                messages.insert(at, json!({"role": "system", "content": SYSTEM_NOTE}));
            }
        }
        Wire::OpenAiResponses => {
            let text = match obj.get("instructions").and_then(Value::as_str) {
                Some(s) if !s.is_empty() => format!("{s}\n\n{SYSTEM_NOTE}"),
                _ => SYSTEM_NOTE.to_owned(),
            };
            obj.insert("instructions".into(), Value::String(text));
        }
        Wire::Gemini => {
            let key = if obj.contains_key("system_instruction") {
                "system_instruction"
            } else {
                "systemInstruction"
            };
            let slot = obj.entry(key).or_insert_with(|| json!({"parts": []}));
            if let Some(parts) = slot.get_mut("parts").and_then(Value::as_array_mut) {
                parts.push(json!({"text": SYSTEM_NOTE}));
            } else {
                *slot = json!({"parts": [{"text": SYSTEM_NOTE}]});
            }
        }
    }
}

/// Appends `text` as trailing user content: after the last message, so every cached prefix
/// stays byte-identical.
pub fn append_user_text(wire: Wire, obj: &mut Map<String, Value>, text: &str) {
    match wire {
        Wire::Anthropic => {
            let Some(messages) = obj.get_mut("messages").and_then(Value::as_array_mut) else {
                return;
            };
            let last_is_user = messages
                .last()
                .is_some_and(|m| m.get("role").and_then(Value::as_str) == Some("user"));
            if !last_is_user {
                messages.push(json!({"role": "user", "content": [{"type": "text", "text": text}]}));
                return;
            }
            if let Some(last) = messages.last_mut() {
                match last.get_mut("content") {
                    Some(Value::Array(parts)) => parts.push(json!({"type": "text", "text": text})),
                    Some(Value::String(s)) => {
                        let old = std::mem::take(s);
                        last["content"] = json!([
                            {"type": "text", "text": old},
                            {"type": "text", "text": text}
                        ]);
                    }
                    _ => last["content"] = json!([{"type": "text", "text": text}]),
                }
            }
        }
        Wire::OpenAiChat => {
            if let Some(messages) = obj.get_mut("messages").and_then(Value::as_array_mut) {
                messages.push(json!({"role": "user", "content": text}));
            }
        }
        Wire::OpenAiResponses => {
            if let Some(input) = responses_input(obj) {
                input.push(json!({"role": "user", "content": text}));
            }
        }
        Wire::Gemini => {
            if let Some(contents) = obj.get_mut("contents").and_then(Value::as_array_mut) {
                let last_user = contents
                    .last_mut()
                    .filter(|c| c.get("role").and_then(Value::as_str).unwrap_or("user") == "user");
                match last_user
                    .and_then(|c| c.get_mut("parts"))
                    .and_then(Value::as_array_mut)
                {
                    Some(parts) => parts.push(json!({"text": text})),
                    None => contents.push(json!({"role": "user", "parts": [{"text": text}]})),
                }
            }
        }
    }
}

/// The Responses `input` as a list (a string input becomes one user message).
pub fn responses_input(obj: &mut Map<String, Value>) -> Option<&mut Vec<Value>> {
    let slot = obj
        .entry("input")
        .or_insert_with(|| Value::Array(Vec::new()));
    if let Value::String(s) = slot {
        let text = std::mem::take(s);
        *slot = json!([{"role": "user", "content": text}]);
    }
    if !slot.is_array() {
        *slot = Value::Array(Vec::new());
    }
    slot.as_array_mut()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nudges_follow_the_fold_schedule() {
        // Window 100,000: 84,000 available; trigger 0.45 (37,800), asked from 0.8 of it
        // (30,240); growth 0.25 (21,000) since the last fold; ceiling 0.9 (75,600).
        let w = 100_000;
        assert_eq!(pressure_note(30_000, 0, w), None, "under the early trigger");
        assert!(pressure_note(31_000, 0, w).unwrap().contains("Fold due"));
        assert!(pressure_note(40_000, 0, w).unwrap().contains("Fold now"));
        // Right after a fold that left 25,000, the same pressure asks nothing until the
        // context has grown again: no nudge on every turn.
        assert_eq!(pressure_note(31_000, 25_000, w), None);
        assert_eq!(pressure_note(45_000, 25_000, w), None);
        assert!(
            pressure_note(47_000, 25_000, w)
                .unwrap()
                .contains("Fold now")
        );
        // Past the ceiling whatever the growth.
        assert_eq!(pressure_note(75_000, 74_000, w), None);
        assert!(
            pressure_note(76_000, 75_000, w)
                .unwrap()
                .contains("Fold now")
        );
        let r = RangeInfo {
            start: "m00001".parse().unwrap(),
            end: "m00004".parse().unwrap(),
            tokens: 900,
            messages: 4,
            tool_calls: [("bash".to_owned(), 2)].into_iter().collect(),
        };
        let note = turn_note(std::slice::from_ref(&r), &[], None, 100, 0, 1000).unwrap();
        assert!(note.contains("m00001..m00004: 4 messages, ~900 tokens (tools: bash×2)"));
        assert!(turn_note(&[], &[], None, 100, 0, 1000).is_none());
        // Due with nothing to offer: no nudge asks for a fold that cannot be made.
        assert!(turn_note(&[], &[], None, 35_000, 0, w).is_none());
        let pressed = turn_note(std::slice::from_ref(&r), &[], None, 35_000, 0, w).unwrap();
        assert!(pressed.contains("Fold due") && pressed.contains("m00001..m00004"));
        // Summaries side by side are offered by block ids, and count as an offer.
        let run = SummaryRun {
            blocks: vec![
                foldwire_core::BlockId(2),
                foldwire_core::BlockId(3),
                foldwire_core::BlockId(5),
            ],
            tokens: 240,
            tier: 2,
        };
        let note = turn_note(&[], std::slice::from_ref(&run), None, 35_000, 0, w).unwrap();
        assert!(note.contains("Fold due"), "{note}");
        assert!(
            note.contains("b2..b5: 3 summaries, ~240 tokens (folds them into one tier-2 summary)"),
            "{note}"
        );
    }

    #[test]
    fn injection_adds_tools_and_note_and_respects_client_names() {
        let mut body = json!({"model": "m", "system": "be brief", "messages": [{"role": "user", "content": "hi"}]});
        inject(Wire::Anthropic, &mut body, Some("[foldwire] ranges")).unwrap();
        assert_eq!(body["tools"].as_array().unwrap().len(), 3);
        assert_eq!(body["system"][0]["text"], "be brief");
        assert_eq!(
            body["messages"][0]["content"][1]["text"],
            "[foldwire] ranges"
        );

        let mut taken =
            json!({"contents": [], "tools": [{"functionDeclarations": [{"name": "compress"}]}]});
        assert_eq!(
            inject(Wire::Gemini, &mut taken, None),
            Err(InjectError::NameTaken("compress".into()))
        );
        let mut chat = json!({"messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]});
        inject(Wire::OpenAiChat, &mut chat, None).unwrap();
        assert_eq!(chat["messages"][1]["content"], SYSTEM_NOTE);
        assert_eq!(chat["tools"][0]["function"]["name"], COMPRESS);
        let mut resp = json!({"input": "hello"});
        inject(Wire::OpenAiResponses, &mut resp, Some("note")).unwrap();
        assert_eq!(resp["input"][0]["content"], "hello");
        assert_eq!(resp["input"][1]["content"], "note");
        assert_eq!(resp["instructions"], SYSTEM_NOTE);
    }
}
