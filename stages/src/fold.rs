//! Stage `fold`: applies the session's active blocks to the request and, when the request is
//! over its policy's threshold, first makes new blocks.
//!
//! 0. **Block sync** ([`sync_blocks`]), on what the client sent: each active block is
//!    marked in or out of its view and the blocks in play age one turn (old after
//!    `old_after_turns`); the blocks that left the view, came back or turned old are
//!    counted (`fold.blocks_left_view`, `fold.blocks_returned`, `fold.blocks_turned_old`).
//!    Nothing is removed.
//! 1. **Automatic folds** (param `auto`, default on): the request's tokens (frame, the
//!    units no active block covers, and the rendered summaries of the blocks that show) are
//!    put to the `FoldPolicy` named by `policy` (default `fold.scheduled`) over
//!    `turn.ranges`; the ranges it picks are merged where they are adjacent, summarized by
//!    the `Summarizer` named by `summarizer` (default `summarizer.extractive`) and applied
//!    with [`apply_compression`](crate::kernel::apply_compression). While the request is
//!    still over the policy's threshold, the summaries on the wire fold again: the runs of
//!    them ([`summary_runs`](crate::kernel::summary_runs)) the policy picks are folded by
//!    block ids into one block a tier up each (nested blocks, which restore down to the
//!    originals). On a turn that folded, the runs of summaries also fold
//!    a tier up once they hold more than `tier_after_fold` (0.05) of the budget, inside the
//!    rewrite the fold makes anyway. A range whose summary or application fails is
//!    reported and left unfolded.
//! 2. **Fold** ([`fold_view`]): covered units leave the wire, each active block's summary is
//!    rendered once where its range began, the first-user pin is decided (its held and
//!    residual cases are reported as warnings `first_user_pin_held` /
//!    `first_user_pin_residual`), and nothing orphaned is left behind. When a rendered summary
//!    stands in for archived media, `media_folded` names each payload and how the model's
//!    `restore` tool and the CLI (`foldwire restore --image-ref`) get it back.
//! 3. **Originals to the archive**: when the context has an archive, every original still
//!    kept in the state (this turn's folds, or earlier ones whose write failed) is moved
//!    there; a failed write keeps it in the state and is reported
//!    (`originals_kept_in_state`). The first round's units start for the archive on a
//!    blocking thread as soon as the policy picks them ([`start_archiving_units`]), beside
//!    the summarizer and the measure of the folded request; [`finish_archiving`] records
//!    what the fold kept and writes the rest. When the turn's caller waits for pending
//!    writes before storing the state ([`foldwire_core::Turn::defer_writes`], the session
//!    actor does), that batch is recorded as soon as its pack is planned (hashed and laid
//!    out), and the pack's write goes on beside the rest of the turn and the state's
//!    serialization (`turn.pending_writes`); the state is stored only once it succeeded.
//!
//! Automatic folds are validated with the protection `ranges.build` used this turn (it
//! leaves it in `turn.extensions`, see [`crate::ranges_build::UsedProtection`]), so the
//! ranges offered and the folds accepted never disagree; `compress.protection` overrides it.

use std::sync::Arc;

use foldwire_core::{
    AnyRef, BuildCx, BuildError, Component, ComponentConfig, ComponentKind, Conversation, Fact,
    FoldDemand, FoldPolicy, MediaArchive, Message, Origin, RangeInfo, Ref, Resolved, Role, Stage,
    StageCx, StageError, StrategyUse, Summarizer, SummaryRequest, TokenEstimator, Turn,
    async_trait,
};
use serde::{Deserialize, Serialize};

use crate::kernel::prehash::{PrehashUnused, Prehashing};
use crate::kernel::units::{KnownUnitTokens, Links};
use crate::kernel::{
    BatchTarget, CompressConfig, CompressRequest, DEFAULT_OLD_AFTER_TURNS, FirstUserPin,
    FoldOutcome, MinSummary, OriginalsInFlight, Protection, SummaryRun, apply_compression_knowing,
    detach_originals, finish_archiving, fold_and_measure, fold_view, folded_media_warning,
    start_archiving, start_archiving_units, summary_runs_linked, summary_text, sync_blocks,
};
use crate::ranges_build::UsedProtection;
use crate::strategy_scope::{self, FAILED_CODE, StrategyScope};

/// Stage name.
pub const NAME: &str = FoldConfig::NAME;

/// Tokens of a rendered summary's header line (`[foldwire b12 · topic]`), generously.
const SUMMARY_HEADER_TOKENS: u64 = 32;

/// Settings of the fold stage.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct FoldConfig {
    /// Make new blocks automatically when the policy asks for it.
    pub auto: bool,
    /// The fold policy's registered name.
    pub policy: String,
    /// Its params.
    pub policy_params: serde_json::Value,
    /// The summarizer's registered name.
    pub summarizer: String,
    /// Its params.
    pub summarizer_params: serde_json::Value,
    /// Upper bound on an automatic summary, in characters.
    pub max_summary_chars: usize,
    /// Validation of automatic folds (protection, minimum size).
    pub compress: AutoCompressConfig,
    /// Turns a block survives in view before it counts as old (0: never).
    pub old_after_turns: u64,
    /// On a turn that folds fresh history, the runs of summaries on the wire fold a tier up
    /// too once they hold more than this share of the available budget (0: never). The
    /// fold rewrites the request from right after those summaries anyway, so folding them
    /// adds only their own tokens to that rewrite, where leaving them to pile up costs a
    /// cached read on every turn and raises the floor every later fold returns to.
    pub tier_after_fold: f64,
}

/// Validation settings of automatic folds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AutoCompressConfig {
    /// Overrides what may not fold. `None` (the default) uses the protection `ranges.build`
    /// used this turn, so a range it offers is never refused as protected.
    pub protection: Option<Protection>,
    /// The fresh content of a batch must reach this many tokens (0 disables).
    pub min_tokens: u64,
    /// Longest accepted summary, in characters (0 disables).
    pub max_summary_chars: usize,
}

impl Default for AutoCompressConfig {
    fn default() -> Self {
        let base = CompressConfig::default();
        AutoCompressConfig {
            protection: None,
            min_tokens: base.min_tokens,
            max_summary_chars: base.max_summary_chars,
        }
    }
}

impl Default for FoldConfig {
    fn default() -> Self {
        FoldConfig {
            auto: true,
            policy: "fold.scheduled".to_owned(),
            policy_params: serde_json::Value::Null,
            summarizer: "summarizer.extractive".to_owned(),
            summarizer_params: serde_json::Value::Null,
            max_summary_chars: 800,
            compress: AutoCompressConfig::default(),
            old_after_turns: DEFAULT_OLD_AFTER_TURNS,
            tier_after_fold: DEFAULT_TIER_AFTER_FOLD,
        }
    }
}

/// Default [`FoldConfig::tier_after_fold`]: summaries over a twentieth of the budget fold a
/// tier up with the next fold (measured with `cargo bench -p foldwire-benches --bench
/// economy`: without it they grew to ~10,000 tokens at a 30k window).
pub const DEFAULT_TIER_AFTER_FOLD: f64 = 0.05;

/// The `fold` stage.
#[derive(Debug, Clone)]
pub struct Fold {
    /// Its settings.
    pub config: FoldConfig,
    policy: Resolved<dyn FoldPolicy>,
    summarizer: Resolved<dyn Summarizer>,
}

impl Default for Fold {
    fn default() -> Self {
        Fold::new(FoldConfig::default())
    }
}

impl Fold {
    /// A fold stage built without a registry: its policy and summarizer are built from the
    /// turn's registry on each run (the registry builds it with them resolved once).
    pub fn new(config: FoldConfig) -> Self {
        Fold {
            policy: Resolved::per_turn("policy", &config.policy, &config.policy_params),
            summarizer: Resolved::per_turn(
                "summarizer",
                &config.summarizer,
                &config.summarizer_params,
            ),
            config,
        }
    }

    /// A fold stage whose policy and summarizer are resolved now, from `cx`'s registry.
    ///
    /// # Errors
    /// A strategy name that is not registered, or params it refuses.
    pub fn build(config: FoldConfig, cx: &BuildCx<'_>) -> Result<Self, BuildError> {
        Ok(Fold {
            policy: Resolved::build(cx, NAME, "policy", &config.policy, &config.policy_params)?,
            summarizer: Resolved::build(
                cx,
                NAME,
                "summarizer",
                &config.summarizer,
                &config.summarizer_params,
            )?,
            config,
        })
    }

    /// The compress settings of this turn's automatic folds: the configured override, else
    /// the protection `ranges.build` recorded on the turn, else the default protection.
    pub fn compress_config(&self, turn: &mut Turn) -> CompressConfig {
        let protection = match &self.config.compress.protection {
            Some(p) => p.clone(),
            None => UsedProtection::of(turn),
        };
        CompressConfig {
            protection,
            min_tokens: self.config.compress.min_tokens,
            max_summary_chars: self.config.compress.max_summary_chars,
            // The summarizer's length follows its own settings, not the range's size: an
            // automatic fold is never refused as too short.
            min_summary: MinSummary::OFF,
        }
    }

    /// The most summary tokens one automatic fold is assumed to put back on the wire: the
    /// summary at its cap (dense text: three characters a token) plus its header line.
    fn summary_tokens(&self) -> u64 {
        (self.config.max_summary_chars as u64).div_ceil(3) + SUMMARY_HEADER_TOKENS
    }

    /// Makes this turn's automatic folds; returns the folded view it measured last, which is
    /// the one to send unless the state changes again, and the originals write it started.
    async fn auto_fold(&self, turn: &mut Turn, cx: &StageCx) -> Result<AutoFolded, StageError> {
        let compress = self.compress_config(turn);
        let policy = self
            .policy
            .get(cx.registry.as_ref())
            .map_err(|e| StageError::caused(NAME, "cannot build the fold policy", e))?;
        let summarizer = self
            .summarizer
            .get(cx.registry.as_ref())
            .map_err(|e| StageError::caused(NAME, "cannot build the summarizer", e))?;
        let estimator = cx.estimator.as_ref();
        let Some(conversation) = turn.conversation.take() else {
            return Err(StageError::NotDecoded { stage: NAME });
        };
        // Strategies that call out (HTTP, plugins, a model) see the turn's options and
        // report their fallbacks into this turn's report.
        let scope = StrategyScope::new(&turn.options);
        let mut record = ScheduleRecord::load(&turn.state);
        let mut folds = Folds {
            turn,
            conversation: &conversation,
            compress: &compress,
            estimator,
            summarizer: summarizer.as_ref(),
            max_chars: self.config.max_summary_chars,
            scope: &scope,
            floor: 0,
            per_turn: 0,
            measured: std::cell::Cell::new(None),
            view: std::cell::RefCell::new(None),
            runs: std::cell::RefCell::new(None),
            links: std::cell::OnceCell::new(),
            archive: cx.archive.as_ref(),
            in_flight: None,
        };

        // The floor the schedule measures growth from: the request right after the last
        // fold, whoever made it (this stage, or the model through `compress` since).
        let now = folds.request_tokens();
        let blocks = folds.turn.state.blocks.len();
        record.observe(now);
        if record.blocks != blocks {
            record.floor = now;
            record.blocks = blocks;
        }
        record.floor = record.floor.min(now);
        folds.floor = record.floor;
        folds.per_turn = record.per_turn;
        // Each round measures the request as it would now be sent and asks the policy again:
        // fresh history first (the ranges it picks, adjacent ones merged so that one summary
        // stands for them all); once no fresh range is picked, the summaries on the wire
        // fold again (each run of them the policy picks becomes one block a tier up). The
        // rounds stop when the policy is satisfied or a round folds nothing.
        for _ in 0..FOLD_ROUNDS {
            let demand = folds.demand(self.summary_tokens());
            let mut chosen = choose(&policy, &scope, &folds.turn.ranges, &demand).await;
            chosen.sort_unstable();
            chosen.dedup();
            chosen.retain(|&i| i < folds.turn.ranges.len());
            if !chosen.is_empty() {
                let picked: Vec<RangeInfo> = chosen
                    .iter()
                    .filter_map(|&i| folds.turn.ranges.get(i).cloned())
                    .collect();
                let spans = folds.merged(&picked);
                folds.start_archiving_spans(&spans);
                let mut requests = Vec::new();
                for (start, end) in spans {
                    requests.extend(folds.fresh_request(start, end).await);
                }
                folds.apply(&requests);
                folds.start_archiving();
                // Picked ranges leave the queue whether or not they applied, so every round
                // makes progress.
                let mut index = 0;
                folds.turn.ranges.retain(|_| {
                    let keep = !chosen.contains(&index);
                    index += 1;
                    keep
                });
                continue;
            }
            let runs: Vec<(SummaryRun, RangeInfo)> = folds
                .summary_runs()
                .into_iter()
                .filter_map(|run| {
                    let info = run.as_range(&folds.turn.state)?;
                    Some((run, info))
                })
                .collect();
            let infos: Vec<RangeInfo> = runs.iter().map(|(_, r)| r.clone()).collect();
            let mut picked = choose(&policy, &scope, &infos, &demand).await;
            picked.sort_unstable();
            picked.dedup();
            let mut requests = Vec::new();
            for i in picked {
                if let Some((run, _)) = runs.get(i) {
                    requests.extend(folds.tier_request(run).await);
                }
            }
            if requests.is_empty() || folds.apply(&requests) == 0 {
                break;
            }
        }
        if folds.turn.state.blocks.len() != blocks && self.config.tier_after_fold > 0.0 {
            folds.tier_with_fold(self.config.tier_after_fold).await;
        }
        if folds.turn.state.blocks.len() != blocks {
            record.floor = folds.request_tokens();
            record.blocks = folds.turn.state.blocks.len();
        }
        record.last = folds.request_tokens();
        let view = folds.view.take();
        let in_flight = folds.in_flight.take();
        scope.report_into(&mut turn.report, NAME);
        turn.report.count("fold.floor_tokens", record.floor);
        turn.report.count("fold.per_turn_tokens", record.per_turn);
        record.store(&mut turn.state);
        turn.conversation = Some(conversation);
        Ok(AutoFolded { view, in_flight })
    }
}

/// Frees the unfolded conversation on a blocking thread when there is a runtime: after a
/// first turn's fold it holds the whole session's units (freeing them is a millisecond
/// the request would otherwise wait for); here when there is none.
fn drop_aside(unfolded: Conversation) {
    if let Ok(runtime) = tokio::runtime::Handle::try_current() {
        runtime.spawn_blocking(move || drop(unfolded));
    }
}

/// The links of `conversation` kept in `cell`, made there on first use.
fn linked<'a>(cell: &'a std::cell::OnceCell<Links>, conversation: &Conversation) -> &'a Links {
    cell.get_or_init(|| Links::new(&conversation.messages))
}

/// What [`Fold::auto_fold`] leaves the rest of the stage.
#[derive(Default)]
struct AutoFolded {
    /// The folded view measured last, when the state has not changed since.
    view: Option<(Conversation, FoldOutcome)>,
    /// The originals write started with the first fold, still under way.
    in_flight: Option<OriginalsInFlight>,
}

/// Where the fold schedule's record lives in the session state (`SessionState::extra`).
pub const SCHEDULE_KEY: &str = "fold_schedule";

/// What the fold schedule remembers between turns: the request's size right after the last
/// fold (the floor growth is measured from) and the number of blocks then, so a fold the
/// model made through `compress` moves the floor too; and how fast the request grows.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct ScheduleRecord {
    /// Tokens of the request right after the last fold.
    pub floor: u64,
    /// Blocks in the state at that time.
    pub blocks: usize,
    /// Tokens of the request as the previous turn left this stage (0: none yet).
    pub last: u64,
    /// Tokens the request gains per turn, a moving average (0: unknown).
    pub per_turn: u64,
}

/// Weight of the newest turn in [`ScheduleRecord::per_turn`], in tenths: recent turns count
/// most (a long tool loop grows faster than a chat), yet one huge tool output does not move
/// the schedule on its own.
const PER_TURN_WEIGHT: u64 = 3;

impl ScheduleRecord {
    /// Takes in this turn's request of `now` tokens: its growth since the previous turn
    /// moves the average. A request that shrank (a fold the model made, a client that
    /// trimmed its history) says nothing about the growth and is left out.
    pub fn observe(&mut self, now: u64) {
        if self.last > 0 && now >= self.last {
            let grown = now - self.last;
            self.per_turn = match self.per_turn {
                0 => grown,
                avg => (avg * (10 - PER_TURN_WEIGHT) + grown * PER_TURN_WEIGHT) / 10,
            };
        }
        self.last = now;
    }

    /// The record in `state` (a fresh one when absent or unreadable).
    pub fn load(state: &foldwire_core::SessionState) -> Self {
        state
            .extra
            .get(SCHEDULE_KEY)
            .and_then(|v| serde_json::from_value(v.clone()).ok())
            .unwrap_or_default()
    }

    /// Writes the record into `state`.
    pub fn store(&self, state: &mut foldwire_core::SessionState) {
        if let Ok(v) = serde_json::to_value(self) {
            state.extra.insert(SCHEDULE_KEY.to_owned(), v);
        }
    }
}

/// Rounds of automatic folds one turn may make: each folds the ranges or runs of summaries
/// the policy picks, and the next measures again.
const FOLD_ROUNDS: usize = 8;

/// The policy's choice, made inside the turn's strategy scope. A policy that waits (an
/// endpoint, a script) decides on the blocking pool, so the worker this stage shares with
/// other sessions is free meanwhile; one that only computes decides in place. A call that
/// dies there folds nothing this round and is reported, so the turn goes on.
async fn choose(
    policy: &Arc<dyn FoldPolicy>,
    scope: &StrategyScope,
    ranges: &[RangeInfo],
    demand: &FoldDemand,
) -> Vec<usize> {
    if !policy.blocks() {
        return scope.enter(|| policy.choose(ranges, demand));
    }
    let (name, shared) = (policy.name(), Arc::clone(policy));
    let (ranges, demand) = (ranges.to_vec(), *demand);
    match scope
        .off_worker(move || shared.choose(&ranges, &demand))
        .await
    {
        Ok(chosen) => chosen,
        Err(e) => {
            scope.enter(|| {
                let why = format!("{e} ({}); nothing folds this round", e.0);
                strategy_scope::warn(name, FAILED_CODE, why);
            });
            Vec::new()
        }
    }
}

/// One turn's automatic folds: the turn, its (unfolded) conversation and how to summarize.
struct Folds<'a> {
    turn: &'a mut Turn,
    conversation: &'a Conversation,
    compress: &'a CompressConfig,
    estimator: &'a dyn TokenEstimator,
    summarizer: &'a dyn Summarizer,
    max_chars: usize,
    scope: &'a StrategyScope,
    /// The request's size right after the session's last fold.
    floor: u64,
    /// Tokens the request gains per turn ([`ScheduleRecord::per_turn`]).
    per_turn: u64,
    /// [`Folds::request_tokens`] since the state last changed: measuring copies and folds
    /// the whole conversation, and a turn asks several times between changes.
    measured: std::cell::Cell<Option<u64>>,
    /// The folded copy that measure was made on (none when no block covered anything): the
    /// view the stage sends if the state does not change again.
    view: std::cell::RefCell<Option<(Conversation, FoldOutcome)>>,
    /// The runs of summaries on the wire with the blocks as they stand: a turn that folded
    /// asks twice between changes (the last round, then `tier_with_fold`), and each walk
    /// links every unit of the conversation again.
    runs: std::cell::RefCell<Option<Vec<SummaryRun>>>,
    /// The conversation's links (calls with their results, reasoning with its act), made
    /// once: applying, folding and finding runs each need them, and the conversation does
    /// not change during the turn's folds (on a first turn, each linking is a millisecond).
    links: std::cell::OnceCell<Links>,
    /// Where the originals of folded units go, when the stage has an archive.
    archive: Option<&'a Arc<dyn MediaArchive>>,
    /// The write of the first round's originals, started when the policy picked them.
    in_flight: Option<OriginalsInFlight>,
}

impl Folds<'_> {
    /// The request as it would be sent with the blocks as they stand: the frame, every unit
    /// no active block covers, and the rendered summary of every block that shows.
    fn request_tokens(&self) -> u64 {
        if let Some(tokens) = self.measured.get() {
            return tokens;
        }
        // The units' estimates `ranges.build` made, where they still hold.
        let known = self.turn.extensions.get::<KnownUnitTokens>();
        let (tokens, view) = fold_and_measure(
            self.conversation,
            &self.turn.state,
            self.estimator,
            known,
            Some(self.links()),
        );
        self.measured.set(Some(tokens));
        self.view.replace(view);
        tokens
    }

    /// The conversation's links, made on first use.
    fn links(&self) -> &Links {
        linked(&self.links, self.conversation)
    }

    /// The runs of summaries on the wire ([`summary_runs`](crate::kernel::summary_runs))
    /// with the blocks as they stand, under the protection the turn's ranges were built with.
    fn summary_runs(&self) -> Vec<SummaryRun> {
        if let Some(runs) = self.runs.borrow().as_ref() {
            return runs.clone();
        }
        let runs = summary_runs_linked(
            self.conversation,
            &self.turn.state,
            &self.compress.protection,
            self.estimator,
            Some(self.links()),
        );
        self.runs.replace(Some(runs.clone()));
        runs
    }

    /// Starts writing the units of `spans` before they are summarized and folded, so the
    /// write runs beside the summarizer (on a first turn it is most of the session).
    fn start_archiving_spans(&mut self, spans: &[(Ref, Ref)]) {
        if self.in_flight.is_some() {
            return;
        }
        let Some(archive) = self.archive else {
            return;
        };
        let units = self.conversation.messages.as_slice();
        let bounds: Vec<Ref> = spans.iter().flat_map(|(a, b)| [*a, *b]).collect();
        let at = self.conversation.positions_of_refs(&bounds);
        let ranges: Vec<&[Message]> = at
            .chunks(2)
            .filter_map(|pair| match pair {
                [Some(a), Some(b)] => units.get(*a..=*b),
                _ => None,
            })
            .collect();
        // The keys `archive.spill` began hashing for this fold, if it judged the turn one
        // that folds most of its history.
        let prehash = self.turn.extensions.remove::<Prehashing>();
        if prehash.is_some() {
            self.turn.carry.remove::<PrehashUnused>();
        }
        let target = self.target(archive);
        self.in_flight = match ranges.as_slice() {
            // One span (a first turn's whole history, merged): its exact length sizes the
            // batch.
            [one] => start_archiving_units(one.iter(), target, prehash),
            _ => start_archiving_units(ranges.into_iter().flatten(), target, prehash),
        };
    }

    /// Starts writing the originals folded so far, unless a write is already under way
    /// (originals folded after it go when the stage finishes).
    fn start_archiving(&mut self) {
        if self.in_flight.is_some() {
            return;
        }
        if let Some(archive) = self.archive {
            self.in_flight = start_archiving(&self.turn.state, self.target(archive));
        }
    }

    /// Where this turn's batches of originals go: cut from its body, and left under way
    /// when the turn's caller waits for them before storing the state.
    fn target<'b>(&'b self, archive: &'b Arc<dyn MediaArchive>) -> BatchTarget<'b> {
        BatchTarget {
            archive,
            session: &self.turn.session,
            source: Some(&self.turn.body),
            defer: self.turn.defer_writes,
        }
    }

    fn demand(&self, summary_tokens: u64) -> FoldDemand {
        FoldDemand::new(self.request_tokens(), self.turn.budget)
            .with_summary_tokens(summary_tokens)
            .with_floor_tokens(self.floor)
            .with_per_turn_tokens(self.per_turn)
    }

    /// The picked ranges as spans of refs, adjacent ones (nothing between them in the view)
    /// merged into one.
    fn merged(&self, picked: &[RangeInfo]) -> Vec<(Ref, Ref)> {
        let bounds: Vec<Ref> = picked.iter().flat_map(|r| [r.start, r.end]).collect();
        let at = self.conversation.positions_of_refs(&bounds);
        let mut spans: Vec<(usize, usize, Ref, Ref)> = picked
            .iter()
            .zip(at.chunks(2))
            .filter_map(|(r, pair)| match pair {
                [Some(s), Some(e)] => Some((*s, *e, r.start, r.end)),
                _ => None,
            })
            .collect();
        spans.sort_by_key(|s| s.0);
        let mut out: Vec<(usize, usize, Ref, Ref)> = Vec::new();
        for s in spans {
            match out.last_mut() {
                Some(last) if s.0 == last.1 + 1 => {
                    last.1 = s.1;
                    last.3 = s.3;
                }
                _ => out.push(s),
            }
        }
        out.into_iter().map(|(_, _, a, b)| (a, b)).collect()
    }

    /// A message range summarized from its units.
    async fn fresh_request(&mut self, start: Ref, end: Ref) -> Option<CompressRequest> {
        let s = self.conversation.position_of_ref(start)?;
        let e = self.conversation.position_of_ref(end)?;
        let units = self.conversation.messages.get(s..=e)?;
        self.summarize(units, AnyRef::Message(start), AnyRef::Message(end))
            .await
    }

    /// On a turn that folded: the runs of summaries on the wire, each folded a tier up when
    /// together they hold more than `share` of the available budget.
    async fn tier_with_fold(&mut self, share: f64) {
        let limit = (share * self.turn.budget.available() as f64) as u64;
        let runs = self.summary_runs();
        if runs.iter().map(|r| r.tokens).sum::<u64>() <= limit {
            return;
        }
        let mut requests = Vec::new();
        for run in &runs {
            requests.extend(self.tier_request(run).await);
        }
        self.apply(&requests);
    }

    /// A run of summaries, summarized from their summaries (and the fresh units between
    /// them), folded by block ids into one block a tier up.
    async fn tier_request(&mut self, run: &SummaryRun) -> Option<CompressRequest> {
        let (first, last) = (run.first()?, run.last()?);
        let state = &self.turn.state;
        let units: Vec<Message> = run
            .blocks
            .iter()
            .filter_map(|id| state.blocks.iter().find(|b| b.id == *id))
            .map(|b| {
                Message::synthesized(
                    0,
                    Role::User,
                    summary_text(b),
                    Origin::Summary(b.id),
                    bytes::Bytes::new(),
                )
            })
            .collect();
        self.summarize(&units, AnyRef::Block(first), AnyRef::Block(last))
            .await
    }

    async fn summarize(
        &mut self,
        units: &[Message],
        start: AnyRef,
        end: AnyRef,
    ) -> Option<CompressRequest> {
        let asked = SummaryRequest {
            wire: self.conversation.wire,
            messages: units,
            max_chars: self.max_chars,
        };
        match self.scope.scoped(self.summarizer.summarize(asked)).await {
            Ok(summary) => Some(CompressRequest {
                start,
                end,
                summary: summary.text,
                topic: summary.topic,
                author: Some(summary.author),
                max_summary_chars: None,
            }),
            Err(e) => {
                self.turn.report.warn(
                    NAME,
                    "summarizer_failed",
                    format!("{start}..{end} left unfolded: {e}"),
                );
                None
            }
        }
    }

    /// Applies a batch, reports it, and returns the number of blocks created.
    fn apply(&mut self, requests: &[CompressRequest]) -> usize {
        if requests.is_empty() {
            return 0;
        }
        self.measured.set(None);
        self.view.replace(None);
        self.runs.replace(None);
        // Borrowed field by field: the state is changed beside them.
        let links = linked(&self.links, self.conversation);
        let result = apply_compression_knowing(
            &mut self.turn.state,
            self.conversation,
            requests,
            self.compress,
            self.estimator,
            self.turn.extensions.get::<KnownUnitTokens>(),
            Some(links),
        );
        let report = &mut self.turn.report;
        for outcome in &result.ranges {
            if let Some(message) = &outcome.message {
                report.warn(
                    NAME,
                    "auto_fold_range_refused",
                    format!("{}..{}: {message}", outcome.start, outcome.end),
                );
            }
            if outcome.tier.is_some_and(|t| t > 1) {
                report.count("fold.tier_blocks_created", 1);
            }
        }
        report.count("fold.blocks_created", result.blocks_created.len() as u64);
        // What the summaries cost to write (output tokens, when a model writes them).
        let summary_tokens: u64 = result
            .blocks_created
            .iter()
            .filter_map(|id| self.turn.state.blocks.iter().find(|b| b.id == *id))
            .map(|b| self.estimator.text_tokens(&b.summary))
            .sum();
        report.count("fold.summary_tokens", summary_tokens);
        report.count("fold.tokens_compressed", result.tokens_compressed);
        result.blocks_created.len()
    }
}

#[async_trait]
impl Stage for Fold {
    fn name(&self) -> &'static str {
        NAME
    }
    fn requires(&self) -> &'static [Fact] {
        // Folding takes units off the wire: media in them must be classified (what cannot
        // be fetched again is pinned) and archived first, or a folded payload is lost.
        &[Fact::RangesBuilt, Fact::MediaClassified, Fact::Archived]
    }
    fn provides(&self) -> &'static [Fact] {
        &[Fact::Folded]
    }
    fn strategies(&self) -> Vec<StrategyUse> {
        // Both are built only for automatic folds.
        if !self.config.auto {
            return Vec::new();
        }
        vec![
            StrategyUse {
                param: "policy",
                kind: ComponentKind::FoldPolicy,
                name: self.config.policy.clone(),
                params: self.config.policy_params.clone(),
            },
            StrategyUse {
                param: "summarizer",
                kind: ComponentKind::Summarizer,
                name: self.config.summarizer.clone(),
                params: self.config.summarizer_params.clone(),
            },
        ]
    }
    async fn run(&self, turn: &mut Turn, cx: &StageCx) -> Result<(), StageError> {
        let Some(conversation) = turn.conversation.as_ref() else {
            return Err(StageError::NotDecoded { stage: NAME });
        };
        // Before anything folds, on what the client sent: blocks made this turn start young.
        let sync = sync_blocks(conversation, &mut turn.state, self.config.old_after_turns);
        // Counted, not warned: a client's side requests (a title, a quota check) carry none
        // of the history, so blocks leave and return around each of them.
        let r = &mut turn.report;
        r.count("fold.blocks_left_view", sync.left_view.len() as u64);
        r.count("fold.blocks_returned", sync.returned.len() as u64);
        r.count("fold.blocks_turned_old", sync.turned_old.len() as u64);
        let AutoFolded { view, in_flight } = if self.config.auto {
            self.auto_fold(turn, cx).await?
        } else {
            AutoFolded::default()
        };
        if let Some(archive) = cx.archive.as_ref()
            && !turn.state.originals.is_empty()
        {
            let done = finish_archiving(
                &mut turn.state,
                in_flight,
                archive.as_ref(),
                &turn.session,
                cx.archive_timeout,
                &mut turn.pending_writes,
            )
            .await;
            turn.report
                .count("fold.originals_archived", done.stored.len() as u64);
            turn.report
                .count("fold.originals_archived_bytes", done.bytes);
            if done.prehashed > 0 {
                turn.report
                    .count("fold.originals_prehashed", done.prehashed);
            }
            if !done.failed.is_empty() {
                let list: Vec<String> = done
                    .failed
                    .iter()
                    .map(|(r, why)| format!("{r}: {why}"))
                    .collect();
                turn.report.warn(
                    NAME,
                    "originals_kept_in_state",
                    format!(
                        "{} folded original(s) could not be archived and stay in the session state (nothing is lost; retried next turn): {}",
                        list.len(),
                        list.join("; ")
                    ),
                );
            }
        }
        if cx.archive.is_none() {
            // Nowhere to move them: they stay in the state, in bytes of their own.
            detach_originals(&mut turn.state);
        }
        let Some(conversation) = turn.conversation.as_mut() else {
            return Err(StageError::NotDecoded { stage: NAME });
        };
        // The view the automatic folds measured last is this state's fold already (moving
        // originals to the archive changes nothing folding reads), so it is sent as it is
        // rather than folded a second time from another copy.
        let outcome = match view {
            Some((folded, outcome)) => {
                drop_aside(std::mem::replace(conversation, folded));
                outcome
            }
            None => fold_view(conversation, &turn.state),
        };
        let r = &mut turn.report;
        r.count("fold.units_removed", outcome.removed as u64);
        r.count("fold.summaries_rendered", outcome.summaries.len() as u64);
        r.count("fold.kept_for_pairing", outcome.kept_for_pairing as u64);
        match outcome.first_user {
            FirstUserPin::Held => r.warn(
                NAME,
                "first_user_pin_held",
                "the first user message is folded but stays on the wire: the next surviving message behind it is not a user text message (a text, maybe with images beside it)",
            ),
            FirstUserPin::Residual => r.warn(
                NAME,
                "first_user_pin_residual",
                "the first user message is folded but stays on the wire: no user message survives behind it, so folding it would leave the request without a leading user message",
            ),
            FirstUserPin::Dropped | FirstUserPin::NotCovered => {}
        }
        if let Some(warning) = folded_media_warning(&turn.state, &outcome.summaries) {
            turn.report.warn(NAME, "media_folded", warning);
        }
        Ok(())
    }
}

impl ComponentConfig for FoldConfig {
    const KIND: ComponentKind = ComponentKind::Stage;
    const NAME: &'static str = "fold";
    const DESCRIPTION: &'static str = "Applies the session's blocks and, when its fold policy asks, summarizes ranges into new ones.";

    fn build(self, cx: &BuildCx<'_>) -> Result<Component, BuildError> {
        Ok(Component::Stage(Arc::new(Fold::build(self, cx)?)))
    }
}

foldwire_core::register_config!(FoldConfig);
