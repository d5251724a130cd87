//! # foldwire-wire
//!
//! The four provider wires: lossless request decode/encode ([`request`]), response-stream
//! parsers and encoders ([`stream`]), token estimators ([`tokens`]), the image header
//! readers they price images with ([`image_size`]), and each wire's dialect ([`dialect`]):
//! what the stages and the proxy need to know about a wire besides its codec.

pub mod any_of;
pub mod dialect;
pub mod image_size;
pub mod request;
pub mod shared_bytes;
pub mod stream;
pub mod tokens;
