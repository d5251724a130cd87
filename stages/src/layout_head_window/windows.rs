//! The head and recent windows, measured over whole wire messages.

use std::ops::Range;

use foldwire_core::{Message, MessageId, MessageKind};

/// The units of each wire message: consecutive units with the same `entry`, in store order.
/// A layout moves these groups whole and never splits one.
pub fn groups(messages: &[Message]) -> Vec<Range<usize>> {
    let mut out: Vec<Range<usize>> = Vec::new();
    let mut start = 0;
    for i in 1..=messages.len() {
        let same = match (messages.get(i), messages.get(start)) {
            (Some(a), Some(b)) => a.entry == b.entry,
            _ => false,
        };
        if !same {
            if start < i {
                out.push(start..i);
            }
            start = i;
        }
    }
    out
}

/// Tokens of each group.
pub fn group_tokens(groups: &[Range<usize>], tokens: &[u64]) -> Vec<u64> {
    groups
        .iter()
        .map(|g| tokens.get(g.clone()).map_or(0, |t| t.iter().sum()))
        .collect()
}

/// Index of the group holding unit `unit` (the last group when out of range).
pub fn group_of(groups: &[Range<usize>], unit: usize) -> usize {
    groups
        .iter()
        .position(|g| g.contains(&unit))
        .unwrap_or(groups.len())
}

/// Where a head starting at group `start` ends, walking whole groups while they fit in
/// `head_tokens`. With `first_whole` the first group (a reset's transition) is taken whole
/// whatever its size. A boundary that would leave a tool call in the head and its result
/// outside is pulled back to before the call's group (never before the first group when it
/// is taken whole). Returns the end group (exclusive) and whether the head reaches the end
/// of the store, i.e. is still filling.
pub fn head_walk(
    messages: &[Message],
    groups: &[Range<usize>],
    group_tokens: &[u64],
    start: usize,
    head_tokens: u64,
    first_whole: bool,
) -> (usize, bool) {
    let mut end = start;
    let mut sum = 0u64;
    if first_whole && end < groups.len() {
        sum += group_tokens.get(end).copied().unwrap_or(0);
        end += 1;
    }
    while end < groups.len() {
        let t = group_tokens.get(end).copied().unwrap_or(0);
        if sum.saturating_add(t) > head_tokens {
            break;
        }
        sum += t;
        end += 1;
    }
    let filling = end >= groups.len();
    let floor = if first_whole {
        (start + 1).min(end)
    } else {
        start
    };
    (pull_back_over_calls(messages, groups, floor, end), filling)
}

/// Moves a group boundary `end` back (not below `floor`) until no tool call before it has
/// its result at or after it.
pub fn pull_back_over_calls(
    messages: &[Message],
    groups: &[Range<usize>],
    floor: usize,
    mut end: usize,
) -> usize {
    loop {
        let Some(boundary_unit) = groups.get(end).map(|g| g.start) else {
            return end;
        };
        let head_units = groups
            .get(floor)
            .map_or(boundary_unit, |g| g.start)
            .min(boundary_unit)..boundary_unit;
        // The head's calls first (a head holds a few units), then one pass over the units
        // after the boundary for their results: a pass per call read a long session's
        // whole history once for each.
        let calls: Vec<(usize, &str)> = head_units
            .filter_map(|i| {
                let m = messages.get(i)?;
                let link = m.tool.as_ref()?;
                (m.kind == MessageKind::ToolCall).then_some((i, link.call_id.as_str()))
            })
            .collect();
        let answered_after: Vec<&str> = if calls.is_empty() {
            Vec::new()
        } else {
            messages
                .iter()
                .skip(boundary_unit)
                .filter(|r| r.kind == MessageKind::ToolResult)
                .filter_map(|r| r.tool.as_ref().map(|l| l.call_id.as_str()))
                .filter(|id| calls.iter().any(|(_, call)| call == id))
                .collect()
        };
        let crossing = calls
            .iter()
            .find(|(_, call)| answered_after.contains(call))
            .map(|(i, _)| *i);
        match crossing {
            Some(call) => {
                let g = group_of(groups, call).max(floor);
                if g >= end {
                    return end;
                }
                end = g;
            }
            None => return end,
        }
    }
}

/// Where a sealed head ends: the groups from `start` whose units are all in `head_ids`.
pub fn sealed_end(
    messages: &[Message],
    groups: &[Range<usize>],
    start: usize,
    head_ids: &[MessageId],
) -> usize {
    let mut end = start;
    while let Some(g) = groups.get(end) {
        let all_in = g
            .clone()
            .all(|i| messages.get(i).is_some_and(|m| head_ids.contains(&m.id)));
        if !all_in {
            break;
        }
        end += 1;
    }
    end
}

/// Where the recent window starts (a group index): the newest whole groups within
/// `recent_tokens`, never reaching into the head (which ends at group `head_end`).
pub fn recent_start(group_tokens: &[u64], head_end: usize, recent_tokens: u64) -> usize {
    let mut start = group_tokens.len();
    let mut sum = 0u64;
    while start > head_end {
        let t = group_tokens.get(start - 1).copied().unwrap_or(0);
        if sum.saturating_add(t) > recent_tokens {
            break;
        }
        sum += t;
        start -= 1;
    }
    start
}

/// Unit indices of a range of groups.
pub fn units_of(groups: &[Range<usize>], range: Range<usize>) -> Range<usize> {
    let start = groups
        .get(range.start)
        .map(|g| g.start)
        .unwrap_or_else(|| groups.last().map_or(0, |g| g.end));
    let end = if range.end == 0 {
        start
    } else {
        groups
            .get(range.end - 1)
            .map(|g| g.end)
            .unwrap_or_else(|| groups.last().map_or(0, |g| g.end))
    };
    start..end.max(start)
}

/// The head-first order, defined with the `Layout` contract so strategies share it.
pub use foldwire_core::strategy::head_first_order;
