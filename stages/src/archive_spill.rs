//! Stage `archive.spill`: writes every archivable media payload to the session's archive
//! before any stage can fold it off the wire.
//!
//! `refs.mint` runs after this stage, so payloads are stored by content, the turn's payloads
//! as one batch ([`foldwire_core::MediaArchive::put_contents`]: one pack object,
//! create-if-absent, each payload's place in it noted in its record) and recorded in the session's archive
//! index by unit fingerprint and JSON pointer ([`foldwire_archive::index`]); the ref is
//! joined in through the refs table once minted, and
//! [`foldwire_archive::restore_media`] resolves ref → fingerprint → bytes. A payload already
//! recorded in an earlier turn (the client resends its whole history) is not written again.
//!
//! **Nothing leaves the wire unless its bytes are stored**: when a write fails, exceeds
//! `cx.archive_timeout`, the payload cannot be decoded, or no archive is configured, the
//! unit is pinned for this turn (`Pin::ArchiveFailed`) and the report names it and why.
//!
//! On a turn that will fold most of its history (a session's first turn far over its window)
//! the stage also starts hashing every unit for the fold's pack on a thread of its own
//! (param `prehash`, default on; [`crate::kernel::prehash`]), counted as
//! `archive.prehashed_units`.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use foldwire_archive::index::{self, MediaRecord};
use foldwire_core::{
    BuildCx, BuildError, Component, ComponentConfig, ComponentKind, Fact, MediaClass, Message,
    MessageKind, Origin, Pin, SessionId, SessionState, Stage, StageCx, StageError, Turn,
    async_trait,
};

use crate::inline_payload::InlinePayload;
use crate::kernel::prehash::{self, PrehashUnused};

/// The registered stage name.
pub const NAME: &str = ArchiveSpillConfig::NAME;

/// Parameters of `archive.spill` (unknown keys are refused).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ArchiveSpillConfig {
    /// On a turn that will fold most of its history (no active block, a body far over the
    /// window), start hashing its units for the fold's archive write on a spare core
    /// ([`crate::kernel::prehash`]). Default on.
    pub prehash: bool,
}

impl Default for ArchiveSpillConfig {
    fn default() -> Self {
        ArchiveSpillConfig { prehash: true }
    }
}

impl ComponentConfig for ArchiveSpillConfig {
    const KIND: ComponentKind = ComponentKind::Stage;
    const NAME: &'static str = "archive.spill";
    const DESCRIPTION: &'static str =
        "Stores every archivable media payload before anything may fold it; pins it if not.";

    fn build(self, _cx: &BuildCx<'_>) -> Result<Component, BuildError> {
        Ok(Component::Stage(Arc::new(ArchiveSpill {
            prehash: self.prehash,
        })))
    }
}

/// The `archive.spill` stage.
#[derive(Debug, Clone, Copy)]
pub struct ArchiveSpill {
    /// See [`ArchiveSpillConfig::prehash`].
    pub prehash: bool,
}

impl Default for ArchiveSpill {
    fn default() -> Self {
        ArchiveSpill { prehash: true }
    }
}

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
            extensions,
            carry,
            budget,
            body,
            ..
        } = turn;
        let Some(conversation) = conversation.as_mut() else {
            return Err(StageError::NotDecoded { stage: NAME });
        };
        if self.prehash
            && cx.archive.is_some()
            && carry.get::<PrehashUnused>().is_none()
            && prehash::worth_prehashing(state, budget, body.len())
            && let Some(hashing) = prehash::start_prehash(&conversation.messages)
        {
            report.count("archive.prehashed_units", hashing.units() as u64);
            extensions.insert(hashing);
            carry.insert(PrehashUnused);
        }
        let attached = index::attach_refs(state);
        report.count("archive.refs_attached", attached as u64);

        // Every payload of the turn still to store, decoded, then written as one batch
        // (one pack object) rather than one object per payload.
        let mut plans: Vec<(usize, UnitPlan)> = Vec::new();
        for (position, message) in conversation.messages.iter().enumerate() {
            if message.origin != Origin::Client
                || !message
                    .media
                    .iter()
                    .any(|m| m.class == MediaClass::Archivable)
            {
                continue;
            }
            plans.push((position, plan_unit(state, message)));
        }
        let batch: Vec<(String, bytes::Bytes)> = plans
            .iter()
            .flat_map(|(_, plan)| plan.payloads.iter())
            .map(|p| (p.media_type.clone(), p.bytes.clone()))
            .collect();
        let written = if batch.is_empty() {
            Ok(Vec::new())
        } else {
            write_batch(cx, session, batch).await
        };
        let mut parts = match &written {
            Ok(parts) => parts.clone().into_iter(),
            Err(_) => Vec::new().into_iter(),
        };

        let mut missing: Vec<String> = Vec::new();
        for (position, plan) in plans {
            let mut outcome = UnitOutcome {
                already: plan.already,
                failures: plan.failures,
                ..UnitOutcome::default()
            };
            let message = &mut conversation.messages[position];
            for payload in plan.payloads {
                match (&written, parts.next()) {
                    (Ok(_), Some(part)) => {
                        outcome.stored += 1;
                        outcome.bytes += part.content.size;
                        index::record_at(
                            state,
                            &MediaRecord {
                                message: message.id.clone(),
                                pointer: payload.pointer.clone(),
                                key: part.content.key,
                                media_type: part.content.media_type,
                                size: part.content.size,
                                r#ref: index::ref_of(state, &message.id),
                            },
                            part.location.as_ref(),
                        );
                    }
                    (Err(why), _) => outcome
                        .failures
                        .push(format!("{} at {}: {why}", payload.kind, payload.pointer)),
                    (Ok(_), None) => outcome.failures.push(format!(
                        "{} at {}: the archive answered fewer parts than it was given",
                        payload.kind, payload.pointer
                    )),
                }
            }
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

/// One payload of a unit, decoded and ready to store.
struct Payload {
    kind: String,
    pointer: String,
    media_type: String,
    bytes: bytes::Bytes,
}

/// What a unit brings to the turn's batch: payloads to store, payloads already stored, and
/// payloads that could not be read.
#[derive(Default)]
struct UnitPlan {
    payloads: Vec<Payload>,
    already: u64,
    failures: Vec<String>,
}

/// Decodes the archivable payloads of one unit that are not stored yet.
fn plan_unit(state: &SessionState, message: &Message) -> UnitPlan {
    let mut plan = UnitPlan::default();
    let pending: Vec<_> = message
        .media
        .iter()
        .filter(|m| m.class == MediaClass::Archivable)
        .filter(|m| {
            let done = index::is_archived(state, &message.id, &m.pointer);
            if done {
                plan.already += 1;
            }
            !done
        })
        .collect();
    if pending.is_empty() {
        return plan;
    }
    let unit: serde_json::Value = match serde_json::from_slice(&message.raw) {
        Ok(v) => v,
        Err(e) => {
            plan.failures
                .push(format!("its raw bytes are not JSON: {e}"));
            return plan;
        }
    };
    for media in pending {
        match decode_one(&unit, media) {
            Ok((media_type, bytes)) => plan.payloads.push(Payload {
                kind: media.kind.to_string(),
                pointer: media.pointer.clone(),
                media_type,
                bytes,
            }),
            Err(why) => plan
                .failures
                .push(format!("{} at {}: {why}", media.kind, media.pointer)),
        }
    }
    plan
}

/// Decodes one payload.
fn decode_one(
    unit: &serde_json::Value,
    media: &foldwire_core::MediaRef,
) -> Result<(String, bytes::Bytes), String> {
    let text = unit
        .pointer(&media.pointer)
        .and_then(serde_json::Value::as_str)
        .ok_or_else(|| "the payload is no longer at its pointer".to_owned())?;
    let payload = InlinePayload::parse(text, media.media_type.as_deref());
    let bytes = payload.decode().map_err(|e| e.to_string())?;
    let media_type = payload
        .media_type
        .unwrap_or_else(|| "application/octet-stream".to_owned());
    Ok((media_type, bytes))
}

/// Writes the turn's payloads as one batch within the archive timeout.
async fn write_batch(
    cx: &StageCx,
    session: &SessionId,
    batch: Vec<(String, bytes::Bytes)>,
) -> Result<Vec<foldwire_core::StoredPart>, String> {
    let Some(archive) = cx.archive.as_ref() else {
        return Err("no media archive is configured".to_owned());
    };
    match tokio::time::timeout(cx.archive_timeout, archive.put_contents(session, batch)).await {
        Ok(Ok(parts)) => Ok(parts),
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
