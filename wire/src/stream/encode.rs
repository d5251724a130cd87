//! Re-emitting a stream for the client while hiding chosen tool calls.
//!
//! With nothing hidden every event goes out as its exact raw bytes. When a call is hidden
//! (selected by tool name) all of its events are removed, and only the events whose wire
//! positions shift because of it are re-serialized: Anthropic content-block `index`, OpenAI
//! Chat `tool_calls[].index`, Responses `output_index` (plus `sequence_number` and the
//! `response.output` list). Gemini needs no renumbering: the hidden `functionCall` part is
//! removed from its response object. On Responses the reasoning item that produced a hidden
//! call is hidden with it (its events are held until the next item starts). The hidden calls'
//! complete arguments are collected so the proxy can run them. Stop reasons are left as the
//! provider sent them.

use std::collections::{BTreeMap, BTreeSet};

use bytes::Bytes;
use foldwire_core::Wire;
use serde_json::Value;

use super::error::StreamError;
use super::event::{Framing, ParsedEvent, StreamEvent};
use super::parser::StreamParser;
use super::sse::rewrite_data;

/// A hidden tool call, with its arguments as sent by the model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HiddenCall {
    /// The wire position the call had (see [`StreamEvent`]).
    pub index: u64,
    /// The call id (empty when the wire gave none).
    pub id: String,
    /// The tool name.
    pub name: String,
    /// The complete JSON arguments (`{}` when the model sent none).
    pub arguments: String,
    /// False when the stream ended before the call did.
    pub complete: bool,
}

/// Passes a parsed stream through for the client, hiding the calls of chosen tools.
#[derive(Debug)]
pub struct StreamFilter {
    wire: Wire,
    hide: BTreeSet<String>,
    /// Hidden calls still receiving arguments, by wire position.
    open: BTreeMap<u64, HiddenCall>,
    done: Vec<HiddenCall>,
    /// Wire positions of hidden calls (block index, tool index or output index).
    hidden_positions: BTreeSet<u64>,
    /// Events dropped so far (Responses `sequence_number` shifts by this much).
    dropped: u64,
    /// Responses: the events of a reasoning item held back until the next item shows
    /// whether it produced a hidden call, and the item's output index.
    held: Vec<ParsedEvent>,
    held_at: Option<u64>,
    /// Held events let go, with the client's bytes for each, not yet taken.
    released: Vec<(ParsedEvent, Bytes)>,
}

impl StreamFilter {
    /// A filter for `wire` that hides every call to one of `tool_names`.
    pub fn new<I, S>(wire: Wire, tool_names: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        StreamFilter {
            wire,
            hide: tool_names.into_iter().map(Into::into).collect(),
            open: BTreeMap::new(),
            done: Vec::new(),
            hidden_positions: BTreeSet::new(),
            dropped: 0,
            held: Vec::new(),
            held_at: None,
            released: Vec::new(),
        }
    }

    /// The bytes the client should get for `event`: its raw bytes, a re-serialized version,
    /// or `None` when the whole event belongs to a hidden call or is held back.
    ///
    /// On Responses a reasoning item is held back until the next item starts: the reasoning
    /// that produced a hidden call is hidden with it (a reasoning item the client sends back
    /// must be followed by the item it produced, or the API refuses it); otherwise its
    /// events are released ([`StreamFilter::take_released`]) ahead of this event's bytes.
    pub fn push(&mut self, event: &ParsedEvent) -> Result<Option<Bytes>, StreamError> {
        let touches_hidden = self.collect(event);
        if self.wire == Wire::OpenAiResponses && !self.hide.is_empty() && self.hold(event)? {
            return Ok(None);
        }
        let out = match self.wire {
            Wire::Anthropic => self.anthropic(event),
            Wire::OpenAiChat => self.chat(event),
            Wire::OpenAiResponses => self.responses(event),
            Wire::Gemini if touches_hidden => self.gemini(event),
            Wire::Gemini => Ok(Some(event.raw.clone())),
        }?;
        if out.is_none() {
            self.dropped += 1;
        }
        Ok(out)
    }

    /// Held events let go by the last [`StreamFilter::push`], with the client's bytes for
    /// each: they go to the client before the bytes `push` returned.
    pub fn take_released(&mut self) -> Vec<(ParsedEvent, Bytes)> {
        std::mem::take(&mut self.released)
    }

    /// The stream ended: whatever is still held, with the client's bytes for each (a
    /// reasoning item nothing followed goes out as it came).
    pub fn flush(&mut self) -> Vec<(ParsedEvent, Bytes)> {
        self.release();
        self.take_released()
    }

    /// Responses: holds a reasoning item's events; at the first event of anything else,
    /// hides the held item if that event opens a hidden call, and releases it otherwise.
    /// True when `event` itself is held.
    fn hold(&mut self, event: &ParsedEvent) -> Result<bool, StreamError> {
        let Some(data) = event.data.as_deref() else {
            return Ok(false);
        };
        // Cheap checks first: most events neither open an item nor belong to a held one.
        let opens = data.contains("\"response.output_item.added\"");
        if self.held_at.is_none() && !opens {
            return Ok(false);
        }
        let value = self.parse(event, data)?;
        let index = value.get("output_index").and_then(Value::as_u64);
        if let Some(at) = self.held_at {
            if index == Some(at) {
                self.held.push(event.clone());
                return Ok(true);
            }
            let produced_hidden =
                opens && index.is_some_and(|i| self.hidden_positions.contains(&i));
            if produced_hidden {
                self.hidden_positions.insert(at);
                self.dropped += self.held.len() as u64;
                self.held.clear();
                self.held_at = None;
            } else {
                self.release();
            }
        }
        let reasoning = value
            .get("item")
            .and_then(|i| i.get("type"))
            .and_then(Value::as_str)
            == Some("reasoning");
        if opens
            && reasoning
            && let Some(at) = index
        {
            self.held_at = Some(at);
            self.held.push(event.clone());
            return Ok(true);
        }
        Ok(false)
    }

    /// Lets the held events go, each through the filter as it would have gone (as received
    /// if it cannot be: every held event was read once already).
    fn release(&mut self) {
        self.held_at = None;
        for event in std::mem::take(&mut self.held) {
            match self.responses(&event) {
                Ok(Some(bytes)) => self.released.push((event, bytes)),
                Ok(None) => self.dropped += 1,
                Err(_) => {
                    let raw = event.raw.clone();
                    self.released.push((event, raw));
                }
            }
        }
    }

    /// Hidden calls that have ended so far.
    pub fn hidden_calls(&self) -> &[HiddenCall] {
        &self.done
    }

    /// Every hidden call, including any the stream left unfinished (`complete: false`).
    pub fn finish(mut self) -> Vec<HiddenCall> {
        self.done.extend(self.open.into_values());
        for call in &mut self.done {
            if call.arguments.trim().is_empty() {
                call.arguments = "{}".to_owned();
            }
        }
        self.done
    }

    /// Follows hidden calls through the normalized events; true if this event has one.
    fn collect(&mut self, event: &ParsedEvent) -> bool {
        let mut touches = false;
        for e in &event.events {
            match e {
                StreamEvent::ToolCallStart {
                    index, id, name, ..
                } if self.hide.contains(name) => {
                    touches = true;
                    self.hidden_positions.insert(*index);
                    self.open.insert(
                        *index,
                        HiddenCall {
                            index: *index,
                            id: id.clone(),
                            name: name.clone(),
                            arguments: String::new(),
                            complete: false,
                        },
                    );
                }
                StreamEvent::ToolCallArgsDelta { index, json } => {
                    if let Some(call) = self.open.get_mut(index) {
                        touches = true;
                        call.arguments.push_str(json);
                    }
                }
                StreamEvent::ToolCallEnd { index } => {
                    if let Some(mut call) = self.open.remove(index) {
                        touches = true;
                        call.complete = true;
                        if call.arguments.trim().is_empty() {
                            call.arguments = "{}".to_owned();
                        }
                        self.done.push(call);
                    }
                }
                _ => {}
            }
        }
        touches
    }

    /// How many hidden positions lie below `index`.
    fn shift(&self, index: u64) -> u64 {
        self.hidden_positions.range(..index).count() as u64
    }

    fn parse(&self, event: &ParsedEvent, data: &str) -> Result<Value, StreamError> {
        serde_json::from_str(data).map_err(|e| StreamError::Json {
            wire: self.wire,
            event: event.number,
            offset: event.offset,
            detail: e.to_string(),
        })
    }

    /// The event's frame with `value` as its new payload.
    fn reframe(event: &ParsedEvent, value: &Value) -> Bytes {
        match event.framing {
            Framing::ArrayElement { start, .. } => {
                let mut out = event.raw.get(..start).unwrap_or_default().to_vec();
                let json =
                    serde_json::to_string_pretty(value).unwrap_or_else(|_| value.to_string());
                out.extend_from_slice(json.as_bytes());
                Bytes::from(out)
            }
            _ => rewrite_data(&event.raw, &value.to_string()),
        }
    }

    fn anthropic(&mut self, event: &ParsedEvent) -> Result<Option<Bytes>, StreamError> {
        let Some(data) = event.data.as_deref() else {
            return Ok(Some(event.raw.clone()));
        };
        if self.hidden_positions.is_empty() || !data.contains("\"index\"") {
            return Ok(Some(event.raw.clone()));
        }
        let mut value = self.parse(event, data)?;
        let Some(index) = value.get("index").and_then(Value::as_u64) else {
            return Ok(Some(event.raw.clone()));
        };
        if self.hidden_positions.contains(&index) {
            return Ok(None);
        }
        let shift = self.shift(index);
        if shift == 0 {
            return Ok(Some(event.raw.clone()));
        }
        if let Some(slot) = value.get_mut("index") {
            *slot = Value::from(index - shift);
        }
        Ok(Some(Self::reframe(event, &value)))
    }

    fn chat(&mut self, event: &ParsedEvent) -> Result<Option<Bytes>, StreamError> {
        let Some(data) = event.data.as_deref() else {
            return Ok(Some(event.raw.clone()));
        };
        if self.hidden_positions.is_empty() || !data.contains("\"tool_calls\"") {
            return Ok(Some(event.raw.clone()));
        }
        let mut value = self.parse(event, data)?;
        let mut changed = false;
        let mut visible = false;
        let choices = value
            .get_mut("choices")
            .and_then(Value::as_array_mut)
            .map(|c| c.iter_mut())
            .into_iter()
            .flatten();
        for choice in choices {
            if choice.get("finish_reason").is_some_and(|r| !r.is_null()) {
                visible = true;
            }
            let Some(delta) = choice.get_mut("delta").and_then(Value::as_object_mut) else {
                continue;
            };
            if let Some(calls) = delta.get_mut("tool_calls").and_then(Value::as_array_mut) {
                let before = calls.len();
                calls.retain(|c| {
                    let i = c.get("index").and_then(Value::as_u64);
                    !i.is_some_and(|i| self.hidden_positions.contains(&i))
                });
                changed |= calls.len() != before;
                for call in calls.iter_mut() {
                    let Some(i) = call.get("index").and_then(Value::as_u64) else {
                        continue;
                    };
                    let shift = self.shift(i);
                    if shift > 0
                        && let Some(slot) = call.get_mut("index")
                    {
                        *slot = Value::from(i - shift);
                        changed = true;
                    }
                }
                if calls.is_empty() {
                    delta.remove("tool_calls");
                }
            }
            visible |= !delta.is_empty();
        }
        if !changed {
            return Ok(Some(event.raw.clone()));
        }
        visible |= value.get("usage").is_some_and(|u| !u.is_null());
        visible |= value.get("error").is_some_and(|e| !e.is_null());
        if !visible {
            return Ok(None);
        }
        Ok(Some(Self::reframe(event, &value)))
    }

    fn responses(&mut self, event: &ParsedEvent) -> Result<Option<Bytes>, StreamError> {
        let Some(data) = event.data.as_deref() else {
            return Ok(Some(event.raw.clone()));
        };
        if self.hidden_positions.is_empty() {
            return Ok(Some(event.raw.clone()));
        }
        let mut value = self.parse(event, data)?;
        let mut changed = false;
        if let Some(index) = value.get("output_index").and_then(Value::as_u64) {
            if self.hidden_positions.contains(&index) {
                return Ok(None);
            }
            let shift = self.shift(index);
            if let Some(slot) = value.get_mut("output_index").filter(|_| shift > 0) {
                *slot = Value::from(index - shift);
                changed = true;
            }
        }
        if let Some(seq) = value.get("sequence_number").and_then(Value::as_u64)
            && let Some(slot) = value
                .get_mut("sequence_number")
                .filter(|_| self.dropped > 0)
        {
            *slot = Value::from(seq.saturating_sub(self.dropped));
            changed = true;
        }
        let output = value
            .get_mut("response")
            .and_then(|r| r.get_mut("output"))
            .and_then(Value::as_array_mut);
        if let Some(output) = output {
            let before = output.len();
            let mut position = 0u64;
            output.retain(|_| {
                let keep = !self.hidden_positions.contains(&position);
                position += 1;
                keep
            });
            changed |= output.len() != before;
        }
        if !changed {
            return Ok(Some(event.raw.clone()));
        }
        Ok(Some(Self::reframe(event, &value)))
    }

    fn gemini(&mut self, event: &ParsedEvent) -> Result<Option<Bytes>, StreamError> {
        let Some(data) = event.data.as_deref() else {
            return Ok(Some(event.raw.clone()));
        };
        let mut value = self.parse(event, data)?;
        let candidates = value
            .get_mut("candidates")
            .and_then(Value::as_array_mut)
            .map(|c| c.iter_mut())
            .into_iter()
            .flatten();
        for candidate in candidates {
            let Some(content) = candidate.get_mut("content").and_then(Value::as_object_mut) else {
                continue;
            };
            if let Some(parts) = content.get_mut("parts").and_then(Value::as_array_mut) {
                parts.retain(|p| {
                    let name = p
                        .get("functionCall")
                        .and_then(|c| c.get("name"))
                        .and_then(Value::as_str);
                    !name.is_some_and(|n| self.hide.contains(n))
                });
                if parts.is_empty() {
                    content.remove("parts");
                }
            }
        }
        Ok(Some(Self::reframe(event, &value)))
    }
}

/// Parses a whole stream and re-emits it for the client: the bytes to send and the hidden
/// calls.
pub fn filter_stream<I, S>(
    wire: Wire,
    bytes: &[u8],
    hidden_tools: I,
) -> Result<(Bytes, Vec<HiddenCall>), StreamError>
where
    I: IntoIterator<Item = S>,
    S: Into<String>,
{
    let mut parser = StreamParser::new(wire);
    let mut filter = StreamFilter::new(wire, hidden_tools);
    let mut events = parser.feed(bytes)?;
    events.extend(parser.finish()?);
    let mut out = Vec::with_capacity(bytes.len());
    for event in &events {
        let current = filter.push(event)?;
        for (_, b) in filter.take_released() {
            out.extend_from_slice(&b);
        }
        if let Some(b) = current {
            out.extend_from_slice(&b);
        }
    }
    for (_, b) in filter.flush() {
        out.extend_from_slice(&b);
    }
    Ok((Bytes::from(out), filter.finish()))
}
