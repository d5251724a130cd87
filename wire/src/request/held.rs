//! Requests that continue a conversation the provider keeps: a Responses request naming a
//! stored response (`previous_response_id`) or a conversation object, or referring to stored
//! items (`item_reference`); a Gemini request on a context cache (`cachedContent`). Their
//! bodies hold only what is new. There is nothing whole to fold, and a call's result in
//! them may answer a call only the provider holds, which pairing repair would take for an
//! orphan. Such a request is not decoded: it goes to the provider as sent.

use foldwire_core::Wire;
use memchr::memmem;

use super::WireError;
use super::scan::{self, Field, Mode};
use crate::dialect::dialect;

/// The longest value quoted in the error.
const SHOWN: usize = 80;

/// The error for the first of `top` (a body's top-level fields) that ties the request to a
/// conversation the provider keeps; a field set to `null` ties nothing.
pub(crate) fn held_field(wire: Wire, src: &str, top: &[Field<'_>]) -> Option<WireError> {
    dialect(wire).provider_held_keys().iter().find_map(|key| {
        let value = src.get(scan::field(top, key)?.value.clone())?;
        (value != "null").then(|| WireError::ProviderHeld {
            wire,
            path: (*key).to_owned(),
            found: shortened(value),
        })
    })
}

/// The error for an item of type `kind` at `path` that stands for one the provider keeps.
pub(crate) fn held_item(wire: Wire, path: String, kind: &str) -> WireError {
    WireError::ProviderHeld {
        wire,
        path,
        found: format!("an {kind:?} item"),
    }
}

/// Why `body` continues a conversation the provider keeps, or `None` when it does not (or
/// is not a JSON object, which decoding reports). Cheap for the bodies that do not: one
/// substring search per name, and only a body that names one is scanned.
pub fn provider_held(wire: Wire, body: &[u8]) -> Option<WireError> {
    let d = dialect(wire);
    let names = || {
        d.provider_held_keys()
            .iter()
            .copied()
            .chain(d.provider_held_item())
    };
    let named = |name: &str| memmem::find(body, format!("\"{name}\"").as_bytes()).is_some();
    if !names().any(named) {
        return None;
    }
    let src = std::str::from_utf8(body).ok()?;
    let start = scan::skip_ws(body, 0);
    let top = scan::object_fields_mode(src, &(start..body.len()), Mode::Trusted).ok()?;
    if let Some(held) = held_field(wire, src, &top) {
        return Some(held);
    }
    let kind = d.provider_held_item()?;
    let key = d.messages_key();
    let items = scan::array_items_mode(body, &scan::field(&top, key)?.value, Mode::Trusted).ok()?;
    items.iter().enumerate().find_map(|(i, span)| {
        let fields = scan::object_fields_mode(src, span, Mode::Trusted).ok()?;
        let ty = scan::string_value(src, &scan::field(&fields, "type")?.value)?;
        (ty == kind).then(|| held_item(wire, format!("{key}[{i}]"), kind))
    })
}

/// `value` as the error quotes it: whole when short, else its start and a count.
fn shortened(value: &str) -> String {
    match value.char_indices().nth(SHOWN) {
        Some((cut, _)) => format!(
            "{}… ({} bytes)",
            value.get(..cut).unwrap_or(value),
            value.len()
        ),
        None => value.to_owned(),
    }
}
