//! Stage `fold`: applies the session's active blocks to the request and, when the request is
//! over its policy's threshold, first makes new blocks.
//!
//! 1. **Automatic folds** (param `auto`, default on): the request's tokens (frame plus the
//!    units no active block covers) are put to the `FoldPolicy` named by `policy` (default
//!    `fold.oldest_first`) over `turn.ranges`; every range it picks is summarized by the
//!    `Summarizer` named by `summarizer` (default `summarizer.extractive`) and applied with
//!    [`apply_compression`]. A range whose summary or application fails is reported and
//!    left unfolded.
//! 2. **Fold** ([`fold_view`]): covered units leave the wire, each active block's summary is
//!    rendered once where its range began, the first-user pin is decided (its held and
//!    residual cases are reported as warnings `first_user_pin_held` /
//!    `first_user_pin_residual`), and nothing orphaned is left behind.
//! 3. **Originals to the archive**: when the context has an archive, every original still
//!    kept in the state (this turn's folds, or earlier ones whose write failed) is moved
//!    there with [`archive_originals`]; a failed write keeps it in the state and is reported
//!    (`originals_kept_in_state`).
//!
//! Automatic folds are validated with the protection `ranges.build` used this turn (it
//! records it in `turn.stage_notes`, see [`crate::ranges_build::PROTECTION_NOTE`]), so the
//! ranges offered and the folds accepted never disagree; `compress.protection` overrides it.

use std::sync::Arc;

use foldwire_core::{
    AnyRef, BuildError, Component, ComponentKind, Fact, FoldDemand, Params, Stage, StageCx,
    StageError, StrategyUse, SummaryRequest, Turn, async_trait,
};
use serde::{Deserialize, Serialize};

use crate::kernel::units::{coverage, unit_tokens};
use crate::kernel::{
    CompressConfig, CompressRequest, FirstUserPin, Protection, apply_compression,
    archive_originals, fold_view,
};
use crate::ranges_build::PROTECTION_NOTE;

/// Stage name.
pub const NAME: &str = "fold";

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
            policy: "fold.oldest_first".to_owned(),
            policy_params: serde_json::Value::Null,
            summarizer: "summarizer.extractive".to_owned(),
            summarizer_params: serde_json::Value::Null,
            max_summary_chars: 800,
            compress: AutoCompressConfig::default(),
        }
    }
}

/// The `fold` stage.
#[derive(Debug, Clone, Default)]
pub struct Fold {
    /// Its settings.
    pub config: FoldConfig,
}

impl Fold {
    /// The compress settings of this turn's automatic folds: the configured override, else
    /// the protection `ranges.build` recorded on the turn, else the default protection.
    pub fn compress_config(&self, turn: &mut Turn) -> CompressConfig {
        let protection = match &self.config.compress.protection {
            Some(p) => p.clone(),
            None => match turn.stage_notes.get(PROTECTION_NOTE) {
                Some(v) => match serde_json::from_value::<Protection>(v.clone()) {
                    Ok(p) => p,
                    Err(e) => {
                        turn.report.warn(
                            NAME,
                            "protection_note_unreadable",
                            format!("the protection ranges.build recorded is unreadable ({e}); using the default protection"),
                        );
                        Protection::default()
                    }
                },
                None => Protection::default(),
            },
        };
        CompressConfig {
            protection,
            min_tokens: self.config.compress.min_tokens,
            max_summary_chars: self.config.compress.max_summary_chars,
        }
    }

    async fn auto_fold(&self, turn: &mut Turn, cx: &StageCx) -> Result<(), StageError> {
        let compress = self.compress_config(turn);
        let Some(conversation) = turn.conversation.as_ref() else {
            return Err(StageError::NotDecoded { stage: NAME });
        };
        let failed = |e: &dyn std::fmt::Display| StageError::Failed {
            stage: NAME,
            message: e.to_string(),
        };
        let policy = cx
            .registry
            .fold_policy(&self.config.policy, &self.config.policy_params)
            .map_err(|e| failed(&e))?;
        let covered = coverage(&turn.state);
        let estimator = cx.estimator.as_ref();
        let frame = conversation
            .source
            .get(..conversation.messages_span.start)
            .map_or(0, |b| estimator.raw_tokens(b))
            + conversation
                .source
                .get(conversation.messages_span.end..)
                .map_or(0, |b| estimator.raw_tokens(b));
        let visible: u64 = conversation
            .messages
            .iter()
            .filter(|u| !u.r#ref.is_some_and(|r| covered.contains_key(&r)))
            .map(|u| unit_tokens(u, estimator))
            .sum();
        let demand = FoldDemand {
            request_tokens: frame + visible,
            budget: turn.budget,
            // The summary text at its cap (dense text: three characters a token) plus the
            // block's header line.
            summary_tokens: (self.config.max_summary_chars as u64).div_ceil(3)
                + SUMMARY_HEADER_TOKENS,
        };
        let mut chosen = policy.choose(&turn.ranges, &demand);
        chosen.sort_unstable();
        chosen.dedup();
        chosen.retain(|&i| i < turn.ranges.len());
        if chosen.is_empty() {
            return Ok(());
        }
        let summarizer = cx
            .registry
            .summarizer(&self.config.summarizer, &self.config.summarizer_params)
            .map_err(|e| failed(&e))?;
        let mut requests = Vec::with_capacity(chosen.len());
        for &i in &chosen {
            let Some(range) = turn.ranges.get(i) else {
                continue;
            };
            let (Some(s), Some(e)) = (
                conversation.position_of_ref(range.start),
                conversation.position_of_ref(range.end),
            ) else {
                continue;
            };
            let Some(units) = conversation.messages.get(s..=e) else {
                continue;
            };
            match summarizer
                .summarize(SummaryRequest {
                    wire: conversation.wire,
                    messages: units,
                    max_chars: self.config.max_summary_chars,
                })
                .await
            {
                Ok(summary) => requests.push(CompressRequest {
                    start: AnyRef::Message(range.start),
                    end: AnyRef::Message(range.end),
                    summary: summary.text,
                    topic: summary.topic,
                    author: Some(summary.author),
                }),
                Err(e) => turn.report.warn(
                    NAME,
                    "summarizer_failed",
                    format!("{}..{} left unfolded: {e}", range.start, range.end),
                ),
            }
        }
        let result = apply_compression(
            &mut turn.state,
            conversation,
            &requests,
            &compress,
            estimator,
        );
        for outcome in &result.ranges {
            if let Some(message) = &outcome.message {
                turn.report.warn(
                    NAME,
                    "auto_fold_range_refused",
                    format!("{}..{}: {message}", outcome.start, outcome.end),
                );
            }
        }
        turn.report
            .count("fold.blocks_created", result.blocks_created.len() as u64);
        turn.report
            .count("fold.tokens_compressed", result.tokens_compressed);
        let mut index = 0;
        turn.ranges.retain(|_| {
            let keep = !chosen.contains(&index);
            index += 1;
            keep
        });
        Ok(())
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
        if turn.conversation.is_none() {
            return Err(StageError::NotDecoded { stage: NAME });
        }
        if self.config.auto && !turn.ranges.is_empty() {
            self.auto_fold(turn, cx).await?;
        }
        if let Some(archive) = cx.archive.as_ref()
            && !turn.state.originals.is_empty()
        {
            let done = archive_originals(
                &mut turn.state,
                archive.as_ref(),
                &turn.session,
                cx.archive_timeout,
            )
            .await;
            turn.report
                .count("fold.originals_archived", done.stored.len() as u64);
            turn.report
                .count("fold.originals_archived_bytes", done.bytes);
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
        let Some(conversation) = turn.conversation.as_mut() else {
            return Err(StageError::NotDecoded { stage: NAME });
        };
        let outcome = fold_view(conversation, &turn.state);
        let r = &mut turn.report;
        r.count("fold.units_removed", outcome.removed as u64);
        r.count("fold.summaries_rendered", outcome.summaries.len() as u64);
        r.count("fold.kept_for_pairing", outcome.kept_for_pairing as u64);
        match outcome.first_user {
            FirstUserPin::Held => r.warn(
                NAME,
                "first_user_pin_held",
                "the first user message is folded but stays on the wire: the next surviving message behind it is not a plain user text",
            ),
            FirstUserPin::Residual => r.warn(
                NAME,
                "first_user_pin_residual",
                "the first user message is folded but stays on the wire: no user message survives behind it, so folding it would leave the request without a leading user message",
            ),
            FirstUserPin::Dropped | FirstUserPin::NotCovered => {}
        }
        Ok(())
    }
}

fn build(params: &Params) -> Result<Component, BuildError> {
    let config: FoldConfig = BuildError::parse_params(NAME, params)?;
    Ok(Component::Stage(Arc::new(Fold { config })))
}

foldwire_core::register!(Stage, NAME, build);
