//! The folding kernel: the pure operations the stages `refs.mint`, `ranges.build`, `fold`
//! and `pairing.repair` and the CLI commands `foldwire fold|restore|inspect|search` rest on.
//!
//! Everything here is a plain function over a [`foldwire_core::Conversation`] and a
//! [`foldwire_core::SessionState`]; no actors, and no I/O except through the
//! [`foldwire_core::MediaArchive`] trait in the two async calls that move folded originals
//! to the archive and read them back ([`archive_originals`], [`restore_with_archive`]).
//!
//! - [`units`]: coverage, linked groups (call ↔ results, reasoning ↔ act), tool globs.
//! - [`protect`]: the protected zone and protected tools.
//! - [`ranges`]: compressible ranges.
//! - [`measure`]: what a request costs as it will be encoded.
//! - [`compress`]: [`apply_compression`] — ranges of refs into blocks.
//! - [`lifecycle`]: [`sync_blocks`] — blocks in or out of the client's view, and their age.
//! - [`prune`]: [`fold_view`] — covered units off the wire, summaries rendered, first-user pin.
//! - [`render`]: the fixed shape of a rendered summary.
//! - [`pairing_rules`] and [`repair`]: each wire's pairing rules and their repair.
//! - [`originals`]: [`archive_originals`] — folded originals from the state into the archive.
//! - [`tiers`]: [`summary_runs`] — runs of summaries that fold again into a higher tier.
//! - [`restore`], [`search`], [`inspect`]: reading blocks back.

pub mod compress;
pub mod inspect;
pub mod lifecycle;
pub mod measure;
pub mod originals;
pub mod pairing_rules;
pub mod prehash;
pub mod protect;
pub mod prune;
pub mod ranges;
pub mod render;
pub mod repair;
pub mod restore;
pub mod schedule;
pub mod search;
pub mod tiers;
pub mod units;

pub use compress::{
    CompressConfig, CompressError, CompressRequest, CompressionResult, MinSummary, RangeOutcome,
    apply_compression, apply_compression_knowing, fold_alone,
};
pub use inspect::{BlockView, Inspection, RefView, inspect};
pub use lifecycle::{BlockSync, DEFAULT_OLD_AFTER_TURNS, sync_blocks};
pub use measure::{
    RequestTokens, fold_and_measure, folded_request_tokens, measure, measure_knowing,
};
pub use originals::{
    BatchTarget, OriginalsArchived, OriginalsInFlight, archive_originals, detach_originals,
    finish_archiving, original_key, start_archiving, start_archiving_units,
};
pub use protect::{DEFAULT_LATEST_COUNT, DEFAULT_LATEST_TOOLS, Protection, pin_tools};
pub use prune::{FirstUserPin, FoldOutcome, fold_copy, fold_copy_linked, fold_view};
pub use ranges::{RangesConfig, compressible_ranges, compressible_ranges_with};
pub use render::{
    ArchivedPart, archived_media_lines, archived_parts, folded_media_warning, media_restore_hint,
    rendered_text, summary_text,
};
pub use repair::{RepairReport, repair};
pub use restore::{RestoreError, Restored, RestoredUnit, restore, restore_with_archive};
pub use search::{SearchHit, search, search_top};
pub use tiers::{MAX_TIER, SummaryRun, summary_runs, summary_runs_linked};
