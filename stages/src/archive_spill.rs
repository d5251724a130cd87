//! Stage `archive.spill`: writes every archivable media payload to the session's archive
//! before any stage can fold it off the wire.
//!
//! `refs.mint` runs after this stage, so payloads are stored by content
//! ([`MediaArchive::put_content`], create-if-absent) and recorded in the session's archive
//! index by unit fingerprint and JSON pointer ([`foldwire_archive::index`]); the ref is
//! joined in through the refs table once minted, and
//! [`foldwire_archive::restore_media`] resolves ref → fingerprint → bytes. A payload already
//! recorded in an earlier turn (the client resends its whole history) is not written again.
//!
//! **Nothing leaves the wire unless its bytes are stored**: when a write fails, exceeds
//! `cx.archive_timeout`, the payload cannot be decoded, or no archive is configured, the
//! unit is pinned for this turn (`Pin::ArchiveFailed`) and the report names it and why.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use foldwire_archive::index::{self, MediaRecord};
use foldwire_core::{
    BuildError, Component, ComponentConfig, ComponentKind, Fact, MediaArchive, MediaClass, Message,
    MessageKind, Origin, Pin, SessionId, SessionState, Stage, StageCx, StageError, Turn,
    async_trait,
};

use crate::media_classify::InlinePayload;

/// The registered stage name.
pub const NAME: &str = ArchiveSpillConfig::NAME;

/// Parameters of `archive.spill` (none yet; unknown keys are refused).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ArchiveSpillConfig {}

impl ComponentConfig for ArchiveSpillConfig {
    const KIND: ComponentKind = ComponentKind::Stage;
    const NAME: &'static str = "archive.spill";
    const DESCRIPTION: &'static str =
        "Stores every archivable media payload before anything may fold it; pins it if not.";

    fn build(self) -> Result<Component, BuildError> {
        Ok(Component::Stage(Arc::new(ArchiveSpill)))
    }
}

/// The `archive.spill` stage.
#[derive(Debug, Clone, Copy, Default)]
pub struct ArchiveSpill;

foldwire_core::register_config!(ArchiveSpillConfig);

/// What happened to one unit's payloads.
#[derive(Debug, Default)]
struct UnitOutcome {
    stored: u64,
    bytes: u64,
    already: u64,
    failures: Vec<String>,
}

#[async_trait]
impl Stage for ArchiveSpill {
    fn name(&self) -> &'static str {
        NAME
    }

    fn requires(&self) -> &'static [Fact] {
        &[Fact::MediaClassified]
    }

    fn provides(&self) -> &'static [Fact] {
        &[Fact::Archived]
    }

    async fn run(&self, turn: &mut Turn, cx: &StageCx) -> Result<(), StageError> {
        let Turn {
            session,
            conversation,
            state,
            report,
            ..
        } = turn;
        let Some(conversation) = conversation.as_mut() else {
            return Err(StageError::NotDecoded { stage: NAME });
        };
        let attached = index::attach_refs(state);
        report.count("archive.refs_attached", attached as u64);

        let mut missing: Vec<String> = Vec::new();
        for (position, message) in conversation.messages.iter_mut().enumerate() {
            if message.origin != Origin::Client
                || !message
                    .media
                    .iter()
                    .any(|m| m.class == MediaClass::Archivable)
            {
                continue;
            }
            let outcome = spill_unit(cx, session, state, message).await;
            report.count("archive.stored", outcome.stored);
            report.count("archive.stored_bytes", outcome.bytes);
            report.count("archive.already_stored", outcome.already);
            if outcome.failures.is_empty() {
                continue;
            }
            let name = unit_name(position, message, state);
            let reason = outcome.failures.join("; ");
            report.count("archive.pinned", 1);
            if cx.archive.is_none() {
                missing.push(name);
            } else {
                report.warn(
                    NAME,
                    "archive_failed",
                    format!("{name} stays on the wire this turn: {reason}"),
                );
            }
            // An unrecoverable-media pin already keeps the unit; otherwise pin it now.
            if !matches!(message.pin, Some(Pin::UnrecoverableMedia(_))) {
                message.pin = Some(Pin::ArchiveFailed(reason));
            }
        }
        if !missing.is_empty() {
            report.warn(
                NAME,
                "archive_missing",
                format!(
                    "no media archive is configured, so {} unit(s) with inline media stay on the wire and cannot fold: {}; configure an archive (file://DIR, memory://, s3://BUCKET/PREFIX)",
                    missing.len(),
                    missing.join(", ")
                ),
            );
        }
        Ok(())
    }
}

/// Stores the archivable payloads of one unit that are not stored yet.
async fn spill_unit(
    cx: &StageCx,
    session: &SessionId,
    state: &mut SessionState,
    message: &Message,
) -> UnitOutcome {
    let mut outcome = UnitOutcome::default();
    let pending: Vec<_> = message
        .media
        .iter()
        .filter(|m| m.class == MediaClass::Archivable)
        .filter(|m| {
            let done = index::is_archived(state, &message.id, &m.pointer);
            if done {
                outcome.already += 1;
            }
            !done
        })
        .collect();
    if pending.is_empty() {
        return outcome;
    }
    let Some(archive) = cx.archive.as_ref() else {
        outcome
            .failures
            .push("no media archive is configured".to_owned());
        return outcome;
    };
    let unit: serde_json::Value = match serde_json::from_slice(&message.raw) {
        Ok(v) => v,
        Err(e) => {
            outcome
                .failures
                .push(format!("its raw bytes are not JSON: {e}"));
            return outcome;
        }
    };
    for media in pending {
        match store_one(cx, archive.as_ref(), session, &unit, media).await {
            Ok((key, media_type, size)) => {
                outcome.stored += 1;
                outcome.bytes += size;
                index::record(
                    state,
                    &MediaRecord {
                        message: message.id.clone(),
                        pointer: media.pointer.clone(),
                        key,
                        media_type,
                        size,
                        r#ref: index::ref_of(state, &message.id),
                    },
                );
            }
            Err(why) => outcome
                .failures
                .push(format!("{} at {}: {why}", media.kind, media.pointer)),
        }
    }
    outcome
}

/// Decodes one payload and writes it within the archive timeout.
async fn store_one(
    cx: &StageCx,
    archive: &dyn MediaArchive,
    session: &SessionId,
    unit: &serde_json::Value,
    media: &foldwire_core::MediaRef,
) -> Result<(String, String, u64), String> {
    let text = unit
        .pointer(&media.pointer)
        .and_then(serde_json::Value::as_str)
        .ok_or_else(|| "the payload is no longer at its pointer".to_owned())?;
    let payload = InlinePayload::parse(text, media.media_type.as_deref());
    let bytes = payload.decode().map_err(|e| e.to_string())?;
    let media_type = payload
        .media_type
        .unwrap_or_else(|| "application/octet-stream".to_owned());
    match tokio::time::timeout(
        cx.archive_timeout,
        archive.put_content(session, &media_type, bytes),
    )
    .await
    {
        Ok(Ok(stored)) => Ok((stored.key, stored.media_type, stored.size)),
        Ok(Err(e)) => Err(format!("archive write failed: {e}")),
        Err(_) => Err(format!(
            "archive write timed out after {} ms",
            cx.archive_timeout.as_millis()
        )),
    }
}

/// How a unit is named in warnings: its position, kind, wire message, ref or fingerprint.
fn unit_name(position: usize, message: &Message, state: &SessionState) -> String {
    let kind = match message.kind {
        MessageKind::Text => "text",
        MessageKind::ToolCall => "tool call",
        MessageKind::ToolResult => "tool result",
        MessageKind::Reasoning => "reasoning",
        MessageKind::Media => "media",
        MessageKind::Other => "block",
        MessageKind::Opaque => "opaque item",
    };
    let ident = match message.r#ref.or_else(|| index::ref_of(state, &message.id)) {
        Some(r) => format!("ref {r}"),
        None => format!("fingerprint {}", message.id),
    };
    format!(
        "unit #{position} ({kind} in wire message {}, {ident})",
        message.entry
    )
}
