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
use foldwire_wire::dialect::{Dialect, WireDialect};
use foldwire_wire::stream::ParsedEvent;
use serde_json::Value;

/// Stitches rounds of one client stream.
pub struct Stitcher {
    wire: Wire,
    /// The wire's event names and fields.
    dialect: &'static dyn Dialect,
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
    /// The id a later round's events came with before they took the first round's.
    last_round_id: Option<String>,
    /// Responses output items the client got completed in earlier rounds.
    earlier_items: Vec<Value>,
    /// Responses output items the client got completed in this round.
    round_items: Vec<Value>,
    /// Answer pieces numbered in earlier rounds / this round (see
    /// [`Dialect::answer_piece_numbers`]).
    piece_offset: u64,
    pieces: u64,
}

impl std::fmt::Debug for Stitcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Stitcher")
            .field("wire", &self.wire)
            .field("round", &self.round)
            .field("offset", &self.offset)
            .field("sent", &self.sent)
            .field("held", &self.held.len())
            .finish_non_exhaustive()
    }
}

impl Stitcher {
    /// A stitcher for one `wire` stream.
    pub fn new(wire: Wire) -> Self {
        Stitcher {
            wire,
            dialect: wire.dialect(),
            round: 0,
            offset: 0,
            opened: 0,
            sent: 0,
            held: Vec::new(),
            first_id: None,
            last_round_id: None,
            earlier_items: Vec::new(),
            round_items: Vec::new(),
            piece_offset: 0,
            pieces: 0,
        }
    }

    /// What to send now for `event`, whose client bytes (after the tool filter) are `out`.
    /// Once a closing event is held, everything after it in the round is held too, so the
    /// client gets the events in the order the provider sent them.
    pub fn push(&mut self, event: &ParsedEvent, out: Bytes) -> Option<Bytes> {
        let kind = self.event_type(event);
        let kind = kind.as_deref();
        let closing = self.dialect.is_closing(event.data.as_deref(), kind);
        if self.round > 0 && !closing && self.dialect.is_opening(kind) {
            return None;
        }
        let opens = self.dialect.opens_item(kind);
        let out = self.number_pieces(out);
        let out = if self.round > 0 {
            self.renumber(out)
        } else {
            out
        };
        self.observe(kind, &out);
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
    /// where the wire's closing events carry content), other held events are sent, and
    /// positions move on.
    pub fn next_round(&mut self) -> Vec<Bytes> {
        let held = std::mem::take(&mut self.held);
        self.round += 1;
        self.offset += self.opened;
        self.opened = 0;
        self.piece_offset += self.pieces;
        self.pieces = 0;
        self.earlier_items.append(&mut self.round_items);
        let mut out = Vec::new();
        for (closing, frame) in held {
            if !closing {
                out.push(frame);
                continue;
            }
            match self.closing_content(&frame) {
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
                    self.edit(frame, |d, v| d.fix_stop(v))
                } else {
                    frame
                }
            })
            .collect()
    }

    /// When later rounds answered under the first round's id: that id (the one the client
    /// was given) and the last round's own. On Responses the provider stored each round as
    /// a response of its own, and only the last one's input holds every round.
    pub fn answered_for(&self) -> Option<(&str, &str)> {
        Some((self.first_id.as_deref()?, self.last_round_id.as_deref()?))
    }

    /// The event's type on wires with typed events: the JSON `type` field, else the SSE
    /// event name.
    fn event_type(&self, event: &ParsedEvent) -> Option<String> {
        if !self.dialect.typed_events() {
            return None;
        }
        event
            .data
            .as_deref()
            .and_then(|d| serde_json::from_str::<Value>(d).ok())
            .and_then(|v| v.get("type").and_then(Value::as_str).map(str::to_owned))
            .or_else(|| event.name.clone())
    }

    /// Notes what later rounds must agree with: the response id the stream opened with,
    /// and the output items the client saw completed.
    fn observe(&mut self, kind: Option<&str>, out: &[u8]) {
        let wants_id = self.first_id.is_none() && self.dialect.carries_response_id();
        let item_done = self.dialect.completes_item(kind);
        if !wants_id && !item_done {
            return;
        }
        let Some(value) = frame_data(out).and_then(|d| serde_json::from_str::<Value>(&d).ok())
        else {
            return;
        };
        if wants_id {
            self.first_id = self
                .dialect
                .response_id(&value)
                .and_then(Value::as_str)
                .map(str::to_owned);
        }
        if item_done && let Some(item) = value.get("item") {
            self.round_items.push(item.clone());
        }
    }

    /// Counts the answer pieces an event numbers, and in a later round numbers them on
    /// after the earlier rounds' (events without any go through untouched, unparsed).
    fn number_pieces(&mut self, frame: Bytes) -> Bytes {
        let Some(marker) = self.dialect.answer_piece_marker() else {
            return frame;
        };
        if !frame.windows(marker.len()).any(|w| w == marker.as_bytes()) {
            return frame;
        }
        let Some(mut value) =
            frame_data(&frame).and_then(|d| serde_json::from_str::<Value>(&d).ok())
        else {
            return frame;
        };
        let offset = self.piece_offset;
        let mut changed = false;
        for number in self.dialect.answer_piece_numbers(&mut value) {
            let n = number.as_u64().unwrap_or_default();
            self.pieces = self.pieces.max(n + 1);
            if offset > 0 {
                *number = Value::from(n + offset);
                changed = true;
            }
        }
        if changed {
            with_data(&frame, &value.to_string())
        } else {
            frame
        }
    }

    /// Shifts positions of a later round's event after the earlier rounds', and gives it
    /// the answer's identity.
    fn renumber(&mut self, frame: Bytes) -> Bytes {
        let Some(data) = frame_data(&frame) else {
            return frame;
        };
        let Ok(mut value) = serde_json::from_str::<Value>(&data) else {
            return frame;
        };
        let d = self.dialect;
        let mut changed = false;
        if self.offset > 0
            && let Some(field) = d.position_field()
            && let Some(i) = value.get(field).and_then(Value::as_u64)
        {
            value[field] = Value::from(i + self.offset);
            changed = true;
        }
        if let Some(first) = &self.first_id
            && let Some(slot) = d.response_id_mut(&mut value)
            && slot.as_str() != Some(first)
        {
            if let Some(own) = slot.as_str() {
                self.last_round_id = Some(own.to_owned());
            }
            *slot = Value::from(first.as_str());
            changed = true;
        }
        if !self.earlier_items.is_empty()
            && let Some(output) = d.output_snapshot(&mut value)
        {
            // The final snapshot lists every round's items, in the order the client got them.
            let later = std::mem::take(output);
            output.extend(self.earlier_items.iter().cloned());
            output.extend(later);
            changed = true;
        }
        if d.numbered_events() && value.get("sequence_number").is_some() {
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

    /// A dropped closing event's content, when it has any to show.
    fn closing_content(&self, frame: &Bytes) -> Option<Bytes> {
        let mut value: Value = serde_json::from_str(&frame_data(frame)?).ok()?;
        self.dialect
            .closing_content(&mut value)
            .then(|| with_data(frame, &value.to_string()))
    }

    /// `frame` after `change` edited its payload (unchanged when it made no change).
    fn edit(&self, frame: Bytes, change: impl Fn(&dyn Dialect, &mut Value) -> bool) -> Bytes {
        let Some(data) = frame_data(&frame) else {
            return frame;
        };
        let Ok(mut value) = serde_json::from_str::<Value>(&data) else {
            return frame;
        };
        if change(self.dialect, &mut value) {
            with_data(&frame, &value.to_string())
        } else {
            frame
        }
    }
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
