//! The per-turn note: which ranges the model can compress now, and a nudge when a fold is due
//! on the fold schedule. It is appended after everything cached.

use std::collections::{HashMap, HashSet};

use foldwire_core::{AnyRef, Conversation, RangeInfo, Ref, SessionState, TokenEstimator, Turn};

use crate::kernel::schedule::ScheduleConfig;
use crate::kernel::units::KnownUnitTokens;
use crate::kernel::{CompressConfig, Protection, SummaryRun, fold_alone, summary_runs};
use crate::ranges_build::UsedProtection;

/// Characters of a range's first message shown in the note.
const PREVIEW_CHARS: usize = 80;

/// The runs of summaries the model may fold a tier up, found in a turn's conversation (refs
/// minted, folds applied), the session's state after its folds, and the protection
/// `ranges.build` recorded, with the same rules automatic folds use.
pub fn summary_runs_of(turn: &Turn, estimator: &dyn TokenEstimator) -> Vec<SummaryRun> {
    let Some(view) = turn.conversation.as_ref() else {
        return Vec::new();
    };
    let protection = UsedProtection::of(turn);
    summary_runs(view, &turn.state, &protection, estimator)
}

/// The config a model's `compress` call is checked under: the protection the turn's note
/// offered its ranges under, every other rule at its default. The note and the call share
/// it, so they cannot disagree on what may fold.
pub fn model_compress_config(protection: Protection) -> CompressConfig {
    CompressConfig {
        protection,
        ..CompressConfig::default()
    }
}

/// The ranges of `ranges` (what `ranges.build` found) the model can still compress once the
/// turn is folded and laid out: those whose ends the model is sent in `view`, in order, and
/// that `compress` under `config`, checked against `view`, would fold on their own. Each
/// keeps, as its tokens, what that fold would take.
///
/// The ranges are built before `pairing.repair` drops a result whose call the client no
/// longer sends or adds a stub, before `tool.trim` shortens outputs and before the layout
/// records a new head; `compress` checks the model's ranges against what it was sent, so a
/// note listing every range would ask for folds that cannot be made: ends not sent, every
/// unit between them recent or in the head, or too little left to be worth a summary.
pub fn offered_ranges(
    ranges: &[RangeInfo],
    view: &Conversation,
    state: &SessionState,
    config: &CompressConfig,
    estimator: &dyn TokenEstimator,
    known: Option<&KnownUnitTokens>,
) -> Vec<RangeInfo> {
    // Sent in order, too: `compress` takes reversed ends, but a note listing them would
    // name a span other than the one folded.
    let wanted: HashSet<Ref> = ranges.iter().flat_map(|r| [r.start, r.end]).collect();
    let at: HashMap<Ref, usize> = view
        .messages
        .iter()
        .enumerate()
        .filter_map(|(i, u)| u.r#ref.filter(|r| wanted.contains(r)).map(|r| (r, i)))
        .collect();
    let in_order: Vec<&RangeInfo> = ranges
        .iter()
        .filter(|r| match (at.get(&r.start), at.get(&r.end)) {
            (Some(first), Some(last)) => first <= last,
            _ => false,
        })
        .collect();
    let ends: Vec<(AnyRef, AnyRef)> = in_order
        .iter()
        .map(|r| (AnyRef::Message(r.start), AnyRef::Message(r.end)))
        .collect();
    fold_alone(state, view, &ends, config, estimator, known)
        .into_iter()
        .zip(in_order)
        .filter_map(|(check, range)| {
            let mut offered = range.clone();
            offered.tokens = check.ok()?;
            Some(offered)
        })
        .collect()
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
            "\n- {first}..{last}: {} summaries, ~{} tokens (folds them into one tier-{} summary",
            run.blocks.len(),
            run.tokens,
            run.tier
        ));
        // The fresh messages between the summaries fold with them: a summary written from
        // the summaries alone would leave them out.
        match (run.fresh.first(), run.fresh.last()) {
            (Some(a), Some(b)) => note.push_str(&format!(
                ", with the {} messages between them, {a}..{b}, which it must cover too)",
                run.fresh.len()
            )),
            _ => note.push(')'),
        }
    }
    Some(note)
}

/// The nudge asks the model a little before the fold stage would fold by itself (with its
/// extractive summarizer): at this share of the schedule's trigger.
pub const NUDGE_EARLY: f64 = 0.8;

/// The fold schedule's record in a session state: the request's size right after its last
/// fold (0 before the first), which the nudges measure growth from.
pub fn schedule_floor(state: &foldwire_core::SessionState) -> u64 {
    crate::fold::ScheduleRecord::load(state).floor
}

/// A nudge that follows the fold schedule (`fold.scheduled`'s defaults): none until the
/// request has passed [`NUDGE_EARLY`] of its trigger and grown by that share of the
/// schedule's `growth` since the last fold; "due" from there, "urgent" once the schedule
/// itself is due (the proxy folds by itself there if the model does not). So a model is
/// asked rarely, and for one large fold, not on every turn.
pub fn pressure_note(request_tokens: u64, floor: u64, window: u64) -> Option<String> {
    if window == 0 {
        return None;
    }
    let schedule = ScheduleConfig::default();
    let available = foldwire_core::Budget::default()
        .with_window(window)
        .available();
    // Early in both: the growth the schedule waits for is as large as its trigger, so an
    // early trigger alone would never come before the fold itself.
    let early = ScheduleConfig {
        trigger: schedule.trigger * NUDGE_EARLY,
        growth: schedule.growth * NUDGE_EARLY,
        min_growth_tokens: (schedule.min_growth_tokens as f64 * NUDGE_EARLY) as u64,
        ..schedule
    };
    let grown = request_tokens.saturating_sub(floor);
    match (
        schedule.due(request_tokens, floor, available),
        early.due(request_tokens, floor, available),
    ) {
        (Some(_), _) => Some(format!(
            "[foldwire] Fold now: the context holds {request_tokens} of {window} tokens and grew by {grown} since the last fold. \
             In one compress call, fold every listed range you no longer need verbatim, oldest first."
        )),
        (None, Some(_)) => Some(format!(
            "[foldwire] Fold due: the context grew by {grown} tokens since the last fold ({request_tokens} of {window}). \
             In one compress call, fold the oldest listed ranges you no longer need verbatim."
        )),
        (None, None) => None,
    }
}

/// The trailing note of a turn: the compressible ranges and, when some are offered and a
/// fold is due on the schedule ([`pressure_note`]), the nudge to compress them. Without a
/// range to offer there is no nudge: the model is never asked for a fold it cannot make.
pub fn turn_note(
    ranges: &[RangeInfo],
    runs: &[SummaryRun],
    view: Option<&Conversation>,
    request_tokens: u64,
    floor: u64,
    window: u64,
) -> Option<String> {
    let listed = ranges_note(ranges, runs, view)?;
    let parts: Vec<String> = pressure_note(request_tokens, floor, window)
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
    fn nudges_follow_the_fold_schedule() {
        // Window 100,000: 84,000 available; trigger 0.45 (37,800) and growth 0.45 (37,800)
        // since the last fold, asked from 0.8 of both (30,240); ceiling 0.9 (75,600).
        let w = 100_000;
        assert_eq!(pressure_note(30_000, 0, w), None, "under the early trigger");
        assert!(pressure_note(31_000, 0, w).unwrap().contains("Fold due"));
        assert!(pressure_note(40_000, 0, w).unwrap().contains("Fold now"));
        // Right after a fold that left 25,000, the same pressure asks nothing until the
        // context has grown again: no nudge on every turn.
        assert_eq!(pressure_note(31_000, 25_000, w), None);
        assert_eq!(pressure_note(55_000, 25_000, w), None);
        assert!(
            pressure_note(56_000, 25_000, w)
                .unwrap()
                .contains("Fold due")
        );
        assert!(
            pressure_note(63_000, 25_000, w)
                .unwrap()
                .contains("Fold now")
        );
        // Past the ceiling whatever the growth.
        assert_eq!(pressure_note(75_000, 74_000, w), None);
        assert!(
            pressure_note(76_000, 75_000, w)
                .unwrap()
                .contains("Fold now")
        );
        let r = RangeInfo::new("m00001".parse().unwrap(), "m00004".parse().unwrap(), 900, 4)
            .with_tool_calls([("bash".to_owned(), 2)])
            .with_tool_units(4);
        let note = turn_note(std::slice::from_ref(&r), &[], None, 100, 0, 1000).unwrap();
        assert!(note.contains("m00001..m00004: 4 messages, ~900 tokens (tools: bash×2)"));
        assert!(turn_note(&[], &[], None, 100, 0, 1000).is_none());
        // Due with nothing to offer: no nudge asks for a fold that cannot be made.
        assert!(turn_note(&[], &[], None, 35_000, 0, w).is_none());
        let pressed = turn_note(std::slice::from_ref(&r), &[], None, 35_000, 0, w).unwrap();
        assert!(pressed.contains("Fold due") && pressed.contains("m00001..m00004"));
        // Summaries side by side are offered by block ids, and count as an offer.
        let run = SummaryRun {
            blocks: vec![
                foldwire_core::BlockId(2),
                foldwire_core::BlockId(3),
                foldwire_core::BlockId(5),
            ],
            tokens: 240,
            tier: 2,
            fresh: Vec::new(),
        };
        let note = turn_note(&[], std::slice::from_ref(&run), None, 35_000, 0, w).unwrap();
        assert!(note.contains("Fold due"), "{note}");
        assert!(
            note.contains("b2..b5: 3 summaries, ~240 tokens (folds them into one tier-2 summary)"),
            "{note}"
        );
        // Fresh messages between the summaries fold with them, and the note says which.
        let with_fresh = SummaryRun {
            fresh: vec!["m00011".parse().unwrap(), "m00014".parse().unwrap()],
            ..run.clone()
        };
        let note = turn_note(&[], std::slice::from_ref(&with_fresh), None, 35_000, 0, w).unwrap();
        assert!(
            note.contains("b2..b5: 3 summaries, ~240 tokens (folds them into one tier-2 summary, with the 2 messages between them, m00011..m00014, which it must cover too)"),
            "{note}"
        );
    }
}
