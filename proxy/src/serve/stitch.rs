//! Stitching the rounds of the compress loop into one well-formed client stream.
//!
//! The client must see one ordinary answer even when the proxy talked to the model several
//! times. Per SSE stream:
//! - Events reach the client as they arrive, through the tool filter (proxy calls hidden).
//! - A round's *closing* events (and everything after the first of them, to keep the order) (Anthropic `message_delta`/`message_stop`, Chat chunks with a
//!   `finish_reason`, the usage-only chunk and `[DONE]`, Responses `response.completed` and
//!   friends, Gemini chunks with a `finishReason`) are held back until the round's outcome is
//!   known. If another round follows they are dropped (Gemini keeps any content of such a
//!   chunk, minus the finish fields); otherwise they are released, with a tool-use stop
//!   reason turned into a normal end when every call of the round was hidden.
//! - Later rounds drop their *opening* events (Anthropic `message_start`, Responses
//!   `response.created`/`response.in_progress`), and their positions continue after the
//!   earlier rounds': Anthropic content-block `index` and Responses `output_index` are
//!   shifted by the blocks/items already sent, and Responses `sequence_number` continues.
//! - The answer keeps one identity: later rounds' events carry the first round's response id
//!   (Chat chunk `id`, Responses `response.id`, Gemini `responseId`), and the Responses
//!   stream's final `response.output` lists the items of every round, since clients check
//!   both against what the stream opened with.

use bytes::Bytes;
use foldwire_core::Wire;
use foldwire_wire::stream::ParsedEvent;
use serde_json::Value;

/// Stitches rounds of one client stream.
#[derive(Debug)]
pub struct Stitcher {
    wire: Wire,
    round: usize,
    /// Blocks / output items sent in earlier rounds.
    offset: u64,
    /// Blocks / output items sent in this round.
    opened: u64,
    /// Events sent to the client so far (Responses sequence numbers).
    sent: u64,
    /// Events held back, with whether each closes the round.
    held: Vec<(bool, Bytes)>,
    /// The response id the client's stream opened with.
    first_id: Option<String>,
    /// Responses output items the client got completed in earlier rounds.
    earlier_items: Vec<Value>,
    /// Responses output items the client got completed in this round.
    round_items: Vec<Value>,
}

impl Stitcher {
    /// A stitcher for one `wire` stream.
    pub fn new(wire: Wire) -> Self {
        Stitcher {
            wire,
            round: 0,
            offset: 0,
            opened: 0,
            sent: 0,
            held: Vec::new(),
            first_id: None,
            earlier_items: Vec::new(),
            round_items: Vec::new(),
        }
    }

    /// What to send now for `event`, whose client bytes (after the tool filter) are `out`.
    /// Once a closing event is held, everything after it in the round is held too, so the
    /// client gets the events in the order the provider sent them.
    pub fn push(&mut self, event: &ParsedEvent, out: Bytes) -> Option<Bytes> {
        let kind = event_type(self.wire, event);
        let closing = self.is_closing(event, kind.as_deref());
        if self.round > 0 && !closing && is_opening(self.wire, kind.as_deref()) {
            return None;
        }
        let opens = match self.wire {
            Wire::Anthropic => kind.as_deref() == Some("content_block_start"),
            Wire::OpenAiResponses => kind.as_deref() == Some("response.output_item.added"),
            _ => false,
        };
        let out = if self.round > 0 {
            self.renumber(out)
        } else {
            out
        };
        self.observe(kind.as_deref(), &out);
        if opens {
            self.opened += 1;
        }
        self.sent += 1;
        if closing || !self.held.is_empty() {
            self.held.push((closing, out));
            return None;
        }
        Some(out)
    }

    /// Another round follows: held closing events are dropped (content they carry is kept
    /// for Gemini), other held events are sent, and positions move on.
    pub fn next_round(&mut self) -> Vec<Bytes> {
        let held = std::mem::take(&mut self.held);
        self.round += 1;
        self.offset += self.opened;
        self.opened = 0;
        self.earlier_items.append(&mut self.round_items);
        let mut out = Vec::new();
        for (closing, frame) in held {
            if !closing {
                out.push(frame);
                continue;
            }
            let kept = if self.wire == Wire::Gemini {
                gemini_without_finish(&frame)
            } else {
                None
            };
            match kept {
                Some(frame) => out.push(frame),
                None => self.sent = self.sent.saturating_sub(1),
            }
        }
        out
    }

    /// The stream ends: the held events, with a tool-use stop turned into a normal end when
    /// `all_hidden` (the last round's calls were all the proxy's).
    pub fn finish(&mut self, all_hidden: bool) -> Vec<Bytes> {
        std::mem::take(&mut self.held)
            .into_iter()
            .map(|(_, frame)| {
                if all_hidden {
                    fix_stop(self.wire, frame)
                } else {
                    frame
                }
            })
            .collect()
    }

    fn is_closing(&self, event: &ParsedEvent, kind: Option<&str>) -> bool {
        match self.wire {
            Wire::Anthropic => matches!(kind, Some("message_delta" | "message_stop")),
            Wire::OpenAiResponses => matches!(
                kind,
                Some(
                    "response.completed"
                        | "response.incomplete"
                        | "response.failed"
                        | "response.done"
                )
            ),
            Wire::OpenAiChat => {
                let Some(data) = event.data.as_deref() else {
                    return false;
                };
                if data.trim() == "[DONE]" {
                    return true;
                }
                let Ok(v) = serde_json::from_str::<Value>(data) else {
                    return false;
                };
                let choices = v.get("choices").and_then(Value::as_array);
                let finished = choices
                    .into_iter()
                    .flatten()
                    .any(|c| c.get("finish_reason").is_some_and(|r| !r.is_null()));
                let usage_only = choices.is_none_or(Vec::is_empty)
                    && v.get("usage").is_some_and(|u| !u.is_null());
                finished || usage_only
            }
            Wire::Gemini => event
                .data
                .as_deref()
                .is_some_and(|d| d.contains("\"finishReason\"")),
        }
    }

    /// Notes what later rounds must agree with: the response id the stream opened with,
    /// and the Responses items the client saw completed.
    fn observe(&mut self, kind: Option<&str>, out: &[u8]) {
        let wants_id = self.first_id.is_none() && self.wire != Wire::Anthropic;
        let item_done =
            self.wire == Wire::OpenAiResponses && kind == Some("response.output_item.done");
        if !wants_id && !item_done {
            return;
        }
        let Some(value) = frame_data(out).and_then(|d| serde_json::from_str::<Value>(&d).ok())
        else {
            return;
        };
        if wants_id {
            self.first_id = id_slot(self.wire, &value)
                .and_then(Value::as_str)
                .map(str::to_owned);
        }
        if item_done && let Some(item) = value.get("item") {
            self.round_items.push(item.clone());
        }
    }

    /// Shifts positions of a later round's event after the earlier rounds', and gives it
    /// the answer's identity.
    fn renumber(&self, frame: Bytes) -> Bytes {
        let (field, shift) = match self.wire {
            Wire::Anthropic => ("index", self.offset),
            Wire::OpenAiResponses => ("output_index", self.offset),
            Wire::OpenAiChat | Wire::Gemini => ("", 0),
        };
        let Some(data) = frame_data(&frame) else {
            return frame;
        };
        let Ok(mut value) = serde_json::from_str::<Value>(&data) else {
            return frame;
        };
        let mut changed = false;
        if shift > 0
            && let Some(i) = value.get(field).and_then(Value::as_u64)
        {
            value[field] = Value::from(i + shift);
            changed = true;
        }
        if let Some(first) = &self.first_id
            && let Some(slot) = id_slot_mut(self.wire, &mut value)
            && slot.as_str() != Some(first)
        {
            *slot = Value::from(first.as_str());
            changed = true;
        }
        if self.wire == Wire::OpenAiResponses
            && !self.earlier_items.is_empty()
            && let Some(output) = value
                .get_mut("response")
                .and_then(|r| r.get_mut("output"))
                .and_then(Value::as_array_mut)
        {
            // The final snapshot lists every round's items, in the order the client got them.
            let later = std::mem::take(output);
            output.extend(self.earlier_items.iter().cloned());
            output.extend(later);
            changed = true;
        }
        if self.wire == Wire::OpenAiResponses && value.get("sequence_number").is_some() {
            // `sent` counts the events before this one.
            value["sequence_number"] = Value::from(self.sent);
            changed = true;
        }
        if changed {
            with_data(&frame, &value.to_string())
        } else {
            frame
        }
    }
}

/// Where an event carries the response id: the Chat chunk's `id`, the Responses lifecycle
/// event's `response.id`, Gemini's `responseId` (Anthropic names it only in `message_start`,
/// which later rounds drop).
fn id_slot(wire: Wire, value: &Value) -> Option<&Value> {
    match wire {
        Wire::OpenAiChat => value.get("id"),
        Wire::OpenAiResponses => value.get("response").and_then(|r| r.get("id")),
        Wire::Gemini => value.get("responseId"),
        Wire::Anthropic => None,
    }
}

fn id_slot_mut(wire: Wire, value: &mut Value) -> Option<&mut Value> {
    match wire {
        Wire::OpenAiChat => value.get_mut("id"),
        Wire::OpenAiResponses => value.get_mut("response").and_then(|r| r.get_mut("id")),
        Wire::Gemini => value.get_mut("responseId"),
        Wire::Anthropic => None,
    }
}

/// The event's type: the JSON `type` field, else the SSE event name.
fn event_type(wire: Wire, event: &ParsedEvent) -> Option<String> {
    if matches!(wire, Wire::OpenAiChat | Wire::Gemini) {
        return None;
    }
    event
        .data
        .as_deref()
        .and_then(|d| serde_json::from_str::<Value>(d).ok())
        .and_then(|v| v.get("type").and_then(Value::as_str).map(str::to_owned))
        .or_else(|| event.name.clone())
}

fn is_opening(wire: Wire, kind: Option<&str>) -> bool {
    match wire {
        Wire::Anthropic => kind == Some("message_start"),
        Wire::OpenAiResponses => {
            matches!(kind, Some("response.created" | "response.in_progress"))
        }
        _ => false,
    }
}

/// Turns a tool-use stop into a normal end in a closing frame.
fn fix_stop(wire: Wire, frame: Bytes) -> Bytes {
    let Some(data) = frame_data(&frame) else {
        return frame;
    };
    let Ok(mut value) = serde_json::from_str::<Value>(&data) else {
        return frame;
    };
    let mut changed = false;
    match wire {
        Wire::Anthropic => {
            if let Some(delta) = value.get_mut("delta")
                && delta.get("stop_reason").and_then(Value::as_str) == Some("tool_use")
            {
                delta["stop_reason"] = Value::from("end_turn");
                changed = true;
            }
        }
        Wire::OpenAiChat => {
            for c in value
                .get_mut("choices")
                .and_then(Value::as_array_mut)
                .into_iter()
                .flatten()
            {
                if c.get("finish_reason").and_then(Value::as_str) == Some("tool_calls") {
                    c["finish_reason"] = Value::from("stop");
                    changed = true;
                }
            }
        }
        _ => {}
    }
    if changed {
        with_data(&frame, &value.to_string())
    } else {
        frame
    }
}

/// A Gemini chunk without its finish fields, when it still has parts to show.
fn gemini_without_finish(frame: &Bytes) -> Option<Bytes> {
    let mut value: Value = serde_json::from_str(&frame_data(frame)?).ok()?;
    let mut any_parts = false;
    for c in value
        .get_mut("candidates")
        .and_then(Value::as_array_mut)
        .into_iter()
        .flatten()
    {
        if let Some(obj) = c.as_object_mut() {
            obj.remove("finishReason");
            obj.remove("finishMessage");
        }
        any_parts |= c
            .get("content")
            .and_then(|c| c.get("parts"))
            .and_then(Value::as_array)
            .is_some_and(|p| !p.is_empty());
    }
    if let Some(obj) = value.as_object_mut() {
        obj.remove("usageMetadata");
    }
    any_parts.then(|| with_data(frame, &value.to_string()))
}

/// The payload of an SSE frame: its `data:` lines joined with `\n`.
pub fn frame_data(frame: &[u8]) -> Option<String> {
    let text = std::str::from_utf8(frame).ok()?;
    let mut data: Option<String> = None;
    for line in text.split('\n') {
        let line = line.strip_suffix('\r').unwrap_or(line);
        if let Some(rest) = line.strip_prefix("data:") {
            let rest = rest.strip_prefix(' ').unwrap_or(rest);
            match &mut data {
                Some(d) => {
                    d.push('\n');
                    d.push_str(rest);
                }
                None => data = Some(rest.to_owned()),
            }
        }
    }
    data
}

/// An SSE frame with its `data:` lines replaced by one line holding `payload`; every other
/// line and the line endings are kept.
pub fn with_data(frame: &[u8], payload: &str) -> Bytes {
    let text = String::from_utf8_lossy(frame);
    let mut out = String::with_capacity(frame.len() + payload.len());
    let mut written = false;
    for piece in text.split_inclusive('\n') {
        let body = piece.trim_end_matches(['\r', '\n']);
        let ending = &piece[body.len()..];
        if body.starts_with("data:") {
            if !written {
                out.push_str("data: ");
                out.push_str(payload);
                out.push_str(if ending.is_empty() { "\n" } else { ending });
                written = true;
            }
        } else {
            out.push_str(piece);
        }
    }
    Bytes::from(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_keep_their_other_lines_when_the_payload_changes() {
        let frame = b"event: message_delta\r\ndata: {\"a\":1}\r\n\r\n";
        assert_eq!(frame_data(frame).unwrap(), "{\"a\":1}");
        let out = with_data(frame, "{\"a\":2}");
        assert_eq!(&out[..], b"event: message_delta\r\ndata: {\"a\":2}\r\n\r\n");
    }
}
