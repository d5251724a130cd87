//! Gemini's JSON-array stream for clients that ask for it (`:streamGenerateContent` without
//! `alt=sse`) while the compress loop runs: the proxy asks upstream for `alt=sse`, reads and
//! stitches the rounds as SSE like on every other wire, and re-frames what the client gets
//! as the elements of one JSON array, the framing the client asked for.

use bytes::Bytes;

use super::stitch::frame_data;

/// Turns SSE frames (split anywhere across chunks) into one JSON array, element by element.
#[derive(Debug, Default)]
pub struct ArrayFramer {
    /// Bytes of a frame not complete yet.
    pending: Vec<u8>,
    /// Whether `[` went out.
    opened: bool,
    /// Whether an element went out (the next one needs a comma).
    elements: bool,
}

impl ArrayFramer {
    /// The array bytes for the complete frames in `chunk` and before it. SSE comments
    /// (keep-alives) become whitespace, which keeps the connection busy and the array valid.
    pub fn push(&mut self, chunk: &[u8]) -> Bytes {
        self.pending.extend_from_slice(chunk);
        let mut out = Vec::new();
        while let Some((end, next)) = frame_end(&self.pending) {
            let frame: Vec<u8> = self.pending.drain(..next).collect();
            self.frame(frame.get(..end).unwrap_or_default(), &mut out);
        }
        Bytes::from(out)
    }

    /// The rest: a last frame without its blank line, then `]`.
    pub fn finish(&mut self) -> Bytes {
        let rest = std::mem::take(&mut self.pending);
        let mut out = Vec::new();
        self.frame(&rest, &mut out);
        self.open(&mut out);
        out.push(b']');
        Bytes::from(out)
    }

    fn open(&mut self, out: &mut Vec<u8>) {
        if !self.opened {
            out.push(b'[');
            self.opened = true;
        }
    }

    fn frame(&mut self, frame: &[u8], out: &mut Vec<u8>) {
        let data = frame_data(frame).filter(|d| !d.trim().is_empty() && d.trim() != "[DONE]");
        let opened_now = !self.opened;
        self.open(out);
        match data {
            Some(json) => {
                if self.elements {
                    out.extend_from_slice(b",\r\n");
                }
                out.extend_from_slice(json.as_bytes());
                self.elements = true;
            }
            // A comment or an empty frame: `[` alone is progress enough the first time.
            None if !opened_now && !frame.iter().all(u8::is_ascii_whitespace) => out.push(b'\n'),
            None => {}
        }
    }
}

/// Where the first complete frame in `buf` ends (its content, and where the next begins).
fn frame_end(buf: &[u8]) -> Option<(usize, usize)> {
    let lf = find(buf, b"\n\n").map(|i| (i, i + 2));
    let crlf = find(buf, b"\r\n\r\n").map(|i| (i, i + 4));
    match (lf, crlf) {
        (Some(a), Some(b)) => Some(if a.0 <= b.0 { a } else { b }),
        (a, b) => a.or(b),
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reframe(sse: &[u8], cut: usize) -> Vec<u8> {
        let mut framer = ArrayFramer::default();
        let mut out = framer.push(&sse[..cut]).to_vec();
        out.extend_from_slice(&framer.push(&sse[cut..]));
        out.extend_from_slice(&framer.finish());
        out
    }

    #[test]
    fn sse_frames_become_one_json_array_however_they_are_cut() {
        let sse = b": keep-alive\n\ndata: {\"a\":1}\n\ndata: {\"b\":\r\ndata: 2}\r\n\r\n: keep-alive\n\ndata: {\"c\":3}";
        for cut in 0..=sse.len() {
            let out = reframe(sse, cut);
            let value: serde_json::Value = serde_json::from_slice(&out)
                .unwrap_or_else(|e| panic!("cut {cut}: {e}: {}", String::from_utf8_lossy(&out)));
            assert_eq!(
                value,
                serde_json::json!([{"a": 1}, {"b": 2}, {"c": 3}]),
                "cut {cut}"
            );
            assert_eq!(out.first(), Some(&b'['));
        }
        assert_eq!(reframe(b"", 0), b"[]");
    }
}
