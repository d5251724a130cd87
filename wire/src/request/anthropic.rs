//! Anthropic Messages: each message is an entry; string content is one unit, each content
//! block is a unit. `system`, `tools` and every other top-level field stay in the frame.

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
    let role = match cx.req_str(mpath, &fields, "role")?.as_ref() {
        "user" => Role::User,
        "assistant" => Role::Assistant,
        "system" => Role::System,
        other => {
            return Err(cx.shape_msg(
                &mpath.key("role"),
                "\"user\" or \"assistant\"",
                &format!("{other:?}"),
            ));
        }
    };
    let entry = cx.begin_entry(role, item);
    let Some(content) = scan::field(&fields, "content") else {
        return Err(cx.shape_msg(
            &mpath.key("content"),
            "a string or an array of blocks",
            "no such field",
        ));
    };
    let cpath = mpath.key("content");
    match cx.bytes().get(content.value.start) {
        Some(b'"') => cx.string_content(entry, role, &content.value),
        Some(b'[') => {
            let blocks = cx.items(&cpath, &content.value)?;
            if blocks.is_empty() {
                // Nothing to cut: the whole message is one unit so it is never lost.
                cx.whole(entry, role, MessageKind::Other, Text::default(), None, item);
            }
            for (j, block) in blocks.iter().enumerate() {
                let spec = decode_block(cx, &cpath.index(j), block, role, j)?;
                cx.unit(entry, spec);
            }
        }
        _ => return Err(cx.shape(&cpath, "a string or an array of blocks", &content.value)),
    }
    Ok(())
}

fn decode_block(
    cx: &Cx<'_>,
    path: &Path<'_>,
    span: &Range<usize>,
    role: Role,
    index: usize,
) -> Result<UnitSpec, WireError> {
    let fields = cx.fields(path, span)?;
    let ty = cx.req_str(path, &fields, "type")?;
    let str_of = |key: &str| {
        scan::field(&fields, key)
            .filter(|f| cx.bytes().get(f.value.start) == Some(&b'"'))
            .map(|f| cx.string_text(&f.value))
    };
    let (kind, text, tool) = match ty.as_ref() {
        "text" => (MessageKind::Text, cx.req_text(path, &fields, "text")?, None),
        "image" | "document" | "search_result" | "container_upload" => (
            MessageKind::Media,
            str_of("title").unwrap_or_default(),
            None,
        ),
        "tool_use" => {
            let id = cx.req_str(path, &fields, "id")?.into_owned();
            let name = cx.req_str(path, &fields, "name")?.into_owned();
            let input = scan::field(&fields, "input")
                .map(|f| cx.json_text(&f.value))
                .unwrap_or_default();
            (
                MessageKind::ToolCall,
                input,
                Some(ToolLink {
                    call_id: id,
                    name: Some(name),
                }),
            )
        }
        "tool_result" => {
            let id = cx.req_str(path, &fields, "tool_use_id")?.into_owned();
            let text = scan::field(&fields, "content")
                .map(|f| cx.content_text(&f.value))
                .unwrap_or_default();
            (
                MessageKind::ToolResult,
                text,
                Some(ToolLink {
                    call_id: id,
                    name: None,
                }),
            )
        }
        "thinking" => (
            MessageKind::Reasoning,
            str_of("thinking").unwrap_or_default(),
            None,
        ),
        "redacted_thinking" => (MessageKind::Reasoning, Text::default(), None),
        // Server tool calls and results, and any block type this codec does not know, are
        // kept verbatim and fold as plain units; their JSON is their text.
        _ => (MessageKind::Other, cx.json_text(span), None),
    };
    Ok(UnitSpec {
        slot: UnitSlot::Content(u32::try_from(index).unwrap_or(u32::MAX)),
        role,
        kind,
        text,
        tool,
        span: span.clone(),
    })
}

/// The role name a new Anthropic message gets.
pub(crate) fn role_name(role: Role) -> &'static str {
    match role {
        Role::Assistant => "assistant",
        Role::User | Role::Tool | Role::System => "user",
    }
}
