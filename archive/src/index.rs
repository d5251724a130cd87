//! The archive index kept in [`SessionState::archive`]: one record per spilled payload.
//!
//! `archive.spill` runs before `refs.mint`, so a payload is recorded by the fingerprint of
//! its unit and its JSON pointer inside the unit; the ref is joined in through the session's
//! refs table (ref → fingerprint) once minted. They are [`ArchivedItem::message`] and
//! [`ArchivedItem::pointer`]; a payload written in a pack also has [`ArchivedItem::pack`] and
//! [`ArchivedItem::offset`]. State files name them as earlier builds did (`message`,
//! `pointer`, `pack`, `offset`), so both read each other's.

use bytes::Bytes;
use foldwire_core::state::ArchivedItem;
use foldwire_core::{
    MediaArchive, MessageId, PackLocation, Ref, SessionId, SessionState, StoreError,
};

/// One spilled media payload of a session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MediaRecord {
    /// Fingerprint of the unit that carried it.
    pub message: MessageId,
    /// JSON pointer of the payload inside the unit's raw bytes.
    pub pointer: String,
    /// Content key (SHA-256 hex) in the session's archive.
    pub key: String,
    /// MIME type.
    pub media_type: String,
    /// Decoded size in bytes.
    pub size: u64,
    /// The unit's ref, once one was minted and attached.
    pub r#ref: Option<Ref>,
}

impl MediaRecord {
    /// The state-file form.
    pub fn to_item(&self) -> ArchivedItem {
        ArchivedItem {
            r#ref: self.r#ref,
            key: self.key.clone(),
            media_type: self.media_type.clone(),
            size: self.size,
            message: Some(self.message.0.clone()),
            pointer: Some(self.pointer.clone()),
            ..ArchivedItem::default()
        }
    }

    /// Reads a record back; `None` for archive items that are not media spills.
    pub fn from_item(item: &ArchivedItem) -> Option<Self> {
        let message = item.message.as_deref()?;
        let pointer = item.pointer.as_deref()?;
        Some(MediaRecord {
            message: MessageId(message.to_owned()),
            pointer: pointer.to_owned(),
            key: item.key.clone(),
            media_type: item.media_type.clone(),
            size: item.size,
            r#ref: item.r#ref,
        })
    }
}

/// Every media record of the session, in spill order.
pub fn records(state: &SessionState) -> Vec<MediaRecord> {
    state
        .archive
        .iter()
        .filter_map(MediaRecord::from_item)
        .collect()
}

/// True when the payload at `pointer` of unit `message` is already archived.
pub fn is_archived(state: &SessionState, message: &MessageId, pointer: &str) -> bool {
    state.archive.iter().any(|item| {
        item.message.as_deref() == Some(message.0.as_str())
            && item.pointer.as_deref() == Some(pointer)
    })
}

/// Adds a record unless the same payload of the same unit is already recorded.
pub fn record(state: &mut SessionState, rec: &MediaRecord) -> bool {
    record_at(state, rec, None)
}

/// [`record`], for a payload written in a pack at `location`.
pub fn record_at(
    state: &mut SessionState,
    rec: &MediaRecord,
    location: Option<&PackLocation>,
) -> bool {
    if is_archived(state, &rec.message, &rec.pointer) {
        return false;
    }
    let mut item = rec.to_item();
    if let Some(location) = location {
        set_location(&mut item, location);
    }
    state.archive.push(item);
    true
}

/// Notes on an archive item where in a pack its bytes are (`pack`, `offset`; `size` is
/// already the item's).
pub fn set_location(item: &mut ArchivedItem, location: &PackLocation) {
    put_location(item, location.clone());
}

/// [`set_location`], taking the location (a batch records thousands: no copy of the pack's
/// key for each).
pub fn put_location(item: &mut ArchivedItem, location: PackLocation) {
    item.pack = Some(location.pack);
    item.offset = Some(location.offset);
}

/// Where in a pack an archive item's bytes are; `None` for an object of its own (every
/// item of earlier builds).
pub fn location(item: &ArchivedItem) -> Option<PackLocation> {
    Some(PackLocation {
        pack: item.pack.clone()?,
        offset: item.offset?,
        size: item.size,
    })
}

/// Where the payload with content key `key` is packed, if any item of the index says.
pub fn location_of_key(state: &SessionState, key: &str) -> Option<PackLocation> {
    state
        .archive
        .iter()
        .rev()
        .filter(|item| item.key == key)
        .find_map(location)
}

/// Reads the payload with content key `key` wherever the index says it is: its range of a
/// pack, or an object of its own. The caller checks the bytes against the key.
///
/// # Errors
/// What the archive answered (not found, unreachable).
pub async fn read_content(
    archive: &dyn MediaArchive,
    state: &SessionState,
    session: &SessionId,
    key: &str,
) -> Result<Bytes, StoreError> {
    match location_of_key(state, key) {
        Some(at) => archive.get_packed(session, key, &at).await,
        None => archive.get_content(session, key).await,
    }
}

/// The newest ref minted for a unit fingerprint.
pub fn ref_of(state: &SessionState, message: &MessageId) -> Option<Ref> {
    state
        .refs
        .iter()
        .filter(|e| &e.message == message)
        .map(|e| e.r#ref)
        .max()
}

/// Fills in the ref of records whose unit has been given one since; returns how many.
pub fn attach_refs(state: &mut SessionState) -> usize {
    let mut attached = 0;
    for i in 0..state.archive.len() {
        let Some(rec) = state.archive.get(i).and_then(MediaRecord::from_item) else {
            continue;
        };
        let newest = ref_of(state, &rec.message);
        if newest.is_some()
            && newest != rec.r#ref
            && let Some(item) = state.archive.get_mut(i)
        {
            item.r#ref = newest;
            attached += 1;
        }
    }
    attached
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip_through_the_state_file() {
        let mut state = SessionState::default();
        let rec = MediaRecord {
            message: MessageId("fp1".into()),
            pointer: "/source/data".into(),
            key: "k".repeat(64),
            media_type: "image/png".into(),
            size: 3,
            r#ref: None,
        };
        assert!(record(&mut state, &rec));
        assert!(!record(&mut state, &rec), "a resend is recorded once");
        let again = SessionState::from_json(&state.to_json().unwrap()).unwrap();
        assert_eq!(records(&again), vec![rec.clone()]);
        let mut again = again;
        again.mint_ref(MessageId("other".into()));
        let r = again.mint_ref(MessageId("fp1".into()));
        assert_eq!(attach_refs(&mut again), 1);
        assert_eq!(records(&again)[0].r#ref, Some(r));
        assert_eq!(attach_refs(&mut again), 0);
    }
}
