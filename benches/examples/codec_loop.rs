//! Runs one wire's codec (or the `serde_json::Value` round trip) over the bench body in a
//! tight loop, for profilers: the criterion bench interleaves contenders, which mixes their
//! samples in a profile.
//!
//! `cargo build --release -p foldwire-benches --example codec_loop` then
//! `perf record target/release/examples/codec_loop openai-chat 500 [value]`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Instant;

use bytes::Bytes;
use foldwire_core::Wire;
use foldwire_wire::request::{decode, encode};

fn main() {
    let mut args = std::env::args().skip(1);
    let usage = "usage: codec_loop WIRE ITERATIONS [value]";
    let wire: Wire = args.next().expect(usage).parse().expect("a wire name");
    let iterations: u32 = args.next().expect(usage).parse().expect("a count");
    let value = args.next().as_deref() == Some("value");
    let body = Bytes::from(match wire {
        Wire::Anthropic => foldwire_benches::anthropic_turns(1000, 2000),
        Wire::OpenAiChat => foldwire_benches::chat_turns(1000, 2000),
        Wire::OpenAiResponses => foldwire_benches::responses_turns(1000, 2000),
        Wire::Gemini => foldwire_benches::gemini_turns(1000, 2000),
    });
    let start = Instant::now();
    let mut out = 0;
    for _ in 0..iterations {
        out += if value {
            let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
            serde_json::to_vec(&v).unwrap().len()
        } else {
            encode(&decode(wire, body.clone()).unwrap()).unwrap().len()
        };
    }
    let what = if value { "serde_json::Value" } else { "codec" };
    println!(
        "{wire} {what}: {} B, {:?} per round trip ({out} B out)",
        body.len(),
        start.elapsed() / iterations.max(1)
    );
}
