//! Response streams: parse each wire into normalized events; re-emit client-visible events.
//!
//! [`StreamParser`] cuts a response stream into [`ParsedEvent`]s — each keeps its exact bytes
//! and says what it means as [`StreamEvent`]s — however the bytes are chunked.
//! [`StreamFilter`] re-emits the events a client should see, hiding chosen tool calls, and
//! [`parse_response`] reads non-streaming bodies into the same events.

mod anthropic;
mod encode;
mod error;
mod event;
mod gemini;
mod json;
mod json_array;
mod openai_chat;
mod openai_responses;
mod parser;
mod response;
mod sse;

pub use encode::{HiddenCall, StreamFilter, filter_stream};
pub use error::StreamError;
pub use event::{Framing, LineEnding, ParsedEvent, StreamEvent, Usage};
pub use parser::{StreamFormat, StreamParser, parse_stream};
pub use response::parse_response;
