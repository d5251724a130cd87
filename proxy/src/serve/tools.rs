//! The proxy's own tools (`compress`, `restore`, `search_context`). What they are, the notes
//! that explain them and their injection into a request are the library's tool loop
//! ([`foldwire_stages::tool_loop`]: the `tools.inject` stage and the call handlers); the
//! proxy only hides the calls from the client and carries their results back upstream.

use std::sync::OnceLock;

pub use foldwire_stages::tool_loop::{
    COMPRESS, LIST, NAMES, RESTORE, SEARCH, SYSTEM_NOTE, pressure_note, ranges_note, tool_entries,
    turn_note,
};

/// Every tool the loop handles (the built-ins and any a linked crate registered): the calls
/// the proxy runs and hides from the client.
pub fn names() -> &'static [&'static str] {
    static NAMES_ONCE: OnceLock<Vec<&'static str>> = OnceLock::new();
    NAMES_ONCE.get_or_init(foldwire_stages::tool_loop::names)
}
