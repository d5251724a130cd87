//! Shared checks of the fuzz targets, so each target stays one line.

use foldwire_core::Wire;
use foldwire_wire::stream::{ParsedEvent, StreamError, StreamFilter, StreamParser};

/// The request decoder's contract on arbitrary input: no panic, every unit's text can be
/// read (it is decoded lazily, from the body), and whatever decodes encodes back to the
/// exact input bytes when nothing changed.
pub fn check_request(wire: Wire, data: &[u8]) {
    let body = bytes::Bytes::copy_from_slice(data);
    if let Ok(conversation) = foldwire_wire::request::decode(wire, body) {
        if let Err(e) = serde_json::from_slice::<serde::de::IgnoredAny>(data) {
            panic!("decoded a body serde_json refuses: {e}");
        }
        for unit in &conversation.messages {
            std::hint::black_box(unit.text.len());
        }
        let encoded = foldwire_wire::request::encode(&conversation)
            .expect("a decoded conversation must encode");
        assert_eq!(&encoded[..], data, "untouched round trip is not byte-identical");
    }
}

/// Tool names the stream checks hide: the proxy's own tools plus short names fuzzers find.
const HIDDEN: [&str; 4] = ["compress", "restore", "f", "a"];

/// Parses `bytes` fed in pieces cut at `cuts`; the events until the first error, and it.
fn parse(wire: Wire, bytes: &[u8], cuts: &[usize]) -> (Vec<ParsedEvent>, Option<StreamError>) {
    let mut parser = StreamParser::new(wire);
    let mut events = Vec::new();
    let mut start = 0;
    for &cut in cuts.iter().chain(std::iter::once(&bytes.len())) {
        match parser.feed(&bytes[start..cut]) {
            Ok(e) => events.extend(e),
            Err(e) => return (events, Some(e)),
        }
        start = cut;
    }
    match parser.finish() {
        Ok(e) => events.extend(e),
        Err(e) => return (events, Some(e)),
    }
    (events, None)
}

/// The stream parser's contract on arbitrary input: no panic, the same outcome however the
/// bytes are chunked, raw bytes that give the input back, byte-exact pass-through with nothing
/// hidden, and a filtered stream that still parses.
pub fn check_stream(wire: Wire, data: &[u8]) {
    // The first two bytes choose cut points; the rest is the stream.
    let (cut_a, cut_b, bytes) = match data {
        [a, b, rest @ ..] => (*a as usize, *b as usize, rest),
        _ => (0, 0, data),
    };
    let whole = parse(wire, bytes, &[]);
    let len = bytes.len();
    let mut cuts = vec![cut_a * len / 256, cut_b * len / 256];
    cuts.sort_unstable();
    assert_eq!(
        parse(wire, bytes, &cuts),
        whole,
        "chunking changed the result"
    );
    let (events, error) = whole;
    if error.is_some() {
        return;
    }
    let raw: Vec<u8> = events.iter().flat_map(|e| e.raw.iter().copied()).collect();
    assert_eq!(raw, bytes, "raw bytes do not give the stream back");

    let mut pass = StreamFilter::new(wire, std::iter::empty::<String>());
    let mut out = Vec::new();
    for e in &events {
        let b = pass.push(e).expect("filter failed on a parsed event");
        out.extend_from_slice(&b.expect("event dropped with nothing hidden"));
    }
    assert_eq!(out, bytes, "pass-through is not byte-exact");

    let mut filter = StreamFilter::new(wire, HIDDEN);
    let mut out = Vec::new();
    for e in &events {
        if let Some(b) = filter.push(e).expect("filter failed on a parsed event") {
            out.extend_from_slice(&b);
        }
    }
    let _ = filter.finish();
    let (_, error) = parse(wire, &out, &[]);
    assert!(error.is_none(), "filtered stream does not parse: {error:?}");
}

/// Response bodies: any bytes, any wire, no panic.
pub fn check_body(data: &[u8]) {
    let Some((first, body)) = data.split_first() else {
        return;
    };
    let wire = Wire::ALL[usize::from(*first) % Wire::ALL.len()];
    let _ = foldwire_wire::stream::parse_response(wire, body);
}
