//! Codec bench: decode + encode of a 1,000-turn tool-use session on each wire, side by side
//! with a `serde_json::Value` parse + serialize of the same bytes (the naive floor), in one
//! run, printing the ratio. The Anthropic body is `anthropic-1000-turns.json` (generated
//! byte-identically); the other wires get comparable bodies with the same turns, texts and
//! 2,000-character tool outputs.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::fmt::Write as _;
use std::hint::black_box;
use std::time::{Duration, Instant};

use bytes::Bytes;
use criterion::{Criterion, criterion_group, criterion_main};
use foldwire_core::Wire;
use foldwire_wire::request::{decode, encode};

const TURNS: usize = 1000;
const OUTPUT: usize = 2000;

fn tool_output(t: usize, size: usize) -> String {
    let line =
        format!("line {t} fn handler_{t}(req: Request) -> Response {{ validate(req)?; ok() }}\n");
    let mut out = line.repeat(size.div_ceil(line.len()));
    out.truncate(size);
    out
}

/// JSON string literal of an ASCII text.
fn js(s: &str) -> String {
    serde_json::to_string(s).unwrap()
}

fn chat_turns(turns: usize, output: usize) -> Vec<u8> {
    let mut s = String::from(
        r#"{"model":"gpt-4.1","messages":[{"role":"system","content":"You are a coding agent."},{"role":"user","content":"Please refactor the auth module and fix the failing tests."}"#,
    );
    for t in 0..turns {
        let id = format!("call_{t:06}");
        let args = js(&format!(r#"{{"command":"cat src/mod{t}.rs"}}"#));
        let _ = write!(
            s,
            r#",{{"role":"assistant","content":"Step {t}: I will inspect file src/mod{t}.rs to understand the flow.","tool_calls":[{{"id":"{id}","type":"function","function":{{"name":"bash","arguments":{args}}}}}]}}"#
        );
        let _ = write!(
            s,
            r#",{{"role":"tool","tool_call_id":"{id}","content":{}}}"#,
            js(&tool_output(t, output))
        );
    }
    s.push_str(r#",{"role":"user","content":"Continue."}],"stream":true}"#);
    s.into_bytes()
}

fn responses_turns(turns: usize, output: usize) -> Vec<u8> {
    let mut s = String::from(
        r#"{"model":"gpt-5","instructions":"You are a coding agent.","input":[{"role":"user","content":"Please refactor the auth module and fix the failing tests."}"#,
    );
    for t in 0..turns {
        let id = format!("call_{t:06}");
        let args = js(&format!(r#"{{"command":"cat src/mod{t}.rs"}}"#));
        let _ = write!(
            s,
            r#",{{"type":"message","role":"assistant","content":[{{"type":"output_text","text":"Step {t}: I will inspect file src/mod{t}.rs to understand the flow."}}]}}"#
        );
        let _ = write!(
            s,
            r#",{{"type":"function_call","call_id":"{id}","name":"bash","arguments":{args}}}"#
        );
        let _ = write!(
            s,
            r#",{{"type":"function_call_output","call_id":"{id}","output":{}}}"#,
            js(&tool_output(t, output))
        );
    }
    s.push_str(r#",{"role":"user","content":"Continue."}],"stream":true}"#);
    s.into_bytes()
}

fn gemini_turns(turns: usize, output: usize) -> Vec<u8> {
    let mut s = String::from(
        r#"{"systemInstruction":{"parts":[{"text":"You are a coding agent."}]},"contents":[{"role":"user","parts":[{"text":"Please refactor the auth module and fix the failing tests."}]}"#,
    );
    for t in 0..turns {
        let _ = write!(
            s,
            r#",{{"role":"model","parts":[{{"text":"Step {t}: I will inspect file src/mod{t}.rs to understand the flow."}},{{"functionCall":{{"name":"bash","args":{{"command":"cat src/mod{t}.rs"}}}}}}]}}"#
        );
        let _ = write!(
            s,
            r#",{{"role":"user","parts":[{{"functionResponse":{{"name":"bash","response":{{"output":{}}}}}}}]}}"#,
            js(&tool_output(t, output))
        );
    }
    s.push_str(r#",{"role":"user","parts":[{"text":"Continue."}]}],"generationConfig":{"maxOutputTokens":8192}}"#);
    s.into_bytes()
}

fn bodies() -> Vec<(Wire, Bytes)> {
    vec![
        (
            Wire::Anthropic,
            Bytes::from(foldwire_benches::anthropic_turns(TURNS, OUTPUT)),
        ),
        (Wire::OpenAiChat, Bytes::from(chat_turns(TURNS, OUTPUT))),
        (
            Wire::OpenAiResponses,
            Bytes::from(responses_turns(TURNS, OUTPUT)),
        ),
        (Wire::Gemini, Bytes::from(gemini_turns(TURNS, OUTPUT))),
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

fn value_round_trip(body: &Bytes) -> usize {
    let v: serde_json::Value = serde_json::from_slice(body).unwrap();
    serde_json::to_vec(&v).unwrap().len()
}

/// Wall times of three contenders run interleaved (so machine load hits them alike): the
/// minimum and the median of each over `runs` rounds, after one warm-up round.
fn interleaved<const N: usize>(
    runs: usize,
    mut fs: [&mut dyn FnMut() -> usize; N],
) -> [(Duration, Duration); N] {
    for f in fs.iter_mut() {
        black_box(f());
    }
    let mut times: Vec<Vec<Duration>> = vec![Vec::with_capacity(runs); N];
    for _ in 0..runs {
        for (f, t) in fs.iter_mut().zip(times.iter_mut()) {
            let start = Instant::now();
            black_box(f());
            t.push(start.elapsed());
        }
    }
    let mut out = [(Duration::ZERO, Duration::ZERO); N];
    for (o, t) in out.iter_mut().zip(times.iter_mut()) {
        t.sort();
        *o = (t[0], t[runs / 2]);
    }
    out
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
            b.iter(|| value_round_trip(black_box(body)))
        });
        group.finish();
    }
    println!("\ncodec vs serde_json::Value round trip (31 interleaved rounds; min / median):");
    for (wire, body) in &bodies {
        let [value, codec, edit] = interleaved(
            31,
            [
                &mut || value_round_trip(body),
                &mut || codec_round_trip(*wire, body),
                &mut || codec_with_edit(*wire, body),
            ],
        );
        let ratio = |a: Duration, b: Duration| a.as_secs_f64() / b.as_secs_f64();
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
