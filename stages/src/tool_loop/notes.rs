//! The per-turn note: which ranges the model can compress now, and a nudge when the request
//! fills a pressure band of the window. It is appended after everything cached.

use foldwire_core::{Conversation, RangeInfo, TokenEstimator, Turn};

use crate::kernel::{Protection, SummaryRun, summary_runs};
use crate::ranges_build::PROTECTION_NOTE;

/// Characters of a range's first message shown in the note.
const PREVIEW_CHARS: usize = 80;

/// The runs of summaries the model may fold a tier up, found in a turn's conversation (refs
/// minted, folds applied), the session's state after its folds, and the protection
/// `ranges.build` recorded, with the same rules automatic folds use.
pub fn summary_runs_of(turn: &Turn, estimator: &dyn TokenEstimator) -> Vec<SummaryRun> {
    let Some(view) = turn.conversation.as_ref() else {
        return Vec::new();
    };
    let protection = turn
        .stage_notes
        .get(PROTECTION_NOTE)
        .and_then(|v| serde_json::from_value::<Protection>(v.clone()).ok())
        .unwrap_or_default();
    summary_runs(view, &turn.state, &protection, estimator)
}

/// The list of ranges that can be compressed right now, each with a preview of its first
/// message (found in `view`, the conversation with refs) so the model can tell them apart,
/// then the runs of summaries that can fold into one a tier up (by block ids).
pub fn ranges_note(
    ranges: &[RangeInfo],
    runs: &[SummaryRun],
    view: Option<&Conversation>,
) -> Option<String> {
    if ranges.is_empty() && runs.is_empty() {
        return None;
    }
    let mut note = String::from("[foldwire] Compressible ranges now:");
    for r in ranges {
        note.push_str(&format!(
            "\n- {}..{}: {} messages, ~{} tokens",
            r.start, r.end, r.messages, r.tokens
        ));
        if !r.tool_calls.is_empty() {
            let tools: Vec<String> = r
                .tool_calls
                .iter()
                .map(|(name, n)| format!("{name}×{n}"))
                .collect();
            note.push_str(&format!(" (tools: {})", tools.join(", ")));
        }
        let first = view.and_then(|v| v.messages.iter().find(|m| m.r#ref == Some(r.start)));
        if let Some(m) = first {
            let preview: String = m.text.split_whitespace().collect::<Vec<_>>().join(" ");
            let preview: String = preview.chars().take(PREVIEW_CHARS).collect();
            if !preview.is_empty() {
                note.push_str(&format!(" — starts: \"{preview}\""));
            }
        }
    }
    for run in runs {
        let (Some(first), Some(last)) = (run.first(), run.last()) else {
            continue;
        };
        note.push_str(&format!(
            "\n- {first}..{last}: {} summaries, ~{} tokens (folds them into one tier-{} summary)",
            run.blocks.len(),
            run.tokens,
            run.tier
        ));
    }
    Some(note)
}

/// Pressure bands (percent of the window) at which the per-turn note nudges the model.
pub const PRESSURE_BANDS: [u64; 3] = [30, 50, 70];

/// A nudge when the request fills a band of the window: the highest band crossed.
pub fn pressure_note(request_tokens: u64, window: u64) -> Option<String> {
    if window == 0 {
        return None;
    }
    let percent = request_tokens.saturating_mul(100) / window;
    let band = PRESSURE_BANDS.iter().rev().find(|b| percent >= **b)?;
    Some(format!(
        "[foldwire] The context is past {band}% of the window ({request_tokens} of {window} \
         tokens): compress ranges you no longer need verbatim before continuing."
    ))
}

/// The trailing note of a turn: the compressible ranges and, when some are offered and the
/// request fills a pressure band, the nudge to compress them. Without a range to offer there
/// is no nudge: the model is never asked for a fold it cannot make.
pub fn turn_note(
    ranges: &[RangeInfo],
    runs: &[SummaryRun],
    view: Option<&Conversation>,
    request_tokens: u64,
    window: u64,
) -> Option<String> {
    let listed = ranges_note(ranges, runs, view)?;
    let parts: Vec<String> = pressure_note(request_tokens, window)
        .into_iter()
        .chain(Some(listed))
        .collect();
    Some(parts.join("\n"))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn nudges_follow_the_pressure_bands() {
        assert_eq!(pressure_note(299, 1000), None);
        assert!(pressure_note(500, 1000).unwrap().contains("past 50%"));
        assert!(pressure_note(900, 1000).unwrap().contains("past 70%"));
        let r = RangeInfo {
            start: "m00001".parse().unwrap(),
            end: "m00004".parse().unwrap(),
            tokens: 900,
            messages: 4,
            tool_calls: [("bash".to_owned(), 2)].into_iter().collect(),
            tool_units: 4,
        };
        let note = turn_note(std::slice::from_ref(&r), &[], None, 100, 1000).unwrap();
        assert!(note.contains("m00001..m00004: 4 messages, ~900 tokens (tools: bash×2)"));
        assert!(turn_note(&[], &[], None, 100, 1000).is_none());
        // Past a band with nothing to offer: no nudge asks for a fold that cannot be made.
        assert!(turn_note(&[], &[], None, 600, 1000).is_none());
        let pressed = turn_note(std::slice::from_ref(&r), &[], None, 600, 1000).unwrap();
        assert!(pressed.contains("50%") && pressed.contains("m00001..m00004"));
        // Summaries side by side are offered by block ids, and count as an offer.
        let run = SummaryRun {
            blocks: vec![
                foldwire_core::BlockId(2),
                foldwire_core::BlockId(3),
                foldwire_core::BlockId(5),
            ],
            tokens: 240,
            tier: 2,
        };
        let note = turn_note(&[], std::slice::from_ref(&run), None, 600, 1000).unwrap();
        assert!(note.contains("50%"), "{note}");
        assert!(
            note.contains("b2..b5: 3 summaries, ~240 tokens (folds them into one tier-2 summary)"),
            "{note}"
        );
    }
}
