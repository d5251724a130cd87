//! OpenAI Responses: each input item is an entry and, except for messages, one whole unit.
//! A message item's string content is one unit; each content part of an array is a unit.
//! Compaction items are opaque and protected: they reach the provider unchanged; tool search
//! calls and outputs are protected too, since they load tools. An `item_reference` stands
//! for an item the provider keeps, so a request holding one is not decoded (`held.rs`).
//! `input` given as a plain string is one user entry with one string unit.

use std::ops::Range;

use foldwire_core::{MessageKind, Role, Text, ToolLink, UnitSlot};

use super::{Cx, Path, UnitSpec, WireError, scan, text_of_content};

/// The type of an input item that declares the model's tools (Codex's "Responses lite"
/// requests, which send no `tools`).
const TOOLS_ITEM: &str = "additional_tools";

/// Why a tools-declaring item is pinned; [`declares_tools_in_items`] reads it.
const TOOLS_ITEM_PIN: &str = "additional_tools item: declares the model's tools";

/// Whether the conversation declares the model's tools in an input item rather than in the
/// request's `tools` (Codex's "Responses lite" requests). Such a request takes no tools
/// beside its own: the provider's handling of both at once is not known.
pub fn declares_tools_in_items(conv: &foldwire_core::Conversation) -> bool {
    conv.messages.iter().any(
        |m| matches!(&m.pin, Some(foldwire_core::Pin::Protected(why)) if why == TOOLS_ITEM_PIN),
    )
}

/// Decodes the `input` value at `span` when it is a string (one user text) and says so;
/// `false` for an array of items (each decoded by [`decode_item`]), an error otherwise.
pub(crate) fn decode_string_input(
    cx: &mut Cx<'_>,
    path: &Path<'_>,
    span: &Range<usize>,
) -> Result<bool, WireError> {
    if cx.bytes().get(span.start) == Some(&b'"') {
        let entry = cx.begin_entry(Role::User, span);
        cx.string_content(entry, Role::User, span);
        return Ok(true);
    }
    if cx.bytes().get(span.start) != Some(&b'[') {
        return Err(cx.shape(path, "a string or an array of items", span));
    }
    Ok(false)
}

fn parse_role(cx: &Cx<'_>, path: &Path<'_>, name: &str) -> Result<Role, WireError> {
    match name {
        "user" => Ok(Role::User),
        "assistant" => Ok(Role::Assistant),
        "system" | "developer" => Ok(Role::System),
        other => Err(cx.shape_msg(
            &path.key("role"),
            "one of \"user\", \"assistant\", \"system\", \"developer\"",
            &format!("{other:?}"),
        )),
    }
}

/// Decodes one item of the `input` array at `path`.
pub(crate) fn decode_item(
    cx: &mut Cx<'_>,
    path: &Path<'_>,
    span: &Range<usize>,
) -> Result<(), WireError> {
    let fields = cx.fields(path, span)?;
    let ty = cx.opt_str(path, &fields, "type")?;
    let role_field = cx.opt_str(path, &fields, "role")?;
    let is_message = match ty.as_deref() {
        Some("message") => true,
        None => role_field.is_some(),
        Some(_) => false,
    };
    if is_message {
        let role_name = role_field
            .ok_or_else(|| cx.shape_msg(&path.key("role"), "a string", "no such field"))?;
        let role = parse_role(cx, path, &role_name)?;
        let entry = cx.begin_entry(role, span);
        let cpath = path.key("content");
        let Some(content) = scan::field(&fields, "content") else {
            return Err(cx.shape_msg(&cpath, "a string or an array of parts", "no such field"));
        };
        match cx.bytes().get(content.value.start) {
            Some(b'"') => cx.string_content(entry, role, &content.value),
            Some(b'[') => {
                let parts = cx.items(&cpath, &content.value)?;
                if parts.is_empty() {
                    cx.whole(entry, role, MessageKind::Other, Text::default(), None, span);
                }
                for (j, part) in parts.iter().enumerate() {
                    let spec = decode_part(cx, &cpath.index(j), part, role, j)?;
                    cx.unit(entry, spec);
                }
            }
            _ => return Err(cx.shape(&cpath, "a string or an array of parts", &content.value)),
        }
        return Ok(());
    }
    let ty = ty.unwrap_or_default();
    if crate::dialect::dialect(cx.wire).provider_held_item() == Some(ty.as_ref()) {
        return Err(super::held::held_item(cx.wire, path.render(), &ty));
    }
    let str_of = |key: &str| {
        scan::field(&fields, key)
            .filter(|f| cx.bytes().get(f.value.start) == Some(&b'"'))
            .map(|f| cx.string_text(&f.value))
    };
    let (role, kind, text, tool) = match ty.as_ref() {
        // A computer-use action is a call like a function's: its screenshot comes back in a
        // `computer_call_output` with the same `call_id`, and the two fold together.
        "function_call" | "custom_tool_call" | "computer_call" => {
            let call_id = cx.req_str(path, &fields, "call_id")?.into_owned();
            let name = match cx.opt_str(path, &fields, "name")? {
                Some(name) => Some(name.into_owned()),
                None if ty == "computer_call" => Some("computer".to_owned()),
                None => None,
            };
            let args = str_of("arguments")
                .or_else(|| str_of("input"))
                .unwrap_or_default();
            (
                Role::Assistant,
                MessageKind::ToolCall,
                args,
                Some(ToolLink { call_id, name }),
            )
        }
        "function_call_output" | "custom_tool_call_output" | "computer_call_output" => {
            let call_id = cx.req_str(path, &fields, "call_id")?.into_owned();
            let text = scan::field(&fields, "output")
                .map(|f| cx.content_text(&f.value))
                .unwrap_or_default();
            (
                Role::Tool,
                MessageKind::ToolResult,
                text,
                Some(ToolLink {
                    call_id,
                    name: None,
                }),
            )
        }
        // Calls of the built-in tools a client runs (shell, local shell, apply_patch, a
        // program) and their outputs, paired by `call_id`, and an MCP approval request and
        // its response: kept verbatim as other items (their outputs have types of their
        // own, which a client tool result's stub would not match), linked so they fold
        // together; the API refuses either one alone.
        "shell_call"
        | "local_shell_call"
        | "apply_patch_call"
        | "program"
        | "mcp_approval_request" => {
            let key = if ty == "mcp_approval_request" {
                "id"
            } else {
                "call_id"
            };
            let name = match cx.opt_str(path, &fields, "name")? {
                Some(name) => name.into_owned(),
                None => ty.strip_suffix("_call").unwrap_or(&ty).to_owned(),
            };
            let link = cx.opt_str(path, &fields, key)?.map(|id| ToolLink {
                call_id: id.into_owned(),
                name: Some(name),
            });
            (
                Role::Assistant,
                MessageKind::Other,
                cx.json_text(span),
                link,
            )
        }
        "shell_call_output"
        | "local_shell_call_output"
        | "apply_patch_call_output"
        | "program_output"
        | "mcp_approval_response" => {
            let (key, role) = if ty == "mcp_approval_response" {
                ("approval_request_id", Role::User)
            } else {
                ("call_id", Role::Tool)
            };
            let link = cx.opt_str(path, &fields, key)?.map(|id| ToolLink {
                call_id: id.into_owned(),
                name: None,
            });
            (role, MessageKind::Other, cx.json_text(span), link)
        }
        // A remote MCP call carries its own output: one item, no result to pair with. It
        // folds as one unit, named by its tool so protected-tool rules reach it.
        "mcp_call" => {
            let name = cx.opt_str(path, &fields, "name")?.map(|s| s.into_owned());
            let id = cx.opt_str(path, &fields, "id")?.map(|s| s.into_owned());
            (
                Role::Assistant,
                MessageKind::Other,
                cx.json_text(span),
                Some(ToolLink {
                    call_id: id.unwrap_or_default(),
                    name,
                }),
            )
        }
        "reasoning" => {
            let mut text = scan::field(&fields, "summary")
                .map(|f| text_of_content(cx.src, &f.value))
                .unwrap_or_default();
            if let Some(c) = scan::field(&fields, "content") {
                let more = text_of_content(cx.src, &c.value);
                if !more.is_empty() {
                    if !text.is_empty() {
                        text.push('\n');
                    }
                    text.push_str(&more);
                }
            }
            (Role::Assistant, MessageKind::Reasoning, text.into(), None)
        }
        "compaction" | "compaction_summary" => {
            let entry = cx.begin_entry(Role::Assistant, span);
            cx.whole(
                entry,
                Role::Assistant,
                MessageKind::Opaque,
                Text::default(),
                None,
                span,
            );
            cx.pin_last("Responses compaction item: never modified".to_owned());
            return Ok(());
        }
        // Codex's "Responses lite" requests declare the model's tools in an input item, not
        // in `tools`: folded, the model would lose every tool it has.
        TOOLS_ITEM => {
            let role = match cx.opt_str(path, &fields, "role")? {
                Some(name) => parse_role(cx, path, &name)?,
                None => Role::System,
            };
            let entry = cx.begin_entry(role, span);
            cx.whole(
                entry,
                role,
                MessageKind::Other,
                cx.json_text(span),
                None,
                span,
            );
            cx.pin_last(TOOLS_ITEM_PIN.to_owned());
            return Ok(());
        }
        // Hosted tool calls, item references and unknown items: kept verbatim, foldable.
        _ => (
            Role::Assistant,
            MessageKind::Other,
            cx.json_text(span),
            None,
        ),
    };
    let entry = cx.begin_entry(role, span);
    cx.whole(entry, role, kind, text, tool, span);
    // A tool search's call and output load the tools it found from here on: folded, they
    // would be unloaded while the client believes them loaded (see `anthropic.rs`).
    if matches!(ty.as_ref(), "tool_search_call" | "tool_search_output") {
        cx.pin_last(format!("{ty} item: sets the model's tools from here on"));
    }
    Ok(())
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
        "input_text" | "output_text" | "text" => {
            (MessageKind::Text, cx.req_text(path, &fields, "text")?)
        }
        "refusal" => (
            MessageKind::Text,
            cx.opt_text(path, &fields, "refusal")?.unwrap_or_default(),
        ),
        "input_image" | "input_file" | "input_audio" => (MessageKind::Media, Text::default()),
        _ => (MessageKind::Other, cx.json_text(span)),
    };
    Ok(UnitSpec {
        slot: UnitSlot::Content(u32::try_from(index).unwrap_or(u32::MAX)),
        role,
        kind,
        text,
        tool: None,
        span: span.clone(),
    })
}

/// The role name a new Responses message item gets.
pub(crate) fn role_name(role: Role) -> &'static str {
    match role {
        Role::System => "developer",
        Role::Assistant => "assistant",
        Role::User | Role::Tool => "user",
    }
}

/// The text part type for a role: the model's own words are `output_text`.
pub(crate) fn text_part_type(role: Role) -> &'static str {
    if role == Role::Assistant {
        "output_text"
    } else {
        "input_text"
    }
}
