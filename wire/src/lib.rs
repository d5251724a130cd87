//! # foldwire-wire
//!
//! The four provider wires: lossless request decode/encode ([`request`]), response-stream
//! parsers and encoders ([`stream`]), token estimators ([`tokens`]) and
//! the image header readers they price images with ([`image_size`]).

pub mod dialect;
pub mod image_size;
pub mod request;
pub mod stream;
pub mod tokens;
