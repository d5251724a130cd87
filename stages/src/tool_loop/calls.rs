//! The handlers of the model's calls to the loop's tools: `compress` folds ranges of the
//! conversation it saw into blocks, `restore` returns a block's originals or an archived
//! payload, `search_context` searches the summaries. Each is a [`ToolHandler`] registered at
//! link time ([`RegisteredTool`]); [`run_call`] dispatches a call by name.
//!
//! Failures are results too: the model reads them and can correct itself.

use std::sync::Arc;

use foldwire_archive::{RestoreError, RestoredMedia, restore_media_part};
use foldwire_core::{AnyRef, BlockId, Conversation, Engine, Ref, SessionId, async_trait};
use serde::Deserialize;
use serde_json::{Value, json};

use super::{COMPRESS, LIST, NAMES, RESTORE, SEARCH, model_compress_config};
use crate::kernel::{
    CompressRequest, apply_compression, restore, restore_with_archive, search_top,
};
use crate::ranges_build::offered_protection;

/// Most search hits returned to the model.
const MAX_HITS: usize = 8;

/// What a call gives back to the model: its text, and the media it restored.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CallResult {
    /// The tool result's text.
    pub text: String,
    /// Archived payloads restored by ref, attached to the result in the wire's shape.
    pub media: Vec<RestoredMedia>,
}

impl From<String> for CallResult {
    fn from(text: String) -> Self {
        CallResult {
            text,
            media: Vec::new(),
        }
    }
}

/// What a handler works on: the session's engine, the session, and the conversation the
/// turn produced ([`foldwire_core::TurnOutcome::conversation`]), when there is one.
#[derive(Debug, Clone, Copy)]
pub struct CallCx<'a> {
    /// The engine running the session (state updates go through its session actor).
    pub engine: &'a Engine,
    /// The session.
    pub session: &'a SessionId,
    /// The conversation as the model saw it, refs minted.
    pub view: Option<&'a Arc<Conversation>>,
}

/// One of the loop's tools: its definition, and what a call to it does.
#[async_trait]
pub trait ToolHandler: Send + Sync + 'static {
    /// The tool's name.
    fn name(&self) -> &'static str;
    /// What it does, for the model.
    fn description(&self) -> &'static str;
    /// Its input's JSON schema.
    fn schema(&self) -> Value;
    /// Runs one call with its parsed arguments.
    async fn call(&self, cx: &CallCx<'_>, args: Value) -> CallResult;
}

/// A link-time registration of a [`ToolHandler`] (`inventory::submit!`); `order` sorts the
/// tools in the request (the built-ins take 0, 1, 2).
pub struct RegisteredTool {
    /// Position among the tools.
    pub order: u32,
    /// The handler.
    pub handler: &'static dyn ToolHandler,
}

foldwire_core::inventory::collect!(RegisteredTool);

/// Every registered handler, in order (ties by name).
pub fn handlers() -> Vec<&'static dyn ToolHandler> {
    let mut all: Vec<&RegisteredTool> = foldwire_core::inventory::iter::<RegisteredTool>
        .into_iter()
        .collect();
    all.sort_by_key(|r| (r.order, r.handler.name()));
    all.into_iter().map(|r| r.handler).collect()
}

/// The names of every registered tool (the built-ins [`NAMES`] first).
pub fn names() -> Vec<&'static str> {
    let mut out: Vec<&'static str> = NAMES.to_vec();
    for h in handlers() {
        if !out.contains(&h.name()) {
            out.push(h.name());
        }
    }
    out
}

/// Runs one call (`arguments` as the model wrote them) and returns the tool result.
pub async fn run_call(cx: &CallCx<'_>, name: &str, arguments: &str) -> CallResult {
    let args: Value = match serde_json::from_str(arguments) {
        Ok(v) => v,
        Err(e) => return format!("error: the arguments of {name} are not JSON: {e}").into(),
    };
    match handlers().into_iter().find(|h| h.name() == name) {
        Some(h) => h.call(cx, args).await,
        None => format!("error: {name} is not a foldwire tool").into(),
    }
}

/// `compress`.
struct Compress;
/// `restore`.
struct Restore;
/// `search_context`.
struct Search;

foldwire_core::inventory::submit! { RegisteredTool { order: 0, handler: &Compress } }
foldwire_core::inventory::submit! { RegisteredTool { order: 1, handler: &Restore } }
foldwire_core::inventory::submit! { RegisteredTool { order: 2, handler: &Search } }

#[derive(Debug, Deserialize)]
struct CompressArgs {
    ranges: Vec<RangeArg>,
}

#[derive(Debug, Deserialize)]
struct RangeArg {
    start: String,
    end: String,
    summary: String,
    #[serde(default)]
    topic: Option<String>,
}

#[async_trait]
impl ToolHandler for Compress {
    fn name(&self) -> &'static str {
        COMPRESS
    }
    fn description(&self) -> &'static str {
        "Fold ranges of earlier messages into summaries to free context. Each range names \
         its first and last ref (message refs like m00003 or block ids like b2)."
    }
    fn schema(&self) -> Value {
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
        })
    }
    async fn call(&self, cx: &CallCx<'_>, args: Value) -> CallResult {
        compress(cx, args).await.into()
    }
}

#[async_trait]
impl ToolHandler for Restore {
    fn name(&self) -> &'static str {
        RESTORE
    }
    fn description(&self) -> &'static str {
        "Return the exact original messages folded into a block, or an archived image or \
         document by the ref its placeholder line names. With the id `list`, list the \
         session's archived images and documents instead: one line each with its ref, type \
         and size."
    }
    fn schema(&self) -> Value {
        json!({
            "type": "object",
            "properties": {"id": {"type": "string", "description": "a block id such as b3, a media ref such as m00012, or list"}},
            "required": ["id"]
        })
    }
    async fn call(&self, cx: &CallCx<'_>, args: Value) -> CallResult {
        let id = args.get("id").and_then(Value::as_str).unwrap_or_default();
        if id.trim().eq_ignore_ascii_case(LIST) {
            return list_media(cx).await.into();
        }
        // Placeholders of units with several payloads name one: `m00014 part 1`.
        let (name, part) = match id.split_once(" part ") {
            Some((name, part)) => (name, part.trim().parse::<usize>().ok()),
            None => (id, None),
        };
        match name.trim().parse::<AnyRef>() {
            Ok(AnyRef::Block(block)) => restore_block(cx, block).await.into(),
            Ok(AnyRef::Message(r)) => match restore_trimmed(cx, r).await {
                Some(text) => text.into(),
                None => restore_media_ref(cx, r, part).await,
            },
            Err(_) => format!(
                "error: {id:?} is neither a block id (b1, b2, ...) nor a media ref (m00012, or m00012 part 1)"
            )
            .into(),
        }
    }
}

#[async_trait]
impl ToolHandler for Search {
    fn name(&self) -> &'static str {
        SEARCH
    }
    fn description(&self) -> &'static str {
        "Search the summaries of folded context; returns matching block ids with snippets."
    }
    fn schema(&self) -> Value {
        json!({
            "type": "object",
            "properties": {"query": {"type": "string"}},
            "required": ["query"]
        })
    }
    async fn call(&self, cx: &CallCx<'_>, args: Value) -> CallResult {
        search_blocks(cx, &args).await.into()
    }
}

async fn compress(cx: &CallCx<'_>, args: Value) -> String {
    let Some(view) = cx.view else {
        return "error: this request could not be indexed, so nothing can be compressed now"
            .to_owned();
    };
    // Ranges are checked against the client's conversation as the model was sent it (folded,
    // trimmed, laid out), not the loop's notes; a block keeps the client's own bytes of
    // every unit a stage rewrote for the wire (`Message::client_raw`).
    let view = super::model_view(view);
    let args: CompressArgs = match serde_json::from_value(args) {
        Ok(a) => a,
        Err(e) => {
            return format!(
                "error: compress expects {{\"ranges\":[{{\"start\",\"end\",\"summary\",\"topic\"?}}]}}: {e}"
            );
        }
    };
    let mut requests = Vec::new();
    let mut problems = Vec::new();
    for r in args.ranges {
        match (r.start.parse::<AnyRef>(), r.end.parse::<AnyRef>()) {
            (Ok(start), Ok(end)) => requests.push(CompressRequest {
                start,
                end,
                summary: r.summary,
                topic: r.topic,
                author: Some("model".to_owned()),
                max_summary_chars: None,
            }),
            _ => problems.push(format!(
                "{}..{}: refs look like m00012 or b3",
                r.start, r.end
            )),
        }
    }
    let estimator = cx.engine.context().estimator.clone();
    let outcome = cx
        .engine
        .update(
            cx.session,
            move |state: &mut foldwire_core::SessionState| {
                // The protection the turn's note offered ranges under, so none it offered
                // is refused as protected.
                let config = model_compress_config(offered_protection(state).unwrap_or_default());
                apply_compression(state, &view, &requests, &config, estimator.as_ref())
            },
        )
        .await;
    let result = match outcome {
        Ok(result) => result,
        Err(e) => return format!("error: the session could not be updated: {e}"),
    };
    let mut lines = Vec::new();
    for r in &result.ranges {
        let span = format!("{}..{}", r.start, r.end);
        match r.block {
            Some(b) => lines.push(format!("{span}: folded into {b}")),
            None => lines.push(format!(
                "{span}: not folded: {}",
                r.message
                    .clone()
                    .or_else(|| r.error.as_ref().and_then(|e| serde_json::to_string(e).ok()))
                    .unwrap_or_default()
            )),
        }
    }
    lines.extend(problems);
    // A batch-level explanation (every ref unknown) leads: it says why each range failed.
    if let Some(note) = &result.note {
        lines.insert(0, note.clone());
    }
    if lines.is_empty() {
        "no ranges given".to_owned()
    } else {
        lines.join("\n")
    }
}

async fn restore_block(cx: &CallCx<'_>, block: BlockId) -> String {
    let state = match cx.engine.snapshot(cx.session).await {
        Ok(s) => s,
        Err(e) => return format!("error: the session could not be read: {e}"),
    };
    // Originals live in the session's archive once the fold stage stored them; the state
    // holds only those not archived yet.
    let restored = match &cx.engine.context().archive {
        Some(archive) => {
            restore_with_archive(&state, archive.as_ref(), cx.session, block, true).await
        }
        None => restore(&state, block, true),
    };
    match restored {
        Ok(restored) => restored
            .units
            .iter()
            .map(|u| format!("[{}] {}", u.r#ref, u.raw))
            .collect::<Vec<_>>()
            .join("\n"),
        Err(e) => format!("error: {e}"),
    }
}

/// The archived media of the session, one line per payload (`m00012: image/png, 149
/// bytes`), named as placeholders and `restore` name them; payloads whose unit has no ref
/// cannot be asked for by ref and are left out.
async fn list_media(cx: &CallCx<'_>) -> String {
    let state = match cx.engine.snapshot(cx.session).await {
        Ok(s) => s,
        Err(e) => return format!("error: the session could not be read: {e}"),
    };
    let lines: Vec<String> = foldwire_archive::list_media(&state)
        .iter()
        .filter_map(|m| {
            let r = m.r#ref?;
            let name = match m.part {
                0 => r.to_string(),
                part => format!("{r} part {part}"),
            };
            Some(format!("{name}: {}, {} bytes", m.media_type, m.size))
        })
        .collect();
    if lines.is_empty() {
        return "no archived media in this session".to_owned();
    }
    format!(
        "{} archived media item(s) in this session; restore one with its ref:\n{}",
        lines.len(),
        lines.join("\n")
    )
}

/// The whole output of a tool result `tool.trim` trimmed, exactly as sent (`None` when
/// `r` was not trimmed: it may name archived media instead).
async fn restore_trimmed(cx: &CallCx<'_>, r: Ref) -> Option<String> {
    let state = match cx.engine.snapshot(cx.session).await {
        Ok(s) => s,
        Err(e) => return Some(format!("error: the session could not be read: {e}")),
    };
    crate::tool_trim::trimmed_key(&state, r)?;
    let Some(archive) = cx.engine.context().archive.clone() else {
        return Some(format!(
            "error: this proxy has no archive, so {r} cannot be restored"
        ));
    };
    Some(
        match crate::tool_trim::restore_trimmed(&state, archive.as_ref(), cx.session, r).await {
            Ok(raw) => format!("[{r}] {raw}"),
            Err(e) => format!("error: {e}"),
        },
    )
}

/// Archived payload `part` of the unit named by `r`, or all of them (an image or document
/// that a fold took off the wire and left a placeholder line for).
async fn restore_media_ref(cx: &CallCx<'_>, r: Ref, part: Option<usize>) -> CallResult {
    let Some(archive) = cx.engine.context().archive.clone() else {
        return format!("error: this proxy has no archive, so {r} cannot be restored").into();
    };
    let state = match cx.engine.snapshot(cx.session).await {
        Ok(s) => s,
        Err(e) => return format!("error: the session could not be read: {e}").into(),
    };
    let mut media = Vec::new();
    let mut next = part.unwrap_or(0);
    loop {
        match restore_media_part(archive.as_ref(), &state, cx.session, r, next).await {
            Ok(m) => media.push((next, m)),
            Err(RestoreError::NoSuchPart { .. }) if !media.is_empty() => break,
            Err(e) => return format!("error: {e}").into(),
        }
        if part.is_some() {
            break;
        }
        next += 1;
    }
    let lines: Vec<String> = media
        .iter()
        .map(|(part, m)| {
            format!(
                "[{r} part {part}] {}, {} bytes, restored exactly as sent (attached)",
                m.media_type,
                m.bytes.len()
            )
        })
        .collect();
    CallResult {
        text: lines.join("\n"),
        media: media.into_iter().map(|(_, m)| m).collect(),
    }
}

async fn search_blocks(cx: &CallCx<'_>, args: &Value) -> String {
    let query = args
        .get("query")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let state = match cx.engine.snapshot(cx.session).await {
        Ok(s) => s,
        Err(e) => return format!("error: the session could not be read: {e}"),
    };
    let hits = search_top(&state, query, MAX_HITS);
    if hits.is_empty() {
        return format!("no folded context matches {query:?}");
    }
    hits.iter()
        .map(|h| {
            format!(
                "{} ({}..{}{}): {}",
                h.block,
                h.span.0,
                h.span.1,
                h.topic
                    .as_deref()
                    .map(|t| format!(", {t}"))
                    .unwrap_or_default(),
                h.snippet
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}
