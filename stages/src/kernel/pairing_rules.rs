//! Each wire's tool-pairing rules, as a checker over units.
//!
//! - **Anthropic**: the tool_use blocks of an assistant message are answered by tool_result
//!   blocks in the immediately following user message.
//! - **Gemini**: the functionCall parts of a model content are answered by functionResponse
//!   parts in the immediately following user content.
//! - **OpenAI Chat**: an assistant message with `tool_calls` is followed immediately by one
//!   `role: tool` message per call.
//! - **OpenAI Responses**: a run of `function_call` items is followed immediately by their
//!   `function_call_output` items.
//!
//! Everywhere: every result answers a call that precedes it, one result per call, and the
//! units of one wire message stay contiguous.

use foldhash::{HashMap, HashMapExt as _, HashSet, HashSetExt as _};

use foldwire_core::{Message, MessageKind, Role, Wire};
use foldwire_wire::dialect::WireDialect;

use super::units::{call_id, result_id};

/// Consecutive units of one wire message: `(entry, first position, end position)`.
pub fn groups(units: &[Message]) -> Vec<(usize, usize, usize)> {
    let mut out: Vec<(usize, usize, usize)> = Vec::new();
    for (i, u) in units.iter().enumerate() {
        match out.last_mut() {
            Some(g) if g.0 == u.entry => g.2 = i + 1,
            _ => out.push((u.entry, i, i + 1)),
        }
    }
    out
}

/// True when every unit of the group is a tool call (a Responses `function_call` item).
fn all_calls(units: &[Message], g: &(usize, usize, usize)) -> bool {
    units
        .get(g.1..g.2)
        .is_some_and(|us| !us.is_empty() && us.iter().all(|u| u.kind == MessageKind::ToolCall))
}

fn has_call(units: &[Message], g: &(usize, usize, usize)) -> bool {
    units
        .get(g.1..g.2)
        .is_some_and(|us| us.iter().any(|u| call_id(u).is_some()))
}

fn role_of(units: &[Message], g: &(usize, usize, usize)) -> Option<Role> {
    units.get(g.1).map(|u| u.role)
}

/// Every way the units break the wire's pairing rules, in words (empty when valid).
pub fn violations(wire: Wire, units: &[Message]) -> Vec<String> {
    let pairing = wire.dialect().pairing();
    let mut out = Vec::new();
    let gs = groups(units);
    let mut seen_entries = HashSet::new();
    for g in &gs {
        if !seen_entries.insert(g.0) {
            out.push(format!("wire message {} is split into several runs", g.0));
        }
    }
    let mut called: HashSet<&str> = HashSet::new();
    let mut answered: HashMap<&str, usize> = HashMap::new();
    for u in units {
        if let Some(id) = call_id(u) {
            called.insert(id);
        }
        if let Some(id) = result_id(u) {
            if !called.contains(id) {
                out.push(format!("result for {id} has no call before it"));
            }
            *answered.entry(id).or_default() += 1;
        }
    }
    for (id, n) in &answered {
        if *n > 1 {
            out.push(format!("call {id} has {n} results"));
        }
    }
    let mut k = 0;
    while k < gs.len() {
        let Some(g) = gs.get(k) else { break };
        if !has_call(units, g) {
            k += 1;
            continue;
        }
        // The run of call groups answered together.
        let mut end = k + 1;
        if pairing.calls_are_items && all_calls(units, g) {
            while gs.get(end).is_some_and(|n| all_calls(units, n)) {
                end += 1;
            }
        }
        let ids: Vec<&str> = gs
            .get(k..end)
            .unwrap_or_default()
            .iter()
            .flat_map(|g| {
                units
                    .get(g.1..g.2)
                    .unwrap_or_default()
                    .iter()
                    .filter_map(call_id)
            })
            .collect();
        let zone: Vec<&(usize, usize, usize)> = if pairing.results_in_one_message {
            gs.get(end)
                .filter(|n| role_of(units, n) == Some(pairing.result_role))
                .into_iter()
                .collect()
        } else {
            gs.get(end..)
                .unwrap_or_default()
                .iter()
                .take_while(|n| role_of(units, n) == Some(pairing.result_role))
                .collect()
        };
        let answered_here: HashSet<&str> = zone
            .iter()
            .flat_map(|g| {
                units
                    .get(g.1..g.2)
                    .unwrap_or_default()
                    .iter()
                    .filter_map(result_id)
            })
            .collect();
        for id in ids {
            if !answered_here.contains(id) {
                out.push(format!(
                    "call {id} is not answered in the wire message(s) right after it"
                ));
            }
        }
        k = end;
    }
    out
}
