//! Errors of request decoding, encoding and wire detection.

use foldwire_core::Wire;

/// Why a request body could not be decoded or a conversation encoded.
///
/// Every variant names the wire, the JSON path (`messages[3].content[1].type`) and what was
/// expected there.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    /// The body is not UTF-8.
    #[error(
        "{wire} request: the body is not valid UTF-8 (at byte {at}); expected a UTF-8 JSON object"
    )]
    NotUtf8 {
        /// The wire.
        wire: Wire,
        /// Byte offset of the first invalid sequence.
        at: usize,
    },
    /// The body is not well-formed JSON.
    #[error("{wire} request: invalid JSON in {path} at byte {at}: expected {expected}")]
    Syntax {
        /// The wire.
        wire: Wire,
        /// The JSON path of the value being read.
        path: String,
        /// Byte offset of the error in the body.
        at: usize,
        /// What the scanner expected there.
        expected: &'static str,
    },
    /// Well-formed JSON of the wrong shape.
    #[error("{wire} request: at {path}: expected {expected}, found {found}")]
    Shape {
        /// The wire.
        wire: Wire,
        /// The JSON path.
        path: String,
        /// What the wire requires there.
        expected: String,
        /// What the body holds instead.
        found: String,
    },
    /// The request continues a conversation the provider keeps (a stored response, a
    /// conversation object, a context cache, an item reference): the body holds only what is
    /// new, so it cannot be folded and calls in it may answer calls it does not hold.
    #[error(
        "{wire} request: {path} is {found}: the request continues a conversation the provider \
         keeps and holds only what is new, so foldwire cannot fold it and leaves it as sent"
    )]
    ProviderHeld {
        /// The wire.
        wire: Wire,
        /// The JSON path of the field or item (`previous_response_id`, `input[3]`).
        path: String,
        /// What stands there (the field's value, the item's type), shortened.
        found: String,
    },
    /// The conversation could not be encoded (a stage left it inconsistent).
    #[error("{wire} encode: at {path}: expected {expected}, found {found}")]
    Encode {
        /// The wire.
        wire: Wire,
        /// Where in the conversation (`messages[12]` is the unit index, `entries[3]` an entry).
        path: String,
        /// What the encoder needs there.
        expected: String,
        /// What it found.
        found: String,
    },
}

/// Why the wire of a request could not be told from its path and body.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DetectError {
    /// The body is not a JSON object.
    #[error("cannot detect the wire: the body is not a JSON object ({reason}); path {path:?}")]
    NotAnObject {
        /// The request path, if one was given.
        path: Option<String>,
        /// What was wrong.
        reason: String,
    },
    /// Neither the path nor the body matched a known wire.
    #[error(
        "cannot detect the wire: path {path:?} is not a known endpoint and the body has none of \
         `messages`, `input`, `contents` (top-level keys seen: {keys:?}); pass the wire explicitly"
    )]
    Unknown {
        /// The request path, if one was given.
        path: Option<String>,
        /// The top-level keys of the body.
        keys: Vec<String>,
    },
    /// The body fits more than one wire and nothing in it decides.
    #[error(
        "cannot detect the wire: path {path:?} is not a known endpoint and the body could be \
         {candidates:?} (top-level keys seen: {keys:?}); pass the wire explicitly"
    )]
    Ambiguous {
        /// The request path, if one was given.
        path: Option<String>,
        /// The wires the body fits.
        candidates: Vec<Wire>,
        /// The top-level keys of the body.
        keys: Vec<String>,
    },
}
