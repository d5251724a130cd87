//! Pairing repair: every tool call immediately followed by its result in the shape the wire
//! requires, however far away the result was.

use foldhash::{HashMap, HashMapExt as _, HashSet};

use bytes::Bytes;
use foldwire_core::{Conversation, Message, MessageKind, Origin, Role, ToolLink};
use foldwire_wire::dialect::WireDialect;
use serde::{Deserialize, Serialize};

use super::pairing_rules::groups;
use super::units::{call_id, result_id};

/// What pairing repair did, by kind of action.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RepairReport {
    /// Results moved next to their call.
    pub moved: usize,
    /// Stub results inserted because no result existed anywhere.
    pub stubs: usize,
    /// Results dropped because no call for them exists.
    pub orphans_dropped: usize,
    /// Second and later results for one call, dropped (the first is kept).
    pub duplicates_dropped: usize,
    /// Result messages formed by joining results that sat in several wire messages.
    pub joined: usize,
}

impl RepairReport {
    /// True when nothing was changed.
    pub fn is_clean(&self) -> bool {
        *self == RepairReport::default()
    }
}

/// The text of a stub result.
pub fn stub_text(call: &str, name: Option<&str>) -> String {
    format!(
        "[foldwire: no result for tool call {call}{} exists anywhere in this conversation; this placeholder stands in for it]",
        name.map(|n| format!(" ({n})")).unwrap_or_default()
    )
}

/// Repairs tool pairing in place (see the module docs). A conversation that already obeys
/// the wire's rules is left exactly as it was.
pub fn repair(conversation: &mut Conversation) -> RepairReport {
    let wire = conversation.wire;
    let pairing = wire.dialect().pairing();
    let result_role = pairing.result_role;
    let mut report = RepairReport::default();
    let original = std::mem::take(&mut conversation.messages);

    // Which calls exist; which result answers each (the first one).
    let mut calls: HashMap<String, Option<String>> = HashMap::new();
    for u in &original {
        if let Some(id) = call_id(u) {
            calls
                .entry(id.to_owned())
                .or_insert_with(|| u.tool.as_ref().and_then(|t| t.name.clone()));
        }
    }
    let mut first_result: HashMap<String, usize> = HashMap::new();
    let keep: Vec<bool> = original
        .iter()
        .enumerate()
        .map(|(i, u)| match result_id(u) {
            Some(id) if !calls.contains_key(id) => {
                report.orphans_dropped += 1;
                false
            }
            Some(id) if first_result.contains_key(id) => {
                report.duplicates_dropped += 1;
                false
            }
            Some(id) => {
                first_result.insert(id.to_owned(), i);
                true
            }
            None => true,
        })
        .collect();
    if keep.iter().all(|k| *k) && super::pairing_rules::violations(wire, &original).is_empty() {
        conversation.messages = original;
        return report;
    }
    let units: Vec<(usize, Message)> = original
        .into_iter()
        .enumerate()
        .filter(|(i, _)| keep.get(*i) == Some(&true))
        .collect();
    let plain: Vec<Message> = units.iter().map(|(_, u)| u.clone()).collect();
    let gs = groups(&plain);
    // Position in `plain` of each call's chosen result.
    let result_at: HashMap<&str, usize> = plain
        .iter()
        .enumerate()
        .filter_map(|(i, u)| {
            let id = result_id(u)?;
            (units.get(i).map(|(o, _)| *o) == first_result.get(id).copied()).then_some((id, i))
        })
        .collect();
    let entry_sizes: HashMap<usize, usize> = gs.iter().fold(HashMap::new(), |mut m, g| {
        *m.entry(g.0).or_default() += g.2 - g.1;
        m
    });

    let mut out: Vec<Message> = Vec::with_capacity(plain.len());
    let mut new_entries: Vec<Role> = Vec::new();
    let base_entries = conversation.entries.len();
    let mut k = 0;
    while k < gs.len() {
        let Some(&g) = gs.get(k) else { break };
        let slice = plain.get(g.1..g.2).unwrap_or_default();
        if !slice.iter().any(|u| call_id(u).is_some()) {
            // Results are placed right after their call (earlier or later), never here.
            out.extend(slice.iter().filter(|u| result_id(u).is_none()).cloned());
            k += 1;
            continue;
        }
        let mut end = k + 1;
        if pairing.calls_are_items && slice.iter().all(|u| u.kind == MessageKind::ToolCall) {
            while gs.get(end).is_some_and(|n| {
                plain.get(n.1..n.2).is_some_and(|us| {
                    !us.is_empty() && us.iter().all(|u| u.kind == MessageKind::ToolCall)
                })
            }) {
                end += 1;
            }
        }
        let run = gs.get(k..end).unwrap_or_default();
        let mut ids: Vec<&str> = Vec::new();
        for g in run {
            for u in plain.get(g.1..g.2).unwrap_or_default() {
                out.push(u.clone());
                if let Some(id) = call_id(u)
                    && !ids.contains(&id)
                {
                    ids.push(id);
                }
            }
        }
        // Already in the right shape?
        let wanted: Vec<Option<usize>> = ids.iter().map(|id| result_at.get(id).copied()).collect();
        let tidy = if pairing.results_in_one_message {
            gs.get(end).is_some_and(|n| {
                plain.get(n.1).map(|u| u.role) == Some(result_role)
                    && wanted
                        .iter()
                        .all(|w| w.is_some_and(|p| p >= n.1 && p < n.2))
                    && plain
                        .get(n.1..n.2)
                        .unwrap_or_default()
                        .iter()
                        .filter_map(result_id)
                        .all(|id| ids.contains(&id))
            })
        } else {
            let next = gs.get(end..end + ids.len()).unwrap_or_default();
            next.len() == ids.len()
                && next.iter().all(|n| {
                    n.2 - n.1 == 1
                        && plain.get(n.1).is_some_and(|u| {
                            u.role == result_role
                                && result_id(u).is_some_and(|id| ids.contains(&id))
                        })
                })
                && wanted.iter().all(|w| w.is_some())
        };
        if tidy {
            let take = if pairing.results_in_one_message {
                1
            } else {
                ids.len()
            };
            for n in gs.get(end..end + take).unwrap_or_default() {
                for at in n.1..n.2 {
                    if let Some(u) = plain.get(at) {
                        out.push(u.clone());
                    }
                }
            }
            k = end + take;
            continue;
        }
        // Gather the results, wherever they are; stub the missing ones.
        let sources: HashSet<usize> = wanted
            .iter()
            .flatten()
            .filter_map(|&p| plain.get(p).map(|u| u.entry))
            .collect();
        let shared_entry = if pairing.results_in_one_message {
            let reuse = sources.len() == 1
                && wanted.iter().all(Option::is_some)
                && sources
                    .iter()
                    .next()
                    .is_some_and(|e| entry_sizes.get(e) == Some(&wanted.len()));
            if sources.len() > 1 {
                report.joined += 1;
            }
            if reuse {
                sources.iter().next().copied()
            } else {
                new_entries.push(result_role);
                Some(base_entries + new_entries.len() - 1)
            }
        } else {
            None
        };
        for (id, w) in ids.iter().zip(&wanted) {
            let mut unit = match w.and_then(|p| plain.get(p).map(|u| (p, u.clone()))) {
                Some((_, u)) => {
                    report.moved += 1;
                    u
                }
                None => {
                    report.stubs += 1;
                    let name = calls.get(*id).cloned().flatten();
                    let mut stub = Message::synthesized(
                        0,
                        result_role,
                        stub_text(id, name.as_deref()),
                        Origin::Stub,
                        Bytes::new(),
                    );
                    stub.kind = MessageKind::ToolResult;
                    stub.tool = Some(ToolLink {
                        call_id: (*id).to_owned(),
                        name,
                    });
                    stub
                }
            };
            unit.entry = match shared_entry {
                Some(e) => e,
                None if unit.origin == Origin::Client
                    && entry_sizes.get(&unit.entry) == Some(&1) =>
                {
                    unit.entry
                }
                None => {
                    new_entries.push(result_role);
                    base_entries + new_entries.len() - 1
                }
            };
            out.push(unit);
        }
        k = end;
    }
    if report.is_clean() {
        conversation.messages = plain;
        return report;
    }
    for role in new_entries {
        conversation.push_entry(role);
    }
    conversation.messages = out;
    report
}
