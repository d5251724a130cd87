//! Compressible ranges: the contiguous runs of units the model (or a fold policy) may fold.

use std::collections::BTreeMap;

use foldwire_core::{Conversation, Message};
use foldwire_core::{MessageKind, RangeInfo, Role, SessionState, TokenEstimator};
use serde::{Deserialize, Serialize};

use super::protect::Protection;
use super::units::{Links, coverage, foldable, unit_tokens};

/// Settings of range building.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RangesConfig {
    /// What is protected.
    pub protection: Protection,
    /// Ranges below this many tokens are not worth a summary each: side by side they merge
    /// until they reach it, alone they are dropped.
    pub min_tokens: u64,
    /// A range is cut before a user text message once it holds this many units, so ranges
    /// follow the conversation's exchanges (0 never cuts).
    pub split_at_user_after: usize,
    /// A range is cut, where no tool call and its results would be separated, once it holds
    /// this many tokens, so a fold can take as much as it needs and no more: an agent's tool
    /// loop has no user text to cut at, and would otherwise be one range that folds whole
    /// (`None`: no cap; `ranges.build` derives one from the budget).
    pub max_tokens: Option<u64>,
}

impl Default for RangesConfig {
    fn default() -> Self {
        RangesConfig {
            protection: Protection::default(),
            min_tokens: 200,
            split_at_user_after: 3,
            max_tokens: None,
        }
    }
}

/// Finds the compressible ranges of a conversation whose refs are minted.
///
/// A unit is a candidate when it is foldable (has a ref, no pin, client origin), not covered
/// by an active block, outside the protected zone and the head window, and not part of a
/// protected tool. Units
/// that must travel together ([`Links`]) are withdrawn whole when any member is not a
/// candidate or when a cut would separate them. The result is oldest first and never
/// overlaps. Small ranges side by side merge up to `min_tokens` (see `merge_small`).
pub fn compressible_ranges(
    conversation: &Conversation,
    state: &SessionState,
    config: &RangesConfig,
    estimator: &dyn TokenEstimator,
) -> Vec<RangeInfo> {
    let tokens: Vec<u64> = conversation
        .messages
        .iter()
        .map(|u| unit_tokens(conversation.wire, u, estimator))
        .collect();
    compressible_ranges_with(conversation, state, config, estimator, &tokens)
}

/// [`compressible_ranges`] with every unit's estimate made already (`tokens[i]` is unit
/// `i`'s [`unit_tokens`]; a caller that remembers them across turns passes them in).
pub fn compressible_ranges_with(
    conversation: &Conversation,
    state: &SessionState,
    config: &RangesConfig,
    estimator: &dyn TokenEstimator,
    tokens: &[u64],
) -> Vec<RangeInfo> {
    let units = &conversation.messages;
    let covered = coverage(state);
    let links = Links::new(units);
    let wire = conversation.wire;
    let zone = config.protection.zone(wire, units, &covered, estimator);
    let tools = config.protection.protected_tools(units, &links);
    let head = config.protection.head(units, state);
    let mut candidate: Vec<bool> = units
        .iter()
        .enumerate()
        .map(|(i, u)| {
            foldable(u)
                && u.r#ref.is_some_and(|r| !covered.contains_key(&r))
                && !zone.contains(&i)
                && !tools.contains(&i)
                && !head.contains(&i)
        })
        .collect();
    let groups = links.groups();
    // A cut before `i` is clean when every group that starts before `i` ends before it.
    let mut clean_cut = Vec::with_capacity(units.len());
    let mut reach = 0;
    for i in 0..units.len() {
        clean_cut.push(i >= reach);
        reach = reach.max(links.span(i).1 + 1);
    }
    let cuts = Cuts {
        split_at_user_after: config.split_at_user_after,
        max_tokens: config.max_tokens,
        tokens,
        clean: &clean_cut,
    };
    loop {
        let mut changed = false;
        for members in groups.values() {
            let some = members.iter().any(|&i| candidate.get(i) == Some(&true));
            let all = members.iter().all(|&i| candidate.get(i) == Some(&true));
            if some && !all {
                for &i in members {
                    if let Some(c) = candidate.get_mut(i) {
                        *c = false;
                    }
                }
                changed = true;
            }
        }
        let segments = segment(units, &candidate, &cuts);
        let mut segment_of = vec![usize::MAX; units.len()];
        for (s, seg) in segments.iter().enumerate() {
            for i in seg.clone() {
                if let Some(slot) = segment_of.get_mut(i) {
                    *slot = s;
                }
            }
        }
        for members in groups.values() {
            let first = members.first().and_then(|&i| segment_of.get(i));
            let split = members.iter().any(|&i| segment_of.get(i) != first);
            if split {
                for &i in members {
                    if let Some(c) = candidate.get_mut(i) {
                        *c = false;
                    }
                }
                changed = true;
            }
        }
        if !changed {
            let described = segments
                .into_iter()
                .filter_map(|seg| {
                    let info = describe(units.get(seg.clone())?, tokens.get(seg.clone())?)?;
                    Some((seg, info))
                })
                .collect();
            return merge_small(described, config.min_tokens)
                .into_iter()
                .filter(|r| r.tokens > 0)
                .collect();
        }
    }
}

/// Keeps the ranges of at least `min_tokens` and merges the smaller ones (acp §26 #90): a
/// short exchange is not worth a summary of its own, but a run of them side by side is, so
/// consecutive small ranges with nothing between them in the view (cut apart only at user
/// messages) merge until the merged range reaches the minimum. A run that never reaches
/// it is left out, as a lone small range is. Ranges of the minimum or more stay as they are.
fn merge_small(
    described: Vec<(std::ops::Range<usize>, RangeInfo)>,
    min_tokens: u64,
) -> Vec<RangeInfo> {
    let mut out = Vec::new();
    // The small ranges merged so far, and the position after the last of them.
    let mut batch: Option<(usize, RangeInfo)> = None;
    for (span, info) in described {
        if info.tokens >= min_tokens {
            batch = None;
            out.push(info);
            continue;
        }
        let (end, merged) = match batch.take() {
            Some((end, mut merged)) if end == span.start => {
                merged.absorb(&info);
                (span.end, merged)
            }
            _ => (span.end, info),
        };
        if merged.tokens >= min_tokens {
            out.push(merged);
        } else {
            batch = Some((end, merged));
        }
    }
    out
}

/// Where runs of candidates are cut besides their ends.
struct Cuts<'a> {
    split_at_user_after: usize,
    max_tokens: Option<u64>,
    /// Tokens per unit.
    tokens: &'a [u64],
    /// Whether a cut before each unit keeps every link group whole.
    clean: &'a [bool],
}

/// Maximal runs of consecutive candidates, cut before a user text once a run is long enough,
/// and at a clean boundary once it reaches the token cap.
fn segment(units: &[Message], candidate: &[bool], cuts: &Cuts<'_>) -> Vec<std::ops::Range<usize>> {
    let mut out = Vec::new();
    let mut start: Option<usize> = None;
    let mut run_tokens = 0u64;
    for (i, u) in units.iter().enumerate() {
        let is_candidate = candidate.get(i) == Some(&true);
        if let Some(s) = start {
            let cut_user = is_candidate
                && cuts.split_at_user_after > 0
                && u.role == Role::User
                && u.kind == MessageKind::Text
                && i - s >= cuts.split_at_user_after;
            let cut_size = is_candidate
                && cuts.max_tokens.is_some_and(|max| run_tokens >= max)
                && cuts.clean.get(i) == Some(&true);
            if !is_candidate || cut_user || cut_size {
                out.push(s..i);
                start = None;
            }
        }
        if is_candidate && start.is_none() {
            start = Some(i);
            run_tokens = 0;
        }
        if is_candidate {
            run_tokens += cuts.tokens.get(i).copied().unwrap_or(0);
        }
    }
    if let Some(s) = start {
        out.push(s..units.len());
    }
    out
}

/// The range `units` make, whose estimates are `tokens` (one each, as
/// [`compressible_ranges_with`] was given them).
fn describe(units: &[Message], tokens: &[u64]) -> Option<RangeInfo> {
    let start = units.first()?.r#ref?;
    let end = units.last()?.r#ref?;
    let mut tool_calls: BTreeMap<String, u32> = BTreeMap::new();
    for u in units {
        if u.kind == MessageKind::ToolCall {
            let name = u
                .tool
                .as_ref()
                .and_then(|t| t.name.as_deref())
                .unwrap_or("unnamed");
            match tool_calls.get_mut(name) {
                Some(count) => *count += 1,
                None => {
                    tool_calls.insert(name.to_owned(), 1);
                }
            }
        }
    }
    Some(
        RangeInfo::new(start, end, tokens.iter().sum(), units.len())
            .with_tool_calls(tool_calls)
            .with_tool_units(
                units
                    .iter()
                    .filter(|u| matches!(u.kind, MessageKind::ToolCall | MessageKind::ToolResult))
                    .count(),
            ),
    )
}
