//! The normalized stream vocabulary shared by every wire.

use bytes::Bytes;

/// Token counts reported by the provider; each count is `None` when the wire did not report it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Usage {
    /// Prompt tokens (Anthropic `input_tokens`, OpenAI `prompt_tokens`/`input_tokens`,
    /// Gemini `promptTokenCount`).
    pub input_tokens: Option<u64>,
    /// Generated tokens (Gemini `candidatesTokenCount`).
    pub output_tokens: Option<u64>,
    /// Prompt tokens served from the provider's cache.
    pub cache_read: Option<u64>,
    /// Prompt tokens written to the provider's cache (Anthropic `cache_creation_input_tokens`,
    /// OpenAI `cache_write_tokens`).
    pub cache_write: Option<u64>,
    /// Reasoning / thinking tokens, where reported separately.
    pub reasoning_tokens: Option<u64>,
    /// The provider's own total, where reported.
    pub total_tokens: Option<u64>,
}

/// One normalized happening in a response, whatever the wire.
///
/// `index` is the wire's own position: the content block (Anthropic), the output item
/// (Responses), the choice for text and the `tool_calls[].index` for tool calls (OpenAI Chat),
/// the candidate for text and the running function-call number for tool calls (Gemini).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StreamEvent {
    /// Visible answer text.
    TextDelta {
        /// Wire position (see the type docs).
        index: u64,
        /// The text fragment.
        text: String,
    },
    /// Reasoning / thinking text.
    ReasoningDelta {
        /// Wire position.
        index: u64,
        /// The text fragment.
        text: String,
    },
    /// An opaque reasoning signature (Anthropic `signature`, Gemini `thoughtSignature`,
    /// Responses `encrypted_content`).
    ReasoningSignature {
        /// Wire position.
        index: u64,
        /// The signature, verbatim.
        signature: String,
    },
    /// A tool call begins.
    ToolCallStart {
        /// Wire position.
        index: u64,
        /// The call id (empty when the wire gives none, e.g. Gemini without `id`).
        id: String,
        /// The tool name.
        name: String,
        /// True for provider-executed tools (Anthropic `server_tool_use`).
        server: bool,
    },
    /// A fragment of a tool call's JSON arguments; the fragments concatenate to the full JSON.
    ToolCallArgsDelta {
        /// Wire position.
        index: u64,
        /// The JSON fragment.
        json: String,
    },
    /// A tool call is complete.
    ToolCallEnd {
        /// Wire position.
        index: u64,
    },
    /// Token usage (Anthropic sends cumulative counts more than once; the last one wins).
    Usage(Usage),
    /// Why generation stopped, in the wire's own words (`end_turn`, `tool_calls`, `STOP`, …).
    Stop {
        /// The provider's stop reason.
        reason: String,
    },
    /// An error reported inside the stream or as the body.
    Error {
        /// The provider's message.
        message: String,
        /// The error object as JSON text.
        raw: String,
    },
    /// An event with nothing to normalize (ping, lifecycle, comment, `[DONE]`, other blocks).
    Other {
        /// The wire's event type, or `comment`, `done`, `trailer`.
        kind: String,
    },
}

/// How a [`ParsedEvent`]'s raw bytes are framed on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    /// A Server-Sent Events frame: its lines up to and including the blank line.
    Sse {
        /// The line terminator of the frame's first line (`\n`, `\r\n` or `\r`).
        line_ending: LineEnding,
    },
    /// One element of a JSON array stream; `raw[start..end]` is the element's JSON, the bytes
    /// before it are the separator (`[` or `,` and whitespace).
    ArrayElement {
        /// Start of the element inside `raw`.
        start: usize,
        /// End (exclusive) of the element inside `raw`.
        end: usize,
    },
    /// Bytes after the last element of a JSON array stream (`]` and whitespace).
    ArrayTrailer,
}

/// An SSE line terminator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LineEnding {
    /// `\n`
    Lf,
    /// `\r\n`
    CrLf,
    /// `\r`
    Cr,
}

impl LineEnding {
    /// The terminator's bytes.
    pub fn as_bytes(self) -> &'static [u8] {
        match self {
            LineEnding::Lf => b"\n",
            LineEnding::CrLf => b"\r\n",
            LineEnding::Cr => b"\r",
        }
    }
}

/// One wire event as received, with its exact bytes and its normalized meaning.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParsedEvent {
    /// 0-based position of this event in the stream.
    pub number: usize,
    /// Byte offset of `raw` in the stream.
    pub offset: u64,
    /// The exact bytes of this event; all events' `raw` concatenated give the stream back.
    pub raw: Bytes,
    /// How `raw` is framed.
    pub framing: Framing,
    /// The SSE `event:` name, if any.
    pub name: Option<String>,
    /// The payload: the SSE `data:` lines joined with `\n`, or the array element's JSON.
    pub data: Option<String>,
    /// What the event means, in order (empty for comments and blank frames).
    pub events: Vec<StreamEvent>,
}

impl ParsedEvent {
    /// Concatenated text deltas of this event.
    pub fn text(&self) -> String {
        self.events
            .iter()
            .filter_map(|e| match e {
                StreamEvent::TextDelta { text, .. } => Some(text.as_str()),
                _ => None,
            })
            .collect()
    }
}
