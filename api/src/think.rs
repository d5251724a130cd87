//! Reasoning written inline at the start of an assistant's text.
//!
//! Open-weight models served through OpenAI-compatible APIs often put their reasoning in
//! the answer itself, as `<think>…</think>`, `<thinking>…</thinking>` or a fenced
//! ```` ```thinking ```` block, instead of a reasoning field. That part is reasoning, not
//! text to summarize. The unit stays one unit (its bytes, and so the wire, are untouched,
//! and no range can separate the reasoning from its answer); readers that summarize or
//! preview ask for the answer through [`crate::Message::inline_reasoning`].

/// The delimiters of the recognized inline forms: (opening, closing).
const FORMS: [(&str, &str); 3] = [
    ("<think>", "</think>"),
    ("<thinking>", "</thinking>"),
    ("```thinking\n", "\n```"),
];

/// A text split into the inline reasoning at its start and the answer after it.
///
/// `reasoning` and `answer` are adjacent slices: `reasoning + answer` is the text, byte for
/// byte.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InlineReasoning<'a> {
    /// The reasoning blocks as written, delimiters and the newline after each included.
    pub reasoning: &'a str,
    /// What follows them.
    pub answer: &'a str,
}

/// Splits the reasoning blocks written at offset 0 of `text` (stacked blocks included) from
/// the answer, or `None` when `text` does not start with one.
///
/// A block must be closed and hold something besides whitespace; after each block one `\n`
/// of glue belongs to it. A malformed, unterminated or empty block ends the reasoning there
/// (and, when it is the first, nothing is split).
pub fn split_inline_reasoning(text: &str) -> Option<InlineReasoning<'_>> {
    let mut end = 0;
    while let Some(len) = text.get(end..).and_then(block_len) {
        end += len;
    }
    if end == 0 {
        return None;
    }
    let (reasoning, answer) = text.split_at_checked(end)?;
    Some(InlineReasoning { reasoning, answer })
}

/// Length of the reasoning block at the start of `rest`, its trailing newline included.
fn block_len(rest: &str) -> Option<usize> {
    FORMS.iter().find_map(|(open, close)| {
        let body = rest.strip_prefix(open)?;
        let inner_len = body.find(close)?;
        let inner = body.get(..inner_len)?;
        if inner.trim().is_empty() {
            return None;
        }
        let mut len = open.len() + inner_len + close.len();
        if rest.get(len..).is_some_and(|r| r.starts_with('\n')) {
            len += 1;
        }
        Some(len)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(text: &str) -> Option<&str> {
        split_inline_reasoning(text).map(|s| s.answer)
    }

    // acp §26 #120
    #[test]
    fn each_form_splits_byte_exactly() {
        for text in [
            "<think>\nplan it\n</think>\nthe answer",
            "<thinking>\nplan it\n</thinking>\nthe answer",
            "```thinking\nplan it\n```\nthe answer",
            "<think>plan it</think>the answer",
        ] {
            let s = split_inline_reasoning(text).unwrap_or_else(|| panic!("{text:?}"));
            assert_eq!(s.answer, "the answer", "{text:?}");
            assert_eq!(format!("{}{}", s.reasoning, s.answer), text);
        }
    }

    // acp §26 #120
    #[test]
    fn stacked_blocks_and_glue() {
        let text = "<think>\na\n</think>\n<thinking>\nb\n</thinking>\n\nanswer";
        let s = split_inline_reasoning(text);
        assert_eq!(s.map(|s| s.answer), Some("\nanswer"));
        assert_eq!(answer("<think>only reasoning</think>"), Some(""));
    }

    // acp §26 #120
    #[test]
    fn malformed_unterminated_empty_or_late_tags_are_not_split() {
        for text in [
            "<think>never closed",
            "<think>\n \n</think>answer",
            "answer first <think>x</think>",
            " <think>x</think>leading space",
            "<Think>x</Think>case",
            "```thinking no newline```",
            "plain text",
        ] {
            assert_eq!(split_inline_reasoning(text), None, "{text:?}");
        }
        // A malformed block after a good one ends the reasoning there.
        assert_eq!(answer("<think>a</think><think>open"), Some("<think>open"));
    }
}
