//! A validating JSON scanner over the request body that reports byte spans instead of
//! building values, so untouched messages can be re-emitted as the exact bytes they came from.
//!
//! It never recurses (a bracket stack keeps nesting), so no input can exhaust the call stack.
//! Strings are skipped with `memchr`; their contents are only decoded where a unit needs text.

use std::borrow::Cow;
use std::ops::Range;

use super::tape::{Cursor, INDEX_DEPTH, Tape};

/// A syntax error: the byte offset and what the scanner expected there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Syntax {
    /// Byte offset into the scanned text.
    pub at: usize,
    /// What was expected at that offset.
    pub expected: &'static str,
}

fn syntax<T>(at: usize, expected: &'static str) -> Result<T, Syntax> {
    Err(Syntax { at, expected })
}

/// Index of the first non-whitespace byte at or after `pos`.
pub(crate) fn skip_ws(src: &[u8], mut pos: usize) -> usize {
    while let Some(b) = src.get(pos) {
        if matches!(b, b' ' | b'\n' | b'\r' | b'\t') {
            pos += 1;
        } else {
            break;
        }
    }
    pos
}

/// End (exclusive) of the string literal starting at `start` (which must hold `"`): every
/// escape checked, and no control character left unescaped (JSON allows none raw).
pub(crate) fn string_end(src: &[u8], start: usize) -> Result<usize, Syntax> {
    if src.get(start) != Some(&b'"') {
        return syntax(start, "a string");
    }
    let ended = string_end_escapes(src, start);
    // Looked for once over all the string's bytes up to where it ended (or failed), not
    // between each pair of escapes: the runs between escapes are short, and an escape
    // holds no control character.
    let upto = match ended {
        Ok(end) => end,
        Err(e) => e.at,
    };
    let inner = src.get(start + 1..upto).unwrap_or_default();
    match first_control(inner) {
        Some(at) => syntax(start + 1 + at, CONTROL_IN_STRING),
        None => ended,
    }
}

/// [`string_end`] without the check for control characters.
fn string_end_escapes(src: &[u8], start: usize) -> Result<usize, Syntax> {
    let mut pos = start + 1;
    loop {
        let rest = src.get(pos..).unwrap_or_default();
        let Some(off) = memchr::memchr2(b'"', b'\\', rest) else {
            return syntax(src.len(), "the closing quote of a string");
        };
        pos += off;
        if src.get(pos) == Some(&b'"') {
            return Ok(pos + 1);
        }
        // A backslash: validate the escape and skip it.
        match src.get(pos + 1) {
            Some(b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't') => pos += 2,
            Some(b'u') => {
                let hex = src.get(pos + 2..pos + 6).unwrap_or_default();
                if hex.len() != 4 || !hex.iter().all(u8::is_ascii_hexdigit) {
                    return syntax(pos, "four hex digits after \\u");
                }
                pos += 6;
            }
            _ => return syntax(pos, "a valid escape sequence"),
        }
    }
}

/// What a string holding a raw control character lacks.
const CONTROL_IN_STRING: &str =
    "a control character escaped (as \\n, \\t or \\u00XX), not raw in a string";

/// Where the first control character (a byte below 0x20) of `bytes` is.
///
/// Strings are most of a body's bytes, so this runs over nearly all of a first turn: each
/// block is checked whole, without an exit inside it, which compiles to vector compares,
/// and only a block that holds one is searched byte by byte.
fn first_control(bytes: &[u8]) -> Option<usize> {
    const BLOCK: usize = 64;
    let least = |block: &[u8]| block.iter().fold(u8::MAX, |least, &b| least.min(b));
    let blocks = bytes.chunks_exact(BLOCK);
    let tail = blocks.remainder();
    let found = blocks
        .enumerate()
        .find(|(_, block)| least(block) < 0x20)
        .map(|(i, block)| (i * BLOCK, block))
        .or_else(|| (least(tail) < 0x20).then(|| (bytes.len() - tail.len(), tail)));
    let (base, block) = found?;
    block.iter().position(|&b| b < 0x20).map(|at| base + at)
}

/// End (exclusive) of the string literal at `start` in text already validated: finds the
/// closing quote with one `memchr` per embedded quote instead of stopping at every escape.
fn string_end_trusted(src: &[u8], start: usize) -> Result<usize, Syntax> {
    let mut pos = start + 1;
    loop {
        let rest = src.get(pos..).unwrap_or_default();
        let Some(off) = memchr::memchr(b'"', rest) else {
            return syntax(src.len(), "the closing quote of a string");
        };
        let quote = pos + off;
        // The quote is escaped when an odd number of backslashes precede it.
        let mut k = quote;
        while k > start + 1 && src.get(k - 1) == Some(&b'\\') {
            k -= 1;
        }
        if (quote - k).is_multiple_of(2) {
            return Ok(quote + 1);
        }
        pos = quote + 1;
    }
}

/// What a digit after a number's leading 0 was expected to be.
const LEADING_ZERO: &str = "no digit after a leading 0 (JSON numbers have no leading zeros)";

fn number_end(src: &[u8], start: usize) -> Result<usize, Syntax> {
    let mut pos = start;
    if src.get(pos) == Some(&b'-') {
        pos += 1;
    }
    let digits = |mut p: usize| {
        while src.get(p).is_some_and(u8::is_ascii_digit) {
            p += 1;
        }
        p
    };
    // JSON's integer part is `0` or starts with 1-9: `0512` is not a number (serde_json
    // and the providers refuse it).
    let int_end = match src.get(pos) {
        Some(b'0') if src.get(pos + 1).is_some_and(u8::is_ascii_digit) => {
            return syntax(pos + 1, LEADING_ZERO);
        }
        Some(b'0') => pos + 1,
        _ => digits(pos),
    };
    if int_end == pos {
        return syntax(pos, "a digit");
    }
    pos = int_end;
    if src.get(pos) == Some(&b'.') {
        let frac_end = digits(pos + 1);
        if frac_end == pos + 1 {
            return syntax(pos + 1, "a digit after the decimal point");
        }
        pos = frac_end;
    }
    if matches!(src.get(pos), Some(b'e' | b'E')) {
        pos += 1;
        if matches!(src.get(pos), Some(b'+' | b'-')) {
            pos += 1;
        }
        let exp_end = digits(pos);
        if exp_end == pos {
            return syntax(pos, "a digit in the exponent");
        }
        pos = exp_end;
    }
    Ok(pos)
}

fn literal_end(src: &[u8], start: usize, word: &'static [u8]) -> Result<usize, Syntax> {
    if src.get(start..start + word.len()) == Some(word) {
        Ok(start + word.len())
    } else {
        syntax(start, "true, false or null")
    }
}

/// End (exclusive) of the JSON value starting at `start` (no leading whitespace), fully
/// validated.
pub(crate) fn value_end(src: &[u8], start: usize) -> Result<usize, Syntax> {
    value_end_mode(src, start, Mode::Validate)
}

/// Validates the value at `start` like [`value_end`] and returns its end and its structural
/// index down to [`INDEX_DEPTH`].
pub(crate) fn value_end_indexed(src: &[u8], start: usize) -> Result<(usize, Tape), Syntax> {
    let mut tape = Tape::for_body(src.len());
    let end = scan_value(src, start, string_end, Some(&mut tape), 0)?;
    Ok((end, tape))
}

/// The depth of a top-level array's items (the root object is depth 0, its fields' values
/// depth 1): where every wire keeps its messages.
const ITEM_DEPTH: usize = 2;

/// Where a scan hands over to the scan of the rest of an array made on another thread:
/// when it reaches a value starting at `at`, at [`ITEM_DEPTH`] inside an array, it takes
/// that thread's index of the value and of every item after it, and where the array's
/// closing bracket sits (or its first syntax error).
struct Join<'scope> {
    at: usize,
    src: &'scope [u8],
    other: std::thread::ScopedJoinHandle<'scope, Result<(Tape, usize), Syntax>>,
}

impl Join<'_> {
    /// The other thread's scan (made here if that thread failed).
    fn rest(self) -> Result<(Tape, usize), Syntax> {
        self.other
            .join()
            .unwrap_or_else(|_| items_from(self.src, self.at))
    }

    /// Waits for the other thread and drops its work (the guess was not an item).
    fn discard(self) {
        let _ = self.other.join();
    }
}

/// [`value_end_indexed`], on two threads when the body holds at least `split_from` bytes:
/// a second thread guesses where a message starts past the middle of the body
/// ([`item_start_after`]) and validates and indexes from there to the end of its array
/// ([`items_from`]), while this thread scans from the front. Only if this thread's scan
/// reaches that very position as an item of an array does it take the other's work; any
/// other guess is dropped and this thread scans on, so the result (the end, the index, or
/// the first syntax error in the body) is always the one-thread scan's.
pub(crate) fn value_end_indexed_split(
    src: &[u8],
    start: usize,
    split_from: usize,
) -> Result<(usize, Tape), Syntax> {
    let guess = (foldwire_core::par::threads_for(src.len(), split_from) > 1)
        .then(|| item_start_after(src, src.len() / 2))
        .flatten();
    let Some(at) = guess else {
        return value_end_indexed(src, start);
    };
    split_scan(src, start, at).0
}

/// [`value_end_indexed_split`] with the guess `at` given; also says whether the front scan
/// took the other thread's work.
fn split_scan(src: &[u8], start: usize, at: usize) -> (Result<(usize, Tape), Syntax>, bool) {
    std::thread::scope(|scope| {
        let mut join = Some(Join {
            at,
            src,
            other: scope.spawn(move || items_from(src, at)),
        });
        let mut tape = Tape::for_body(src.len());
        let end = scan_value_joining(src, start, string_end, Some(&mut tape), 0, &mut join);
        let joined = join.is_none();
        if let Some(unused) = join {
            unused.discard();
        }
        (end.map(|end| (end, tape)), joined)
    })
}

/// The first place at or after `from` that looks like the start of a message in an array
/// of messages: `{"role"` right after `},` (whitespace allowed around the comma). Inside a
/// JSON string a quote is escaped, so this is always an object inside an array (perhaps a
/// nested one); whether it is a message is for the front scan to confirm.
fn item_start_after(src: &[u8], from: usize) -> Option<usize> {
    let tail = src.get(from..)?;
    memchr::memmem::find_iter(tail, br#"{"role""#)
        .map(|i| from + i)
        .find(|&at| {
            let before = src.get(..at).unwrap_or_default().trim_ascii_end();
            match before.split_last() {
                Some((b',', rest)) => rest.trim_ascii_end().last() == Some(&b'}'),
                _ => false,
            }
        })
}

/// Validates and indexes the item at `at` of an array at [`ITEM_DEPTH`] and every item
/// after it, as a front-to-back scan would; returns their index and where the array's
/// closing bracket sits.
fn items_from(src: &[u8], at: usize) -> Result<(Tape, usize), Syntax> {
    let mut tape = Tape::for_body(src.len().saturating_sub(at));
    let mut pos = at;
    loop {
        let end = scan_value(src, pos, string_end, Some(&mut tape), ITEM_DEPTH)?;
        pos = skip_ws(src, end);
        match src.get(pos) {
            Some(b',') => pos = skip_ws(src, pos + 1),
            Some(b']') => return Ok((tape, pos)),
            _ => return syntax(pos, "',' or ']'"),
        }
    }
}

/// Validates and indexes the rest of an array from `after`, the end of one of its items at
/// `depth` in the body: the remaining items (their spans, indexed as [`value_end_indexed`]
/// would have indexed them) and the array's end. For a body whose start is known valid.
pub(crate) fn array_rest_indexed(
    src: &[u8],
    after: usize,
    depth: usize,
) -> Result<(Vec<Range<usize>>, usize, Tape), Syntax> {
    let mut tape = Tape::for_body(src.len().saturating_sub(after));
    let mut items = Vec::new();
    let mut pos = skip_ws(src, after);
    loop {
        match src.get(pos) {
            Some(b']') => return Ok((items, pos + 1, tape)),
            Some(b',') => {
                let start = skip_ws(src, pos + 1);
                let end = scan_value(src, start, string_end, Some(&mut tape), depth)?;
                items.push(start..end);
                pos = skip_ws(src, end);
            }
            _ => return syntax(pos, "',' or ']'"),
        }
    }
}

/// Validates the rest of an object from `after`, the end of one of its values, and returns
/// the object's end.
pub(crate) fn object_rest(src: &[u8], after: usize) -> Result<usize, Syntax> {
    let mut pos = skip_ws(src, after);
    loop {
        match src.get(pos) {
            Some(b'}') => return Ok(pos + 1),
            Some(b',') => {
                let value = key_and_colon(src, skip_ws(src, pos + 1), string_end, None, 0)?;
                pos = skip_ws(src, value_end(src, value)?);
            }
            _ => return syntax(pos, "',' or '}'"),
        }
    }
}

/// How strictly strings are scanned.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Mode {
    /// Check every escape: for bytes nobody has checked yet.
    Validate,
    /// Only find the closing quote: for spans inside a body already validated.
    Trusted,
}

fn value_end_mode(src: &[u8], start: usize, mode: Mode) -> Result<usize, Syntax> {
    match mode {
        Mode::Validate => scan_value(src, start, string_end, None, 0),
        Mode::Trusted => scan_value(src, start, string_end_trusted, None, 0),
    }
}

type StringEnd = fn(&[u8], usize) -> Result<usize, Syntax>;

/// The iterative scanner behind every mode; indexes values into `tape` when given one.
/// `depth` is how deep the value at `start` sits in the body (the index stops at
/// [`INDEX_DEPTH`] counted from the body's root).
fn scan_value(
    src: &[u8],
    start: usize,
    string_end: StringEnd,
    tape: Option<&mut Tape>,
    depth: usize,
) -> Result<usize, Syntax> {
    scan_value_joining(src, start, string_end, tape, depth, &mut None)
}

/// [`scan_value`], taking over the rest of an array from another scan at `join.at` (see
/// [`Join`]).
fn scan_value_joining(
    src: &[u8],
    start: usize,
    string_end: StringEnd,
    mut tape: Option<&mut Tape>,
    depth: usize,
    join: &mut Option<Join<'_>>,
) -> Result<usize, Syntax> {
    // Open containers, innermost last, with their index slot (when indexed).
    let mut stack: Vec<(u8, Option<usize>)> = Vec::new();
    let mut pos = start;
    'value: loop {
        // Parse one value at `pos`, at depth `stack.len()`.
        let joins = join.as_ref().is_some_and(|j| {
            pos == j.at
                && depth + stack.len() == ITEM_DEPTH
                && matches!(stack.last(), Some((b'[', _)))
        });
        if let Some(j) = join.take_if(|_| joins) {
            // The other scan validated and indexed this item and the rest of its array
            // exactly as this loop would have; its end is the array's closing bracket.
            let (rest, close) = j.rest()?;
            if let Some(t) = tape.as_deref_mut() {
                t.append(rest);
            }
            pos = close;
        } else {
            let indexed = tape
                .as_deref_mut()
                .filter(|_| depth + stack.len() <= INDEX_DEPTH);
            let at = pos;
            match src.get(pos) {
                Some(b'"') => pos = string_end(src, pos)?,
                Some(&open @ (b'{' | b'[')) => {
                    let close = if open == b'{' { b'}' } else { b']' };
                    pos = skip_ws(src, pos + 1);
                    if src.get(pos) != Some(&close) {
                        let slot = indexed.map(|t| t.open(at));
                        stack.push((open, slot));
                        if open == b'{' {
                            pos = key_and_colon(
                                src,
                                pos,
                                string_end,
                                tape.as_deref_mut(),
                                depth + stack.len(),
                            )?;
                        }
                        continue 'value;
                    }
                    pos += 1;
                }
                Some(b't') => pos = literal_end(src, pos, b"true")?,
                Some(b'f') => pos = literal_end(src, pos, b"false")?,
                Some(b'n') => pos = literal_end(src, pos, b"null")?,
                Some(b'-' | b'0'..=b'9') => pos = number_end(src, pos)?,
                _ => return syntax(pos, "a JSON value"),
            }
            if let Some(t) = tape
                .as_deref_mut()
                .filter(|_| depth + stack.len() <= INDEX_DEPTH)
            {
                t.leaf(at..pos);
            }
        }
        // After a value: close containers or move to the next element.
        loop {
            let Some(&(open, slot)) = stack.last() else {
                return Ok(pos);
            };
            pos = skip_ws(src, pos);
            match (open, src.get(pos)) {
                (b'{', Some(b',')) => {
                    pos = key_and_colon(
                        src,
                        skip_ws(src, pos + 1),
                        string_end,
                        tape.as_deref_mut(),
                        depth + stack.len(),
                    )?;
                    continue 'value;
                }
                (b'[', Some(b',')) => {
                    pos = skip_ws(src, pos + 1);
                    continue 'value;
                }
                (b'{', Some(b'}')) | (b'[', Some(b']')) => {
                    stack.pop();
                    pos += 1;
                    if let (Some(t), Some(slot)) = (tape.as_deref_mut(), slot) {
                        t.close(slot, pos);
                    }
                }
                (b'{', _) => return syntax(pos, "',' or '}'"),
                _ => return syntax(pos, "',' or ']'"),
            }
        }
    }
}

/// Parses `"key" :` at `pos` and returns the start of the value after it; indexes the key
/// when its depth is within [`INDEX_DEPTH`].
fn key_and_colon(
    src: &[u8],
    pos: usize,
    string_end: StringEnd,
    tape: Option<&mut Tape>,
    depth: usize,
) -> Result<usize, Syntax> {
    if src.get(pos) != Some(&b'"') {
        return syntax(pos, "an object key");
    }
    let key_end = string_end(src, pos)?;
    if let Some(t) = tape.filter(|_| depth <= INDEX_DEPTH) {
        t.leaf(pos..key_end);
    }
    let after_key = skip_ws(src, key_end);
    if src.get(after_key) != Some(&b':') {
        return syntax(after_key, "':' after an object key");
    }
    Ok(skip_ws(src, after_key + 1))
}

/// One field of a scanned object.
#[derive(Debug, Clone)]
pub(crate) struct Field<'a> {
    /// The decoded key.
    pub key: Cow<'a, str>,
    /// Where the key's opening quote sits (a field is `src[key_start..value.end]`).
    pub key_start: usize,
    /// The value's span.
    pub value: Range<usize>,
}

/// The JSON type a value starts with, in words.
pub(crate) fn kind_name(src: &[u8], span: &Range<usize>) -> &'static str {
    match src.get(span.start) {
        Some(b'"') => "a string",
        Some(b'{') => "an object",
        Some(b'[') => "an array",
        Some(b't' | b'f') => "a boolean",
        Some(b'n') => "null",
        Some(_) => "a number",
        None => "nothing",
    }
}

/// What a key that repeats an earlier one of its object was expected to be.
const REPEATED_KEY: &str = concat!(
    "each key once in an object (this one repeats an earlier key, ",
    "and JSON readers differ on which of the two counts)"
);

/// Adds the field `key` to `fields`, unless that key is one of theirs: JSON readers disagree on
/// which of two equal keys counts (the providers' mostly take the last), so an object that
/// repeats one is refused rather than read one way here and another way upstream. An
/// object holds a handful of keys, and keys of different lengths differ at the first test.
fn push_field<'a>(
    fields: &mut Vec<Field<'a>>,
    key: Cow<'a, str>,
    key_start: usize,
    value: Range<usize>,
) -> Result<(), Syntax> {
    if fields.iter().any(|f| f.key == key) {
        return syntax(key_start, REPEATED_KEY);
    }
    fields.push(Field {
        key,
        key_start,
        value,
    });
    Ok(())
}

/// The fields of the object value at `span` (which must start with `{`).
pub(crate) fn object_fields<'a>(
    src: &'a str,
    span: &Range<usize>,
) -> Result<Vec<Field<'a>>, Syntax> {
    object_fields_mode(src, span, Mode::Validate)
}

/// The fields of the object at `span` from the index alone, or `None` when its children
/// are not indexed (the caller then scans the bytes).
pub(crate) fn indexed_object_fields<'a>(
    tape: &Cursor<'_>,
    src: &'a str,
    span: &Range<usize>,
) -> Option<Result<Vec<Field<'a>>, Syntax>> {
    let mut children = tape.child_spans(span)?;
    let mut fields = Vec::with_capacity(8);
    while let Some(key) = children.next() {
        let Some(value) = children.next() else {
            return Some(syntax(key.end, "a value after an object key"));
        };
        if let Err(e) = push_field(&mut fields, unescape_key(src, &key), key.start, value) {
            return Some(Err(e));
        }
    }
    Some(Ok(fields))
}

/// [`object_fields`] with a chosen string-scanning mode.
pub(crate) fn object_fields_mode<'a>(
    src: &'a str,
    span: &Range<usize>,
    mode: Mode,
) -> Result<Vec<Field<'a>>, Syntax> {
    let string_end: StringEnd = match mode {
        Mode::Validate => string_end,
        Mode::Trusted => string_end_trusted,
    };
    let bytes = src.as_bytes();
    if bytes.get(span.start) != Some(&b'{') {
        return syntax(span.start, "an object");
    }
    let mut fields = Vec::new();
    let mut pos = skip_ws(bytes, span.start + 1);
    if bytes.get(pos) == Some(&b'}') {
        return Ok(fields);
    }
    loop {
        let key_start = pos;
        let key_end = string_end(bytes, pos)?;
        let key = unescape_key(src, &(key_start..key_end));
        let colon = skip_ws(bytes, key_end);
        if bytes.get(colon) != Some(&b':') {
            return syntax(colon, "':' after an object key");
        }
        let vstart = skip_ws(bytes, colon + 1);
        let vend = value_end_mode(bytes, vstart, mode)?;
        push_field(&mut fields, key, key_start, vstart..vend)?;
        pos = skip_ws(bytes, vend);
        match bytes.get(pos) {
            Some(b',') => pos = skip_ws(bytes, pos + 1),
            Some(b'}') => return Ok(fields),
            _ => return syntax(pos, "',' or '}'"),
        }
    }
}

/// The fields of the top-level object starting at `start` in a body that was already
/// validated, and the object's end, without scanning the value at `known` again: the
/// messages array of a decoded body is where almost all of its bytes are, and its span is
/// known, so reading the frame costs the frame's bytes only.
///
/// It reads bytes, checking only each key is UTF-8: a decoded body was checked whole when it
/// was decoded, and the stages that read its frame again (the tool loop, an encode with
/// overrides) would otherwise check the whole body, history and all, once each per turn.
pub(crate) fn frame_fields<'a>(
    bytes: &'a [u8],
    start: usize,
    known: &Range<usize>,
) -> Result<(Vec<Field<'a>>, usize), Syntax> {
    if bytes.get(start) != Some(&b'{') {
        return syntax(start, "an object");
    }
    let mut fields = Vec::new();
    let mut pos = skip_ws(bytes, start + 1);
    if bytes.get(pos) == Some(&b'}') {
        return Ok((fields, pos + 1));
    }
    loop {
        let key_start = pos;
        let key_end = string_end_trusted(bytes, pos)?;
        let Some(literal) = bytes
            .get(key_start..key_end)
            .and_then(|k| std::str::from_utf8(k).ok())
        else {
            return syntax(key_start, "a UTF-8 object key");
        };
        let key = unescape_key(literal, &(0..literal.len()));
        let colon = skip_ws(bytes, key_end);
        if bytes.get(colon) != Some(&b':') {
            return syntax(colon, "':' after an object key");
        }
        let vstart = skip_ws(bytes, colon + 1);
        let vend = if vstart == known.start && known.end > vstart {
            known.end
        } else {
            value_end_mode(bytes, vstart, Mode::Trusted)?
        };
        push_field(&mut fields, key, key_start, vstart..vend)?;
        pos = skip_ws(bytes, vend);
        match bytes.get(pos) {
            Some(b',') => pos = skip_ws(bytes, pos + 1),
            Some(b'}') => return Ok((fields, pos + 1)),
            _ => return syntax(pos, "',' or '}'"),
        }
    }
}

/// The element spans of the array value at `span` (which must start with `[`).
pub(crate) fn array_items(src: &[u8], span: &Range<usize>) -> Result<Vec<Range<usize>>, Syntax> {
    array_items_mode(src, span, Mode::Validate)
}

/// [`array_items`] with a chosen string-scanning mode.
pub(crate) fn array_items_mode(
    src: &[u8],
    span: &Range<usize>,
    mode: Mode,
) -> Result<Vec<Range<usize>>, Syntax> {
    if src.get(span.start) != Some(&b'[') {
        return syntax(span.start, "an array");
    }
    let mut items = Vec::new();
    let mut pos = skip_ws(src, span.start + 1);
    if src.get(pos) == Some(&b']') {
        return Ok(items);
    }
    loop {
        let end = value_end_mode(src, pos, mode)?;
        items.push(pos..end);
        pos = skip_ws(src, end);
        match src.get(pos) {
            Some(b',') => pos = skip_ws(src, pos + 1),
            Some(b']') => return Ok(items),
            _ => return syntax(pos, "',' or ']'"),
        }
    }
}

/// [`unescape`] for object keys: short, and almost never escaped, so a plain byte loop finds
/// that out cheaper than a vectorized search's setup.
pub(crate) fn unescape_key<'a>(src: &'a str, span: &Range<usize>) -> Cow<'a, str> {
    let inner = src
        .get(span.start + 1..span.end.saturating_sub(1))
        .unwrap_or_default();
    if inner.bytes().any(|b| b == b'\\') {
        unescape(src, span)
    } else {
        Cow::Borrowed(inner)
    }
}

/// Decodes the string literal at `span` (quotes included). Borrowed when it has no escapes.
/// Lone surrogates become U+FFFD rather than an error: the bytes are kept verbatim anyway,
/// the decoded text is only for previews and estimates.
pub(crate) fn unescape<'a>(src: &'a str, span: &Range<usize>) -> Cow<'a, str> {
    let inner = src
        .get(span.start + 1..span.end.saturating_sub(1))
        .unwrap_or_default();
    let bytes = inner.as_bytes();
    let Some(first) = memchr::memchr(b'\\', bytes) else {
        return Cow::Borrowed(inner);
    };
    let mut out = String::with_capacity(inner.len());
    let mut pos = 0;
    let mut next = Some(first);
    while let Some(bs) = next {
        // Escapes are ASCII, so every cut below falls on a char boundary.
        out.push_str(inner.get(pos..bs).unwrap_or_default());
        pos = bs + 2;
        match bytes.get(bs + 1) {
            Some(b'n') => out.push('\n'),
            Some(b't') => out.push('\t'),
            Some(b'r') => out.push('\r'),
            Some(b'b') => out.push('\u{8}'),
            Some(b'f') => out.push('\u{c}'),
            Some(b'u') => {
                let (ch, used) = unicode_escape(inner, bs);
                out.push(ch);
                pos = bs + used;
            }
            Some(&c) if c.is_ascii() => out.push(char::from(c)),
            // Not a valid escape (only in unvalidated text): keep what follows as is.
            _ => pos = bs + 1,
        }
        next = bytes
            .get(pos..)
            .and_then(|rest| memchr::memchr(b'\\', rest))
            .map(|o| pos + o);
    }
    out.push_str(inner.get(pos..).unwrap_or_default());
    Cow::Owned(out)
}

/// Decodes the `\\uXXXX` escape at `bs` (and a following low surrogate); returns the char and
/// how many bytes it used. Lone or broken surrogates become U+FFFD.
fn unicode_escape(inner: &str, bs: usize) -> (char, usize) {
    match hex4(inner, bs + 2) {
        Some(hi @ 0xD800..=0xDBFF) => {
            let low = if inner.get(bs + 6..bs + 8) == Some("\\u") {
                hex4(inner, bs + 8)
            } else {
                None
            };
            match low {
                Some(lo @ 0xDC00..=0xDFFF) => (
                    char::from_u32(0x10000 + ((hi - 0xD800) << 10) + (lo - 0xDC00))
                        .unwrap_or('\u{FFFD}'),
                    12,
                ),
                _ => ('\u{FFFD}', 6),
            }
        }
        Some(u) => (char::from_u32(u).unwrap_or('\u{FFFD}'), 6),
        None => ('\u{FFFD}', 2),
    }
}

fn hex4(s: &str, at: usize) -> Option<u32> {
    u32::from_str_radix(s.get(at..at + 4)?, 16).ok()
}

/// The decoded string at `span`, or `None` when the value is not a string.
pub(crate) fn string_value<'a>(src: &'a str, span: &Range<usize>) -> Option<Cow<'a, str>> {
    (src.as_bytes().get(span.start) == Some(&b'"')).then(|| unescape(src, span))
}

/// The field named `key`, if present.
pub(crate) fn field<'f, 'a>(fields: &'f [Field<'a>], key: &str) -> Option<&'f Field<'a>> {
    fields.iter().find(|f| f.key == key)
}

/// The JSON path (`messages[1].content`) of the value being read at byte `at`, found by
/// walking the (valid) prefix before it; used to place syntax errors.
pub(crate) fn path_at(src: &str, at: usize) -> String {
    enum Frame<'a> {
        Obj {
            key: Option<Cow<'a, str>>,
            expecting_key: bool,
        },
        Arr {
            index: usize,
        },
    }
    let bytes = src.as_bytes();
    let mut stack: Vec<Frame<'_>> = Vec::new();
    let mut pos = skip_ws(bytes, 0);
    while pos < at {
        match bytes.get(pos) {
            Some(b'{') => {
                stack.push(Frame::Obj {
                    key: None,
                    expecting_key: true,
                });
                pos += 1;
            }
            Some(b'[') => {
                stack.push(Frame::Arr { index: 0 });
                pos += 1;
            }
            Some(b'}' | b']') => {
                stack.pop();
                pos += 1;
            }
            Some(b',') => {
                match stack.last_mut() {
                    Some(Frame::Arr { index }) => *index += 1,
                    Some(Frame::Obj { expecting_key, .. }) => *expecting_key = true,
                    None => {}
                }
                pos += 1;
            }
            Some(b':') => {
                if let Some(Frame::Obj { expecting_key, .. }) = stack.last_mut() {
                    *expecting_key = false;
                }
                pos += 1;
            }
            Some(b'"') => {
                let Ok(end) = string_end(bytes, pos) else {
                    break;
                };
                if let Some(Frame::Obj {
                    key,
                    expecting_key: true,
                }) = stack.last_mut()
                {
                    *key = Some(unescape(src, &(pos..end)));
                }
                pos = end;
            }
            Some(_) => pos += 1,
            None => break,
        }
        pos = skip_ws(bytes, pos);
    }
    let mut out = String::new();
    for frame in &stack {
        match frame {
            Frame::Obj {
                key: Some(k),
                expecting_key: false,
            } => {
                if !out.is_empty() {
                    out.push('.');
                }
                out.push_str(k);
            }
            Frame::Obj { .. } => {}
            Frame::Arr { index } => {
                out.push('[');
                out.push_str(&index.to_string());
                out.push(']');
            }
        }
    }
    if out.is_empty() {
        out.push_str("body");
    }
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// The frame is read from bytes: the messages array at the known span is skipped, not
    /// checked (bytes there that are not UTF-8 change nothing), while each key is checked.
    #[test]
    fn frame_fields_read_the_frame_alone_and_check_each_key() {
        let mut body = br#"{"model":"m","messages":["#.to_vec();
        let array_start = body.len() - 1;
        body.extend_from_slice(b"\"\xff\xfe\"");
        body.extend_from_slice(br#"],"max_tokens":5,"s\u00e9":1}"#);
        let array_end = body.iter().rposition(|&b| b == b']').unwrap() + 1;
        let (fields, end) = frame_fields(&body, 0, &(array_start..array_end)).unwrap();
        assert_eq!(end, body.len());
        let keys: Vec<&str> = fields.iter().map(|f| f.key.as_ref()).collect();
        assert_eq!(keys, ["model", "messages", "max_tokens", "s\u{e9}"]);
        assert_eq!(fields[1].value, array_start..array_end);
        assert_eq!(&body[fields[2].value.clone()], b"5");

        let bad_key = b"{\"a\xff\":1}";
        let err = frame_fields(bad_key, 0, &(0..0)).unwrap_err();
        assert_eq!(err.at, 1);
    }

    #[test]
    fn value_end_spans_nested_values_and_rejects_garbage() {
        let s = br#"{"a":[1,-2.5e3,"x\"y",{"b":null}],"c":true} tail"#;
        assert_eq!(value_end(s, 0), Ok(43));
        assert!(value_end(b"{\"a\" 1}", 0).is_err());
        assert!(value_end(b"[1,]", 0).is_err());
        assert!(value_end(b"\"abc", 0).is_err());
        assert_eq!(value_end(b"12x", 0), Ok(2));
        assert!(value_end(b"-", 0).is_err());
        assert!(value_end(b"\"\\q\"", 0).is_err());
        // Control characters only escaped; DEL and everything above may stand raw.
        assert_eq!(value_end(b"\"a\\nb\\tc\x7f\"", 0), Ok(10));
        for raw in [b'\n', b'\t', b'\r', 0x00, 0x1f] {
            let s = [b'"', b'a', raw, b'b', b'"'];
            assert_eq!(
                value_end(&s, 0),
                Err(Syntax {
                    at: 2,
                    expected: CONTROL_IN_STRING
                }),
                "{raw:#04x}"
            );
        }
        // JSON numbers have no leading zeros: `0512` is refused where the second digit is.
        assert_eq!(
            value_end(b"[0512]", 0),
            Err(Syntax {
                at: 2,
                expected: LEADING_ZERO
            })
        );
        assert_eq!(value_end(b"-0.5e00", 0), Ok(7));
        let deep = "[".repeat(100_000);
        assert!(value_end(deep.as_bytes(), 0).is_err());
    }

    #[test]
    fn index_agrees_with_scanning() {
        let long = "x".repeat(100);
        let src = format!(
            r#"{{"a":[1,{{"b":"{long}"}},[]],"c":"{long}","d":{{}},"e":[[[[[[[[1]]]]]]]]}}"#
        );
        let (end, tape) = value_end_indexed(src.as_bytes(), 0).unwrap();
        let tape = tape.cursor();
        assert_eq!(end, src.len());
        let top = indexed_object_fields(&tape, &src, &(0..end))
            .unwrap()
            .unwrap();
        let plain = object_fields(&src, &(0..end)).unwrap();
        assert_eq!(top.len(), 4);
        for (a, b) in top.iter().zip(&plain) {
            assert_eq!(
                (&a.key, a.key_start, &a.value),
                (&b.key, b.key_start, &b.value)
            );
        }
        let items = tape.array_items(&top[0].value).unwrap();
        assert_eq!(items, array_items(src.as_bytes(), &top[0].value).unwrap());
        // Strings, empty containers and containers at the depth limit have no indexed children.
        assert!(tape.array_items(&top[1].value).is_none());
        assert!(indexed_object_fields(&tape, &src, &top[2].value).is_none());
        let mut span = top[3].value.clone();
        for depth in 1..INDEX_DEPTH {
            let inner = tape.array_items(&span).unwrap();
            assert_eq!(
                inner,
                array_items(src.as_bytes(), &span).unwrap(),
                "depth {depth}"
            );
            span = inner[0].clone();
        }
        assert!(tape.array_items(&span).is_none());
    }

    proptest::proptest! {
        #[test]
        fn fast_paths_agree_with_serde(text in proptest::prelude::any::<String>(), pad in "[a-z\\\\\"]{0,6}") {
            let s = text + &pad;
            let lit = serde_json::to_string(&s).unwrap();
            let span = 0..lit.len();
            proptest::prop_assert_eq!(unescape(&lit, &span), s.as_str());
            proptest::prop_assert_eq!(string_end(lit.as_bytes(), 0), Ok(lit.len()));
            proptest::prop_assert_eq!(string_end_trusted(lit.as_bytes(), 0), Ok(lit.len()));
            let escaped_all = lit.replace('z', "\\u007a");
            proptest::prop_assert_eq!(unescape(&escaped_all, &(0..escaped_all.len())), s.as_str());
        }
    }

    proptest::proptest! {
        #[test]
        fn strings_are_valid_exactly_when_serde_says(
            body in proptest::collection::vec(
                proptest::prop_oneof![
                    0u8..0x80,
                    proptest::strategy::Just(b'\\'),
                    proptest::sample::select(b"ntr\"/u0a".to_vec()),
                ],
                0..80,
            )
        ) {
            let mut lit = vec![b'"'];
            lit.extend(&body);
            lit.push(b'"');
            let ours = value_end(&lit, 0).is_ok_and(|end| end == lit.len());
            let serde = serde_json::from_slice::<serde_json::Value>(&lit).is_ok();
            proptest::prop_assert_eq!(ours, serde, "{:?}", String::from_utf8_lossy(&lit));
        }

        #[test]
        fn numbers_are_valid_exactly_when_serde_says(
            number in proptest::collection::vec(proptest::sample::select(b"-+.eE0019".to_vec()), 1..9)
        ) {
            // In an array, so bytes a number leaves unread are refused as they would be in a
            // body; serde reads it as syntax only (`IgnoredAny`), without range checks.
            let mut lit = b"[".to_vec();
            lit.extend(&number);
            lit.push(b']');
            let ours = value_end(&lit, 0).is_ok_and(|end| end == lit.len());
            let serde = serde_json::from_slice::<serde::de::IgnoredAny>(&lit).is_ok();
            proptest::prop_assert_eq!(ours, serde, "{:?}", String::from_utf8_lossy(&lit));
        }

        #[test]
        fn the_first_control_character_is_found_in_any_block(
            bytes in proptest::collection::vec(0x18u8..0x80, 0..200)
        ) {
            let naive = bytes.iter().position(|&b| b < 0x20);
            proptest::prop_assert_eq!(first_control(&bytes), naive);
        }
    }

    /// Walks every container of `span` by scanning and checks the index agrees wherever it
    /// answers; returns how many containers the index answered for.
    fn check_index(src: &str, tape: &Cursor<'_>, span: &Range<usize>) -> usize {
        let mut answered = 0;
        let children: Vec<Range<usize>> = match src.as_bytes().get(span.start) {
            Some(b'{') => {
                let scanned = object_fields(src, span).unwrap();
                if let Some(indexed) = indexed_object_fields(tape, src, span) {
                    let indexed = indexed.unwrap();
                    assert_eq!(indexed.len(), scanned.len());
                    for (a, b) in indexed.iter().zip(&scanned) {
                        assert_eq!(
                            (&a.key, a.key_start, &a.value),
                            (&b.key, b.key_start, &b.value)
                        );
                    }
                    answered += 1;
                }
                scanned.into_iter().map(|f| f.value).collect()
            }
            Some(b'[') => {
                let scanned = array_items(src.as_bytes(), span).unwrap();
                if let Some(indexed) = tape.array_items(span) {
                    assert_eq!(indexed, scanned);
                    answered += 1;
                }
                scanned
            }
            _ => return 0,
        };
        answered
            + children
                .iter()
                .map(|c| check_index(src, tape, c))
                .sum::<usize>()
    }

    fn nested_json() -> impl proptest::strategy::Strategy<Value = serde_json::Value> {
        use proptest::prelude::*;
        let leaf = prop_oneof![
            Just(serde_json::Value::Null),
            any::<i32>().prop_map(serde_json::Value::from),
            "[a-z\\\\\"\n]{0,6}".prop_map(serde_json::Value::String),
        ];
        leaf.prop_recursive(10, 64, 4, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..4).prop_map(serde_json::Value::Array),
                proptest::collection::btree_map("[a-z\"]{1,3}", inner, 0..4)
                    .prop_map(|m| serde_json::Value::Object(m.into_iter().collect())),
            ]
        })
    }

    proptest::proptest! {
        #[test]
        fn index_agrees_with_scanning_at_every_depth(v in nested_json(), pretty in proptest::prelude::any::<bool>()) {
            let src = if pretty { serde_json::to_string_pretty(&v) } else { serde_json::to_string(&v) }.unwrap();
            let (end, tape) = value_end_indexed(src.as_bytes(), 0).unwrap();
            proptest::prop_assert_eq!(end, src.len());
            let answered = check_index(&src, &tape.cursor(), &(0..end));
            let empty_root = matches!(&v, serde_json::Value::Array(a) if a.is_empty())
                || matches!(&v, serde_json::Value::Object(o) if o.is_empty());
            proptest::prop_assert!(answered > 0 || empty_root || !(v.is_array() || v.is_object()));
        }
    }

    #[test]
    fn path_at_places_offsets() {
        let src = r#"{"messages":[{"role":"user","content":[1,{"type":"x"},]}]}"#;
        let at = src.find(",]").unwrap() + 1;
        assert_eq!(path_at(src, at), "messages[0].content[2]");
        assert_eq!(path_at(src, 0), "body");
    }

    #[test]
    fn unescape_handles_escapes_and_surrogates() {
        let src = r#""a\n\u00e9\ud83d\ude00\ud800x\\""#;
        assert_eq!(unescape(src, &(0..src.len())), "a\né😀\u{FFFD}x\\");
        let plain = r#""plain""#;
        assert!(matches!(
            unescape(plain, &(0..plain.len())),
            Cow::Borrowed("plain")
        ));
    }

    #[test]
    fn object_fields_keep_key_positions() {
        let src = r#"{ "k" : [1] , "é\"" : {} }"#;
        let f = object_fields(src, &(0..src.len())).unwrap();
        assert_eq!(f.len(), 2);
        assert_eq!(f[0].key, "k");
        assert_eq!(&src[f[0].key_start..f[0].value.end], r#""k" : [1]"#);
        assert_eq!(f[1].key, "é\"");
    }

    #[test]
    fn a_repeated_key_is_refused_by_every_reader_of_fields() {
        let src = r#"{"a":1,"b":{"a":2},"\u0061":3}"#;
        let repeat = Err(Syntax {
            at: src.rfind(r#""\u0061""#).unwrap(),
            expected: REPEATED_KEY,
        });
        let span = 0..src.len();
        assert_eq!(object_fields(src, &span).map(|f| f.len()), repeat);
        let (_, tape) = value_end_indexed(src.as_bytes(), 0).unwrap();
        let indexed = indexed_object_fields(&tape.cursor(), src, &span).unwrap();
        assert_eq!(indexed.map(|f| f.len()), repeat);
        let framed = frame_fields(src.as_bytes(), 0, &(0..0)).map(|(f, _)| f.len());
        assert_eq!(framed, repeat);
        // `a` inside `b` is another object's.
        let once = r#"{"a":1,"b":{"a":2}}"#;
        assert_eq!(object_fields(once, &(0..once.len())).unwrap().len(), 2);
    }

    /// A messages body whose content holds everything a guess could land on: nested
    /// arrays of objects, a tool input with a `{"role"` object of its own after `},`,
    /// escaped quotes spelling `},{"role"` inside a string, and whitespace between items.
    fn tricky_body() -> String {
        let mut items = vec![r#"{"role":"user","content":"start"}"#.to_owned()];
        for i in 0..6 {
            items.push(format!(
                r#"{{"role":"assistant","content":[{{"type":"text","text":"step {i}"}},{{"type":"tool_use","id":"t{i}","name":"x","input":{{"list":[{{"a":1}},{{"role":"nested"}}]}}}}]}}"#
            ));
            items.push(format!(
                r#"{{"role":"user","content":[{{"type":"tool_result","tool_use_id":"t{i}","content":"out \"}},{{\"role\" {i}"}}]}}"#
            ));
        }
        format!(
            r#"{{"model":"m","messages":[{}],"tools":[{{"name":"x"}}],"stream":false}}"#,
            items.join(",\n  ")
        )
    }

    /// Whatever the guess, the split scan gives what the one-thread scan gives: the end
    /// and the index of a valid body, or the same first error of a broken one.
    #[test]
    fn a_split_scan_equals_the_one_thread_scan_for_every_guess() {
        let body = tricky_body();
        let valid = body.as_bytes();
        let mut broken_late = valid.to_vec();
        let late = body.rfind("out").unwrap();
        broken_late[late - 1] = b'x'; // the tool result's content: no longer a string
        let mut broken_early = valid.to_vec();
        broken_early[body.find("step 0").unwrap() - 2] = b'}';
        let truncated = &valid[..valid.len() - 1];
        for (src, is_valid) in [
            (valid, true),
            (&broken_late[..], false),
            (&broken_early[..], false),
            (truncated, false),
        ] {
            let one = value_end_indexed(src, 0);
            let mut joins = 0;
            for at in 0..=src.len() {
                let (split, joined) = split_scan(src, 0, at);
                assert_eq!(split, one, "guess at {at}");
                joins += usize::from(joined);
            }
            // The front scan takes over at each item of the two top-level arrays: the 13
            // messages and the one tool.
            if is_valid {
                assert_eq!(joins, 14);
            }
        }
        assert!(value_end_indexed(&broken_late, 0).is_err());
        assert!(value_end_indexed(truncated, 0).is_err());
    }

    /// The guess is an object starting with `"role"` after `},` (whitespace allowed), never
    /// quoted text.
    #[test]
    fn the_guess_is_the_next_message_start() {
        let body = tricky_body();
        let src = body.as_bytes();
        let expected: Vec<usize> = body
            .match_indices(r#"{"role":"#)
            .map(|(at, _)| at)
            .filter(|&at| body[..at].trim_end().ends_with(','))
            .collect();
        // 12 messages after the first, and the 6 nested objects of the tool inputs.
        assert_eq!(expected.len(), 18);
        let mut from = 0;
        for &at in &expected {
            assert_eq!(item_start_after(src, from), Some(at), "from {from}");
            from = at + 1;
        }
        assert_eq!(item_start_after(src, from), None);
        // A split scan of a body past the threshold joins and equals the one-thread scan.
        let one = value_end_indexed(src, 0);
        assert_eq!(value_end_indexed_split(src, 0, 0), one);
        assert_eq!(value_end_indexed_split(src, 0, usize::MAX), one);
    }
}
