//! Anthropic Messages: each message is an entry; string content is one unit, each content
//! block is a unit. `system`, `tools` and every other top-level field stay in the frame.
//!
//! Blocks that set which tools the model has from their place in the conversation on are
//! pinned, so no fold takes them: a tool result holding `tool_reference` blocks (a client's
//! tool search, as Claude Code's `ToolSearch` answers), the server tool search's result
//! (its call, linked to it, stays with it), `tool_addition`, `tool_removal` and
//! `mcp_tool_listing`. The API loads a deferred
//! tool where a reference names it; folded away, the tool would be unloaded for the rest of
//! the session while the client still believes it loaded (Anthropic's own compaction keeps
//! such changes for the same reason, in its block's `tool_changes`). A `compaction` block is
//! opaque and pinned like Responses' compaction items: the server reads it back as sent.

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
                let (spec, pin) = decode_block(cx, &cpath.index(j), block, role, j)?;
                cx.unit(entry, spec);
                if let Some(why) = pin {
                    cx.pin_last(why);
                }
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
) -> Result<(UnitSpec, Option<String>), WireError> {
    let fields = cx.fields(path, span)?;
    let ty = cx.req_str(path, &fields, "type")?;
    let str_of = |key: &str| {
        scan::field(&fields, key)
            .filter(|f| cx.bytes().get(f.value.start) == Some(&b'"'))
            .map(|f| cx.string_text(&f.value))
    };
    let mut pin = None;
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
            let content = scan::field(&fields, "content");
            let loaded = content
                .map(|f| tool_references(cx, &f.value))
                .unwrap_or_default();
            if !loaded.is_empty() {
                pin = Some(format!(
                    "loads the deferred tool(s) {}: folded, they would be unloaded",
                    loaded.join(", ")
                ));
            }
            let text = content
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
        "compaction" => {
            pin = Some("Anthropic compaction block: sent back unchanged".to_owned());
            (MessageKind::Opaque, Text::default(), None)
        }
        "tool_addition" | "tool_removal" | "mcp_tool_listing" => {
            pin = Some(format!("{ty} block: sets the model's tools from here on"));
            (MessageKind::Other, cx.json_text(span), None)
        }
        // A call the provider runs itself, and its result in the same message: kept
        // verbatim, linked so they fold together (the provider refuses either alone). The
        // tool search's result loads tools, so it is pinned, and its call stays with it.
        "server_tool_use" | "mcp_tool_use" => {
            let id = cx.opt_str(path, &fields, "id")?;
            let name = cx.opt_str(path, &fields, "name")?;
            let link = id.zip(name).map(|(id, name)| ToolLink {
                call_id: id.into_owned(),
                name: Some(name.into_owned()),
            });
            (MessageKind::Other, cx.json_text(span), link)
        }
        other if other.ends_with("_tool_result") => {
            if other == "tool_search_tool_result" {
                pin = Some(format!("{ty} block: sets the model's tools from here on"));
            }
            let link = cx
                .opt_str(path, &fields, "tool_use_id")?
                .map(|id| ToolLink {
                    call_id: id.into_owned(),
                    name: None,
                });
            (MessageKind::Other, cx.json_text(span), link)
        }
        // Any block type this codec does not know is kept verbatim and folds as a plain
        // unit; its JSON is its text.
        _ => (MessageKind::Other, cx.json_text(span), None),
    };
    let spec = UnitSpec {
        slot: UnitSlot::Content(u32::try_from(index).unwrap_or(u32::MAX)),
        role,
        kind,
        text,
        tool,
        span: span.clone(),
    };
    Ok((spec, pin))
}

/// The tools a tool result's `content` at `span` loads: the `tool_name` of each of its
/// `tool_reference` blocks (empty for string content, the common case, found without
/// reading the blocks).
fn tool_references(cx: &Cx<'_>, span: &Range<usize>) -> Vec<String> {
    let bytes = cx.bytes().get(span.clone()).unwrap_or_default();
    if bytes.first() != Some(&b'[') || memchr::memmem::find(bytes, b"tool_reference").is_none() {
        return Vec::new();
    }
    let Ok(items) = scan::array_items_mode(cx.bytes(), span, scan::Mode::Trusted) else {
        return Vec::new();
    };
    items
        .iter()
        .filter_map(|item| {
            let fields = scan::object_fields_mode(cx.src, item, scan::Mode::Trusted).ok()?;
            let ty =
                scan::field(&fields, "type").and_then(|f| scan::string_value(cx.src, &f.value))?;
            if ty != "tool_reference" {
                return None;
            }
            let name = scan::field(&fields, "tool_name")
                .and_then(|f| scan::string_value(cx.src, &f.value))
                .map(|n| n.into_owned())
                .unwrap_or_default();
            Some(name)
        })
        .collect()
}

/// The role name a new Anthropic message gets.
pub(crate) fn role_name(role: Role) -> &'static str {
    match role {
        Role::Assistant => "assistant",
        Role::User | Role::Tool | Role::System => "user",
    }
}
