//! The incremental stream parser: framing (SSE or JSON array) plus the wire's interpreter.

use foldwire_core::Wire;
use serde_json::Value;

use super::anthropic::AnthropicStream;
use super::error::{StreamError, shorten};
use super::event::{Framing, ParsedEvent, StreamEvent};
use super::gemini::GeminiStream;
use super::json_array::{ArrayError, ArrayFramer, ArrayPiece};
use super::openai_chat::ChatStream;
use super::openai_responses::ResponsesStream;
use super::sse::{SseFrame, SseFramer};

/// How a response stream is framed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StreamFormat {
    /// Server-Sent Events (every wire; Gemini with `alt=sse`).
    Sse,
    /// One JSON array of response objects (Gemini `streamGenerateContent` without `alt=sse`).
    JsonArray,
}

#[derive(Debug)]
enum Framer {
    /// Gemini before the first non-blank byte: `[` means a JSON array, anything else SSE.
    Detect(Vec<u8>),
    Sse(SseFramer),
    Array(ArrayFramer),
}

#[derive(Debug)]
enum Interpreter {
    Anthropic(AnthropicStream),
    Chat(ChatStream),
    Responses(ResponsesStream),
    Gemini(GeminiStream),
}

/// A structural problem found by a framer; it becomes a [`StreamError`] once the pieces cut
/// before it are numbered.
enum FramingError {
    /// A byte that does not fit the structure.
    Unexpected(ArrayError),
    /// The stream ended mid-structure.
    Truncated(ArrayError),
}

/// One cut frame before interpretation.
enum Piece {
    Sse(SseFrame),
    Array(ArrayPiece),
}

/// Parses one wire's response stream incrementally; chunk boundaries never change the result.
///
/// If a chunk holds good events and then a bad one, `feed` returns the good events and the
/// next call returns the error, so the events before an error never depend on chunking.
#[derive(Debug)]
pub struct StreamParser {
    wire: Wire,
    framer: Framer,
    interpreter: Interpreter,
    /// Number of events cut so far.
    number: usize,
    /// An error found after events that were already returned.
    pending: Option<StreamError>,
    /// The event number of the first error, once there was one.
    failed_at: Option<usize>,
}

impl StreamParser {
    /// A parser for `wire`'s stream; Gemini detects SSE vs JSON array from the first byte.
    pub fn new(wire: Wire) -> Self {
        let framer = match wire {
            Wire::Gemini => Framer::Detect(Vec::new()),
            _ => Framer::Sse(SseFramer::default()),
        };
        Self::build(wire, framer)
    }

    /// A parser for `wire`'s stream in a known format.
    pub fn with_format(wire: Wire, format: StreamFormat) -> Self {
        let framer = match format {
            StreamFormat::Sse => Framer::Sse(SseFramer::default()),
            StreamFormat::JsonArray => Framer::Array(ArrayFramer::default()),
        };
        Self::build(wire, framer)
    }

    fn build(wire: Wire, framer: Framer) -> Self {
        let interpreter = match wire {
            Wire::Anthropic => Interpreter::Anthropic(AnthropicStream::default()),
            Wire::OpenAiChat => Interpreter::Chat(ChatStream::default()),
            Wire::OpenAiResponses => Interpreter::Responses(ResponsesStream::default()),
            Wire::Gemini => Interpreter::Gemini(GeminiStream::default()),
        };
        StreamParser {
            wire,
            framer,
            interpreter,
            number: 0,
            pending: None,
            failed_at: None,
        }
    }

    /// The wire this parser reads.
    pub fn wire(&self) -> Wire {
        self.wire
    }

    /// Adds the next bytes of the stream; returns the events they complete.
    pub fn feed(&mut self, chunk: &[u8]) -> Result<Vec<ParsedEvent>, StreamError> {
        self.check_failed()?;
        let (pieces, framing_error) = self.frame(chunk, false);
        self.interpret_all(pieces, framing_error, true)
    }

    /// Ends the stream: returns the events still buffered (an unterminated last SSE event,
    /// the array trailer), or an error when the stream stopped mid-structure.
    pub fn finish(mut self) -> Result<Vec<ParsedEvent>, StreamError> {
        self.check_failed()?;
        let (pieces, framing_error) = self.frame(&[], true);
        self.interpret_all(pieces, framing_error, false)
    }

    fn check_failed(&mut self) -> Result<(), StreamError> {
        if let Some(error) = self.pending.take() {
            return Err(error);
        }
        match self.failed_at {
            Some(event) => Err(StreamError::AfterError {
                wire: self.wire,
                event,
            }),
            None => Ok(()),
        }
    }

    /// Feeds the framer (or, at the end, finishes it).
    fn frame(&mut self, chunk: &[u8], at_end: bool) -> (Vec<Piece>, Option<FramingError>) {
        if let Framer::Detect(buf) = &mut self.framer {
            buf.extend_from_slice(chunk);
            let first = buf.iter().find(|b| !b.is_ascii_whitespace()).copied();
            if first.is_none() && !at_end {
                return (Vec::new(), None);
            }
            let buffered = std::mem::take(buf);
            let mut framer = if first == Some(b'[') {
                Framer::Array(ArrayFramer::default())
            } else {
                Framer::Sse(SseFramer::default())
            };
            let mut pieces = Vec::new();
            let mut error = None;
            match &mut framer {
                Framer::Sse(f) => pieces.extend(f.feed(&buffered).into_iter().map(Piece::Sse)),
                Framer::Array(f) => {
                    let (p, e) = f.feed(&buffered);
                    pieces.extend(p.into_iter().map(Piece::Array));
                    error = e.map(FramingError::Unexpected);
                }
                Framer::Detect(_) => {}
            }
            self.framer = framer;
            if error.is_some() || !at_end {
                return (pieces, error);
            }
            let (more, error) = self.frame(&[], true);
            pieces.extend(more);
            return (pieces, error);
        }
        let framer = std::mem::replace(&mut self.framer, Framer::Detect(Vec::new()));
        let (pieces, error, framer) = match framer {
            Framer::Sse(mut f) if !at_end => {
                let p = f.feed(chunk);
                (
                    p.into_iter().map(Piece::Sse).collect(),
                    None,
                    Framer::Sse(f),
                )
            }
            Framer::Sse(f) => {
                let p = f.finish();
                let empty = Framer::Sse(SseFramer::default());
                (p.into_iter().map(Piece::Sse).collect(), None, empty)
            }
            Framer::Array(mut f) if !at_end => {
                let (p, e) = f.feed(chunk);
                (
                    p.into_iter().map(Piece::Array).collect(),
                    e.map(FramingError::Unexpected),
                    Framer::Array(f),
                )
            }
            Framer::Array(f) => {
                let (p, e) = f.finish();
                let empty = Framer::Array(ArrayFramer::default());
                let e = e.map(FramingError::Truncated);
                (p.into_iter().map(Piece::Array).collect(), e, empty)
            }
            detect @ Framer::Detect(_) => (Vec::new(), None, detect),
        };
        self.framer = framer;
        (pieces, error)
    }

    /// Interprets the cut pieces; a framing error counts as coming after them.
    fn interpret_all(
        &mut self,
        pieces: Vec<Piece>,
        framing_error: Option<FramingError>,
        can_defer: bool,
    ) -> Result<Vec<ParsedEvent>, StreamError> {
        let mut out = Vec::with_capacity(pieces.len());
        let mut error = None;
        for piece in pieces {
            match self.interpret(piece) {
                Ok(event) => out.push(event),
                Err(e) => {
                    error = Some(e);
                    break;
                }
            }
        }
        let error = error.or_else(|| {
            framing_error.map(|e| match e {
                FramingError::Unexpected(e) => self.array_error(e),
                FramingError::Truncated(e) => self.truncated(e),
            })
        });
        let Some(error) = error else {
            return Ok(out);
        };
        self.failed_at = Some(error.event());
        if can_defer && !out.is_empty() {
            self.pending = Some(error);
            Ok(out)
        } else {
            Err(error)
        }
    }

    fn interpret(&mut self, piece: Piece) -> Result<ParsedEvent, StreamError> {
        let number = self.number;
        self.number += 1;
        match piece {
            Piece::Sse(frame) => {
                let name = frame.name.map(|n| String::from_utf8_lossy(&n).into_owned());
                let data = match frame.data {
                    Some(d) => Some(String::from_utf8(d).map_err(|_| StreamError::Utf8 {
                        wire: self.wire,
                        event: number,
                        offset: frame.offset,
                    })?),
                    None => None,
                };
                let events = match &data {
                    Some(d) => self.payload_events(d, number, frame.offset)?,
                    None => Vec::new(),
                };
                Ok(ParsedEvent {
                    number,
                    offset: frame.offset,
                    raw: frame.raw,
                    framing: Framing::Sse {
                        line_ending: frame.line_ending,
                    },
                    name,
                    data,
                    events,
                })
            }
            Piece::Array(ArrayPiece::Element {
                offset,
                raw,
                start,
                end,
            }) => {
                let element = raw.get(start..end).unwrap_or_default();
                let data = std::str::from_utf8(element)
                    .map_err(|_| StreamError::Utf8 {
                        wire: self.wire,
                        event: number,
                        offset,
                    })?
                    .to_owned();
                let events = self.payload_events(&data, number, offset)?;
                Ok(ParsedEvent {
                    number,
                    offset,
                    raw,
                    framing: Framing::ArrayElement { start, end },
                    name: None,
                    data: Some(data),
                    events,
                })
            }
            Piece::Array(ArrayPiece::Trailer { offset, raw }) => Ok(ParsedEvent {
                number,
                offset,
                raw,
                framing: Framing::ArrayTrailer,
                name: None,
                data: None,
                events: vec![StreamEvent::Other {
                    kind: "trailer".to_owned(),
                }],
            }),
        }
    }

    /// The normalized events of one payload.
    fn payload_events(
        &mut self,
        data: &str,
        number: usize,
        offset: u64,
    ) -> Result<Vec<StreamEvent>, StreamError> {
        if let Interpreter::Chat(chat) = &mut self.interpreter
            && data.trim() == "[DONE]"
        {
            return Ok(chat.done());
        }
        let value: Value = serde_json::from_str(data).map_err(|e| StreamError::Json {
            wire: self.wire,
            event: number,
            offset,
            detail: e.to_string(),
        })?;
        if !value.is_object() {
            return Err(StreamError::Unexpected {
                wire: self.wire,
                event: number,
                offset,
                expected: "a JSON object payload",
                found: shorten(data.as_bytes()),
            });
        }
        Ok(match &mut self.interpreter {
            Interpreter::Anthropic(s) => s.event(&value),
            Interpreter::Chat(s) => s.event(&value),
            Interpreter::Responses(s) => s.event(&value),
            Interpreter::Gemini(s) => s.event(&value),
        })
    }

    fn array_error(&self, e: ArrayError) -> StreamError {
        StreamError::Unexpected {
            wire: self.wire,
            event: self.number,
            offset: e.offset,
            expected: e.expected,
            found: shorten(&e.found),
        }
    }

    fn truncated(&self, e: ArrayError) -> StreamError {
        StreamError::Truncated {
            wire: self.wire,
            event: self.number,
            offset: e.offset,
            expected: e.expected,
        }
    }
}

/// Parses a whole stream held in memory.
pub fn parse_stream(wire: Wire, bytes: &[u8]) -> Result<Vec<ParsedEvent>, StreamError> {
    let mut parser = StreamParser::new(wire);
    let mut events = parser.feed(bytes)?;
    events.extend(parser.finish()?);
    Ok(events)
}
