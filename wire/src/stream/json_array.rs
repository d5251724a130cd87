//! Incremental framing of a JSON array stream (Gemini `streamGenerateContent` without
//! `alt=sse`): one array of objects, usually pretty-printed, arriving a piece at a time.
//!
//! Only the array structure is tracked (depth, strings, escapes), so each element is cut the
//! moment its closing brace arrives; the element's JSON is parsed later by the wire code.

use bytes::{Bytes, BytesMut};

/// What the framer cut from the stream.
#[derive(Debug)]
pub(crate) enum ArrayPiece {
    /// One element; `raw[start..end]` is its JSON, the bytes before it are the separator.
    Element {
        offset: u64,
        raw: Bytes,
        start: usize,
        end: usize,
    },
    /// Bytes after the last element: `]` and whitespace.
    Trailer { offset: u64, raw: Bytes },
}

/// A problem in the array structure.
#[derive(Debug)]
pub(crate) struct ArrayError {
    /// Stream offset of the offending byte (or the end of the stream).
    pub offset: u64,
    /// What was expected there.
    pub expected: &'static str,
    /// The bytes found there.
    pub found: Vec<u8>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Before the opening `[`.
    Start,
    /// After `[` (first = true) or after `,`.
    BeforeElement { first: bool },
    /// Inside an element.
    InElement,
    /// After an element, expecting `,` or `]`.
    AfterElement,
    /// After the closing `]`.
    Done,
}

/// Cuts a JSON array stream into elements.
#[derive(Debug)]
pub(crate) struct ArrayFramer {
    buf: BytesMut,
    /// Next byte of `buf` to look at.
    pos: usize,
    /// Stream offset of `buf[0]`.
    offset: u64,
    state: State,
    /// Start of the current element in `buf`.
    element_start: usize,
    depth: usize,
    in_string: bool,
    escaped: bool,
    failed: bool,
}

impl Default for ArrayFramer {
    fn default() -> Self {
        ArrayFramer {
            buf: BytesMut::new(),
            pos: 0,
            offset: 0,
            state: State::Start,
            element_start: 0,
            depth: 0,
            in_string: false,
            escaped: false,
            failed: false,
        }
    }
}

impl ArrayFramer {
    /// Adds bytes and returns every piece they complete, then the first structural error.
    pub fn feed(&mut self, chunk: &[u8]) -> (Vec<ArrayPiece>, Option<ArrayError>) {
        self.buf.extend_from_slice(chunk);
        self.scan()
    }

    /// Ends the stream: the trailer is returned, or an error if the array is not closed.
    pub fn finish(mut self) -> (Vec<ArrayPiece>, Option<ArrayError>) {
        if self.failed {
            return (Vec::new(), None);
        }
        if self.state != State::Done {
            let expected = match self.state {
                State::Start => "'[' opening the JSON array stream",
                State::InElement => "the end of the current array element",
                State::BeforeElement { .. } => "an array element or ']'",
                State::AfterElement | State::Done => "',' or ']' closing the array",
            };
            return (
                Vec::new(),
                Some(ArrayError {
                    offset: self.offset + self.buf.len() as u64,
                    expected,
                    found: b"end of stream".to_vec(),
                }),
            );
        }
        let mut pieces = Vec::new();
        if !self.buf.is_empty() {
            let raw = self.buf.split().freeze();
            pieces.push(ArrayPiece::Trailer {
                offset: self.offset,
                raw,
            });
        }
        (pieces, None)
    }

    fn scan(&mut self) -> (Vec<ArrayPiece>, Option<ArrayError>) {
        let mut pieces = Vec::new();
        if self.failed {
            return (pieces, None);
        }
        while let Some(&byte) = self.buf.get(self.pos) {
            let at = self.pos;
            self.pos += 1;
            match self.state {
                State::InElement => {
                    if self.step_in_element(byte) {
                        pieces.push(self.cut_element(at + 1));
                        self.state = State::AfterElement;
                    }
                }
                _ if byte.is_ascii_whitespace() => {}
                State::Start if byte == b'[' => self.state = State::BeforeElement { first: true },
                State::BeforeElement { .. } if byte == b'{' => {
                    self.state = State::InElement;
                    self.element_start = at;
                    self.depth = 1;
                }
                State::BeforeElement { first: true } | State::AfterElement if byte == b']' => {
                    self.state = State::Done;
                    let raw = self.buf.split_to(at + 1).freeze();
                    pieces.push(ArrayPiece::Trailer {
                        offset: self.offset,
                        raw,
                    });
                    self.offset += (at + 1) as u64;
                    self.pos = 0;
                }
                State::AfterElement if byte == b',' => {
                    self.state = State::BeforeElement { first: false }
                }
                state => {
                    self.failed = true;
                    let expected = match state {
                        State::Start => "'[' opening the JSON array stream",
                        State::BeforeElement { first: true } => "'{' or ']'",
                        State::BeforeElement { first: false } => "'{' starting an array element",
                        State::AfterElement => "',' or ']' after an array element",
                        State::Done | State::InElement => "only whitespace after the closing ']'",
                    };
                    // Only the offending byte: what else is buffered depends on chunking.
                    let found = vec![byte];
                    return (
                        pieces,
                        Some(ArrayError {
                            offset: self.offset + at as u64,
                            expected,
                            found,
                        }),
                    );
                }
            }
        }
        (pieces, None)
    }

    /// Tracks strings and nesting; true when the element just closed.
    fn step_in_element(&mut self, byte: u8) -> bool {
        if self.in_string {
            if self.escaped {
                self.escaped = false;
            } else if byte == b'\\' {
                self.escaped = true;
            } else if byte == b'"' {
                self.in_string = false;
            }
            return false;
        }
        match byte {
            b'"' => self.in_string = true,
            b'{' | b'[' => self.depth += 1,
            b'}' | b']' => {
                self.depth = self.depth.saturating_sub(1);
                return self.depth == 0;
            }
            _ => {}
        }
        false
    }

    fn cut_element(&mut self, end: usize) -> ArrayPiece {
        let end = end.min(self.buf.len());
        let start = self.element_start.min(end);
        let raw = self.buf.split_to(end).freeze();
        let offset = self.offset;
        self.offset += end as u64;
        self.pos = 0;
        ArrayPiece::Element {
            offset,
            raw,
            start,
            end,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn elements_and_trailer_concatenate_to_input() {
        let input = b" [{\"a\": \"}]\\\"\"}\n,\n{\"b\": [1, {}]}\n]\n";
        for split in 0..=input.len() {
            let mut f = ArrayFramer::default();
            let (mut pieces, e1) = f.feed(&input[..split]);
            let (p2, e2) = f.feed(&input[split..]);
            pieces.extend(p2);
            let (p3, e3) = f.finish();
            pieces.extend(p3);
            assert!(
                e1.is_none() && e2.is_none() && e3.is_none(),
                "split {split}"
            );
            assert_eq!(pieces.len(), 4, "split {split}: {pieces:?}");
            let mut joined = Vec::new();
            for p in &pieces {
                match p {
                    ArrayPiece::Element { raw, .. } | ArrayPiece::Trailer { raw, .. } => {
                        joined.extend_from_slice(raw)
                    }
                }
            }
            assert_eq!(joined, input);
            let ArrayPiece::Element {
                raw, start, end, ..
            } = &pieces[0]
            else {
                panic!("first piece is not an element");
            };
            assert_eq!(&raw[*start..*end], b"{\"a\": \"}]\\\"\"}");
        }
    }

    #[test]
    fn garbage_after_element_is_named() {
        let mut f = ArrayFramer::default();
        let (pieces, err) = f.feed(b"[{}x");
        assert_eq!(pieces.len(), 1);
        let err = err.expect("error");
        assert_eq!(err.offset, 3);
        assert!(err.expected.contains("','"));
    }

    #[test]
    fn unclosed_array_is_truncated() {
        let mut f = ArrayFramer::default();
        let _ = f.feed(b"[{}");
        let (_, err) = f.finish();
        assert!(err.expect("error").expected.contains("']'"));
    }
}
