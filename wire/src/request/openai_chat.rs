//! OpenAI Chat Completions: each message is an entry. Units, in this order:
//! `reasoning_content`, then the content (string, or each part), then each `tool_calls[i]`.
//! A `role: tool` message is one whole unit, as is a message with nothing to cut.

use std::ops::Range;

use foldwire_core::{MessageKind, Role, Text, ToolLink, UnitSlot};

use super::{Cx, Path, UnitSpec, WireError, scan};

/// Decodes one wire message, `item` of the `messages` array, at `mpath`.
pub(crate) fn decode_message(
    cx: &mut Cx<'_>,
    mpath: &Path<'_>,
    item: &Range<usize>,
) -> Result<(), WireError> {
    let fields = cx.fields(mpath, item)?;
    let role_name = cx.req_str(mpath, &fields, "role")?;
    let role = match role_name.as_ref() {
        "system" | "developer" => Role::System,
        "user" => Role::User,
        "assistant" => Role::Assistant,
        "tool" | "function" => Role::Tool,
        other => {
            return Err(cx.shape_msg(
                &mpath.key("role"),
                "one of \"system\", \"developer\", \"user\", \"assistant\", \"tool\"",
                &format!("{other:?}"),
            ));
        }
    };
    let entry = cx.begin_entry(role, item);
    let content = scan::field(&fields, "content");
    if role == Role::Tool {
        let call_id = match cx.opt_str(mpath, &fields, "tool_call_id")? {
            Some(id) => id.into_owned(),
            // Legacy `role: function` results carry only the function name.
            None => cx
                .opt_str(mpath, &fields, "name")?
                .map(|n| n.into_owned())
                .unwrap_or_default(),
        };
        let name = cx.opt_str(mpath, &fields, "name")?.map(|n| n.into_owned());
        let text = content
            .map(|c| cx.content_text(&c.value))
            .unwrap_or_default();
        let tool = Some(ToolLink { call_id, name });
        cx.whole(entry, role, MessageKind::ToolResult, text, tool, item);
        return Ok(());
    }
    let before = cx.messages.len();
    if let Some(reasoning) = scan::field(&fields, "reasoning_content")
        && cx.bytes().get(reasoning.value.start) == Some(&b'"')
    {
        let text = cx.string_text(&reasoning.value);
        cx.unit(
            entry,
            UnitSpec {
                slot: UnitSlot::ReasoningField,
                role,
                kind: MessageKind::Reasoning,
                text,
                tool: None,
                span: reasoning.value.clone(),
            },
        );
    }
    if let Some(content) = content {
        let cpath = mpath.key("content");
        match cx.bytes().get(content.value.start) {
            Some(b'"') => cx.string_content(entry, role, &content.value),
            Some(b'[') => {
                let parts = cx.items(&cpath, &content.value)?;
                for (j, part) in parts.iter().enumerate() {
                    let spec = decode_part(cx, &cpath.index(j), part, role, j)?;
                    cx.unit(entry, spec);
                }
            }
            Some(b'n') => {}
            _ => {
                return Err(cx.shape(
                    &cpath,
                    "a string, an array of parts or null",
                    &content.value,
                ));
            }
        }
    }
    if let Some(calls) = scan::field(&fields, "tool_calls") {
        let tpath = mpath.key("tool_calls");
        if cx.bytes().get(calls.value.start) != Some(&b'n') {
            let calls = cx.items(&tpath, &calls.value)?;
            for (j, call) in calls.iter().enumerate() {
                let spec = decode_tool_call(cx, &tpath.index(j), call, role, j)?;
                cx.unit(entry, spec);
            }
        }
    }
    if cx.messages.len() == before {
        // Nothing to cut (e.g. an empty assistant turn): keep the message as one unit.
        cx.whole(entry, role, MessageKind::Other, Text::default(), None, item);
    }
    Ok(())
}

fn index_u32(i: usize) -> u32 {
    u32::try_from(i).unwrap_or(u32::MAX)
}

fn decode_part(
    cx: &Cx<'_>,
    path: &Path<'_>,
    span: &Range<usize>,
    role: Role,
    index: usize,
) -> Result<UnitSpec, WireError> {
    let fields = cx.fields(path, span)?;
    let ty = cx.req_str(path, &fields, "type")?;
    let (kind, text) = match ty.as_ref() {
        "text" => (MessageKind::Text, cx.req_text(path, &fields, "text")?),
        "refusal" => (
            MessageKind::Text,
            cx.opt_text(path, &fields, "refusal")?.unwrap_or_default(),
        ),
        "image_url" | "input_audio" | "file" | "input_image" | "input_file" => {
            (MessageKind::Media, Text::default())
        }
        _ => (MessageKind::Other, cx.json_text(span)),
    };
    Ok(UnitSpec {
        slot: UnitSlot::Content(index_u32(index)),
        role,
        kind,
        text,
        tool: None,
        span: span.clone(),
    })
}

fn decode_tool_call(
    cx: &Cx<'_>,
    path: &Path<'_>,
    span: &Range<usize>,
    role: Role,
    index: usize,
) -> Result<UnitSpec, WireError> {
    let fields = cx.fields(path, span)?;
    let call_id = cx
        .opt_str(path, &fields, "id")?
        .map(|s| s.into_owned())
        .unwrap_or_default();
    let (name, args) = match scan::field(&fields, "function") {
        Some(f) => {
            let fpath = path.key("function");
            let ffields = cx.fields(&fpath, &f.value)?;
            let name = cx
                .opt_str(&fpath, &ffields, "name")?
                .map(|s| s.into_owned());
            let args = match scan::field(&ffields, "arguments") {
                Some(a) if cx.bytes().get(a.value.start) == Some(&b'"') => cx.string_text(&a.value),
                Some(a) => cx.json_text(&a.value),
                None => Text::default(),
            };
            (name, args)
        }
        // Custom tool calls carry `custom: {name, input}`.
        None => match scan::field(&fields, "custom") {
            Some(c) => {
                let cpath = path.key("custom");
                let cfields = cx.fields(&cpath, &c.value)?;
                (
                    cx.opt_str(&cpath, &cfields, "name")?
                        .map(|s| s.into_owned()),
                    cx.opt_text(&cpath, &cfields, "input")?.unwrap_or_default(),
                )
            }
            None => (None, Text::default()),
        },
    };
    Ok(UnitSpec {
        slot: UnitSlot::ToolCalls(index_u32(index)),
        role,
        kind: MessageKind::ToolCall,
        text: args,
        tool: Some(ToolLink { call_id, name }),
        span: span.clone(),
    })
}

/// The role name a new Chat message gets.
pub(crate) fn role_name(role: foldwire_core::Role) -> &'static str {
    match role {
        Role::System => "system",
        Role::Assistant => "assistant",
        Role::User | Role::Tool => "user",
    }
}
