//! Small, panic-free readers over `serde_json::Value` shared by the wire interpreters.

use serde_json::Value;

use super::event::{StreamEvent, Usage};

/// The value at `path` (object keys), if every step exists.
pub(crate) fn at<'a>(value: &'a Value, path: &[&str]) -> Option<&'a Value> {
    path.iter().try_fold(value, |v, key| v.get(*key))
}

/// The unsigned integer at `path`.
pub(crate) fn u64_at(value: &Value, path: &[&str]) -> Option<u64> {
    at(value, path).and_then(Value::as_u64)
}

/// The string at `path`.
pub(crate) fn str_at<'a>(value: &'a Value, path: &[&str]) -> Option<&'a str> {
    at(value, path).and_then(Value::as_str)
}

/// The array at `path`, or an empty slice.
pub(crate) fn array_at<'a>(value: &'a Value, path: &[&str]) -> &'a [Value] {
    at(value, path)
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default()
}

/// The string at `path` when it is present and not empty.
pub(crate) fn nonempty_str_at<'a>(value: &'a Value, path: &[&str]) -> Option<&'a str> {
    str_at(value, path).filter(|s| !s.is_empty())
}

/// Pushes a `Usage` event when `usage` is an object with at least one count.
pub(crate) fn push_usage(out: &mut Vec<StreamEvent>, usage: Usage) {
    if usage != Usage::default() {
        out.push(StreamEvent::Usage(usage));
    }
}

/// An `Error` event from a provider error object (`{"message": ...}`) or string.
pub(crate) fn error_event(error: &Value) -> StreamEvent {
    let message = match error {
        Value::String(s) => s.clone(),
        other => str_at(other, &["message"])
            .map(str::to_owned)
            .unwrap_or_else(|| other.to_string()),
    };
    StreamEvent::Error {
        message,
        raw: error.to_string(),
    }
}

/// True when `value` is present and not JSON `null`.
pub(crate) fn is_set(value: Option<&Value>) -> bool {
    value.is_some_and(|v| !v.is_null())
}
