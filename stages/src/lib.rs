//! # foldwire-stages
//!
//! The built-in stages, one module each, registered at link time:
//! `wire.decode`, `media.classify`, `archive.spill`, `refs.mint`, `ranges.build`, `fold`,
//! `pairing.repair`, `layout.head_window`, `wire.encode`, and the tool loop's
//! `tools.inject` with the handlers of the model's calls ([`tool_loop`]).

pub mod archive_spill;
mod digest_memo;
pub mod fold;
pub mod head_record;
pub mod inline_payload;
pub mod kernel;
pub mod layout_head_window;
pub mod media_classify;
pub mod pairing_repair;
pub mod ranges_build;
pub mod refs_mint;
pub mod strategy_scope;
pub mod tool_loop;
pub mod tool_trim;
pub mod wire_codec;

/// Call from a binary or test that needs these stages registered; referencing the crate is
/// what keeps its link-time registrations in the final binary.
pub fn link() {}
