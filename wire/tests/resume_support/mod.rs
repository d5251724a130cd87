//! Checks for `decode_after`: an earlier body of the same session is made from a body by
//! cutting its history short, and decoding the body after it must give exactly what a fresh
//! decode gives.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, dead_code)]

use bytes::Bytes;
use foldwire_core::{Conversation, Wire};
use foldwire_wire::request::{decode, decode_after};

/// Where `part` (a slice of `whole`) starts in it.
pub fn offset(whole: &Bytes, part: &Bytes) -> usize {
    part.as_ptr() as usize - whole.as_ptr() as usize
}

/// `body` with its messages array cut after its first `keep` wire messages (the request the
/// client sent before the rest of its history existed); the body itself when its messages
/// are not an array (a Responses string `input`).
pub fn history_prefix(conv: &Conversation, keep: usize) -> Vec<u8> {
    let body = &conv.source;
    if body.get(conv.messages_span.start) != Some(&b'[') {
        return body.to_vec();
    }
    let cut = match keep.checked_sub(1).and_then(|i| conv.entries.get(i)) {
        Some(entry) => {
            let raw = entry.raw.as_ref().unwrap();
            offset(body, raw) + raw.len()
        }
        None => conv.messages_span.start + 1,
    };
    let mut out = body[..cut].to_vec();
    out.extend_from_slice(&body[conv.messages_span.end - 1..]);
    out
}

/// Decodes `body` after `prior` and checks the result against a fresh decode: the same
/// conversation (or the same error), every span a slice of `body`. Returns how many wire
/// messages were reused.
pub fn check_resume(wire: Wire, prior: &Conversation, body: &[u8]) -> usize {
    let body = Bytes::copy_from_slice(body);
    let fresh = decode(wire, body.clone());
    match (decode_after(wire, body.clone(), prior.clone()), fresh) {
        (Ok((conv, reused)), Ok(fresh)) => {
            assert_eq!(conv, fresh, "a resumed decode differs from a fresh one");
            assert_eq!(conv.source, body);
            for raw in conv.entries.iter().filter_map(|e| e.raw.as_ref()) {
                assert!(
                    offset(&body, raw) + raw.len() <= body.len(),
                    "an entry outside the body"
                );
            }
            for m in &conv.messages {
                assert!(
                    offset(&body, &m.raw) + m.raw.len() <= body.len(),
                    "a unit outside the body"
                );
            }
            reused
        }
        (Err(a), Err(b)) => {
            assert_eq!(a.to_string(), b.to_string());
            0
        }
        (a, b) => panic!(
            "resumed {:?} but fresh {:?}",
            a.map(|(_, n)| n).map_err(|e| e.to_string()),
            b.map(|_| ()).map_err(|e| e.to_string())
        ),
    }
}
