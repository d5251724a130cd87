//! The compress operation: turning ranges of refs into blocks.

use std::collections::BTreeMap;

use foldhash::HashSet;

use foldwire_core::derived;
use foldwire_core::{
    AnyRef, Block, BlockId, ByRef, Conversation, Message, MessageId, Origin, OriginalText, Ref,
    SessionState, TokenEstimator, state::Shared,
};
use serde::{Deserialize, Serialize};

use super::protect::Protection;
use super::tiers::MAX_TIER;
use super::units::{Coverage, KnownUnitTokens, Links, coverage, foldable, unit_tokens};

/// One range the caller (the model through the compress tool, the CLI, a fold policy) asks
/// to fold. Build one with [`CompressRequest::new`] and the `with_` methods, so a field added
/// later does not break the code that builds it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct CompressRequest {
    /// First ref of the range: a message ref or a block id.
    pub start: AnyRef,
    /// Last ref of the range (reversed ranges are accepted and normalized).
    pub end: AnyRef,
    /// The summary that stands in for the range.
    pub summary: String,
    /// An optional topic line.
    #[serde(default)]
    pub topic: Option<String>,
    /// Who wrote the summary (`summarizer.extractive`, `model`, `cli`).
    #[serde(default)]
    pub author: Option<String>,
    /// This range's own longest summary, in characters, in place of the batch's
    /// [`CompressConfig::max_summary_chars`] (0 disables): a range that needs a longer summary
    /// than the rest says so without loosening the bound for all of them.
    #[serde(default)]
    pub max_summary_chars: Option<usize>,
}

impl CompressRequest {
    /// A request to fold `start..=end` into `summary`, with no topic, author or bound of
    /// its own.
    pub fn new(start: AnyRef, end: AnyRef, summary: impl Into<String>) -> Self {
        CompressRequest {
            start,
            end,
            summary: summary.into(),
            topic: None,
            author: None,
            max_summary_chars: None,
        }
    }

    /// This request with a topic line.
    pub fn with_topic(mut self, topic: impl Into<String>) -> Self {
        self.topic = Some(topic.into());
        self
    }

    /// This request with who wrote its summary.
    pub fn with_author(mut self, author: impl Into<String>) -> Self {
        self.author = Some(author.into());
        self
    }

    /// This request with its own longest summary, in characters.
    pub fn with_max_summary_chars(mut self, chars: usize) -> Self {
        self.max_summary_chars = Some(chars);
        self
    }
}

/// Validation settings of the compress operation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CompressConfig {
    /// What may not fold.
    pub protection: Protection,
    /// The fresh content of a batch's message ranges must reach this many tokens (0
    /// disables); block ranges are exempt.
    pub min_tokens: u64,
    /// Longest accepted summary, in characters (0 disables).
    pub max_summary_chars: usize,
    /// Shortest accepted summary, relative to what it replaces. It is meant for summaries a
    /// model writes (the proxy's `compress` tool): automatic folds turn it off, since a
    /// summarizer's length follows its own settings, and so does the CLI's `fold`, a
    /// person's explicit choice.
    pub min_summary: MinSummary,
}

impl Default for CompressConfig {
    fn default() -> Self {
        CompressConfig {
            protection: Protection::default(),
            min_tokens: 200,
            max_summary_chars: 20_000,
            min_summary: MinSummary::default(),
        }
    }
}

/// The shortest summary a range accepts: `chars`, raised by `chars_per_1k_tokens` for every
/// 1,000 tokens the range replaces (its fresh messages and the summaries of the blocks it
/// consumes), but never above `cap` — so a huge range does not demand a huge summary.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct MinSummary {
    /// The floor, in characters (0 turns the whole rule off).
    pub chars: usize,
    /// Characters more per 1,000 replaced tokens (about 1% of the replaced text).
    pub chars_per_1k_tokens: usize,
    /// The most the minimum grows to, in characters (a floor above it still applies).
    pub cap: usize,
}

impl MinSummary {
    /// No minimum.
    pub const OFF: MinSummary = MinSummary {
        chars: 0,
        chars_per_1k_tokens: 0,
        cap: 0,
    };

    /// The minimum for a range replacing `tokens`, or 0 when the rule is off.
    pub fn for_tokens(&self, tokens: u64) -> usize {
        if self.chars == 0 {
            return 0;
        }
        let grown = usize::try_from(tokens.saturating_mul(self.chars_per_1k_tokens as u64) / 1000)
            .unwrap_or(usize::MAX);
        self.chars.max(grown.min(self.cap))
    }
}

impl Default for MinSummary {
    fn default() -> Self {
        MinSummary {
            chars: 40,
            chars_per_1k_tokens: 40,
            cap: 400,
        }
    }
}

/// Why one range of a batch was not applied. The rest of the batch still applies.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum CompressError {
    /// The ref was never issued in this session.
    #[error(
        "{given} does not exist in this session (refs are per session; inspect the session for valid refs)"
    )]
    UnknownRef {
        /// The ref as given.
        given: String,
    },
    /// The ref exists but its message is not in the conversation the range was checked against.
    #[error("{given} is not in the current conversation (the client no longer sends it)")]
    NotInView {
        /// The ref as given.
        given: String,
    },
    /// The message was already folded directly by an active block.
    #[error(
        "{given} is already folded into {block}; use {block} as the endpoint to fold it further"
    )]
    AlreadyFolded {
        /// The ref as given.
        given: String,
        /// The block that holds it.
        block: BlockId,
    },
    /// The block was consumed by a higher tier and no active block holds its content.
    #[error("{given} is inactive and no active block holds its content")]
    BlockInactive {
        /// The block as given.
        given: String,
    },
    /// Everything foldable in the range is protected.
    #[error("range is entirely protected ({why}); nothing was folded")]
    Protected {
        /// Which protection applied.
        why: String,
    },
    /// The range holds nothing that can fold (all pinned, covered by other blocks, or empty).
    #[error("range contains no compressible messages")]
    NothingCompressible,
    /// A message range that would only re-wrap existing blocks.
    #[error(
        "range adds no new messages: it only re-wraps {blocks}; fold those by block id ({first}..{last}) to make a higher tier"
    )]
    NothingNew {
        /// The blocks it would re-wrap, comma-separated.
        blocks: String,
        /// The first of them.
        first: BlockId,
        /// The last of them.
        last: BlockId,
    },
    /// The batch's fresh content is below the minimum.
    #[error(
        "total compressible content too small ({tokens} tokens across the batch's message ranges, minimum {min}); include more messages"
    )]
    TooSmall {
        /// Fresh tokens of the batch.
        tokens: u64,
        /// The minimum.
        min: u64,
    },
    /// The summary is empty.
    #[error("summary is empty")]
    EmptySummary,
    /// The summary is too short for what it replaces.
    #[error(
        "summary too short ({len} chars, min {min} for the ~{tokens} tokens it replaces); write a summary of at least {min} characters that keeps what is still needed (files, decisions, open questions)"
    )]
    SummaryTooShort {
        /// Its length.
        len: usize,
        /// The minimum.
        min: usize,
        /// Tokens the range replaces.
        tokens: u64,
    },
    /// The summary is too long.
    #[error("summary too long ({len} chars, max {max})")]
    SummaryTooLong {
        /// Its length.
        len: usize,
        /// The maximum.
        max: usize,
    },
    /// The range overlaps an earlier-starting range of the same batch, which won.
    #[error(
        "range overlaps range #{with} of the same batch, which starts earlier and was applied instead"
    )]
    Overlaps {
        /// Index of the winning range in the request.
        with: usize,
    },
    /// A unit's bytes are not UTF-8 and cannot be kept in the state.
    #[error("the bytes of {ref} are not UTF-8 and cannot be kept for restore")]
    NotUtf8 {
        /// The ref.
        r#ref: Ref,
    },
}

/// What happened to one range of a batch.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RangeOutcome {
    /// Index of the range in the request.
    pub request: usize,
    /// Start as given.
    pub start: String,
    /// End as given.
    pub end: String,
    /// The block created, when it applied.
    pub block: Option<BlockId>,
    /// The created block's tier.
    pub tier: Option<u8>,
    /// Why it did not apply.
    pub error: Option<CompressError>,
    /// Set when the range was skipped without an error: everything it names is already
    /// folded (a fold asked again), so there was nothing to do. Names the blocks.
    #[serde(default)]
    pub skipped: Option<String>,
    /// The error, or why the range was skipped, in words.
    pub message: Option<String>,
    /// Adjustments made while applying (widening, exclusions, snapping, reversal).
    pub warnings: Vec<String>,
}

/// The result of a compress batch.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct CompressionResult {
    /// Blocks created, in request order.
    pub blocks_created: Vec<BlockId>,
    /// Tokens of the folded messages plus the summaries of consumed blocks.
    pub tokens_compressed: u64,
    /// One outcome per requested range, in request order.
    pub ranges: Vec<RangeOutcome>,
    /// What the batch as a whole got wrong, when the per-range errors alone do not say it
    /// (every ref of the batch unknown: they come from another session or conversation).
    #[serde(default)]
    pub note: Option<String>,
}

impl CompressionResult {
    /// The per-range errors.
    pub fn errors(&self) -> impl Iterator<Item = &CompressError> {
        self.ranges.iter().filter_map(|r| r.error.as_ref())
    }
}

/// A resolved endpoint: the positions it spans in the view.
struct Endpoint {
    first: usize,
    last: usize,
    is_block: bool,
    warning: Option<String>,
}

/// A range ready to become a block.
struct Plan {
    first: usize,
    last: usize,
    is_block: bool,
    direct: Vec<usize>,
    consumed: Vec<BlockId>,
    tier: u8,
    fresh_tokens: u64,
}

/// A block made from a plan, not yet in the state: the originals it folds and the tokens
/// it compresses (fresh ones and the summaries it consumes).
struct Made {
    block: Block,
    originals: Vec<(Ref, OriginalText)>,
    tokens: u64,
}

/// Adds `block` to the state under the next id, deactivating the blocks it consumed.
fn add_block(state: &mut SessionState, mut block: Block) -> BlockId {
    let id = state.next_block_id();
    block.id = id;
    for b in state.blocks.iter_mut() {
        if block.consumed.contains(&b.id) {
            b.active = false;
        }
    }
    state.blocks.push(block);
    id
}

/// The units of one range a fold takes directly: a mask over the range. A first turn
/// plans ranges of thousands of units and checks every linked group against them, a
/// lookup per member that a tree of indices made a descent each.
struct RangeSet {
    first: usize,
    mask: Vec<bool>,
    len: usize,
}

impl RangeSet {
    /// None of `first..=last`.
    fn new(first: usize, last: usize) -> Self {
        RangeSet {
            first,
            mask: vec![false; last.saturating_sub(first).saturating_add(1)],
            len: 0,
        }
    }

    fn slot(&mut self, i: usize) -> Option<&mut bool> {
        i.checked_sub(self.first).and_then(|k| self.mask.get_mut(k))
    }

    /// Adds `i` (an index outside the range is ignored).
    fn insert(&mut self, i: usize) {
        if let Some(slot) = self.slot(i)
            && !*slot
        {
            *slot = true;
            self.len += 1;
        }
    }

    /// Takes `i` out; true when it was in.
    fn remove(&mut self, i: usize) -> bool {
        match self.slot(i) {
            Some(slot) if *slot => {
                *slot = false;
                self.len -= 1;
                true
            }
            _ => false,
        }
    }

    fn contains(&self, i: usize) -> bool {
        i.checked_sub(self.first)
            .and_then(|k| self.mask.get(k))
            .is_some_and(|&b| b)
    }

    fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The indices in, ascending.
    fn iter(&self) -> impl Iterator<Item = usize> + '_ {
        self.mask
            .iter()
            .enumerate()
            .filter(|(_, in_set)| **in_set)
            .map(|(k, _)| self.first + k)
    }
}

struct Ctx<'a> {
    state: &'a SessionState,
    units: &'a [Message],
    covered: Coverage,
    pos_by_ref: ByRef<usize>,
    /// The refs table's fingerprints, for the `message_ids` of every block the batch makes
    /// (creating blocks mints no refs); made on the first block, not when only checking.
    fingerprints: std::cell::OnceCell<ByRef<&'a MessageId>>,
    links: &'a Links,
    zone: HashSet<usize>,
    tools: HashSet<usize>,
    head: HashSet<usize>,
    config: &'a CompressConfig,
    estimator: &'a dyn TokenEstimator,
    /// The units' estimates made earlier in the turn, if any.
    known: Option<&'a KnownUnitTokens>,
    wire: foldwire_core::Wire,
}

/// Applies a batch of ranges to the session's state, checked against `view` (the
/// conversation with refs minted, as the model saw it — folded or not).
///
/// Each range is resolved, widened so no tool call leaves its results and no reasoning
/// leaves its act (message ranges only), stripped of protected and pinned units, and made
/// into a block: a message range makes a tier-1 block absorbing the active tier-1 blocks
/// inside it; a range with a block endpoint makes a block one tier above the lowest nested
/// tier (max 3) that deactivates the blocks of that tier it consumed. Overlapping ranges:
/// the earliest start wins. A failing range gets an error in its outcome; the others still
/// apply. The bytes the client sent for every newly folded unit (`Message::client_bytes`,
/// not a rewrite a stage made for the wire) are kept in `state.originals` so
/// [`restore`](super::restore::restore) returns them byte-identical; call
/// [`archive_originals`](super::originals::archive_originals) afterwards to move them to the
/// session's archive. Units of the layout's head window never fold (`protection.head_window`).
pub fn apply_compression(
    state: &mut SessionState,
    view: &Conversation,
    requests: &[CompressRequest],
    config: &CompressConfig,
    estimator: &dyn TokenEstimator,
) -> CompressionResult {
    apply_compression_knowing(state, view, requests, config, estimator, None, None)
}

/// [`apply_compression`], taking the units' estimates from `known` where the turn made
/// them already ([`KnownUnitTokens`]) and the units' links from `links` when they are
/// `view`'s.
pub fn apply_compression_knowing(
    state: &mut SessionState,
    view: &Conversation,
    requests: &[CompressRequest],
    config: &CompressConfig,
    estimator: &dyn TokenEstimator,
    known: Option<&KnownUnitTokens>,
    links: Option<&Links>,
) -> CompressionResult {
    // Every range is planned and its block made from the state as it was before the batch;
    // the blocks go into `state` only after, so it is read in place, never copied.
    let mut linked = None;
    let links = Links::given_or(links, view.messages.as_slice(), &mut linked);
    let cx = Ctx::new(state, view, config, estimator, known, links);

    let mut outcomes: Vec<RangeOutcome> = requests
        .iter()
        .enumerate()
        .map(|(i, r)| RangeOutcome {
            request: i,
            start: r.start.to_string(),
            end: r.end.to_string(),
            block: None,
            tier: None,
            error: None,
            skipped: None,
            message: None,
            warnings: Vec::new(),
        })
        .collect();
    let mut plans: Vec<Option<Plan>> = Vec::with_capacity(requests.len());
    for (request, outcome) in requests.iter().zip(outcomes.iter_mut()) {
        match cx.plan(request, &mut outcome.warnings) {
            Ok(plan) => plans.push(Some(plan)),
            Err(e @ CompressError::AlreadyFolded { .. }) => {
                match cx.folded_already(request) {
                    // acp §26 #59: asked again for a fold that is done. Nothing is wrong and
                    // nothing is left to do, so it is a skip, not an error the caller should
                    // act on; a range reaching into fresh messages stays an error.
                    Some(blocks) => skip(outcome, request, &blocks),
                    None => fail(outcome, e),
                }
                plans.push(None);
            }
            Err(e) => {
                fail(outcome, e);
                plans.push(None);
            }
        }
    }

    // Earliest start wins; later overlapping ranges are refused.
    let mut order: Vec<usize> = (0..plans.len())
        .filter(|&i| plans.get(i).is_some_and(Option::is_some))
        .collect();
    order.sort_by_key(|&i| plans.get(i).and_then(|p| p.as_ref()).map(|p| (p.first, i)));
    let mut reach: Option<(usize, usize)> = None;
    for i in order {
        let Some(Some(plan)) = plans.get(i) else {
            continue;
        };
        let (first, last) = (plan.first, plan.last);
        match reach {
            Some((end, with)) if first <= end => {
                if let Some(o) = outcomes.get_mut(i) {
                    fail(o, CompressError::Overlaps { with });
                }
                if let Some(p) = plans.get_mut(i) {
                    *p = None;
                }
            }
            _ => reach = Some((last, i)),
        }
    }

    // The size gate is batch-wide over the fresh content of message ranges.
    let fresh: u64 = plans
        .iter()
        .flatten()
        .filter(|p| !p.is_block)
        .map(|p| p.fresh_tokens)
        .sum();
    if config.min_tokens > 0 && fresh < config.min_tokens {
        for (plan, outcome) in plans.iter_mut().zip(outcomes.iter_mut()) {
            if plan.as_ref().is_some_and(|p| !p.is_block) {
                fail(
                    outcome,
                    CompressError::TooSmall {
                        tokens: fresh,
                        min: config.min_tokens,
                    },
                );
                *plan = None;
            }
        }
    }

    let made: Vec<Option<Result<Made, CompressError>>> = plans
        .iter()
        .zip(requests)
        .map(|(plan, request)| plan.as_ref().map(|plan| cx.make(plan, request)))
        .collect();
    drop(cx);
    let mut result = CompressionResult::default();
    let mut originals = Vec::new();
    for (made, outcome) in made.into_iter().zip(outcomes.iter_mut()) {
        match made {
            None => {}
            Some(Ok(made)) => {
                outcome.tier = Some(made.block.tier);
                result.tokens_compressed += made.tokens;
                originals.extend(made.originals);
                let id = add_block(state, made.block);
                outcome.block = Some(id);
                result.blocks_created.push(id);
            }
            Some(Err(e)) => fail(outcome, e),
        }
    }
    keep_originals(&mut state.originals, originals);
    result.ranges = outcomes;
    result.note = unknown_batch_note(state, &result);
    result
}

/// acp §26 #55: when no ref of a non-empty batch exists in the session, the per-range
/// "does not exist" errors do not tell the caller why; this says it once for the batch.
fn unknown_batch_note(state: &SessionState, result: &CompressionResult) -> Option<String> {
    let all_unknown = !result.ranges.is_empty()
        && result
            .ranges
            .iter()
            .all(|r| matches!(r.error, Some(CompressError::UnknownRef { .. })));
    if !all_unknown {
        return None;
    }
    let known = match (state.refs.first(), state.refs.last()) {
        (Some(first), Some(last)) => format!("its refs run {}..{}", first.r#ref, last.r#ref),
        _ => "it has no refs yet".to_owned(),
    };
    Some(format!(
        "none of the {} range(s) resolved: no ref given exists in this session ({known}, {} block(s)). Refs belong to one session and are never reused, so these come from another session or an earlier conversation; use the refs shown in this conversation",
        result.ranges.len(),
        state.blocks.len()
    ))
}

/// Why a client unit cannot fold, in words.
fn pin_reason(unit: &Message) -> String {
    let media = unit.media.iter().find_map(|m| match &m.class {
        foldwire_core::MediaClass::Unrecoverable { reason } => Some(reason.clone()),
        foldwire_core::MediaClass::Archivable => None,
    });
    match (&unit.pin, media) {
        (_, Some(reason)) => format!("unrecoverable media ({reason})"),
        (Some(foldwire_core::Pin::UnrecoverableMedia(d)), None) => {
            format!("unrecoverable media ({d})")
        }
        (Some(foldwire_core::Pin::ArchiveFailed(d)), None) => format!("archive write failed ({d})"),
        (Some(foldwire_core::Pin::Protected(d)), None) => format!("protected ({d})"),
        (None, None) if unit.is_frame() => "a system/developer message (frame)".to_owned(),
        (None, None) => format!("{:?} item", unit.kind).to_lowercase(),
    }
}

/// Marks a range skipped: everything it names is already folded into `blocks`.
fn skip(outcome: &mut RangeOutcome, request: &CompressRequest, blocks: &[BlockId]) {
    let (first, last) = match (blocks.first(), blocks.last()) {
        (Some(f), Some(l)) => (*f, *l),
        _ => (BlockId(1), BlockId(1)),
    };
    let names: Vec<String> = blocks.iter().map(ToString::to_string).collect();
    let why = format!(
        "skipped: {}..{} is already folded into {}; nothing new to fold (to fold it a tier up, use {first}..{last})",
        request.start,
        request.end,
        names.join(", ")
    );
    outcome.message = Some(why.clone());
    outcome.skipped = Some(why);
}

fn fail(outcome: &mut RangeOutcome, error: CompressError) {
    outcome.message = Some(error.to_string());
    outcome.error = Some(error);
}

/// What each of `ranges` would fold if it were the only range of a `compress` call with a
/// summary long enough: the fresh tokens [`apply_compression_knowing`] on the same state,
/// view and config would take from it, or the error it would refuse it with (the summary's
/// own checks aside). Nothing is changed. The tool loop offers the model only ranges that
/// pass, so none it is offered comes back refused.
pub fn fold_alone(
    state: &SessionState,
    view: &Conversation,
    ranges: &[(AnyRef, AnyRef)],
    config: &CompressConfig,
    estimator: &dyn TokenEstimator,
    known: Option<&KnownUnitTokens>,
) -> Vec<Result<u64, CompressError>> {
    if ranges.is_empty() {
        return Vec::new();
    }
    let links = Links::new(view.messages.as_slice());
    let cx = Ctx::new(state, view, config, estimator, known, &links);
    ranges
        .iter()
        .map(|&(start, end)| {
            let span = cx.span(start, end, &mut Vec::new())?;
            match config.min_tokens {
                min if !span.is_block && span.fresh_tokens < min => Err(CompressError::TooSmall {
                    tokens: span.fresh_tokens,
                    min,
                }),
                _ => Ok(span.fresh_tokens),
            }
        })
        .collect()
}

impl<'a> Ctx<'a> {
    /// What a batch is checked against: `state` as it was before the batch, and `view` with
    /// its protections under `config`.
    fn new(
        state: &'a SessionState,
        view: &'a Conversation,
        config: &'a CompressConfig,
        estimator: &'a dyn TokenEstimator,
        known: Option<&'a KnownUnitTokens>,
        links: &'a Links,
    ) -> Self {
        let units = view.messages.as_slice();
        let covered = coverage(state);
        let zone = config
            .protection
            .zone(view.wire, units, &covered, estimator);
        let tools = config.protection.protected_tools(units, links);
        let head = config.protection.head(units, state);
        let pos_by_ref = units
            .iter()
            .enumerate()
            .filter_map(|(i, u)| u.r#ref.map(|r| (r, i)))
            .collect();
        Ctx {
            state,
            units,
            covered,
            pos_by_ref,
            fingerprints: std::cell::OnceCell::new(),
            links,
            zone,
            tools,
            head,
            config,
            estimator,
            known,
            wire: view.wire,
        }
    }
}

impl Ctx<'_> {
    fn block(&self, id: BlockId) -> Option<&Block> {
        self.state.blocks.iter().find(|b| b.id == id)
    }

    fn ref_known(&self, r: Ref) -> bool {
        self.state
            .refs
            .binary_search_by_key(&r, |e| e.r#ref)
            .is_ok()
            || self.state.refs.iter().any(|e| e.r#ref == r)
    }

    /// The active block holding an inactive block's content, if any.
    fn active_holder(&self, id: BlockId) -> Option<BlockId> {
        let mut current = id;
        for _ in 0..=self.state.blocks.len() {
            let parent = self
                .state
                .blocks
                .iter()
                .find(|b| b.consumed.contains(&current))?;
            if parent.active {
                return Some(parent.id);
            }
            current = parent.id;
        }
        None
    }

    /// The active blocks holding everything a message range names, when
    /// the range adds nothing to them: both ends are folded, and every ref between them is
    /// folded too or no longer sent by the client. `None` when anything in it is fresh.
    fn folded_already(&self, request: &CompressRequest) -> Option<Vec<BlockId>> {
        let (AnyRef::Message(a), AnyRef::Message(b)) = (request.start, request.end) else {
            return None;
        };
        let (lo, hi) = if a <= b { (a, b) } else { (b, a) };
        // Both ends folded first: the walk between them is then bounded by refs minted.
        if !self.covered.contains_key(&lo) || !self.covered.contains_key(&hi) {
            return None;
        }
        let mut holders: Vec<BlockId> = Vec::new();
        for n in lo.0..=hi.0 {
            let r = Ref(n);
            match self.covered.get(&r) {
                Some(holder) => {
                    if !holders.contains(holder) {
                        holders.push(*holder);
                    }
                }
                None => {
                    let fresh = self
                        .pos_by_ref
                        .get(&r)
                        .and_then(|&i| self.units.get(i))
                        .is_some_and(foldable);
                    if fresh {
                        return None;
                    }
                }
            }
        }
        holders.sort();
        (!holders.is_empty()).then_some(holders)
    }

    /// Positions in the view that show an active block: its covered units and its summary.
    fn block_positions(&self, id: BlockId) -> Option<(usize, usize)> {
        let mut span: Option<(usize, usize)> = None;
        for (i, u) in self.units.iter().enumerate() {
            let shows = u.origin == Origin::Summary(id)
                || u.r#ref.and_then(|r| self.covered.get(&r)) == Some(&id);
            if shows {
                span = Some(span.map_or((i, i), |(a, _)| (a, i)));
            }
        }
        span
    }

    fn endpoint(&self, given: AnyRef) -> Result<Endpoint, CompressError> {
        let text = given.to_string();
        match given {
            AnyRef::Message(r) => {
                if !self.ref_known(r) {
                    return Err(CompressError::UnknownRef { given: text });
                }
                if let Some(&holder) = self.covered.get(&r) {
                    let direct = self.block(holder).is_some_and(|b| b.direct.contains(&r));
                    // acp §26 #47: a folded message the model still sees beside its block's
                    // summary (the first-user pin kept it on the wire) is a fair endpoint; it
                    // anchors to that block, as an inherited ref does. Anywhere else a ref
                    // folded directly is refused: the block id is the way to fold it further.
                    let pinned_in_sight = direct
                        && self.pos_by_ref.contains_key(&r)
                        && self
                            .units
                            .iter()
                            .any(|u| u.origin == Origin::Summary(holder));
                    if direct && !pinned_in_sight {
                        return Err(CompressError::AlreadyFolded {
                            given: text,
                            block: holder,
                        });
                    }
                    let (first, last) =
                        self.block_positions(holder)
                            .ok_or(CompressError::NotInView {
                                given: text.clone(),
                            })?;
                    let warning = if pinned_in_sight {
                        format!(
                            "{text} is folded into {holder} and stays on the wire only as the pinned first message; anchored to {holder}"
                        )
                    } else {
                        format!(
                            "{text} was folded into a block that {holder} consumed; anchored to {holder}"
                        )
                    };
                    return Ok(Endpoint {
                        first,
                        last,
                        is_block: false,
                        warning: Some(warning),
                    });
                }
                let pos = *self
                    .pos_by_ref
                    .get(&r)
                    .ok_or(CompressError::NotInView { given: text })?;
                Ok(Endpoint {
                    first: pos,
                    last: pos,
                    is_block: false,
                    warning: None,
                })
            }
            AnyRef::Block(b) => {
                let block = self.block(b).ok_or(CompressError::UnknownRef {
                    given: text.clone(),
                })?;
                let (target, warning) = if block.active {
                    (b, None)
                } else {
                    let holder = self.active_holder(b).ok_or(CompressError::BlockInactive {
                        given: text.clone(),
                    })?;
                    (
                        holder,
                        Some(format!(
                            "{b} was consumed by {holder}; anchored to the active block {holder}"
                        )),
                    )
                };
                let (first, last) = self
                    .block_positions(target)
                    .ok_or(CompressError::NotInView { given: text })?;
                Ok(Endpoint {
                    first,
                    last,
                    is_block: true,
                    warning,
                })
            }
        }
    }

    /// The block `request` would make, its summary checked against what it replaces.
    fn plan(
        &self,
        request: &CompressRequest,
        warnings: &mut Vec<String>,
    ) -> Result<Plan, CompressError> {
        let plan = self.span(request.start, request.end, warnings)?;
        self.check_summary(&plan, request)?;
        Ok(plan)
    }

    /// What folding `start..=end` would take: the range resolved, widened over linked
    /// units, stripped of what cannot or may not fold.
    fn span(
        &self,
        start_ref: AnyRef,
        end_ref: AnyRef,
        warnings: &mut Vec<String>,
    ) -> Result<Plan, CompressError> {
        let start = self.endpoint(start_ref)?;
        let end = self.endpoint(end_ref)?;
        warnings.extend(start.warning.clone());
        warnings.extend(end.warning.clone());
        let (mut first, mut last) = (start.first, end.last);
        if first > last {
            warnings.push(format!(
                "refs were given reversed ({start_ref}..{end_ref}); applied as {end_ref}..{start_ref}"
            ));
            (first, last) = (end.first, start.last);
        }
        let is_block = start.is_block || end.is_block;
        if !is_block {
            let before = (first, last);
            loop {
                let (mut f, mut l) = (first, last);
                for i in first..=last {
                    let (a, b) = self.links.span(i);
                    f = f.min(a);
                    l = l.max(b);
                }
                if (f, l) == (first, last) {
                    break;
                }
                (first, last) = (f, l);
            }
            if (first, last) != before {
                warnings.push(format!(
                    "widened to {}..{} so tool calls stay with their results and reasoning with its act",
                    self.ref_label(first),
                    self.ref_label(last)
                ));
            }
        }

        // Blocks showing inside the range.
        let mut nested: Vec<BlockId> = Vec::new();
        for u in self.units.get(first..=last).unwrap_or_default() {
            let shown = match u.origin {
                Origin::Summary(b) => Some(b),
                _ => u.r#ref.and_then(|r| self.covered.get(&r).copied()),
            };
            if let Some(b) = shown
                && !nested.contains(&b)
            {
                nested.push(b);
            }
        }
        nested.sort_by_key(|id| self.state.blocks.iter().position(|b| b.id == *id));
        // A block range consumes every active block showing in it, whatever its tier, and
        // makes the tier above the highest (up to MAX_TIER); a message range absorbs only
        // the tier-1 blocks nested in it and stays tier 1.
        let consumable = |b: &Block| b.active && (is_block || b.tier == 1);
        let consumed: Vec<BlockId> = nested
            .iter()
            .copied()
            .filter(|id| self.block(*id).is_some_and(consumable))
            .collect();
        let tier = if is_block {
            let highest = consumed
                .iter()
                .filter_map(|id| self.block(*id).map(|b| b.tier))
                .max()
                .unwrap_or(0);
            (highest + 1).min(MAX_TIER)
        } else {
            1
        };
        let consumed_refs: HashSet<Ref> = consumed
            .iter()
            .filter_map(|id| self.block(*id))
            .flat_map(|b| b.effective.iter().copied())
            .collect();

        let mut direct = RangeSet::new(first, last);
        let mut hard = 0usize;
        let mut in_head: Vec<String> = Vec::new();
        let mut soft: Vec<String> = Vec::new();
        let mut pinned: Vec<String> = Vec::new();
        for i in first..=last {
            let Some(u) = self.units.get(i) else { continue };
            if u.origin == Origin::Client && !foldable(u) {
                pinned.push(pin_reason(u));
            }
            let fresh = foldable(u) && u.r#ref.is_some_and(|r| !self.covered.contains_key(&r));
            if !fresh {
                continue;
            }
            if self.tools.contains(&i) {
                hard += 1;
            } else if self.head.contains(&i) {
                in_head.push(self.ref_label(i));
            } else if self.zone.contains(&i) {
                soft.push(self.ref_label(i));
            } else {
                direct.insert(i);
            }
        }
        if !pinned.is_empty() {
            warnings.push(format!(
                "{} message(s) in the range cannot fold and stay on the wire: {}",
                pinned.len(),
                pinned.join("; ")
            ));
        }
        if hard > 0 {
            warnings.push(format!(
                "excluded {hard} message(s) of protected tools ({}); they stay visible",
                self.config.protection.tool_rules()
            ));
        }
        if !in_head.is_empty() {
            warnings.push(format!(
                "excluded {} message(s) of the head window {}; the head is kept verbatim",
                in_head.len(),
                in_head.join(", ")
            ));
        }
        if !soft.is_empty() {
            warnings.push(format!(
                "excluded {} protected message(s) {} (recent messages / last user message); they stay visible",
                soft.len(),
                soft.join(", ")
            ));
        }

        // Integrity: a linked group folds whole or not at all.
        let groups = self.links.groups();
        let mut withdrawn = 0usize;
        loop {
            let mut changed = false;
            for members in groups.values() {
                let touches = members.iter().any(|&i| direct.contains(i));
                let whole = members.iter().all(|&i| {
                    direct.contains(i)
                        || self
                            .units
                            .get(i)
                            .and_then(|u| u.r#ref)
                            .is_some_and(|r| consumed_refs.contains(&r))
                });
                if touches && !whole {
                    for i in members {
                        if direct.remove(*i) {
                            withdrawn += 1;
                        }
                    }
                    changed = true;
                }
            }
            if !changed {
                break;
            }
        }
        if withdrawn > 0 {
            warnings.push(format!(
                "withdrew {withdrawn} message(s) whose tool call/result or reasoning partner cannot fold with them"
            ));
        }

        if direct.is_empty() {
            if consumed.is_empty() {
                if hard > 0 || !soft.is_empty() || !in_head.is_empty() {
                    let mut why = Vec::new();
                    if hard > 0 {
                        why.push("protected tools".to_owned());
                    }
                    if !in_head.is_empty() {
                        why.push("the head window".to_owned());
                    }
                    if !soft.is_empty() {
                        why.push(format!(
                            "the last {} messages / {} tokens and the last user message",
                            self.config.protection.recent_messages,
                            self.config.protection.recent_tokens
                        ));
                    }
                    return Err(CompressError::Protected {
                        why: why.join("; "),
                    });
                }
                return Err(CompressError::NothingCompressible);
            }
            if !is_block {
                let names: Vec<String> = consumed.iter().map(ToString::to_string).collect();
                return Err(CompressError::NothingNew {
                    blocks: names.join(", "),
                    first: consumed.first().copied().unwrap_or(BlockId(1)),
                    last: consumed.last().copied().unwrap_or(BlockId(1)),
                });
            }
        }
        let fresh_tokens: u64 = direct
            .iter()
            .filter_map(|i| Some((i, self.units.get(i)?)))
            .map(|(i, u)| match self.known {
                Some(known) => known.unit(self.wire, i, u, self.estimator),
                None => unit_tokens(self.wire, u, self.estimator),
            })
            .sum();
        Ok(Plan {
            first,
            last,
            is_block,
            direct: direct.iter().collect(),
            consumed,
            tier,
            fresh_tokens,
        })
    }

    /// Refuses a summary that is empty, too long, or far shorter than what `plan` replaces.
    fn check_summary(&self, plan: &Plan, request: &CompressRequest) -> Result<(), CompressError> {
        let summary = request.summary.trim();
        if summary.is_empty() {
            return Err(CompressError::EmptySummary);
        }
        let len = summary.chars().count();
        // acp §26 #61: a summary far shorter than what it replaces loses the range; refuse
        // it with the numbers the model needs to write a better one.
        let replaced = plan.fresh_tokens
            + plan
                .consumed
                .iter()
                .filter_map(|id| self.block(*id))
                .map(|b| self.estimator.text_tokens(&b.summary))
                .sum::<u64>();
        let min = self.config.min_summary.for_tokens(replaced);
        if len < min {
            return Err(CompressError::SummaryTooShort {
                len,
                min,
                tokens: replaced,
            });
        }
        let max = request
            .max_summary_chars
            .unwrap_or(self.config.max_summary_chars);
        if max > 0 && len > max {
            return Err(CompressError::SummaryTooLong { len, max });
        }
        Ok(())
    }

    fn ref_label(&self, i: usize) -> String {
        self.units
            .get(i)
            .and_then(|u| u.r#ref)
            .map_or_else(|| format!("#{i}"), |r| r.to_string())
    }

    /// Makes the block `plan` describes (its id given when it is added), with the originals
    /// it folds, from the state as it was before the batch.
    fn make(&self, plan: &Plan, request: &CompressRequest) -> Result<Made, CompressError> {
        let mut originals = Vec::with_capacity(plan.direct.len());
        let mut direct_refs = Vec::with_capacity(plan.direct.len());
        for u in plan.direct.iter().filter_map(|&i| self.units.get(i)) {
            let Some(r) = u.r#ref else { continue };
            // A slice of the request body, shared rather than copied: the client's bytes,
            // not a rewrite a stage made for the wire, so the unit restores as it was sent.
            let text = OriginalText::from_utf8(u.client_bytes().clone())
                .map_err(|_| CompressError::NotUtf8 { r#ref: r })?;
            originals.push((r, text));
            direct_refs.push(r);
        }
        // Sorted and deduplicated as a list: a first turn's block holds thousands of refs,
        // already in order.
        let mut effective: Vec<Ref> = direct_refs.clone();
        let mut consumed_tokens = 0;
        for b in plan.consumed.iter().filter_map(|id| self.block(*id)) {
            effective.extend(b.effective.iter().copied());
            consumed_tokens += self.estimator.text_tokens(&b.summary);
        }
        effective.sort_unstable();
        effective.dedup();
        let (Some(&lo), Some(&hi)) = (effective.first(), effective.last()) else {
            return Err(CompressError::NothingCompressible);
        };
        let fingerprints = self
            .fingerprints
            .get_or_init(|| derived::fingerprints(&self.state.refs));
        let message_ids = derived::message_ids_of(&effective, fingerprints).into();
        let block = Block {
            tier: plan.tier,
            summary: request.summary.clone(),
            topic: request.topic.clone().filter(|t| !t.trim().is_empty()),
            span: (lo, hi),
            direct: direct_refs.into(),
            effective: effective.into(),
            message_ids,
            consumed: plan.consumed.clone(),
            active: true,
            archive_keys: Shared::default(),
            author: request.author.clone(),
            // Made from what the model saw, so in view; it starts young and ages with turns.
            ..Block::default()
        };
        Ok(Made {
            block,
            originals,
            tokens: plan.fresh_tokens + consumed_tokens,
        })
    }
}

/// Adds a batch's originals to the state's. Into none (a session's first fold keeps
/// thousands), the map is built from them in one pass rather than by one insertion each.
fn keep_originals(into: &mut BTreeMap<Ref, OriginalText>, originals: Vec<(Ref, OriginalText)>) {
    if into.is_empty() {
        *into = originals.into_iter().collect();
    } else {
        into.extend(originals);
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// The mask answers what a set of indices answers, for indices inside and outside its
    /// range, through inserts (repeated too) and removals.
    #[test]
    fn a_range_set_agrees_with_a_set_of_indices() {
        let (first, last) = (40, 140);
        let mut mask = RangeSet::new(first, last);
        let mut set: std::collections::BTreeSet<usize> = std::collections::BTreeSet::new();
        let mut x: u64 = 7;
        for step in 0..2_000 {
            x = x
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            let i = (x >> 33) as usize % 200;
            if step % 3 == 2 {
                assert_eq!(mask.remove(i), set.remove(&i), "remove {i}");
            } else {
                mask.insert(i);
                if (first..=last).contains(&i) {
                    set.insert(i);
                }
            }
            assert_eq!(mask.contains(i), set.contains(&i), "contains {i}");
            assert_eq!(mask.is_empty(), set.is_empty());
        }
        assert_eq!(
            mask.iter().collect::<Vec<_>>(),
            set.iter().copied().collect::<Vec<_>>()
        );
        assert!(!mask.contains(0) && !mask.contains(usize::MAX));
        let one = RangeSet::new(5, 5);
        assert!(one.is_empty() && !one.contains(5));
    }
}
