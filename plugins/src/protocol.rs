//! The JSON a strategy outside the binary sees and answers — an HTTP endpoint
//! (`fold.http`, `layout.http`, `summarizer.http`) or a sandboxed plugin — versioned by
//! [`VERSION`]. Each request carries what the trait gets; each answer is checked before it
//! is used, and an answer that does not check out makes the built-in strategy decide.
//!
//! - fold policy: `{"version":1,"kind":"fold_policy","ranges":[{"index","start","end",
//!   "tokens","messages","tool_calls":{name:count},"age"}],"demand":{"request_tokens",
//!   "available","window","reserve","summary_tokens"}}` → `{"version":1,"fold":[index…]}`.
//!   `age` counts the ranges newer than this one (0: the newest).
//! - layout: `{"version":1,"kind":"layout","units":[{"index","role","kind","tokens","group",
//!   "ref","tool"}],"available","head":{"start","end","after_reset","filling","generation"},
//!   "unchanged_prefix_tokens","state"}` → `{"version":1,"order":[index…],"state":any,
//!   "seal_head":bool}`. Units of one `group` (one wire message) must stay together, in order.
//! - summarizer: `{"version":1,"kind":"summarizer","wire","max_chars","units":[{"role",
//!   "kind","text","tool"}]}` → `{"version":1,"summary":"…","topic":"…"|null}`.

use foldwire_core::{
    FoldDemand, LayoutPlan, LayoutRequest, Message, RangeInfo, Summary, SummaryRequest,
};
use foldwire_stages::layout_head_window::{check_order, windows};
use serde_json::{Value, json};

/// The protocol version requests carry and answers must echo.
pub const VERSION: u64 = 1;

/// Why an answer was not used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct BadAnswer(pub String);

fn bad(message: impl Into<String>) -> BadAnswer {
    BadAnswer(message.into())
}

/// Checks the answer's `version`.
fn versioned(answer: &Value) -> Result<(), BadAnswer> {
    match answer.get("version").and_then(Value::as_u64) {
        Some(VERSION) => Ok(()),
        Some(v) => Err(bad(format!(
            "answered protocol version {v}; this foldwire speaks {VERSION}"
        ))),
        None => Err(bad(format!(
            "the answer has no \"version\": {VERSION} (got {})",
            preview(answer)
        ))),
    }
}

/// A short rendering of a value for messages.
pub fn preview(value: &Value) -> String {
    let text = value.to_string();
    if text.chars().count() > 120 {
        let mut s: String = text.chars().take(119).collect();
        s.push('…');
        s
    } else {
        text
    }
}

/// The fold-policy request.
pub fn fold_request(ranges: &[RangeInfo], demand: &FoldDemand) -> Value {
    let n = ranges.len();
    let ranges: Vec<Value> = ranges
        .iter()
        .enumerate()
        .map(|(i, r)| {
            json!({
                "index": i,
                "start": r.start.to_string(),
                "end": r.end.to_string(),
                "tokens": r.tokens,
                "messages": r.messages,
                "tool_calls": r.tool_calls,
                "age": n - 1 - i,
            })
        })
        .collect();
    json!({
        "version": VERSION,
        "kind": "fold_policy",
        "ranges": ranges,
        "demand": {
            "request_tokens": demand.request_tokens,
            "available": demand.budget.available(),
            "window": demand.budget.window,
            "reserve": demand.budget.reserve,
            "summary_tokens": demand.summary_tokens,
        },
    })
}

/// The ranges to fold, from an answer.
///
/// # Errors
/// Wrong version, no `fold` array, or an index that is not one of the ranges.
pub fn fold_answer(answer: &Value, ranges: usize) -> Result<Vec<usize>, BadAnswer> {
    versioned(answer)?;
    let Some(list) = answer.get("fold").and_then(Value::as_array) else {
        return Err(bad(format!(
            "the answer has no \"fold\" array (got {})",
            preview(answer)
        )));
    };
    list.iter()
        .map(|v| match v.as_u64() {
            Some(i) if (i as usize) < ranges => Ok(i as usize),
            _ => Err(bad(format!(
                "\"fold\" holds {v}, which is not the index of one of the {ranges} ranges"
            ))),
        })
        .collect()
}

/// The layout request.
pub fn layout_request(request: &LayoutRequest<'_>) -> Value {
    let groups = windows::groups(request.messages);
    let mut group_of = vec![0usize; request.messages.len()];
    for (g, range) in groups.iter().enumerate() {
        for i in range.clone() {
            if let Some(slot) = group_of.get_mut(i) {
                *slot = g;
            }
        }
    }
    let units: Vec<Value> = request
        .messages
        .iter()
        .enumerate()
        .map(|(i, m)| {
            json!({
                "index": i,
                "role": m.role,
                "kind": m.kind,
                "tokens": request.tokens.get(i).copied().unwrap_or(0),
                "group": group_of.get(i).copied().unwrap_or(0),
                "ref": m.r#ref.map(|r| r.to_string()),
                "tool": m.tool.as_ref().and_then(|t| t.name.clone()),
            })
        })
        .collect();
    json!({
        "version": VERSION,
        "kind": "layout",
        "units": units,
        "available": request.budget.available(),
        "head": request.head,
        "unchanged_prefix_tokens": request.unchanged_prefix_tokens,
        "state": request.state,
    })
}

/// The plan in an answer, checked against the request.
///
/// # Errors
/// Wrong version, no `order`, or an order that is not a permutation of whole wire messages.
pub fn layout_answer(answer: &Value, request: &LayoutRequest<'_>) -> Result<LayoutPlan, BadAnswer> {
    versioned(answer)?;
    let Some(list) = answer.get("order").and_then(Value::as_array) else {
        return Err(bad(format!(
            "the answer has no \"order\" array (got {})",
            preview(answer)
        )));
    };
    let order = list
        .iter()
        .map(|v| {
            v.as_u64()
                .map(|i| i as usize)
                .ok_or_else(|| bad(format!("\"order\" holds {v}, which is not an index")))
        })
        .collect::<Result<Vec<usize>, BadAnswer>>()?;
    let groups = windows::groups(request.messages);
    check_order(&order, &groups, request.messages.len(), "answer")
        .map_err(|e| bad(e.to_string()))?;
    let seal_head = answer
        .get("seal_head")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    Ok(
        LayoutPlan::new(order, answer.get("state").cloned().unwrap_or(Value::Null))
            .with_seal_head(seal_head),
    )
}

/// One unit as summarizers see it: the answer text (reasoning left out, as the extractive
/// summarizer does) or, for a tool call, its arguments.
pub fn unit_json(m: &Message) -> Value {
    json!({
        "role": m.role,
        "kind": m.kind,
        "text": m.answer_text(),
        "tool": m.tool.as_ref().and_then(|t| t.name.clone()),
    })
}

/// The summarizer request.
pub fn summary_request(request: &SummaryRequest<'_>) -> Value {
    json!({
        "version": VERSION,
        "kind": "summarizer",
        "wire": request.wire.to_string(),
        "max_chars": request.max_chars,
        "units": request.messages.iter().map(unit_json).collect::<Vec<_>>(),
    })
}

/// The summary in an answer.
///
/// # Errors
/// Wrong version, no non-empty `summary`, or one longer than `max_chars`.
pub fn summary_answer(
    answer: &Value,
    max_chars: usize,
    author: &str,
) -> Result<Summary, BadAnswer> {
    versioned(answer)?;
    let text = answer
        .get("summary")
        .and_then(Value::as_str)
        .map(str::trim)
        .unwrap_or_default();
    if text.is_empty() {
        return Err(bad(format!(
            "the answer has no non-empty \"summary\" string (got {})",
            preview(answer)
        )));
    }
    let chars = text.chars().count();
    if chars > max_chars {
        return Err(bad(format!(
            "the summary has {chars} characters; at most {max_chars} were asked for"
        )));
    }
    let topic = answer
        .get("topic")
        .and_then(Value::as_str)
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .map(str::to_owned);
    Ok(Summary::new(text, author).with_topic(topic))
}
