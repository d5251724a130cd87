//! Message identity: a content fingerprint that is the same whenever a client resends the
//! same unit, so refs and blocks stay attached to it across turns.

use foldhash::{HashMap, HashMapExt as _};

use foldwire_core::{Message, MessageId, Role, UnitSlot};
use xxhash_rust::xxh3::xxh3_64_with_seed;

/// How many hex digits an id has (64 bits: collisions within a session are negligible, ids
/// stay short in reports).
const ID_HEX_LEN: usize = 16;

/// The fingerprint of a unit: XXH3-64 over its role, the shape of its slot (a string content
/// and a reasoning field with equal text are different units) and its exact bytes.
///
/// Identity needs stability and few accidental collisions, not collision resistance (a
/// client can only confuse its own session), and hashing every unit of every request was
/// a quarter of decode time with SHA-256; XXH3 is an order of magnitude faster.
pub fn fingerprint(role: Role, slot: UnitSlot, raw: &[u8]) -> MessageId {
    MessageId(hex(&digest(role, slot, raw)))
}

fn digest(role: Role, slot: UnitSlot, raw: &[u8]) -> [u8; ID_HEX_LEN / 2] {
    let role_tag: u8 = match role {
        Role::System => b's',
        Role::User => b'u',
        Role::Assistant => b'a',
        Role::Tool => b't',
    };
    let slot_tag: u8 = match slot {
        UnitSlot::Whole => b'w',
        UnitSlot::StringContent => b's',
        UnitSlot::Content(_) => b'c',
        UnitSlot::ToolCalls(_) => b'k',
        UnitSlot::ReasoningField => b'r',
    };
    // Role and slot shape pick the seed, so equal bytes in different places hash apart; the
    // one-shot form skips the streaming hasher's buffering.
    let seed = u64::from(role_tag) << 8 | u64::from(slot_tag);
    xxh3_64_with_seed(raw, seed).to_be_bytes()
}

/// The digest an id was made from: its first [`ID_HEX_LEN`] hex digits.
fn digest_of_id(id: &MessageId) -> Option<[u8; ID_HEX_LEN / 2]> {
    content_digest(id).map(u64::to_be_bytes)
}

/// The fingerprint of a unit's role, slot shape and bytes that its id was made from, which
/// every copy of those bytes shares (`#2`, `#3` copies included): a key for facts that
/// depend on the bytes alone. `None` for ids the decoder did not make.
pub fn content_digest(id: &MessageId) -> Option<u64> {
    let bytes = id.0.as_bytes();
    match bytes.get(ID_HEX_LEN) {
        None | Some(b'#') => parse_hex(bytes.get(..ID_HEX_LEN)?),
        Some(_) => None,
    }
}

/// The value of lowercase hex `digits` (what [`hex`] writes), at most 16 of them; `None` for
/// anything else. Every stage that keys facts by digest reads the ids of the whole history
/// each turn, so this is a table lookup per digit without a branch on it: the digits of a
/// hash are letters or numbers at random, which a branch per digit mispredicts.
fn parse_hex(digits: &[u8]) -> Option<u64> {
    if digits.len() > 16 {
        return None;
    }
    let mut value = 0u64;
    let mut invalid = 0u8;
    for &c in digits {
        let nibble = HEX_VALUE[usize::from(c)];
        invalid |= nibble;
        value = value << 4 | u64::from(nibble & 0xf);
    }
    (invalid & 0xf0 == 0).then_some(value)
}

/// Each byte's value as a lowercase hex digit, `0xff` for bytes that are not one.
const HEX_VALUE: [u8; 256] = {
    let mut table = [0xff; 256];
    let mut i = 0;
    while i < 10 {
        table[b'0' as usize + i] = i as u8;
        i += 1;
    }
    let mut i = 0;
    while i < 6 {
        table[b'a' as usize + i] = 10 + i as u8;
        i += 1;
    }
    table
};

fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2 + 3);
    for b in bytes {
        out.push(char::from(DIGITS[usize::from(b >> 4)]));
        out.push(char::from(DIGITS[usize::from(b & 0xf)]));
    }
    out
}

/// Gives every unit after the first `kept` its fingerprint; the second and later copies of an
/// identical unit in one request get `#2`, `#3`, … in order, so ids are unique and still
/// stable across turns. The first `kept` units have theirs already (a decode that reused
/// them): their digests are read back from their ids, not hashed again.
pub(crate) fn assign_ids_after(messages: &mut [Message], kept: usize) {
    let (kept, new) = messages.split_at_mut(kept.min(messages.len()));
    if new.is_empty() {
        return;
    }
    // Only the copies of the new units' bytes need counting, among the kept units too.
    // A first turn digests its whole history: on the machine's cores.
    let digests: Vec<[u8; ID_HEX_LEN / 2]> = foldwire_core::par::map(
        new,
        |m| m.raw.len(),
        foldwire_core::par::BYTES_WORTH_A_THREAD,
        |m| digest(m.role, m.slot, &m.raw),
    );
    let mut seen: HashMap<[u8; ID_HEX_LEN / 2], u32> = HashMap::with_capacity(digests.len());
    for d in &digests {
        seen.insert(*d, 0);
    }
    for m in kept.iter() {
        let d = digest_of_id(&m.id).unwrap_or_else(|| digest(m.role, m.slot, &m.raw));
        if let Some(n) = seen.get_mut(&d) {
            *n += 1;
        }
    }
    for (m, d) in new.iter_mut().zip(digests) {
        let n = seen.entry(d).or_insert(0);
        *n += 1;
        let mut id = hex(&d);
        if *n > 1 {
            id.push('#');
            id.push_str(&n.to_string());
        }
        m.id = MessageId(id);
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;

    #[test]
    fn copies_share_the_content_digest_and_other_ids_have_none() {
        let id = fingerprint(Role::User, UnitSlot::Whole, b"{\"a\":1}");
        let digest = content_digest(&id).unwrap();
        assert_eq!(
            content_digest(&MessageId(format!("{}#2", id.0))),
            Some(digest)
        );
        let other = fingerprint(Role::Assistant, UnitSlot::Whole, b"{\"a\":1}");
        assert_ne!(content_digest(&other), Some(digest));
        for made_elsewhere in [
            "foldwire.added",
            "",
            "0123456789abcdefX",
            "0123",
            "+123456789abcdef",
            "0123456789ABCDEF",
        ] {
            assert_eq!(content_digest(&MessageId(made_elsewhere.into())), None);
        }
    }
}
