//! The compress tool loop as library components: the model folds its own context through
//! tools foldwire adds to the request.
//!
//! - [`inject`]: the `tools.inject` stage adds the tools, the static system note and the
//!   per-turn note (pressure nudge and the ranges `ranges.build` found) to the turn's own
//!   conversation, in the same pass `wire.encode` writes.
//! - [`calls`]: the handlers of the model's `compress`, `restore` and `search_context` calls,
//!   registered at link time ([`ToolHandler`]), run against a session of an [`Engine`].
//! - [`notes`]: the notes' text.
//!
//! A host runs the loop without any HTTP layer: put `tools.inject` before `wire.encode`, run
//! the turn, and when the model's answer calls one of [`names`], run it with [`run_call`]
//! against the conversation the turn produced ([`TurnOutcome::conversation`]) and send the
//! results back. The proxy's transport (intercepting calls in a stream, re-requesting,
//! stitching) is built on these.
//!
//! [`Engine`]: foldwire_core::Engine
//! [`TurnOutcome::conversation`]: foldwire_core::TurnOutcome

pub mod calls;
pub mod inject;
pub mod notes;

pub use calls::{CallCx, CallResult, RegisteredTool, ToolHandler, handlers, names, run_call};
pub use inject::{SIDE_REQUEST_COUNTER, ToolsInject, model_view};
pub use notes::{
    NUDGE_EARLY, model_compress_config, offered_ranges, pressure_note, ranges_note, schedule_floor,
    summary_runs_of, turn_note,
};

/// The compress tool's name.
pub const COMPRESS: &str = "compress";
/// The restore tool's name.
pub const RESTORE: &str = "restore";
/// The `restore` argument that lists the session's archived media instead of restoring.
pub const LIST: &str = "list";
/// The search tool's name.
pub const SEARCH: &str = "search_context";
/// The built-in tool names (every one is hidden from the client).
pub const NAMES: [&str; 3] = [COMPRESS, RESTORE, SEARCH];

/// The system note that explains the tools; stable across turns. It describes refs as
/// `refs.mint` issues them: one per foldable content part (a text, a tool call, a tool
/// result), numbered in first-seen order, with parts that cannot fold left unnumbered.
pub const SYSTEM_NOTE: &str = "Context management (foldwire): earlier conversation content \
is numbered with refs (m00001, m00002, ...), one per content part (a text, a tool call, a tool \
result, an image), so one message can hold several refs. Refs are numbered per session in the \
order parts first arrived and are not shown inside the messages. Parts that cannot be folded \
(system instructions, pinned parts such as media that cannot be archived, items foldwire cannot \
read) get no ref, so the numbers skip them. Folded content appears as one summary headed \
[foldwire bN]; bN is that block's id. When a note after the conversation lists ranges that can \
be compressed (ref spans, or block spans like b2..b5 that fold summaries into one), call \
`compress` with such ranges and a faithful summary; only the ranges listed can fold. The \
originals stay recoverable with `restore` (a block id like b3, or the ref an archived image's \
placeholder names; `list` names every archived image or document) and searchable with `search_context`. These calls are handled for you and \
are not part of the user's task; after them, continue the task.";

/// The report counter set to 1 when a turn's request got the tools.
pub const INJECTED_COUNTER: &str = "tools.injected";

/// The report counter of the tokens the tools and notes added (bytes / 4).
pub const ADDED_TOKENS_COUNTER: &str = "tools.added_tokens";

/// The tool definitions as `wire` lists them in its `tools` field.
pub fn tool_entries(wire: foldwire_core::Wire) -> Vec<serde_json::Value> {
    let handlers = handlers();
    let schemas: Vec<serde_json::Value> = handlers.iter().map(|h| h.schema()).collect();
    let specs: Vec<foldwire_wire::request::extend::ToolSpec<'_>> = handlers
        .iter()
        .zip(&schemas)
        .map(|(h, schema)| foldwire_wire::request::extend::ToolSpec {
            name: h.name(),
            description: h.description(),
            schema,
        })
        .collect();
    foldwire_wire::request::extend::tool_entries(wire, &specs)
}
