//! Tiers: runs of summaries that can fold again into one higher-tier block.
//!
//! Folding fresh history alone leaves one summary per fold on the wire, each never folded
//! again, until the summaries themselves no longer fit. A [`SummaryRun`] is a stretch of the
//! conversation holding two or more active blocks with nothing visible between them except
//! fresh units that may fold anyway: compressing it by block ids (`b3..b9`) makes one block of
//! the next tier that consumes them all, and restores down to every original.

use foldhash::{HashMap, HashMapExt as _};

use foldwire_core::{BlockId, Conversation, Origin, RangeInfo, Ref, SessionState, TokenEstimator};

use super::protect::Protection;
use super::render::rendered_text;
use super::units::{Links, coverage, foldable, unit_tokens};

/// Tiers stop growing here: a block folding tier-3 blocks is tier 3 again.
pub const MAX_TIER: u8 = 3;

/// Two or more active blocks whose summaries sit together on the wire.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SummaryRun {
    /// The blocks, in the order their summaries appear.
    pub blocks: Vec<BlockId>,
    /// Tokens the run holds on the wire: its rendered summaries and the fresh units between
    /// them that would fold with it.
    pub tokens: u64,
    /// The tier of the block that folds the run.
    pub tier: u8,
    /// The fresh units between its summaries that fold with it, by ref, in order: a summary
    /// of the run must cover them too.
    pub fresh: Vec<Ref>,
}

impl SummaryRun {
    /// The first block of the run.
    pub fn first(&self) -> Option<BlockId> {
        self.blocks.first().copied()
    }

    /// The last block of the run.
    pub fn last(&self) -> Option<BlockId> {
        self.blocks.last().copied()
    }

    /// The run as a compressible range for a fold policy: its span of refs (the first and
    /// last ref its blocks cover), its tokens and its number of summaries.
    pub fn as_range(&self, state: &SessionState) -> Option<RangeInfo> {
        let refs = self
            .blocks
            .iter()
            .filter_map(|id| state.blocks.iter().find(|b| b.id == *id))
            .flat_map(|b| b.effective.iter().copied());
        let (start, end) = refs.fold(None, |acc: Option<(_, _)>, r| match acc {
            None => Some((r, r)),
            Some((a, b)) => Some((a.min(r), b.max(r))),
        })?;
        Some(RangeInfo::new(start, end, self.tokens, self.blocks.len()))
    }
}

/// The runs of summaries in `conversation` (the client's view, folded or not) that can fold
/// into a higher tier, oldest first. Walking the units in order, a unit an active block
/// covers (or the rendered summary of one) joins the current run; a fresh unit that could
/// fold (foldable, uncovered, outside `protection`'s zone, head and tools) is passed over and
/// folds with the run; anything else visible ends it. Runs of fewer than two blocks, and runs
/// sharing a block with another run, are left out.
pub fn summary_runs(
    conversation: &Conversation,
    state: &SessionState,
    protection: &Protection,
    estimator: &dyn TokenEstimator,
) -> Vec<SummaryRun> {
    summary_runs_linked(conversation, state, protection, estimator, None)
}

/// [`summary_runs`], with the units' links when the caller has them for `conversation`.
pub fn summary_runs_linked(
    conversation: &Conversation,
    state: &SessionState,
    protection: &Protection,
    estimator: &dyn TokenEstimator,
    links: Option<&Links>,
) -> Vec<SummaryRun> {
    let units = &conversation.messages;
    let covered = coverage(state);
    let mut made = None;
    let links = Links::given_or(links, units, &mut made);
    let zone = protection.zone(conversation.wire, units, &covered, estimator);
    let tools = protection.protected_tools(units, links);
    let head = protection.head(units, state);

    #[derive(Default)]
    struct Open {
        blocks: Vec<BlockId>,
        fresh_tokens: u64,
        fresh: Vec<Ref>,
        pending_tokens: u64,
        pending: Vec<Ref>,
    }
    let mut runs: Vec<Open> = Vec::new();
    let mut open: Option<Open> = None;
    let close = |open: &mut Option<Open>, runs: &mut Vec<Open>| {
        if let Some(o) = open.take() {
            runs.push(o);
        }
    };
    for (i, u) in units.iter().enumerate() {
        let holder = match u.origin {
            Origin::Summary(b) => Some(b),
            _ => u.r#ref.and_then(|r| covered.get(&r).copied()),
        };
        match holder {
            Some(b) => {
                let o = open.get_or_insert_with(Open::default);
                if !o.blocks.contains(&b) {
                    o.blocks.push(b);
                }
                // Fresh units between two blocks fold with the run.
                o.fresh_tokens += std::mem::take(&mut o.pending_tokens);
                o.fresh.append(&mut o.pending);
            }
            None => {
                let passable =
                    foldable(u) && !zone.contains(&i) && !tools.contains(&i) && !head.contains(&i);
                match open.as_mut() {
                    Some(o) if passable => {
                        o.pending_tokens += unit_tokens(conversation.wire, u, estimator);
                        o.pending.extend(u.r#ref);
                    }
                    Some(_) => close(&mut open, &mut runs),
                    None => {}
                }
            }
        }
    }
    close(&mut open, &mut runs);

    let mut seen: HashMap<BlockId, usize> = HashMap::new();
    for run in &runs {
        for b in &run.blocks {
            *seen.entry(*b).or_default() += 1;
        }
    }
    let by_id: HashMap<BlockId, &foldwire_core::Block> =
        state.blocks.iter().map(|b| (b.id, b)).collect();
    runs.into_iter()
        .filter(|run| run.blocks.len() >= 2 && run.blocks.iter().all(|b| seen.get(b) == Some(&1)))
        .filter_map(|run| {
            let mut tokens = run.fresh_tokens;
            let mut tier = 1;
            for id in &run.blocks {
                let block = by_id.get(id).filter(|b| b.active)?;
                tokens += estimator.text_tokens(&rendered_text(block, state));
                tier = tier.max(block.tier);
            }
            Some(SummaryRun {
                blocks: run.blocks,
                tokens,
                tier: (tier + 1).min(MAX_TIER),
                fresh: run.fresh,
            })
        })
        .collect()
}
