//! Token estimators: the tiktoken o200k tokenizer (the char estimate lives in core as
//! `CharEstimator`), image token estimates by each provider's published rules, and
//! [`raw_tokens`], the estimate of a span of a request that prices every inline image by
//! its pixel size instead of by the length of its base64 text.

use std::sync::{LazyLock, OnceLock};

use foldwire_core::{CharEstimator, TokenEstimator, Wire};
use tiktoken_rs::CoreBPE;

use crate::dialect::WireMarkers;
use crate::image_size::{Header, read_header};

/// The o200k BPE, loaded once per process; `None` if it failed to load, in which case the
/// estimator falls back to the char estimate rather than failing a turn.
fn o200k() -> Option<&'static CoreBPE> {
    static BPE: OnceLock<Option<CoreBPE>> = OnceLock::new();
    BPE.get_or_init(|| tiktoken_rs::o200k_base().ok()).as_ref()
}

/// Counts tokens with the o200k_base BPE (GPT-4o family); a close estimate for the other
/// providers, whose tokenizers are not public.
#[derive(Debug, Clone, Copy, Default)]
pub struct TiktokenEstimator;

impl TiktokenEstimator {
    /// An estimator; the BPE loads on first use.
    pub fn new() -> Self {
        TiktokenEstimator
    }

    /// True when the BPE loaded (false means the char estimate is being used instead).
    pub fn is_loaded(&self) -> bool {
        o200k().is_some()
    }
}

impl TokenEstimator for TiktokenEstimator {
    fn name(&self) -> &'static str {
        "tiktoken-o200k"
    }

    fn text_tokens(&self, text: &str) -> u64 {
        match o200k() {
            Some(bpe) => bpe.encode_ordinary(text).len() as u64,
            None => CharEstimator.text_tokens(text),
        }
    }
}

/// Estimated input tokens of one image of `width` × `height` pixels on `wire`, by each
/// provider's published rule ([`crate::dialect::Dialect::image_tokens`]). A zero-sized image
/// costs nothing.
pub fn image_tokens(wire: Wire, width: u32, height: u32) -> u64 {
    if width == 0 || height == 0 {
        return 0;
    }
    crate::dialect::dialect(wire).image_tokens(width, height)
}

/// The image size assumed where the real one cannot be read (a header foldwire cannot
/// parse, a remote URL, a provider file reference): a 1920×1080 screenshot, the most common
/// image an agent sends. Priced by each wire's rule: 1,533 tokens on Anthropic, 1,105 on
/// OpenAI, 1,548 on Gemini.
pub const DEFAULT_IMAGE_SIZE: (u32, u32) = (1920, 1080);

/// Estimated tokens of an image whose size cannot be read, on `wire` (see
/// [`DEFAULT_IMAGE_SIZE`]).
pub fn default_image_tokens(wire: Wire) -> u64 {
    image_tokens(wire, DEFAULT_IMAGE_SIZE.0, DEFAULT_IMAGE_SIZE.1)
}

/// Shortest JSON string worth checking for an inline image: a base64 PNG header alone is
/// 44 characters, and below this length the text estimate is as good as any.
const MIN_PAYLOAD_CHARS: usize = 64;

/// Bytes of base64 decoded to find a header: enough for PNG, GIF and WebP at once, and for
/// JPEGs whose frame header follows a typical EXIF block; a JPEG whose frame lies further in
/// is decoded further, up to the whole payload.
const FIRST_HEADER_BYTES: usize = 64 * 1024;

/// Whether `raw`, a span of a `wire` request body, may hold an inline image: it contains
/// one of the wire's markers ([`crate::dialect::Dialect::inline_image_markers`]). Every
/// unit's tokens are estimated on every turn, so a wire looks only for its own.
fn may_hold_inline_image(wire: Wire, raw: &[u8]) -> bool {
    static MARKERS: LazyLock<WireMarkers> =
        LazyLock::new(|| WireMarkers::new(|d| d.inline_image_markers()));
    MARKERS.any_in(wire, raw)
}

/// Estimated tokens of `raw`, a span of a `wire` request body (a unit, a wire message, the
/// frame): every JSON string in it that is an inline image (a `data:image/…;base64,` URL or
/// bare base64 whose bytes start like a PNG, JPEG, GIF or WebP) costs what the provider
/// charges for an image of its pixel size ([`image_tokens`]; [`default_image_tokens`] when
/// the size cannot be read), and everything else what `estimator` says. Other base64
/// payloads (PDFs, audio) keep the estimator's count.
pub fn raw_tokens(wire: Wire, raw: &[u8], estimator: &dyn TokenEstimator) -> u64 {
    if raw.len() < MIN_PAYLOAD_CHARS || !may_hold_inline_image(wire, raw) {
        return estimator.raw_tokens(raw);
    }
    let images = inline_images(wire, raw);
    if images.is_empty() {
        return estimator.raw_tokens(raw);
    }
    let mut rest = Vec::with_capacity(raw.len().min(64 * 1024));
    let mut at = 0;
    let mut image_cost = 0;
    for (span, tokens) in &images {
        rest.extend_from_slice(raw.get(at..span.start).unwrap_or_default());
        at = span.end;
        image_cost += tokens;
    }
    rest.extend_from_slice(raw.get(at..).unwrap_or_default());
    estimator.raw_tokens(&rest) + image_cost
}

/// The contents (between the quotes) of every JSON string in `raw` that is an inline
/// image, with its price on `wire`, in order.
fn inline_images(wire: Wire, raw: &[u8]) -> Vec<(std::ops::Range<usize>, u64)> {
    let mut out = Vec::new();
    let mut at = 0;
    while let Some(open) = memchr::memchr(b'"', raw.get(at..).unwrap_or_default()) {
        let start = at + open + 1;
        let Some(end) = string_end(raw, start) else {
            break;
        };
        at = end + 1;
        if end - start < MIN_PAYLOAD_CHARS {
            continue;
        }
        if let Some(tokens) = raw.get(start..end).and_then(|s| payload_tokens(wire, s)) {
            let tokens = match crate::dialect::dialect(wire).low_detail_image_tokens() {
                Some(low) if low_detail(raw, start, end) => low,
                _ => tokens,
            };
            out.push((start..end, tokens));
        }
    }
    out
}

/// Bytes on either side of an OpenAI image's string searched for its `detail` sibling.
const DETAIL_REACH: usize = 48;

/// True when the image whose string spans `start..end` of `raw` asks for
/// `"detail": "low"` (a sibling of `url` in Chat's `image_url`, of `image_url` in
/// Responses' `input_image`), on wires that price it apart.
fn low_detail(raw: &[u8], start: usize, end: usize) -> bool {
    let before = raw
        .get(start.saturating_sub(DETAIL_REACH)..start)
        .unwrap_or_default();
    let after = raw
        .get(end..(end + DETAIL_REACH).min(raw.len()))
        .unwrap_or_default();
    [before, after].iter().any(|near| {
        let compact: Vec<u8> = near
            .iter()
            .copied()
            .filter(|b| !b.is_ascii_whitespace())
            .collect();
        compact
            .windows(b"\"detail\":\"low\"".len())
            .any(|w| w == b"\"detail\":\"low\"")
    })
}

/// The index of the closing quote of the string whose contents start at `start`.
fn string_end(raw: &[u8], mut at: usize) -> Option<usize> {
    loop {
        let hit = memchr::memchr2(b'"', b'\\', raw.get(at..)?)?;
        at += hit;
        if raw.get(at) == Some(&b'"') {
            return Some(at);
        }
        at += 2;
    }
}

/// The price of one JSON string's contents (still escaped) when it is an inline image.
fn payload_tokens(wire: Wire, s: &[u8]) -> Option<u64> {
    let (declared_image, body) = match strip_data_url(s) {
        Some((media_type, body)) => {
            let is_image = media_type
                .get(..6)
                .is_some_and(|p| p.eq_ignore_ascii_case(b"image/"));
            (is_image, body)
        }
        None => (false, s),
    };
    // Bare base64 must look like base64 from its first characters.
    if !declared_image && !body.iter().take(16).all(|&b| sextet(b).is_some()) {
        return None;
    }
    let mut want = FIRST_HEADER_BYTES;
    loop {
        let (bytes, complete) = decode_prefix(body, want);
        match read_header(&bytes) {
            Header::Size { width, height, .. } => return Some(image_tokens(wire, width, height)),
            Header::Truncated(_) if !complete => want = want.saturating_mul(4),
            Header::Truncated(_) => return Some(default_image_tokens(wire)),
            Header::Unknown if declared_image => return Some(default_image_tokens(wire)),
            Header::Unknown => return None,
        }
    }
}

/// Splits `data:<media type>[;params];base64,<body>` into its media type and body; `None`
/// for anything else (plain data URLs carry text, not images worth pricing).
fn strip_data_url(s: &[u8]) -> Option<(&[u8], &[u8])> {
    if !s.get(..5)?.eq_ignore_ascii_case(b"data:") {
        return None;
    }
    let comma = memchr::memchr(b',', s)?;
    let meta = s.get(5..comma)?;
    let is_base64 = meta
        .split(|&b| b == b';')
        .skip(1)
        .any(|p| p.eq_ignore_ascii_case(b"base64"));
    if !is_base64 {
        return None;
    }
    let media_type = meta.split(|&b| b == b';').next().unwrap_or_default();
    Some((media_type, s.get(comma + 1..)?))
}

/// The value of one base64 character (standard or URL-safe alphabet).
fn sextet(b: u8) -> Option<u32> {
    Some(u32::from(match b {
        b'A'..=b'Z' => b - b'A',
        b'a'..=b'z' => b - b'a' + 26,
        b'0'..=b'9' => b - b'0' + 52,
        b'+' | b'-' => 62,
        b'/' | b'_' => 63,
        _ => return None,
    }))
}

/// Decodes up to `max` bytes from the start of the base64 text `s` as it sits in a JSON
/// string: JSON escapes of line breaks are skipped and `\/` is a slash. Stops at padding or
/// at anything that is not base64. Returns the bytes and whether the whole text was read.
fn decode_prefix(s: &[u8], max: usize) -> (Vec<u8>, bool) {
    let mut out = Vec::with_capacity(max.min(s.len()));
    let (mut acc, mut bits) = (0u32, 0u32);
    let mut i = 0;
    while let Some(&b) = s.get(i) {
        if out.len() >= max {
            return (out, false);
        }
        i += 1;
        let b = match b {
            b'\\' => {
                let escaped = s.get(i).copied();
                i += 1;
                match escaped {
                    Some(b'/') => b'/',
                    Some(b'n' | b'r' | b't') => continue,
                    _ => break,
                }
            }
            b' ' | b'\n' | b'\r' | b'\t' => continue,
            b => b,
        };
        let Some(v) = sextet(b) else { break };
        acc = (acc << 6) | v;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
            acc &= (1 << bits) - 1;
        }
    }
    (out, true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tiktoken_counts_known_strings() {
        let e = TiktokenEstimator::new();
        assert!(e.is_loaded());
        assert_eq!(e.text_tokens(""), 0);
        assert_eq!(e.text_tokens("hello"), 1);
        // o200k splits this into a handful of tokens, far fewer than its 44 bytes.
        let n = e.text_tokens("The quick brown fox jumps over the lazy dog.");
        assert!((8..=12).contains(&n), "{n}");
        assert_eq!(e.name(), "tiktoken-o200k");
    }

    #[test]
    fn anthropic_images_scale_then_divide_by_750() {
        // 200×200 = 40,000 px → 54 tokens (40,000 / 750 rounded up).
        assert_eq!(image_tokens(Wire::Anthropic, 200, 200), 54);
        // 1000×1000 fits both limits: 1,000,000 / 750 → 1334.
        assert_eq!(image_tokens(Wire::Anthropic, 1000, 1000), 1334);
        // A huge image is capped near 1.15 MP / 750 ≈ 1534.
        let big = image_tokens(Wire::Anthropic, 8000, 6000);
        assert!((1500..=1534).contains(&big), "{big}");
        // A long thin image is capped by the 1568-px long side.
        assert_eq!(
            image_tokens(Wire::Anthropic, 3136, 100),
            (1568.0_f64 * 50.0 / 750.0).ceil() as u64
        );
    }

    #[test]
    fn openai_images_use_512_tiles_after_fitting() {
        // OpenAI's own worked examples: 1024×1024 → 768×768 → 4 tiles → 765.
        assert_eq!(image_tokens(Wire::OpenAiChat, 1024, 1024), 765);
        // 2048×4096 → 1024×2048 → 768×1536 → 6 tiles → 1105.
        assert_eq!(image_tokens(Wire::OpenAiResponses, 2048, 4096), 1105);
        // A small image is one tile.
        assert_eq!(image_tokens(Wire::OpenAiChat, 100, 100), 255);
    }

    #[test]
    fn gemini_images_are_258_per_tile() {
        assert_eq!(image_tokens(Wire::Gemini, 384, 384), 258);
        assert_eq!(image_tokens(Wire::Gemini, 385, 100), 258);
        assert_eq!(image_tokens(Wire::Gemini, 1536, 1000), 258 * 4);
        assert_eq!(image_tokens(Wire::Gemini, 0, 10), 0);
    }

    fn b64(bytes: &[u8]) -> String {
        use base64::Engine as _;
        base64::engine::general_purpose::STANDARD.encode(bytes)
    }

    /// A PNG of `w`×`h` whose IHDR is real and whose body is `body` bytes of filler.
    fn png(w: u32, h: u32, body: usize) -> Vec<u8> {
        let mut b = b"\x89PNG\r\n\x1a\n\x00\x00\x00\x0dIHDR".to_vec();
        b.extend_from_slice(&w.to_be_bytes());
        b.extend_from_slice(&h.to_be_bytes());
        b.extend(std::iter::repeat_n(7u8, body));
        b
    }

    #[test]
    fn inline_images_cost_their_pixel_size_not_their_base64_length() {
        let data = b64(&png(1200, 800, 300_000));
        let chat = format!(
            r#"{{"type":"image_url","image_url":{{"url":"data:image/png;base64,{data}"}}}}"#
        );
        // The whole string is the image, its `data:` prefix included.
        let text_only = (chat.len() - data.len() - "data:image/png;base64,".len()) as u64;
        for wire in Wire::ALL {
            let n = raw_tokens(wire, chat.as_bytes(), &CharEstimator);
            assert_eq!(
                n,
                text_only.div_ceil(4) + image_tokens(wire, 1200, 800),
                "{wire}"
            );
        }
        // Bare base64 (Anthropic source, Gemini inlineData) is recognized by its bytes.
        let anthropic = format!(
            r#"{{"type":"image","source":{{"type":"base64","media_type":"image/png","data":"{data}"}}}}"#
        );
        let n = raw_tokens(Wire::Anthropic, anthropic.as_bytes(), &CharEstimator);
        assert_eq!(n, 1280 + (anthropic.len() - data.len()).div_ceil(4) as u64);
        let gemini = format!(r#"{{"inlineData":{{"mimeType":"image/png","data":"{data}"}}}}"#);
        let n = raw_tokens(Wire::Gemini, gemini.as_bytes(), &CharEstimator);
        assert_eq!(n, 258 * 4 + (gemini.len() - data.len()).div_ceil(4) as u64);
        let python = gemini.replace("inlineData", "inline_data");
        let n = raw_tokens(Wire::Gemini, python.as_bytes(), &CharEstimator);
        assert_eq!(n, 258 * 4 + (python.len() - data.len()).div_ceil(4) as u64);
    }

    #[test]
    fn a_wire_prices_only_its_own_inline_image_shapes() {
        // A Gemini part quoted in an Anthropic or OpenAI message is text to those providers.
        let data = b64(&png(1200, 800, 3_000));
        let quoted = format!(r#"{{"inlineData":{{"mimeType":"image/png","data":"{data}"}}}}"#);
        for wire in [Wire::Anthropic, Wire::OpenAiChat, Wire::OpenAiResponses] {
            assert_eq!(
                raw_tokens(wire, quoted.as_bytes(), &CharEstimator),
                (quoted.len() as u64).div_ceil(4),
                "{wire}"
            );
        }
        let gemini = raw_tokens(Wire::Gemini, quoted.as_bytes(), &CharEstimator);
        assert_eq!(
            gemini,
            258 * 4 + (quoted.len() - data.len()).div_ceil(4) as u64
        );
    }

    #[test]
    fn openai_low_detail_images_cost_the_base_85() {
        let data = b64(&png(1200, 800, 3_000));
        for part in [
            format!(
                r#"{{"type":"image_url","image_url":{{"url":"data:image/png;base64,{data}","detail":"low"}}}}"#
            ),
            format!(
                r#"{{"type":"input_image","detail": "low","image_url":"data:image/png;base64,{data}"}}"#
            ),
        ] {
            let text = (part.len() - data.len() - "data:image/png;base64,".len()) as u64;
            for wire in [Wire::OpenAiChat, Wire::OpenAiResponses] {
                assert_eq!(
                    raw_tokens(wire, part.as_bytes(), &CharEstimator),
                    85 + text.div_ceil(4)
                );
            }
            // Other providers have no such setting.
            assert_eq!(
                raw_tokens(Wire::Anthropic, part.as_bytes(), &CharEstimator),
                1280 + text.div_ceil(4)
            );
        }
        let high =
            format!(r#"{{"image_url":{{"url":"data:image/png;base64,{data}","detail":"high"}}}}"#);
        let text = (high.len() - data.len() - "data:image/png;base64,".len()) as u64;
        assert_eq!(
            raw_tokens(Wire::OpenAiChat, high.as_bytes(), &CharEstimator),
            1105 + text.div_ceil(4)
        );
    }

    #[test]
    fn jpegs_with_a_late_frame_header_are_decoded_far_enough() {
        // An APP1 block of 60 KB pushes the frame header past the first decoded bytes.
        let mut jpeg = vec![0xFF, 0xD8];
        for _ in 0..3 {
            jpeg.extend_from_slice(&[0xFF, 0xE1, 0xEA, 0x60]);
            jpeg.extend(std::iter::repeat_n(0u8, 0xEA60 - 2));
        }
        jpeg.extend_from_slice(&[0xFF, 0xC0, 0x00, 0x11, 8, 0x03, 0x00, 0x04, 0x00]); // 1024×768
        jpeg.extend(std::iter::repeat_n(1u8, 1000));
        let data = b64(&jpeg);
        let body = format!(r#"{{"data":"{data}","x":"base64"}}"#);
        assert_eq!(
            raw_tokens(Wire::OpenAiResponses, body.as_bytes(), &CharEstimator),
            765 + (body.len() - data.len()).div_ceil(4) as u64
        );
    }

    #[test]
    fn unreadable_images_cost_the_default_and_other_payloads_their_text() {
        let garbage = "QUJD".repeat(100);
        let declared = format!(r#"{{"url":"data:image/webp;base64,{garbage}"}}"#);
        let n = raw_tokens(Wire::Anthropic, declared.as_bytes(), &CharEstimator);
        assert_eq!(
            n,
            default_image_tokens(Wire::Anthropic)
                + (declared.len() - garbage.len() - "data:image/webp;base64,".len()).div_ceil(4)
                    as u64
        );
        assert_eq!(default_image_tokens(Wire::OpenAiChat), 1105);
        // A PDF is not an image: its base64 is counted as text, as before.
        let pdf = b64(&[b"%PDF-1.7 ".as_slice(), &[0u8; 600]].concat());
        let doc = format!(r#"{{"type":"base64","data":"{pdf}"}}"#);
        assert_eq!(
            raw_tokens(Wire::Anthropic, doc.as_bytes(), &CharEstimator),
            CharEstimator.raw_tokens(doc.as_bytes())
        );
        // Text without any marker is never scanned.
        let plain = "x".repeat(500);
        assert_eq!(
            raw_tokens(Wire::Gemini, plain.as_bytes(), &CharEstimator),
            125
        );
    }

    #[test]
    fn base64_prefixes_decode_across_json_escapes() {
        assert_eq!(
            decode_prefix(br"aGVs\nbG8=", 100),
            (b"hello".to_vec(), true)
        );
        assert_eq!(decode_prefix(br"\/\/8=", 100).0, vec![0xFF, 0xFF]);
        assert_eq!(decode_prefix(b"aGVsbG8=", 2), (b"he".to_vec(), false));
    }
}
