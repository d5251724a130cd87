//! Errors of the stream parsers, filters and response-body parsers.

use foldwire_core::Wire;

/// What went wrong while reading a response stream or body, and where.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StreamError {
    /// An event's payload is not valid JSON.
    #[error("{wire} stream: event {event} at byte {offset}: payload is not valid JSON ({detail})")]
    Json {
        /// The wire being parsed.
        wire: Wire,
        /// 0-based event number.
        event: usize,
        /// Byte offset of the event.
        offset: u64,
        /// serde_json's description.
        detail: String,
    },
    /// An event's payload is not UTF-8.
    #[error("{wire} stream: event {event} at byte {offset}: payload is not UTF-8")]
    Utf8 {
        /// The wire being parsed.
        wire: Wire,
        /// 0-based event number.
        event: usize,
        /// Byte offset of the event.
        offset: u64,
    },
    /// The bytes do not have the expected shape.
    #[error("{wire} stream: event {event} at byte {offset}: expected {expected}, found {found}")]
    Unexpected {
        /// The wire being parsed.
        wire: Wire,
        /// 0-based event number.
        event: usize,
        /// Byte offset where the problem was seen.
        offset: u64,
        /// What the parser expected.
        expected: &'static str,
        /// What it found (shortened).
        found: String,
    },
    /// The stream ended in the middle of something.
    #[error("{wire} stream: ended at byte {offset} after {event} events: expected {expected}")]
    Truncated {
        /// The wire being parsed.
        wire: Wire,
        /// Number of events parsed.
        event: usize,
        /// Total bytes received.
        offset: u64,
        /// What was still missing.
        expected: &'static str,
    },
    /// A non-streaming body does not have the expected shape.
    #[error("{wire} response body: at {path}: expected {expected}")]
    Body {
        /// The wire being parsed.
        wire: Wire,
        /// JSON path of the problem (`$.content[2].type`).
        path: String,
        /// What was expected there.
        expected: String,
    },
    /// `feed` or `finish` was called after the parser had already reported an error.
    #[error("{wire} stream: parser already failed at event {event}; create a new parser")]
    AfterError {
        /// The wire being parsed.
        wire: Wire,
        /// The event number of the first error.
        event: usize,
    },
}

impl StreamError {
    /// The event number the error refers to (0 for body errors).
    pub fn event(&self) -> usize {
        match self {
            StreamError::Json { event, .. }
            | StreamError::Utf8 { event, .. }
            | StreamError::Unexpected { event, .. }
            | StreamError::Truncated { event, .. }
            | StreamError::AfterError { event, .. } => *event,
            StreamError::Body { .. } => 0,
        }
    }
}

/// At most 40 characters of `bytes`, for error messages.
pub(crate) fn shorten(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(bytes);
    let mut out: String = text.chars().take(40).collect();
    if text.chars().count() > 40 {
        out.push('…');
    }
    out
}
