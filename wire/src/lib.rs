//! # foldwire-wire
//!
//! The four provider wires: lossless request decode/encode ([`request`]), response-stream
//! parsers and encoders ([`stream`]), and token estimators ([`tokens`]).

pub mod request;
pub mod stream;
pub mod tokens;
