//! Incremental Server-Sent Events framing.
//!
//! Bytes arrive in arbitrary chunks; a frame is every line up to and including the blank line
//! that ends it, so the frames' raw bytes concatenate back to the input exactly. Lines end in
//! `\n`, `\r\n` or a lone `\r`; a `\r` at the very end of the buffered bytes is held until the
//! next byte shows whether a `\n` follows, which is what makes a split inside `\r\n` harmless.

use bytes::{Bytes, BytesMut};

use super::event::LineEnding;

/// One complete SSE frame as cut from the stream.
#[derive(Debug)]
pub(crate) struct SseFrame {
    /// Byte offset of the frame in the stream.
    pub offset: u64,
    /// The frame's exact bytes.
    pub raw: Bytes,
    /// The terminator of the frame's first line.
    pub line_ending: LineEnding,
    /// The last `event:` field.
    pub name: Option<Vec<u8>>,
    /// The `data:` lines joined with `\n`; `None` when the frame had no data line.
    pub data: Option<Vec<u8>>,
}

/// Cuts a byte stream into SSE frames.
#[derive(Debug, Default)]
pub(crate) struct SseFramer {
    /// Bytes of the current, unfinished frame.
    buf: BytesMut,
    /// Where the next unprocessed line starts in `buf`.
    line_start: usize,
    /// Stream offset of `buf[0]`.
    offset: u64,
    line_ending: Option<LineEnding>,
    name: Option<Vec<u8>>,
    data: Option<Vec<u8>>,
}

impl SseFramer {
    /// Adds bytes and returns every frame they complete.
    pub fn feed(&mut self, chunk: &[u8]) -> Vec<SseFrame> {
        self.buf.extend_from_slice(chunk);
        self.drain(false)
    }

    /// Ends the stream: an unterminated last line or frame is completed as if a blank line
    /// followed, so no byte is lost.
    pub fn finish(mut self) -> Vec<SseFrame> {
        let mut frames = self.drain(true);
        if self.line_start < self.buf.len() {
            let end = self.buf.len();
            let line = self.buf.get(self.line_start..end).map(<[u8]>::to_vec);
            if let Some(line) = line {
                self.take_field(&line);
            }
            self.line_start = end;
        }
        if !self.buf.is_empty() {
            frames.push(self.cut_frame(self.buf.len()));
        }
        frames
    }

    fn drain(&mut self, at_end: bool) -> Vec<SseFrame> {
        let mut frames = Vec::new();
        loop {
            let rest = self.buf.get(self.line_start..).unwrap_or_default();
            let Some(pos) = memchr::memchr2(b'\n', b'\r', rest) else {
                break;
            };
            let (ending, len) = if rest.get(pos) == Some(&b'\n') {
                (LineEnding::Lf, 1)
            } else {
                match rest.get(pos + 1) {
                    Some(b'\n') => (LineEnding::CrLf, 2),
                    Some(_) => (LineEnding::Cr, 1),
                    // A trailing `\r`: wait for the next byte unless the stream is over.
                    None if at_end => (LineEnding::Cr, 1),
                    None => break,
                }
            };
            let line_end = self.line_start + pos;
            let next = line_end + len;
            if self.line_ending.is_none() {
                self.line_ending = Some(ending);
            }
            if pos == 0 {
                frames.push(self.cut_frame(next));
            } else {
                let line = self.buf.get(self.line_start..line_end).map(<[u8]>::to_vec);
                if let Some(line) = line {
                    self.take_field(&line);
                }
                self.line_start = next;
            }
        }
        frames
    }

    /// Applies one non-blank line to the frame being built.
    fn take_field(&mut self, line: &[u8]) {
        if line.first() == Some(&b':') {
            return; // a comment
        }
        let (field, value) = match memchr::memchr(b':', line) {
            Some(colon) => {
                let value = line.get(colon + 1..).unwrap_or_default();
                let value = value.strip_prefix(b" ").unwrap_or(value);
                (line.get(..colon).unwrap_or_default(), value)
            }
            None => (line, &b""[..]),
        };
        match field {
            b"data" => match &mut self.data {
                Some(data) => {
                    data.push(b'\n');
                    data.extend_from_slice(value);
                }
                None => self.data = Some(value.to_vec()),
            },
            b"event" => self.name = Some(value.to_vec()),
            _ => {} // id, retry and unknown fields carry nothing we normalize
        }
    }

    /// Splits the first `end` bytes off as a finished frame.
    fn cut_frame(&mut self, end: usize) -> SseFrame {
        let end = end.min(self.buf.len());
        let raw = self.buf.split_to(end).freeze();
        let offset = self.offset;
        self.offset += raw.len() as u64;
        self.line_start = 0;
        SseFrame {
            offset,
            raw,
            line_ending: self.line_ending.take().unwrap_or(LineEnding::Lf),
            name: self.name.take(),
            data: self.data.take(),
        }
    }
}

/// Rebuilds an SSE frame with a new payload: every non-`data` line is kept verbatim and the
/// `data` lines are replaced by one `data: <payload>` line at the place of the first.
pub(crate) fn rewrite_data(raw: &[u8], payload: &str) -> Bytes {
    let mut out = Vec::with_capacity(payload.len() + 32);
    let mut written = false;
    let mut rest = raw;
    while !rest.is_empty() {
        let (line, ending_len) = match memchr::memchr2(b'\n', b'\r', rest) {
            Some(pos) => {
                let len = if rest.get(pos) == Some(&b'\r') && rest.get(pos + 1) == Some(&b'\n') {
                    2
                } else {
                    1
                };
                (rest.get(..pos).unwrap_or_default(), len)
            }
            None => (rest, 0),
        };
        let ending = rest
            .get(line.len()..line.len() + ending_len)
            .unwrap_or_default();
        let is_data = line == b"data" || line.starts_with(b"data:");
        if is_data {
            if !written {
                out.extend_from_slice(b"data: ");
                out.extend_from_slice(payload.as_bytes());
                out.extend_from_slice(ending);
                written = true;
            }
        } else {
            out.extend_from_slice(line);
            out.extend_from_slice(ending);
        }
        rest = rest.get(line.len() + ending_len..).unwrap_or_default();
    }
    Bytes::from(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frames(input: &[u8], split: usize) -> Vec<(Vec<u8>, Option<Vec<u8>>)> {
        let mut f = SseFramer::default();
        let (a, b) = input.split_at(split);
        let mut out = f.feed(a);
        out.extend(f.feed(b));
        out.extend(f.finish());
        out.into_iter()
            .map(|fr| (fr.raw.to_vec(), fr.data))
            .collect()
    }

    #[test]
    fn crlf_split_between_cr_and_lf_is_one_terminator() {
        let input = b"data: a\r\n\r\ndata: b\r\n\r\n";
        for split in 0..=input.len() {
            let got = frames(input, split);
            assert_eq!(got.len(), 2, "split {split}");
            assert_eq!(got[0].0, b"data: a\r\n\r\n");
            assert_eq!(got[1].1.as_deref(), Some(&b"b"[..]));
        }
    }

    #[test]
    fn lone_cr_multiline_data_and_comments() {
        let input = b": hi\rdata: x\rdata:y\r\revent: e\ndata\n\n";
        let got = frames(input, 3);
        assert_eq!(got.len(), 2);
        assert_eq!(got[0].1.as_deref(), Some(&b"x\ny"[..]));
        assert_eq!(got[1].1.as_deref(), Some(&b""[..]));
        let joined: Vec<u8> = got.iter().flat_map(|g| g.0.clone()).collect();
        assert_eq!(joined, input);
    }

    #[test]
    fn unterminated_tail_is_kept() {
        let got = frames(b"data: 1\n\ndata: 2", 4);
        assert_eq!(got.len(), 2);
        assert_eq!(got[1].0, b"data: 2");
        assert_eq!(got[1].1.as_deref(), Some(&b"2"[..]));
    }

    #[test]
    fn rewrite_keeps_other_lines_and_endings() {
        let out = rewrite_data(b"event: x\r\ndata: a\r\ndata: b\r\n\r\n", "{}");
        assert_eq!(&out[..], b"event: x\r\ndata: {}\r\n\r\n");
    }
}
