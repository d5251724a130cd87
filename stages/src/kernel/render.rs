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

use foldwire_core::Block;

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

#[cfg(test)]
mod tests {
    use super::*;
    use foldwire_core::BlockId;

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
}
