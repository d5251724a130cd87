//! Shared helpers for the stream tests: fixture loading, replay as SSE, chunked parsing and a
//! summary of normalized events.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

use foldwire_core::Wire;
use foldwire_wire::stream::{ParsedEvent, StreamError, StreamEvent, StreamParser, Usage};

/// The fixture folder of a wire.
pub fn wire_dir(wire: Wire) -> &'static str {
    wire.as_str()
}

/// Every stream fixture of every wire, with its wire.
pub fn stream_fixtures() -> Vec<(Wire, PathBuf)> {
    let mut out = Vec::new();
    for wire in Wire::ALL {
        for path in foldwire_core::fixtures::files(wire_dir(wire), "stream-") {
            out.push((wire, path));
        }
    }
    out
}

/// The stream bytes of a fixture: `.sse` and Gemini `.json` as they are; `.chunks.jsonl`
/// replayed as SSE (`data: <line>\n\n`, for Anthropic preceded by `event: <type>`).
pub fn stream_bytes(wire: Wire, path: &Path) -> Vec<u8> {
    let bytes = std::fs::read(path).unwrap();
    let name = path.file_name().unwrap().to_str().unwrap();
    if !name.ends_with(".chunks.jsonl") {
        return bytes;
    }
    let text = String::from_utf8(bytes).unwrap();
    let mut out = String::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        if wire == Wire::Anthropic {
            let v: serde_json::Value = serde_json::from_str(line).unwrap();
            out.push_str(&format!("event: {}\n", v["type"].as_str().unwrap()));
        }
        out.push_str(&format!("data: {line}\n\n"));
    }
    out.into_bytes()
}

/// What a parse gave: the events (until the first error) and the first error.
pub type Outcome = (Vec<ParsedEvent>, Option<StreamError>);

/// Parses `bytes` fed in pieces cut at `cuts` (sorted positions).
pub fn parse_cut(wire: Wire, bytes: &[u8], cuts: &[usize]) -> Outcome {
    let mut parser = StreamParser::new(wire);
    let mut events = Vec::new();
    let mut start = 0;
    for &cut in cuts.iter().chain(std::iter::once(&bytes.len())) {
        match parser.feed(&bytes[start..cut]) {
            Ok(e) => events.extend(e),
            Err(e) => return (events, Some(e)),
        }
        start = cut;
    }
    match parser.finish() {
        Ok(e) => events.extend(e),
        Err(e) => return (events, Some(e)),
    }
    (events, None)
}

/// Parses `bytes` in one piece and insists it succeeds.
pub fn parse_ok(wire: Wire, bytes: &[u8]) -> Vec<ParsedEvent> {
    let (events, error) = parse_cut(wire, bytes, &[]);
    assert!(error.is_none(), "parse failed: {error:?}");
    events
}

/// A tiny deterministic random generator (xorshift), so tests need no extra crate.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }

    /// Sorted random cut positions in `0..=len` (`count` of them).
    pub fn cuts(&mut self, len: usize, count: usize) -> Vec<usize> {
        let mut cuts: Vec<usize> = (0..count)
            .map(|_| (self.next() % (len as u64 + 1)) as usize)
            .collect();
        cuts.sort_unstable();
        cuts
    }
}

/// A tool call put together from its events.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Call {
    pub index: u64,
    pub id: String,
    pub name: String,
    pub args: String,
    pub ended: bool,
}

/// The normalized events of a whole response, folded together.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Summary {
    pub text: String,
    pub reasoning: String,
    pub signatures: Vec<String>,
    pub calls: Vec<Call>,
    pub usage: Option<Usage>,
    pub stops: Vec<String>,
    pub errors: Vec<String>,
}

/// Folds normalized events into a summary.
pub fn summarize<'a>(events: impl IntoIterator<Item = &'a StreamEvent>) -> Summary {
    let mut s = Summary::default();
    for e in events {
        match e {
            StreamEvent::TextDelta { text, .. } => s.text.push_str(text),
            StreamEvent::ReasoningDelta { text, .. } => s.reasoning.push_str(text),
            StreamEvent::ReasoningSignature { signature, .. } => {
                s.signatures.push(signature.clone())
            }
            StreamEvent::ToolCallStart {
                index, id, name, ..
            } => s.calls.push(Call {
                index: *index,
                id: id.clone(),
                name: name.clone(),
                args: String::new(),
                ended: false,
            }),
            StreamEvent::ToolCallArgsDelta { index, json } => {
                let call = s
                    .calls
                    .iter_mut()
                    .rev()
                    .find(|c| c.index == *index && !c.ended)
                    .expect("arguments for a call that was not started");
                call.args.push_str(json);
            }
            StreamEvent::ToolCallEnd { index } => {
                let call = s
                    .calls
                    .iter_mut()
                    .rev()
                    .find(|c| c.index == *index && !c.ended)
                    .expect("end of a call that was not started");
                call.ended = true;
            }
            StreamEvent::Usage(u) => s.usage = Some(u.clone()),
            StreamEvent::Stop { reason } => s.stops.push(reason.clone()),
            StreamEvent::Error { message, .. } => s.errors.push(message.clone()),
            StreamEvent::Other { .. } => {}
        }
    }
    s
}

/// The summary of parsed stream events.
pub fn summarize_stream(events: &[ParsedEvent]) -> Summary {
    summarize(events.iter().flat_map(|e| e.events.iter()))
}

/// The raw bytes of all events, concatenated.
pub fn concat_raw(events: &[ParsedEvent]) -> Vec<u8> {
    events.iter().flat_map(|e| e.raw.iter().copied()).collect()
}
