//! The fixed shape of a rendered block summary.
//!
//! On every wire a summary is one text message of role **user**, alone in its own wire
//! message, reading
//!
//! ```text
//! [foldwire b3 · topic]
//! summary text
//! ```
//!
//! (`[foldwire b3]` when the block has no topic). Why user: Anthropic and Gemini have no
//! system role among messages, mid-conversation system messages are refused or down-weighted
//! by several OpenAI-compatible backends, and an assistant-role summary would put words in the
//! model's mouth and could split an assistant run. A user message is accepted anywhere
//! between whole exchanges on all four wires (Anthropic and Gemini merge adjacent user
//! turns), and a frame may start with it. The text is a pure function of (block id, topic,
//! summary), so the bytes of a rendered summary never change between turns and the
//! provider's prompt cache stays valid.
//!
//! In a request ([`rendered_text`]) the summary is followed by one placeholder line per
//! archived media payload of the units the block covers (its effective refs, in ref
//! order), so the model knows the media existed and how to get it back — through its
//! `restore` tool, or (for the user) the CLI ([`media_restore_hint`]):
//!
//! ```text
//! [image m00012 archived: image/png, 149 bytes — restore with ref m00012: the restore tool {"id":"m00012"}, or foldwire restore --session s1 --image-ref m00012]
//! [image m00014 part 1 archived: image/jpeg, 2048 bytes — restore with ref m00014 part 1: the restore tool {"id":"m00014 part 1"}]
//! ```
//!
//! The kind is the MIME type's top level (`image`, `audio`, `video`; `file` otherwise); the
//! `part N` form names a unit's second and later payloads (a tool result with several
//! images). The lines come from the archive index `archive.spill` records, which only grows,
//! so they are stable across turns too.

use foldhash::HashMap;

use foldwire_archive::index::MediaRecord;
use foldwire_core::{Block, BlockId, MessageId, Ref, SessionState};

/// The text a block renders as.
pub fn summary_text(block: &Block) -> String {
    let topic = block
        .topic
        .as_deref()
        .map(str::trim)
        .filter(|t| !t.is_empty());
    let header = match topic {
        Some(t) => format!("[foldwire {} · {}]", block.id, t),
        None => format!("[foldwire {}]", block.id),
    };
    let body = block.summary.trim();
    if body.is_empty() {
        header
    } else {
        format!("{header}\n{body}")
    }
}

/// The topic in the header of a block's rendered text (`[foldwire b3 · auth]` → `auth`), or
/// `None` when the text is no rendered summary or its block has no topic. A summary that
/// folds again names its topic by this, never by its header, which would nest.
pub fn rendered_topic(text: &str) -> Option<&str> {
    let header = text.lines().next()?.strip_prefix("[foldwire b")?;
    let (_, rest) = header.split_once(" · ")?;
    rest.strip_suffix(']')
        .map(str::trim)
        .filter(|t| !t.is_empty())
}

/// The text a block renders as in a request: [`summary_text`] followed by the
/// [`archived_media_lines`] of the units it covers.
pub fn rendered_text(block: &Block, state: &SessionState) -> String {
    let mut text = summary_text(block);
    for line in archived_media_lines(block, state) {
        text.push('\n');
        text.push_str(&line);
    }
    text
}

/// One archived payload of a unit a block covers: the unit's ref, the payload's index
/// within the unit (0 for the first) and its archive record.
#[derive(Debug, Clone)]
pub struct ArchivedPart {
    /// The covering unit's ref.
    pub r#ref: Ref,
    /// Which payload of the unit (0 for the first).
    pub part: usize,
    /// What the archive holds for it.
    pub record: MediaRecord,
}

impl ArchivedPart {
    /// How placeholders and the restore tool name it: `m00012`, or `m00014 part 1`.
    pub fn name(&self) -> String {
        if self.part == 0 {
            self.r#ref.to_string()
        } else {
            format!("{} part {}", self.r#ref, self.part)
        }
    }
}

/// The archived media payloads of the units `block` covers, in ref order, then part order.
pub fn archived_parts(block: &Block, state: &SessionState) -> Vec<ArchivedPart> {
    let records = foldwire_archive::index::records(state);
    if records.is_empty() {
        return Vec::new();
    }
    let by_ref: HashMap<Ref, &MessageId> =
        state.refs.iter().map(|e| (e.r#ref, &e.message)).collect();
    let mut parts = Vec::new();
    for r in &block.effective {
        let Some(message) = by_ref.get(r) else {
            continue;
        };
        let of_unit = records.iter().filter(|rec| &rec.message == *message);
        for (part, record) in of_unit.enumerate() {
            parts.push(ArchivedPart {
                r#ref: *r,
                part,
                record: record.clone(),
            });
        }
    }
    parts
}

/// How to get archived payload `part` of the unit `r` back: the model's `restore` tool
/// with its name, and for a unit's first payload also the CLI (which restores by ref).
/// Stable across turns: it depends on the session id, the ref and the part only.
pub fn media_restore_hint(state: &SessionState, r: Ref, part: usize) -> String {
    if part == 0 {
        let session = state
            .session
            .as_ref()
            .map_or_else(|| "ID".to_owned(), ToString::to_string);
        format!(
            "the restore tool {{\"id\":\"{r}\"}}, or foldwire restore --session {session} --image-ref {r}"
        )
    } else {
        format!("the restore tool {{\"id\":\"{r} part {part}\"}}")
    }
}

/// One placeholder line per archived media payload of the units `block` covers, in ref
/// order (see the module docs for the shape).
pub fn archived_media_lines(block: &Block, state: &SessionState) -> Vec<String> {
    archived_parts(block, state)
        .iter()
        .map(|p| {
            let rec = &p.record;
            let top = rec.media_type.split('/').next().unwrap_or_default();
            let kind = if matches!(top, "image" | "audio" | "video") {
                top
            } else {
                "file"
            };
            let name = p.name();
            format!(
                "[{kind} {name} archived: {}, {} bytes — restore with ref {name}: {}]",
                rec.media_type,
                rec.size,
                media_restore_hint(state, p.r#ref, p.part)
            )
        })
        .collect()
}

/// The warning of a turn whose rendered summaries stand in for archived media: which
/// payloads are off the wire and how the model (its `restore` tool) and the user (the CLI)
/// get each back, or `None` when no rendered block covers archived media.
pub fn folded_media_warning(state: &SessionState, rendered: &[BlockId]) -> Option<String> {
    let parts: Vec<ArchivedPart> = rendered
        .iter()
        .filter_map(|id| state.blocks.iter().find(|b| b.id == *id))
        .flat_map(|b| archived_parts(b, state))
        .collect();
    let first = parts.first()?;
    let names: Vec<String> = parts
        .iter()
        .map(|p| {
            format!(
                "{} ({}, {} bytes)",
                p.name(),
                p.record.media_type,
                p.record.size
            )
        })
        .collect();
    Some(format!(
        "{} archived media payload(s) are off the wire, a placeholder in the summary names each: {}; \
         get one back with {} (`foldwire restore --session ID --image-ref list` lists them all)",
        parts.len(),
        names.join(", "),
        media_restore_hint(state, first.r#ref, 0)
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use foldwire_archive::index::{MediaRecord, record};

    #[test]
    fn archived_media_of_covered_units_gets_a_placeholder_naming_its_ref() {
        let mut state = SessionState::default();
        let text_ref = state.mint_ref(MessageId("t".into()));
        let img = state.mint_ref(MessageId("img".into()));
        let outside = state.mint_ref(MessageId("other".into()));
        for (message, pointer, media_type, size) in [
            ("img", "/source/data", "image/png", 149),
            ("img", "/content/1/source/data", "application/pdf", 10),
            ("other", "/source/data", "image/png", 5),
        ] {
            record(
                &mut state,
                &MediaRecord {
                    message: MessageId(message.into()),
                    pointer: pointer.into(),
                    key: format!("k-{pointer}"),
                    media_type: media_type.into(),
                    size,
                    r#ref: None,
                },
            );
        }
        let b = Block {
            id: BlockId(2),
            summary: "looked at a picture".into(),
            effective: vec![text_ref, img].into(),
            ..Block::default()
        };
        let _ = outside;
        assert_eq!(
            rendered_text(&b, &state),
            "[foldwire b2]\nlooked at a picture\n\
             [image m00002 archived: image/png, 149 bytes — restore with ref m00002: \
             the restore tool {\"id\":\"m00002\"}, or foldwire restore --session ID --image-ref m00002]\n\
             [file m00002 part 1 archived: application/pdf, 10 bytes — restore with ref m00002 part 1: \
             the restore tool {\"id\":\"m00002 part 1\"}]"
        );
        let plain = Block {
            effective: vec![text_ref].into(),
            ..b
        };
        assert_eq!(rendered_text(&plain, &state), summary_text(&plain));
    }

    #[test]
    fn shape_names_block_and_topic() {
        let mut b = Block {
            id: BlockId(3),
            summary: "  did things \n".into(),
            topic: Some("auth".into()),
            ..Block::default()
        };
        assert_eq!(summary_text(&b), "[foldwire b3 · auth]\ndid things");
        b.topic = None;
        assert_eq!(summary_text(&b), "[foldwire b3]\ndid things");
    }

    #[test]
    fn a_rendered_summary_gives_back_its_topic() {
        assert_eq!(
            rendered_topic("[foldwire b3 · auth]\ndid things"),
            Some("auth")
        );
        assert_eq!(rendered_topic("[foldwire b3]\ndid things"), None);
        assert_eq!(rendered_topic("plain text · with a dot]"), None);
    }
}
