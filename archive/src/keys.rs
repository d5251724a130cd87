//! Key layout and validation at the archive boundary.
//!
//! Layout, relative to the store's root (or the S3 prefix):
//!
//! ```text
//! sessions/<session>/journal/<seq>.json  session state: journal entries (see `journal`)
//! sessions/<session>/state.json          session state of earlier builds (still read)
//! sessions/<session>/media/<sha256-hex>  archived payload bytes, content-addressed
//! sessions/<session>/packs/<sha256-hex>  the payloads of one batch back to back; the state's
//!                                        archive index holds each one's pack and range
//! sessions/<session>/refs/<ref>.json     pointer: the newest payload stored under a ref
//! ```
//!
//! [`foldwire_core::SessionId`] already restricts ids, but every key is validated again here
//! (defence in depth): a session segment, a content key or a ref that could leave its
//! session's prefix is refused with [`StoreError::InvalidKey`] before any I/O happens.

use object_store::path::Path;
use sha2::{Digest, Sha256};

use foldwire_core::{KnownDigests, Ref, SessionId, StoreError};

/// The longest session segment accepted (the same limit as `SessionId`).
pub const MAX_SESSION_SEGMENT: usize = foldwire_core::ids::MAX_SESSION_ID_LEN;

/// Length of a content key: a SHA-256 digest in hex.
pub const CONTENT_KEY_LEN: usize = 64;

fn refused(given: &str, why: impl Into<String>) -> StoreError {
    StoreError::InvalidKey {
        given: given.chars().take(80).collect(),
        why: why.into(),
    }
}

/// Checks that a raw session id is one safe path segment and returns it.
pub fn session_segment(raw: &str) -> Result<&str, StoreError> {
    if raw.is_empty() {
        return Err(refused(raw, "empty session id"));
    }
    if raw.len() > MAX_SESSION_SEGMENT {
        return Err(refused(
            raw,
            format!(
                "session id is {} bytes; the limit is {MAX_SESSION_SEGMENT}",
                raw.len()
            ),
        ));
    }
    if raw.starts_with('.') {
        return Err(refused(
            raw,
            "session id starts with '.' (no '..' or hidden segments)",
        ));
    }
    if let Some((at, bad)) = raw
        .char_indices()
        .find(|&(_, c)| !(c.is_ascii_alphanumeric() || c == '_' || c == '-' || c == '.'))
    {
        return Err(refused(
            raw,
            format!(
                "session id has {bad:?} at byte {at}; only letters, digits, '.', '_' and '-' are allowed"
            ),
        ));
    }
    Ok(raw)
}

/// Checks that a content key is exactly 64 lowercase hex digits and returns it.
pub fn content_key(raw: &str) -> Result<&str, StoreError> {
    if raw.len() != CONTENT_KEY_LEN
        || !raw
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    {
        return Err(refused(
            raw,
            "a content key is the SHA-256 of the bytes as 64 lowercase hex digits",
        ));
    }
    Ok(raw)
}

/// Parses a ref given as text (`m00042`), refusing anything else as an invalid key.
pub fn parse_ref(raw: &str) -> Result<Ref, StoreError> {
    raw.parse::<Ref>().map_err(|e| refused(raw, e.to_string()))
}

/// [`sha256_hex`] of every payload of a batch, in order. A large batch (a session's first
/// fold archives megabytes of originals) is hashed on the machine's cores, each taking a
/// contiguous share ([`foldwire_core::par`]).
pub fn sha256_hex_all(items: &[(String, bytes::Bytes)]) -> Vec<String> {
    sha256_hex_all_known(items, &KnownDigests::new())
}

/// [`sha256_hex_all`], taking the key `known` holds for a payload rather than hashing it
/// (only the payloads without one weigh in the split over the cores).
pub fn sha256_hex_all_known(items: &[(String, bytes::Bytes)], known: &KnownDigests) -> Vec<String> {
    foldwire_core::par::map(
        items,
        |(_, b)| if known.get(b).is_some() { 0 } else { b.len() },
        foldwire_core::par::BYTES_WORTH_A_THREAD,
        |(_, b)| match known.get(b) {
            Some(key) => key.to_owned(),
            None => sha256_hex(b),
        },
    )
}

/// SHA-256 of the bytes as lowercase hex (sha2 0.11 digests do not format as hex themselves).
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex_key(&Sha256::digest(bytes))
}

/// A digest as a content key: lowercase hex.
fn hex_key(digest: &[u8]) -> String {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(CONTENT_KEY_LEN);
    for byte in digest {
        out.push(char::from(HEX[usize::from(byte >> 4)]));
        out.push(char::from(HEX[usize::from(byte & 0x0f)]));
    }
    out
}

/// The content key of bytes written in pieces: what [`sha256_hex`] gives for them joined,
/// without ever holding them joined (a pack's manifest names thousands of payloads).
pub struct KeyWriter {
    hasher: Sha256,
    /// Pieces gathered until there are enough to be worth a call to the hasher.
    pending: Vec<u8>,
}

impl KeyWriter {
    /// Bytes gathered before they go to the hasher.
    const FLUSH_AT: usize = 16 << 10;

    /// Nothing written yet.
    pub fn new() -> Self {
        KeyWriter {
            hasher: Sha256::new(),
            pending: Vec::with_capacity(Self::FLUSH_AT + 256),
        }
    }

    /// Appends `bytes`.
    pub fn write(&mut self, bytes: &[u8]) {
        self.pending.extend_from_slice(bytes);
        if self.pending.len() >= Self::FLUSH_AT {
            self.hasher.update(&self.pending);
            self.pending.clear();
        }
    }

    /// The key of everything written.
    pub fn finish(mut self) -> String {
        self.hasher.update(&self.pending);
        hex_key(&self.hasher.finalize())
    }
}

impl Default for KeyWriter {
    fn default() -> Self {
        Self::new()
    }
}

/// Builds a store path from segments that were validated above. `Path::parse` refuses empty
/// segments, `.`/`..` and control characters, a second line of defence.
fn join(segments: &[&str]) -> Result<Path, StoreError> {
    let joined = segments.join("/");
    Path::parse(&joined).map_err(|e| refused(&joined, e.to_string()))
}

/// The prefix under which everything of one session lives.
pub fn session_prefix(session: &SessionId) -> Result<Path, StoreError> {
    join(&["sessions", session_segment(session.as_str())?])
}

/// Where a session's state document lives.
pub fn state_path(session: &SessionId) -> Result<Path, StoreError> {
    join(&["sessions", session_segment(session.as_str())?, "state.json"])
}

/// The folder of a session's state journal: `sessions/<session>/journal` (see
/// [`crate::journal`]).
pub fn journal_prefix(session: &SessionId) -> Result<Path, StoreError> {
    join(&["sessions", session_segment(session.as_str())?, "journal"])
}

/// The folder of a session's packs.
pub fn packs_prefix(session: &SessionId) -> Result<Path, StoreError> {
    join(&["sessions", session_segment(session.as_str())?, "packs"])
}

/// Where a pack (several payloads of one batch in one object) with this content key lives.
pub fn pack_path(session: &SessionId, key: &str) -> Result<Path, StoreError> {
    join(&[
        "sessions",
        session_segment(session.as_str())?,
        "packs",
        content_key(key)?,
    ])
}

/// Where a payload with this content key lives.
pub fn media_path(session: &SessionId, key: &str) -> Result<Path, StoreError> {
    join(&[
        "sessions",
        session_segment(session.as_str())?,
        "media",
        content_key(key)?,
    ])
}

/// The prefix of a session's ref pointers.
pub fn refs_prefix(session: &SessionId) -> Result<Path, StoreError> {
    join(&["sessions", session_segment(session.as_str())?, "refs"])
}

/// Where the pointer of a ref lives (refs format as `m` and digits only).
pub fn ref_pointer_path(session: &SessionId, r: Ref) -> Result<Path, StoreError> {
    let name = format!("{r}.json");
    join(&[
        "sessions",
        session_segment(session.as_str())?,
        "refs",
        &name,
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_written_in_pieces_is_the_key_of_the_pieces_joined() {
        // Pieces of every size from empty to past the flush point, so some cross it.
        let pieces: Vec<Vec<u8>> = (0..400usize)
            .map(|i| vec![u8::try_from(i % 251).unwrap_or(0); (i * 131) % 20_000])
            .collect();
        for count in [0, 1, 2, 7, 400] {
            let mut writer = KeyWriter::new();
            let mut joined = Vec::new();
            for piece in &pieces[..count] {
                writer.write(piece);
                joined.extend_from_slice(piece);
            }
            assert_eq!(writer.finish(), sha256_hex(&joined), "{count} pieces");
        }
    }

    #[test]
    fn a_large_batch_hashes_on_several_threads_to_the_same_keys_in_order() {
        let items: Vec<(String, bytes::Bytes)> = (0..300)
            .map(|i| {
                let body = vec![u8::try_from(i % 251).unwrap_or(0); 1000 + (i * 37) % 9000];
                ("t".to_owned(), bytes::Bytes::from(body))
            })
            .collect();
        assert!(items.iter().map(|(_, b)| b.len()).sum::<usize>() > 1 << 20);
        let one_by_one: Vec<String> = items.iter().map(|(_, b)| sha256_hex(b)).collect();
        assert_eq!(sha256_hex_all(&items), one_by_one);
        assert_eq!(sha256_hex_all(&items[..1]), one_by_one[..1].to_vec());
        assert!(sha256_hex_all(&[]).is_empty());
    }

    #[test]
    fn sha256_hex_matches_a_known_digest() {
        assert_eq!(
            sha256_hex(b"abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    #[test]
    fn hostile_session_segments_are_refused() {
        let long = "a".repeat(MAX_SESSION_SEGMENT + 1);
        for bad in [
            "",
            "..",
            "../other",
            "/etc/passwd",
            "a/b",
            "a\0b",
            ".hidden",
            "a\\b",
            &long,
        ] {
            assert!(
                matches!(session_segment(bad), Err(StoreError::InvalidKey { .. })),
                "{bad:?} accepted"
            );
        }
        assert_eq!(session_segment("agent-1.s_2").ok(), Some("agent-1.s_2"));
    }

    #[test]
    fn content_keys_must_be_digests() {
        let good = sha256_hex(b"x");
        assert!(content_key(&good).is_ok());
        for bad in [
            "../../etc/passwd".to_owned(),
            good.to_uppercase(),
            format!("{}/x", &good[..60]),
            format!("{}\0", &good[..63]),
            String::new(),
        ] {
            assert!(content_key(&bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn refs_parse_or_are_refused() {
        assert_eq!(parse_ref("m00007").ok(), Some(Ref(7)));
        for bad in ["m1/../x", "../m1", "m", "m-1", "b1"] {
            assert!(
                matches!(parse_ref(bad), Err(StoreError::InvalidKey { .. })),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn paths_stay_inside_the_session_prefix() {
        let s = SessionId::new("s1").unwrap();
        let key = sha256_hex(b"x");
        assert_eq!(
            media_path(&s, &key).unwrap().as_ref(),
            format!("sessions/s1/media/{key}")
        );
        assert_eq!(
            ref_pointer_path(&s, Ref(3)).unwrap().as_ref(),
            "sessions/s1/refs/m00003.json"
        );
        assert_eq!(state_path(&s).unwrap().as_ref(), "sessions/s1/state.json");
    }
}
