//! The restore library calls: list a session's archived media and get a payload back by
//! ref, byte-identical to what the client sent (the decoded bytes of its base64 / data URL).
//!
//! A ref is resolved through the session state: ref → unit fingerprint (refs table) →
//! archive records of that unit → content key → bytes in the session's archive. A unit may
//! carry several payloads (a tool result with two images); they are its parts, numbered
//! from 0 in the order they appear in the unit.

use bytes::Bytes;

use foldwire_core::{MediaArchive, MessageId, Ref, SessionId, SessionState, StoreError};

use crate::error::RestoreError;
use crate::index::{self, MediaRecord};
use crate::keys;

/// One archived payload as listed.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct MediaListing {
    /// The ref of the unit that carried it (none while the unit has no ref yet).
    pub r#ref: Option<Ref>,
    /// Index of the payload among its unit's archived payloads.
    pub part: usize,
    /// Fingerprint of the unit.
    pub message: MessageId,
    /// JSON pointer of the payload inside the unit.
    pub pointer: String,
    /// MIME type.
    pub media_type: String,
    /// Size in bytes.
    pub size: u64,
    /// Content key in the archive.
    pub key: String,
}

/// A restored payload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RestoredMedia {
    /// The ref asked for.
    pub r#ref: Ref,
    /// MIME type.
    pub media_type: String,
    /// The bytes, exactly as the client sent them (decoded from base64 / the data URL).
    pub bytes: Bytes,
    /// Content key in the archive.
    pub key: String,
    /// JSON pointer of the payload inside its unit.
    pub pointer: String,
}

/// Lists every archived media payload of a session, refs joined in from the refs table.
pub fn list_media(state: &SessionState) -> Vec<MediaListing> {
    let records = index::records(state);
    let mut out = Vec::with_capacity(records.len());
    for (i, rec) in records.iter().enumerate() {
        let part = records
            .iter()
            .take(i)
            .filter(|r| r.message == rec.message)
            .count();
        out.push(MediaListing {
            r#ref: index::ref_of(state, &rec.message).or(rec.r#ref),
            part,
            message: rec.message.clone(),
            pointer: rec.pointer.clone(),
            media_type: rec.media_type.clone(),
            size: rec.size,
            key: rec.key.clone(),
        });
    }
    out
}

/// Restores the first archived payload of the unit named by `r`.
pub async fn restore_media(
    archive: &dyn MediaArchive,
    state: &SessionState,
    session: &SessionId,
    r: Ref,
) -> Result<RestoredMedia, RestoreError> {
    restore_media_part(archive, state, session, r, 0).await
}

/// Restores payload number `part` (from 0) of the unit named by `r`.
pub async fn restore_media_part(
    archive: &dyn MediaArchive,
    state: &SessionState,
    session: &SessionId,
    r: Ref,
    part: usize,
) -> Result<RestoredMedia, RestoreError> {
    // The state must be this session's: refs of another session name other units.
    if let Some(owner) = &state.session
        && owner != session
    {
        return Err(RestoreError::Store(StoreError::InvalidKey {
            given: format!("{session}/{r}"),
            why: format!("the state given belongs to session {owner}, not {session}"),
        }));
    }
    let message = state
        .refs
        .iter()
        .find(|e| e.r#ref == r)
        .map(|e| e.message.clone())
        .ok_or_else(|| RestoreError::UnknownRef {
            session: session.to_string(),
            r,
        })?;
    let parts: Vec<MediaRecord> = index::records(state)
        .into_iter()
        .filter(|rec| rec.message == message)
        .collect();
    if parts.is_empty() {
        // Payloads stored directly under the ref (MediaArchive::put) are found by pointer.
        return match archive.get(session, r).await {
            Ok((obj, bytes)) if part == 0 => Ok(RestoredMedia {
                r#ref: r,
                media_type: obj.media_type,
                bytes,
                key: obj.key,
                pointer: String::new(),
            }),
            Ok(_) => Err(RestoreError::NoSuchPart {
                session: session.to_string(),
                r,
                part,
                count: 1,
            }),
            Err(StoreError::NotFound { .. }) => Err(RestoreError::NotArchived {
                session: session.to_string(),
                r,
            }),
            Err(e) => Err(e.into()),
        };
    }
    let count = parts.len();
    let rec = parts
        .into_iter()
        .nth(part)
        .ok_or_else(|| RestoreError::NoSuchPart {
            session: session.to_string(),
            r,
            part,
            count,
        })?;
    let bytes = index::read_content(archive, state, session, &rec.key).await?;
    // Content addressing makes corruption detectable: never hand back bytes that differ.
    let actual = keys::sha256_hex(&bytes);
    if actual != rec.key {
        return Err(RestoreError::Store(StoreError::Backend {
            backend: "archive".to_owned(),
            operation: format!("verify media {}", rec.key),
            source: format!("stored bytes hash to {actual}, not to their key").into(),
        }));
    }
    Ok(RestoredMedia {
        r#ref: r,
        media_type: rec.media_type,
        bytes,
        key: rec.key,
        pointer: rec.pointer,
    })
}
