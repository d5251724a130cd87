//! Gemini: each `contents[i]` is an entry and each `parts[j]` a unit.
//!
//! Function calls and responses may lack an `id`; the codec then derives a positional one,
//! `gemini:<entry>:<name>:<n>` (the n-th call of that name in that entry), and gives each
//! id-less response the oldest unanswered derived id of its name, so a call and its response
//! always share a `call_id`.

use std::collections::VecDeque;

use foldhash::{HashMap, HashMapExt as _};
use std::ops::Range;

use foldwire_core::{MessageKind, Role, Text, ToolLink, UnitSlot};

use super::{Cx, Path, UnitSpec, WireError, scan};

/// The prefix of derived call ids; the encoder omits such ids when it writes a response.
pub(crate) const DERIVED_ID_PREFIX: &str = "gemini:";

/// Derived call ids not yet answered, per function name, oldest first.
pub(crate) type Pending = HashMap<String, VecDeque<String>>;

/// Decodes one content, `item` of the `contents` array, at `cpath`, with the derived call ids
/// the contents before it left unanswered.
pub(crate) fn decode_content(
    cx: &mut Cx<'_>,
    cpath: &Path<'_>,
    item: &Range<usize>,
    pending: &mut Pending,
) -> Result<(), WireError> {
    let fields = cx.fields(cpath, item)?;
    let role = match cx.opt_str(cpath, &fields, "role")?.as_deref() {
        None | Some("user") => Role::User,
        Some("model") => Role::Assistant,
        Some("function" | "tool") => Role::Tool,
        Some("system") => Role::System,
        Some(other) => {
            return Err(cx.shape_msg(
                &cpath.key("role"),
                "\"user\" or \"model\"",
                &format!("{other:?}"),
            ));
        }
    };
    let entry = cx.begin_entry(role, item);
    let ppath = cpath.key("parts");
    let parts = match scan::field(&fields, "parts") {
        Some(p) => cx.items(&ppath, &p.value)?,
        None => Vec::new(),
    };
    if parts.is_empty() {
        cx.whole(entry, role, MessageKind::Other, Text::default(), None, item);
    }
    let mut calls_by_name: HashMap<String, usize> = HashMap::new();
    for (j, part) in parts.iter().enumerate() {
        let spec = decode_part(
            cx,
            &ppath.index(j),
            part,
            role,
            j,
            entry,
            &mut calls_by_name,
            pending,
        )?;
        cx.unit(entry, spec);
    }
    Ok(())
}

#[allow(clippy::too_many_arguments)]
fn decode_part(
    cx: &Cx<'_>,
    path: &Path<'_>,
    span: &Range<usize>,
    role: Role,
    index: usize,
    entry: usize,
    calls_by_name: &mut HashMap<String, usize>,
    pending: &mut Pending,
) -> Result<UnitSpec, WireError> {
    let fields = cx.fields(path, span)?;
    let thought = scan::field(&fields, "thought").is_some_and(|f| cx.text(&f.value) == "true");
    let (kind, text, tool) = if let Some(t) = scan::field(&fields, "text") {
        if cx.bytes().get(t.value.start) != Some(&b'"') {
            return Err(cx.shape(&path.key("text"), "a string", &t.value));
        }
        let text = cx.string_text(&t.value);
        let kind = if thought {
            MessageKind::Reasoning
        } else {
            MessageKind::Text
        };
        (kind, text, None)
    } else if let Some(call) = scan::field(&fields, "functionCall") {
        let fpath = path.key("functionCall");
        let cf = cx.fields(&fpath, &call.value)?;
        let name = cx.req_str(&fpath, &cf, "name")?.into_owned();
        let args = scan::field(&cf, "args")
            .map(|a| cx.json_text(&a.value))
            .unwrap_or_default();
        let call_id = match cx.opt_str(&fpath, &cf, "id")? {
            Some(id) => id.into_owned(),
            None => {
                let n = calls_by_name.entry(name.clone()).or_insert(0);
                let id = format!("{DERIVED_ID_PREFIX}{entry}:{name}:{n}");
                *n += 1;
                pending
                    .entry(name.clone())
                    .or_default()
                    .push_back(id.clone());
                id
            }
        };
        (
            MessageKind::ToolCall,
            args,
            Some(ToolLink {
                call_id,
                name: Some(name),
            }),
        )
    } else if let Some(resp) = scan::field(&fields, "functionResponse") {
        let fpath = path.key("functionResponse");
        let rf = cx.fields(&fpath, &resp.value)?;
        let name = cx.req_str(&fpath, &rf, "name")?.into_owned();
        let text = scan::field(&rf, "response")
            .map(|r| cx.json_text(&r.value))
            .unwrap_or_default();
        let call_id = match cx.opt_str(&fpath, &rf, "id")? {
            Some(id) => id.into_owned(),
            None => pending
                .get_mut(&name)
                .and_then(VecDeque::pop_front)
                .unwrap_or_else(|| format!("{DERIVED_ID_PREFIX}{entry}:{name}:unmatched")),
        };
        (
            MessageKind::ToolResult,
            text,
            Some(ToolLink {
                call_id,
                name: Some(name),
            }),
        )
    } else if scan::field(&fields, "inlineData").is_some()
        || scan::field(&fields, "fileData").is_some()
        || scan::field(&fields, "videoMetadata").is_some()
    {
        (MessageKind::Media, Text::default(), None)
    } else {
        // executableCode, codeExecutionResult, a bare thoughtSignature, unknown parts.
        let kind = if thought {
            MessageKind::Reasoning
        } else {
            MessageKind::Other
        };
        (kind, cx.json_text(span), None)
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

/// The derived call ids still unanswered after `units` (decoded in order from the start of
/// the contents array), as [`decode_items`] had them there: replayed from the units whose
/// call or response has no `id` of its own. `None` when a unit cannot be read back.
pub(crate) fn pending_after(units: &[foldwire_core::Message]) -> Option<Pending> {
    let mut pending = Pending::new();
    for unit in units {
        let Some(tool) = &unit.tool else { continue };
        let (key, is_call) = match unit.kind {
            MessageKind::ToolCall => ("functionCall", true),
            MessageKind::ToolResult => ("functionResponse", false),
            _ => continue,
        };
        // A derived id always has the prefix; one without it came from the client.
        if !tool.call_id.starts_with(DERIVED_ID_PREFIX) || has_own_id(&unit.raw, key)? {
            continue;
        }
        let name = tool.name.clone()?;
        if is_call {
            pending
                .entry(name)
                .or_default()
                .push_back(tool.call_id.clone());
        } else if let Some(queue) = pending.get_mut(&name) {
            queue.pop_front();
        }
    }
    Some(pending)
}

/// Whether the part `raw` gives its `key` object (`functionCall`, `functionResponse`) an
/// `id`; `None` when the part does not read as that shape.
fn has_own_id(raw: &[u8], key: &str) -> Option<bool> {
    // Most parts never say `"id"` (nor escape a key that could spell it): no need to read
    // their fields.
    let finder = |needle: &[u8]| memchr::memmem::find(raw, needle).is_some();
    if !finder(b"\"id\"") && !finder(b"\\u") {
        return Some(false);
    }
    let src = std::str::from_utf8(raw).ok()?;
    let part = scan::object_fields_mode(src, &(0..src.len()), scan::Mode::Trusted).ok()?;
    let inner = scan::field(&part, key)?;
    let fields = scan::object_fields_mode(src, &inner.value, scan::Mode::Trusted).ok()?;
    Some(scan::field(&fields, "id").is_some())
}

/// The role name a new Gemini content gets.
pub(crate) fn role_name(role: Role) -> &'static str {
    match role {
        Role::Assistant => "model",
        Role::User | Role::Tool | Role::System => "user",
    }
}
