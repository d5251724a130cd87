//! What each wire is, in one place: the JSON shapes, paths, field and event names foldwire
//! reads and writes around the codec. The stages and the proxy ask [`dialect`] (or
//! [`WireDialect::dialect`]) instead of matching on [`Wire`] themselves, so a new wire is one
//! file here plus its codec in [`crate::request`] and [`crate::stream`].
//!
//! Generic logic (walking a tree, splicing bytes, holding back events) stays with its
//! caller; a [`Dialect`] only answers "where / what is it called / what shape" questions.

mod answer;
mod anthropic;
mod gemini;
mod markers;
mod openai_chat;
mod openai_responses;

use base64::Engine as _;
use bytes::Bytes;
use foldwire_core::{Role, Wire};
use serde_json::{Map, Value};

use crate::request::extend::{ToolSpec, array_with, to_json};
use crate::request::scan;
use crate::stream::{HiddenCall, Usage};

pub use answer::RoundAnswer;
pub use markers::WireMarkers;

/// How a wire pairs tool calls with their results.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pairing {
    /// The role of the message that carries a result.
    pub result_role: Role,
    /// One message holds every result of a call turn (Anthropic, Gemini); otherwise each
    /// result is a message of its own right after the calls (OpenAI).
    pub results_in_one_message: bool,
    /// Calls are items of their own, so consecutive call items form one call turn
    /// (Responses `function_call` items).
    pub calls_are_items: bool,
}

/// User text added after the last message, as the wire writes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TrailingText {
    /// A content part (these bytes) of the last user message, or of a new one.
    Part(Vec<u8>),
    /// A user message of its own whose content is these bytes (a JSON string).
    Message(Vec<u8>),
}

/// Which provider's upstream a wire's requests go to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Provider {
    /// Anthropic.
    Anthropic,
    /// OpenAI (Chat Completions and Responses).
    OpenAi,
    /// Google (Gemini).
    Google,
}

/// Where a media payload sits in a unit, as a dialect reports it; the caller decides what to
/// do with it (measure, archive, pin). `field` is a JSON pointer below the object inspected.
pub trait MediaSink {
    /// Inline bytes (`text` is base64 or a data URL) of `kind`, with the declared type.
    fn inline(&mut self, kind: &str, field: &str, text: &str, declared: Option<&str>);
    /// A URL: inline when it is a data URL, else remote.
    fn url(&mut self, kind: &str, field: &str, url: &str, declared: Option<&str>);
    /// A payload foldwire never holds the bytes of, and why.
    fn unrecoverable(&mut self, kind: &str, field: &str, declared: Option<&str>, reason: String);
}

/// One restored payload carried back to the model with a call's result.
#[derive(Debug, Clone, Copy)]
pub struct ResultMedia<'a> {
    /// Its name for the model and in file names (the archive ref).
    pub label: &'a str,
    /// Its media type.
    pub media_type: &'a str,
    /// Its bytes.
    pub bytes: &'a [u8],
}

/// A call's result as the model gets it: text, and any restored media.
#[derive(Debug, Clone, Default)]
pub struct CallOutput<'a> {
    /// The result text.
    pub text: &'a str,
    /// Restored media.
    pub media: Vec<ResultMedia<'a>>,
}

/// The facts of one wire. Every method answers for this wire only; defaults are what most
/// wires do.
pub trait Dialect: Send + Sync {
    /// The wire this dialect speaks.
    fn wire(&self) -> Wire;

    /// Which provider serves it.
    fn provider(&self) -> Provider;

    // --- request -------------------------------------------------------------------------

    /// The top-level key of the conversation list (`messages`, `input`, `contents`).
    fn messages_key(&self) -> &'static str;

    /// The top-level fields that make a request continue a conversation the provider keeps
    /// (Responses' `previous_response_id`, Gemini's `cachedContent`): the body then holds
    /// only what is new, so there is nothing whole to fold and its calls' results may answer
    /// calls the body does not hold.
    fn provider_held_keys(&self) -> &'static [&'static str] {
        &[]
    }

    /// The top-level field by which a request continues the provider's stored response of
    /// that id (Responses' `previous_response_id`).
    fn chain_key(&self) -> Option<&'static str> {
        None
    }

    /// The type of a conversation item that stands for one the provider keeps (Responses'
    /// `item_reference`).
    fn provider_held_item(&self) -> Option<&'static str> {
        None
    }

    /// The tool definitions as the wire lists them in its `tools` field.
    fn tool_entries(&self, tools: &[ToolSpec<'_>]) -> Vec<Value>;

    /// Whether a `tools` entry nests its functions (Gemini `functionDeclarations`) instead
    /// of being one tool.
    fn nested_declarations(&self) -> bool {
        false
    }

    /// The system slot with `note` after the client's system text: the key and its new
    /// value, read from the value the request will send (`field`). `None` where the note is
    /// a system message of its own instead (OpenAI Chat).
    fn note_slot(
        &self,
        field: &dyn Fn(&str) -> Option<Vec<u8>>,
        note: &str,
    ) -> Option<(&'static str, Vec<u8>)>;

    /// How user text after the last message is written.
    fn trailing_text(&self, text: &str) -> TrailingText;

    /// How calls and results pair.
    fn pairing(&self) -> Pairing;

    /// Whether the wire takes prompt-cache markers (`cache_control`).
    fn cache_markers(&self) -> bool {
        false
    }

    /// A text part as it sits inside a user message's content.
    fn text_part(&self, text: &str) -> Value;

    /// Whether `map[key]` is a tool's own data (call arguments, function responses), which
    /// the provider never reads as media.
    fn is_tool_data(&self, map: &Map<String, Value>, key: &str) -> bool;

    /// Reports the media object at `map`, if it is one; true when it was.
    fn media_at(&self, map: &Map<String, Value>, sink: &mut dyn MediaSink) -> bool;

    /// Substrings one of which every unit holding a media object [`Dialect::media_at`]
    /// recognizes contains (its quoted `type` values or keys), so `media.classify` parses
    /// only units that may hold one. The default is every wire's: each media shape has a
    /// key or value containing `data`, `Data`, `file`, `File` or `url`.
    fn media_markers(&self) -> &'static [&'static [u8]] {
        &[b"data", b"Data", b"file", b"File", b"url"]
    }

    /// The conversation value as a list when the wire allows a scalar there (Responses
    /// takes a string `input`): the bytes of the list. `None`: not a list form.
    fn list_from_scalar(&self, _raw: &[u8]) -> Option<Vec<u8>> {
        None
    }

    /// The items a loop round appends to the conversation: the model's turn (its `answer`
    /// as the provider sent it when that holds every call, else its `text` and `calls`) and
    /// the calls' results.
    fn round_items(
        &self,
        answer: &RoundAnswer,
        text: &str,
        calls: &[HiddenCall],
        results: &[CallOutput<'_>],
    ) -> Vec<Value>;

    /// Substrings one of which every answer event or body holding a part of the answer a
    /// loop round sends back contains (none: the round is rebuilt from text and calls).
    fn answer_markers(&self) -> &'static [&'static str] {
        &[]
    }

    /// Reads what a loop round sends back of the answer from one streamed event's payload
    /// or a whole answer body.
    fn observe_answer(&self, _payload: &Value, _into: &mut RoundAnswer) {}

    /// Why the proxy's tools stay out of a request: a side request (structured output,
    /// forced or forbidden tools), or one whose answer the proxy never sees whole (a
    /// Responses `background` run, which the client polls for), so a call to them could not
    /// be answered.
    fn side_request(&self, body: &Value) -> Option<&'static str>;

    /// Headers a request to this provider needs besides the credentials.
    fn required_headers(&self) -> &'static [(&'static str, &'static str)] {
        &[]
    }

    /// The header an API key travels in.
    fn credential(&self, key: &str) -> (String, String);

    /// Whether the model is named in the request path rather than the body.
    fn model_in_path(&self) -> bool {
        false
    }

    /// A one-shot request of this wire: its path and body (a system prompt, one user
    /// message, an output cap). `path` is the caller's path, empty for the default.
    fn one_shot(
        &self,
        path: &str,
        model: &str,
        system: &str,
        ask: &str,
        max_tokens: u64,
    ) -> (String, Value);

    /// Whether this wire serves `path`; `Some(model)` carries a model named in the path.
    fn claims_path(&self, path: &str) -> Option<Option<String>>;

    /// Whether `path` is this wire's token-count endpoint, whose body is a request of the
    /// wire's own shape (the answer a count, not a model turn); `Some(model)` carries a
    /// model named in the path.
    fn counts_at(&self, _path: &str) -> Option<Option<String>> {
        None
    }

    /// Whether this wire's token-count body may carry tools and a system prompt (so the
    /// proxy's are counted too).
    fn count_takes_tools(&self) -> bool {
        true
    }

    /// The tokens a token-count answer reports (`input_tokens`; Gemini's `totalTokens`).
    fn counted_tokens(&self, answer: &Value) -> Option<u64> {
        answer.get("input_tokens").and_then(Value::as_u64)
    }

    /// Whether a request to `path_and_query` streams because of its path (not its body).
    fn streams_by_path(&self, _path_and_query: &str) -> bool {
        false
    }

    /// Whether a streamed answer to `path_and_query` is a JSON array instead of SSE.
    fn array_stream(&self, _path_and_query: &str) -> bool {
        false
    }

    /// Whether the wire's SSE clients accept comment lines (keep-alives).
    fn sse_comments(&self) -> bool {
        true
    }

    /// Input tokens of an image of `width` × `height` pixels (both non-zero), by the
    /// provider's published rule.
    fn image_tokens(&self, width: u32, height: u32) -> u64;

    /// What an image asking for `"detail": "low"` costs whatever its size, on wires that
    /// take that field.
    fn low_detail_image_tokens(&self) -> Option<u64> {
        None
    }

    /// Substrings one of which every span holding an inline image of this wire contains:
    /// data URLs and Anthropic's base64 sources say `base64`. A span with none of them holds
    /// no image the provider prices as one, so its tokens are estimated without looking at
    /// its strings.
    fn inline_image_markers(&self) -> &'static [&'static [u8]] {
        &[b"base64"]
    }

    // --- response ------------------------------------------------------------------------

    /// Removes the calls `is_proxy` names from a non-streamed answer; with no client call
    /// left, a tool-use stop becomes a normal end. Returns whether anything changed.
    fn strip_calls(&self, body: &mut Value, is_proxy: &dyn Fn(&str) -> bool) -> bool;

    /// The client-visible content of an answer, in order.
    fn visible(&self, body: &Value) -> Vec<Value>;

    /// Puts `earlier` (from [`Dialect::visible`]) in front of an answer's content.
    fn prepend(&self, body: &mut Value, earlier: Vec<Value>);

    /// The text of an answer.
    fn answer_text(&self, answer: &Value) -> Option<String>;

    /// The whole prompt the provider counted.
    fn prompt_tokens(&self, usage: &Usage) -> Option<u64> {
        usage.input_tokens
    }

    /// Whether an error answer is a context overflow: `raw` is the body, `lower` its
    /// message in lower case.
    fn is_overflow(&self, status: u16, raw: &str, lower: &str) -> bool;

    // --- stream --------------------------------------------------------------------------

    /// Whether events are typed (a JSON `type`, else the SSE event name).
    fn typed_events(&self) -> bool {
        false
    }

    /// Whether an event of `kind` opens an answer (dropped from later rounds).
    fn is_opening(&self, _kind: Option<&str>) -> bool {
        false
    }

    /// Whether an event of `kind` opens a content block / output item.
    fn opens_item(&self, _kind: Option<&str>) -> bool {
        false
    }

    /// Whether an event (its `data` and `kind`) closes a round.
    fn is_closing(&self, data: Option<&str>, kind: Option<&str>) -> bool;

    /// The field that numbers blocks / items in an event, shifted in later rounds.
    fn position_field(&self) -> Option<&'static str> {
        None
    }

    /// Whether events carry the response id (Anthropic names it only in the opening event,
    /// which later rounds drop).
    fn carries_response_id(&self) -> bool {
        false
    }

    /// Where an event carries the response id.
    fn response_id<'v>(&self, _event: &'v Value) -> Option<&'v Value> {
        None
    }

    /// [`Dialect::response_id`], writable.
    fn response_id_mut<'v>(&self, _event: &'v mut Value) -> Option<&'v mut Value> {
        None
    }

    /// Whether an event of `kind` completes an output item the final snapshot must list.
    fn completes_item(&self, _kind: Option<&str>) -> bool {
        false
    }

    /// Numbers inside an event that count pieces of the whole answer a client puts
    /// together by number (OpenRouter's `reasoning_details[].index` on Chat): a later
    /// round's continue after the earlier rounds', or the client would join them.
    fn answer_piece_numbers<'v>(&self, _event: &'v mut Value) -> Vec<&'v mut Value> {
        Vec::new()
    }

    /// A substring of every event that has [`Dialect::answer_piece_numbers`] (none: the
    /// wire numbers no such pieces).
    fn answer_piece_marker(&self) -> Option<&'static str> {
        None
    }

    /// The final snapshot's list of output items in an event.
    fn output_snapshot<'v>(&self, _event: &'v mut Value) -> Option<&'v mut Vec<Value>> {
        None
    }

    /// Whether events carry a running `sequence_number`.
    fn numbered_events(&self) -> bool {
        false
    }

    /// Turns a tool-use stop into a normal end in a closing event; true when changed.
    fn fix_stop(&self, _event: &mut Value) -> bool {
        false
    }

    /// A closing event with its closing fields removed, when it still has content to show
    /// (otherwise a dropped closing event is dropped whole).
    fn closing_content(&self, _event: &mut Value) -> bool {
        false
    }
}

/// The dialect of `wire`.
pub fn dialect(wire: Wire) -> &'static dyn Dialect {
    match wire {
        Wire::Anthropic => &anthropic::Anthropic,
        Wire::OpenAiChat => &openai_chat::OpenAiChat,
        Wire::OpenAiResponses => &openai_responses::OpenAiResponses,
        Wire::Gemini => &gemini::Gemini,
    }
}

/// `wire.dialect()` for the [`Wire`] defined below this crate.
pub trait WireDialect {
    /// This wire's dialect.
    fn dialect(self) -> &'static dyn Dialect;
}

impl WireDialect for Wire {
    fn dialect(self) -> &'static dyn Dialect {
        dialect(self)
    }
}

/// The wire that serves `path`, and a model the path names.
pub fn route(path: &str) -> Option<(Wire, Option<String>)> {
    Wire::ALL
        .into_iter()
        .find_map(|w| dialect(w).claims_path(path).map(|m| (w, m)))
}

/// The wire whose token-count endpoint `path` is, and the model the path names, if any.
pub fn count_route(path: &str) -> Option<(Wire, Option<String>)> {
    Wire::ALL
        .into_iter()
        .find_map(|w| dialect(w).counts_at(path).map(|m| (w, m)))
}

/// Why a loop round could not be appended.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RoundError {
    /// The body is not a JSON object.
    #[error("{wire} round: the body is not a JSON object (at byte {at})")]
    NotAnObject {
        /// The wire.
        wire: Wire,
        /// Where reading stopped.
        at: usize,
    },
    /// The conversation field is missing or not a list.
    #[error("{wire} round: the body has no {key:?} list to append to")]
    NoList {
        /// The wire.
        wire: Wire,
        /// The conversation key.
        key: &'static str,
    },
}

/// The follow-up request of a loop round: `body` with the model's turn and the call results
/// appended to its conversation list. Every byte before the list's closing bracket is the
/// body's own (the client's prefix, and the provider's cache, stay put); the rest of the body
/// after the list is copied as it was. No document is built from the body.
///
/// # Errors
/// A body that is not an object or has no conversation list.
pub fn append_round(
    wire: Wire,
    body: &[u8],
    answer: &RoundAnswer,
    text: &str,
    calls: &[HiddenCall],
    results: &[CallOutput<'_>],
) -> Result<Bytes, RoundError> {
    let d = dialect(wire);
    let key = d.messages_key();
    let src = std::str::from_utf8(body).map_err(|e| RoundError::NotAnObject {
        wire,
        at: e.valid_up_to(),
    })?;
    let start = scan::skip_ws(body, 0);
    // The body is one the codec read (or wrote) already: only closing quotes are looked for.
    let fields = scan::object_fields_mode(src, &(start..body.len()), scan::Mode::Trusted)
        .map_err(|e| RoundError::NotAnObject { wire, at: e.at })?;
    let end = body
        .iter()
        .rposition(|b| *b == b'}')
        .map(|at| at + 1)
        .ok_or(RoundError::NotAnObject { wire, at: start })?;
    let items: Vec<Vec<u8>> = d
        .round_items(answer, text, calls, results)
        .iter()
        .map(to_json)
        .collect();
    let list = match fields.iter().find(|f| f.key == key) {
        Some(f) => {
            let raw = body.get(f.value.clone()).unwrap_or_default();
            // Items go before the closing bracket: the list's own bytes are copied as sent.
            let as_list = if raw.first() == Some(&b'[') {
                None
            } else {
                d.list_from_scalar(raw)
            };
            let list = array_with(as_list.as_deref().unwrap_or(raw), &items)
                .ok_or(RoundError::NoList { wire, key })?;
            (f.value.clone(), list)
        }
        None => {
            let empty = d
                .list_from_scalar(b"[]")
                .ok_or(RoundError::NoList { wire, key })?;
            let list = array_with(&empty, &items).ok_or(RoundError::NoList { wire, key })?;
            // A new last field, before the object's closing brace.
            let mut field = Vec::with_capacity(list.len() + key.len() + 4);
            if !fields.is_empty() {
                field.push(b',');
            }
            field.extend_from_slice(&to_json(key));
            field.push(b':');
            field.extend_from_slice(&list);
            (end - 1..end - 1, field)
        }
    };
    let (span, with) = list;
    let mut out = Vec::with_capacity(body.len() + with.len());
    out.extend_from_slice(body.get(..span.start).unwrap_or_default());
    out.extend_from_slice(&with);
    out.extend_from_slice(body.get(span.end..).unwrap_or_default());
    Ok(Bytes::from(out))
}

/// Call arguments as a JSON value (an unreadable argument string becomes `{}`).
fn arguments_value(arguments: &str) -> Value {
    serde_json::from_str(arguments).unwrap_or_else(|_| Value::Object(Map::new()))
}

fn base64_of(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

fn data_url(m: &ResultMedia<'_>) -> String {
    format!("data:{};base64,{}", m.media_type, base64_of(m.bytes))
}

/// A file name for a restored payload: its label, part and an extension from its type.
fn file_name(m: &ResultMedia<'_>, part: usize) -> String {
    let ext = m
        .media_type
        .split_once('/')
        .map(|(_, sub)| sub.split(['+', ';']).next().unwrap_or(sub))
        .unwrap_or("bin");
    format!("{}-{part}.{ext}", m.label)
}

fn str_at<'a>(map: &'a Map<String, Value>, key: &str) -> Option<&'a str> {
    map.get(key).and_then(Value::as_str)
}

fn obj_at<'a>(map: &'a Map<String, Value>, key: &str) -> Option<&'a Map<String, Value>> {
    map.get(key).and_then(Value::as_object)
}

/// A best-effort media type from a file name's extension.
fn media_type_from_filename(name: &str) -> Option<&'static str> {
    let ext = name.rsplit_once('.')?.1.to_ascii_lowercase();
    Some(match ext.as_str() {
        "pdf" => "application/pdf",
        "png" => "image/png",
        "jpg" | "jpeg" => "image/jpeg",
        "gif" => "image/gif",
        "webp" => "image/webp",
        "txt" => "text/plain",
        "csv" => "text/csv",
        "json" => "application/json",
        "wav" => "audio/wav",
        "mp3" => "audio/mpeg",
        _ => return None,
    })
}

/// The text a one-shot request's path uses: the caller's, else the wire's default.
fn path_or(path: &str, default: &str) -> String {
    if path.is_empty() {
        default.to_owned()
    } else {
        path.to_owned()
    }
}

/// A tool choice other than automatic: a named tool or function, any/required, or none.
fn forced_or_forbidden(choice: Option<&Value>) -> Option<&'static str> {
    let kind = match choice? {
        Value::String(s) => s.as_str(),
        Value::Object(o) => o.get("type").and_then(Value::as_str).unwrap_or("tool"),
        _ => return None,
    };
    match kind {
        "auto" => None,
        "none" => Some("tools forbidden"),
        _ => Some("tool choice forced"),
    }
}

/// The items of an answer's content list (none when it is absent or not a list).
fn items_of(slot: Option<&Value>) -> Vec<Value> {
    slot.and_then(Value::as_array).cloned().unwrap_or_default()
}

/// Puts `earlier` in front of the list at `slot` (a non-list becomes `earlier`).
fn prepend_items(slot: Option<&mut Value>, earlier: Vec<Value>) {
    match slot {
        Some(Value::Array(items)) => {
            let later = std::mem::take(items);
            items.extend(earlier);
            items.extend(later);
        }
        Some(other) => *other = Value::Array(earlier),
        None => {}
    }
}

/// Concatenated text parts, or `None` when there is no text.
fn joined(parts: Vec<&str>) -> Option<String> {
    Some(parts.concat()).filter(|t| !t.trim().is_empty())
}

#[cfg(test)]
mod tests;
