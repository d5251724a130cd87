//! Codec bench: decode + encode of a 1,000-turn tool-use session on each wire, side by side
//! with a `serde_json::Value` parse + serialize of the same bytes (the naive floor), in one
//! run, printing the ratio. The Anthropic body is `anthropic-1000-turns.json` (generated
//! byte-identically); the other wires get comparable bodies with the same turns, texts and
//! 2,000-character tool outputs.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::hint::black_box;

use bytes::Bytes;
use criterion::{Criterion, criterion_group, criterion_main};
use foldwire_benches::ratio;
use foldwire_core::Wire;
use foldwire_wire::request::{decode, encode};

const TURNS: usize = 1000;
const OUTPUT: usize = 2000;

fn bodies() -> Vec<(Wire, Bytes)> {
    vec![
        (
            Wire::Anthropic,
            Bytes::from(foldwire_benches::anthropic_turns(TURNS, OUTPUT)),
        ),
        (
            Wire::OpenAiChat,
            Bytes::from(foldwire_benches::chat_turns(TURNS, OUTPUT)),
        ),
        (
            Wire::OpenAiResponses,
            Bytes::from(foldwire_benches::responses_turns(TURNS, OUTPUT)),
        ),
        (
            Wire::Gemini,
            Bytes::from(foldwire_benches::gemini_turns(TURNS, OUTPUT)),
        ),
    ]
}

fn codec_round_trip(wire: Wire, body: &Bytes) -> usize {
    let conv = decode(wire, body.clone()).unwrap();
    encode(&conv).unwrap().len()
}

/// Decode, drop one unit in the middle (its message gets rebuilt, everything after it is
/// copied), encode: what a turn with one fold costs the codec.
fn codec_with_edit(wire: Wire, body: &Bytes) -> usize {
    let mut conv = decode(wire, body.clone()).unwrap();
    let mid = conv.messages.len() / 2;
    conv.messages.remove(mid);
    encode(&conv).unwrap().len()
}

fn codec(c: &mut Criterion) {
    let bodies = bodies();
    for (wire, body) in &bodies {
        // Sanity: the body round-trips byte-identical and the edit path produces valid JSON.
        let conv = decode(*wire, body.clone()).unwrap();
        assert_eq!(&encode(&conv).unwrap(), body);
        let mut edited = conv.clone();
        edited.messages.remove(edited.messages.len() / 2);
        serde_json::from_slice::<serde_json::Value>(&encode(&edited).unwrap()).unwrap();

        let mut group = c.benchmark_group(format!("codec/{wire}"));
        group.bench_function("decode+encode", |b| {
            b.iter(|| codec_round_trip(*wire, black_box(body)))
        });
        group.bench_function("decode+edit+encode", |b| {
            b.iter(|| codec_with_edit(*wire, black_box(body)))
        });
        group.bench_function("serde_json::Value round trip", |b| {
            b.iter(|| foldwire_benches::value_round_trip(black_box(body)))
        });
        group.finish();
    }
    println!("\ncodec vs serde_json::Value round trip (31 interleaved rounds; min / median):");
    for (wire, body) in &bodies {
        let [value, codec, edit] = foldwire_benches::interleaved(
            31,
            [
                &mut || foldwire_benches::value_round_trip(body),
                &mut || codec_round_trip(*wire, body),
                &mut || codec_with_edit(*wire, body),
            ],
        );
        println!(
            "  {wire:<16} {:>7} B  value {:>7.2?}/{:>7.2?}  decode+encode {:>7.2?}/{:>7.2?} = {:.2}x/{:.2}x  one edit {:>7.2?}/{:>7.2?} = {:.2}x/{:.2}x",
            body.len(),
            value.0,
            value.1,
            codec.0,
            codec.1,
            ratio(codec.0, value.0),
            ratio(codec.1, value.1),
            edit.0,
            edit.1,
            ratio(edit.0, value.0),
            ratio(edit.1, value.1),
        );
    }
}

criterion_group!(benches, codec);
criterion_main!(benches);
