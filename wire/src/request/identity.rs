//! Message identity: a content fingerprint that is the same whenever a client resends the
//! same unit, so refs and blocks stay attached to it across turns.

use foldhash::{HashMap, HashMapExt as _};

use foldwire_core::{Message, MessageId, Role, UnitSlot};
use twox_hash::XxHash3_64;

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
    XxHash3_64::oneshot_with_seed(seed, raw).to_be_bytes()
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

/// Numbers the copies among the units after the first `kept`: each already has its
/// fingerprint as its id (the decoder gave it one as it cut the unit), and the second and
/// later copies of an identical unit in one request get `#2`, `#3`, … in order, so ids are
/// unique and still stable across turns. The digests of every unit, the first `kept` (a
/// decode that reused them) included, are read back from their ids, not hashed again.
pub(crate) fn assign_ids_after(messages: &mut [Message], kept: usize) {
    let (kept, new) = messages.split_at_mut(kept.min(messages.len()));
    if new.is_empty() {
        return;
    }
    let digest_now =
        |m: &Message| digest_of_id(&m.id).unwrap_or_else(|| digest(m.role, m.slot, &m.raw));
    let digests: Vec<[u8; ID_HEX_LEN / 2]> = new.iter().map(digest_now).collect();
    // Only the copies of the new units' bytes need counting, among the kept units too.
    let mut seen: HashMap<[u8; ID_HEX_LEN / 2], u32> = HashMap::with_capacity(digests.len());
    for d in &digests {
        seen.insert(*d, 0);
    }
    for m in kept.iter() {
        if let Some(n) = seen.get_mut(&digest_now(m)) {
            *n += 1;
        }
    }
    for (m, d) in new.iter_mut().zip(digests) {
        let n = seen.entry(d).or_insert(0);
        *n += 1;
        if *n > 1 {
            let mut id = hex(&d);
            id.push('#');
            id.push_str(&n.to_string());
            m.id = MessageId(id);
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;

    /// What the fingerprints were when they were first stored.
    const GOLDEN: [&str; 7] = [
        "1e514f00c2170d43",
        "803f53e345d56b3b",
        "5dbef70583e12bb9",
        "8c48935e0fc35651",
        "f936a9fe80997b57",
        "880f3b205d41c5c5",
        "9c38ac2f8cf6e313",
    ];

    /// Ids are stored in every session's state: the fingerprint of given bytes must never
    /// change (the values are XXH3-64's, seeded by role and slot), at any input length,
    /// the lengths where XXH3 switches between its short, mid and long paths included.
    #[test]
    fn fingerprints_are_stable_across_versions() {
        let long: Vec<u8> = (0..5000u32).map(|i| (i * 7 % 251) as u8).collect();
        let cases: [(Role, UnitSlot, &[u8]); 7] = [
            (Role::User, UnitSlot::Whole, b""),
            (Role::User, UnitSlot::Whole, b"{\"a\":1}"),
            (Role::Assistant, UnitSlot::Content(0), &long[..17]),
            (Role::Tool, UnitSlot::StringContent, &long[..129]),
            (Role::System, UnitSlot::ToolCalls(2), &long[..240]),
            (Role::User, UnitSlot::ReasoningField, &long[..241]),
            (Role::Assistant, UnitSlot::Content(3), &long),
        ];
        let ids: Vec<String> = cases
            .iter()
            .map(|(role, slot, raw)| fingerprint(*role, *slot, raw).0)
            .collect();
        assert_eq!(ids, GOLDEN);
    }

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
