//! Stage `tool.trim`: archive-then-trim for bulky tool outputs.
//!
//! Outside the recent window (the protection `ranges.build` used this turn), a tool result
//! whose text is over `min_chars` keeps its first `head_chars` and last `tail_chars`
//! characters and a line naming its ref; the whole unit is written to the session's archive
//! **first** (content-addressed, recorded in `state.archive` as [`ArchivedItem::trimmed`]), and
//! [`restore_trimmed`] gives it back byte-identical (the model's `restore` tool with the
//! ref, `foldwire restore --ref mNNNNN`). A unit whose write fails stays whole.
//!
//! A trim is sticky: once trimmed, the unit goes out trimmed the same way on every later
//! turn (the record is kept in the state), so the cached prefix holding it stays valid.
//! Trimming a unit changes the request from that unit on, so trims are scheduled like
//! folds: a candidate at or after the point this turn's request is rewritten from anyway
//! (a fold, a reset) is trimmed at no extra cost; earlier candidates are trimmed together
//! only when the tokens they save, read on the next `payback_turns` turns, cost more than
//! rewriting the cached tokens between the first of them and that point.
//!
//! Tool results carrying media, pinned units, protected tools (`latest_tools`, …) and the
//! head window are never trimmed. The stage runs after `fold` (folds see and archive the
//! whole originals) and before the layout, which measures the request as sent.
//!
//! Params: `min_chars` (4000), `head_chars` (1200), `tail_chars` (600), `payback_turns`
//! (20; 0 trims only on turns rewritten anyway).

use std::collections::BTreeMap;

use foldhash::HashSet;
use std::sync::Arc;

use bytes::Bytes;
use foldwire_core::state::ArchivedItem;
use foldwire_core::{
    BuildCx, BuildError, Component, ComponentConfig, ComponentKind, Fact, MediaArchive, Message,
    MessageKind, Origin, Ref, SessionId, SessionState, Stage, StageCx, StageError, Turn,
    async_trait,
};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::kernel::units::{Coverage, KnownUnitTokens, Links};
use crate::layout_head_window::{HeadState, unit_key};
use crate::ranges_build::UsedProtection;

/// The registered stage name.
pub const NAME: &str = TrimConfig::NAME;

/// The media type trimmed originals are archived under (the unit's JSON, as received).
pub const TRIMMED_MEDIA_TYPE: &str = "application/vnd.foldwire.trimmed+json";

/// Where the stage keeps its trims in `SessionState::extra`.
pub const STATE_KEY: &str = "tool_trim";

/// Cache read and write prices relative to input (Anthropic's, the dearest writes): the
/// exchange rate between tokens saved on every later read and tokens rewritten once.
const READ: f64 = 0.1;
const WRITE: f64 = 1.25;

/// Settings of `tool.trim`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TrimConfig {
    /// Results with more characters of text than this are trimmed.
    pub min_chars: usize,
    /// Characters kept from the start.
    pub head_chars: usize,
    /// Characters kept from the end.
    pub tail_chars: usize,
    /// Turns a trim that moves the rewrite point earlier must pay back within.
    pub payback_turns: u32,
}

impl Default for TrimConfig {
    fn default() -> Self {
        TrimConfig {
            min_chars: 4_000,
            head_chars: 1_200,
            tail_chars: 600,
            payback_turns: 20,
        }
    }
}

/// One trimmed unit, by fingerprint.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TrimRecord {
    /// Its ref.
    pub r#ref: Ref,
    /// The archive key of its original.
    pub key: String,
}

/// The trims of a session.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct TrimState {
    /// Trimmed units by fingerprint.
    pub trims: BTreeMap<String, TrimRecord>,
}

impl TrimState {
    /// The trims recorded in `state`.
    pub fn load(state: &SessionState) -> Self {
        state
            .extra
            .get(STATE_KEY)
            .and_then(|v| serde_json::from_value(v.clone()).ok())
            .unwrap_or_default()
    }

    fn store(&self, state: &mut SessionState) {
        if let Ok(v) = serde_json::to_value(self) {
            state.extra.insert(STATE_KEY.to_owned(), v);
        }
    }
}

/// Why a trimmed output could not be restored.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TrimRestoreError {
    /// The ref names no trimmed tool output of the session.
    #[error("{0} is not a trimmed tool output of this session")]
    NotTrimmed(Ref),
    /// The archive could not give it back.
    #[error("the original of trimmed {ref} could not be read from the archive: {why}")]
    Archive {
        /// The ref.
        r#ref: Ref,
        /// What went wrong.
        why: String,
    },
}

/// The archive key of `r`'s trimmed original, when `r` was trimmed.
pub fn trimmed_key(state: &SessionState, r: Ref) -> Option<&str> {
    state
        .archive
        .iter()
        .rev()
        .find(|i| i.r#ref == Some(r) && i.trimmed)
        .map(|i| i.key.as_str())
}

/// The exact bytes of a trimmed tool result, as the client sent them, checked against
/// their content key.
///
/// # Errors
/// `r` was not trimmed, or the archive lost or altered the bytes.
pub async fn restore_trimmed(
    state: &SessionState,
    archive: &dyn MediaArchive,
    session: &SessionId,
    r: Ref,
) -> Result<String, TrimRestoreError> {
    let key = trimmed_key(state, r).ok_or(TrimRestoreError::NotTrimmed(r))?;
    let fail = |why: String| TrimRestoreError::Archive { r#ref: r, why };
    let bytes = archive
        .get_content(session, key)
        .await
        .map_err(|e| fail(e.to_string()))?;
    let actual = foldwire_archive::keys::sha256_hex(&bytes);
    if actual != key {
        return Err(fail(format!(
            "stored bytes hash to {actual}, not to their key {key}"
        )));
    }
    String::from_utf8(bytes.to_vec()).map_err(|_| fail("not UTF-8".to_owned()))
}

/// The stage.
#[derive(Debug, Clone, Default)]
pub struct ToolTrim {
    /// Its settings.
    pub config: TrimConfig,
}

impl ComponentConfig for TrimConfig {
    const KIND: ComponentKind = ComponentKind::Stage;
    const NAME: &'static str = "tool.trim";
    const DESCRIPTION: &'static str =
        "Archives bulky tool outputs, then sends only their head and tail.";

    fn build(self, _cx: &BuildCx<'_>) -> Result<Component, BuildError> {
        if self.min_chars <= self.head_chars + self.tail_chars {
            return Err(BuildError::new(
                NAME,
                format!(
                    "min_chars ({}) must exceed head_chars + tail_chars ({}), or a trim would not shorten anything",
                    self.min_chars,
                    self.head_chars + self.tail_chars
                ),
            ));
        }
        Ok(Component::Stage(Arc::new(ToolTrim { config: self })))
    }
}

foldwire_core::register_config!(TrimConfig);

/// The text of a unit cut to its head and tail around a line naming its ref.
fn trimmed_text(text: &str, r: Ref, config: &TrimConfig) -> String {
    let chars = text.chars().count();
    let head: String = text.chars().take(config.head_chars).collect();
    let tail: String = text
        .chars()
        .skip(chars.saturating_sub(config.tail_chars))
        .collect();
    let cut = chars - config.head_chars - config.tail_chars;
    format!(
        "{head}\n[foldwire: {cut} of {chars} characters of this tool output trimmed; restore {r} returns all of it]\n{tail}"
    )
}

/// The unit's JSON with its result text replaced by `text`, in its wire's shape: an
/// Anthropic `tool_result` or OpenAI Chat tool message (`content`), a Responses
/// `function_call_output` (`output`), a Gemini `functionResponse` (`response`). `None` when
/// the unit has none of these shapes.
fn with_text(raw: &[u8], text: &str) -> Option<Bytes> {
    let mut v: Value = serde_json::from_slice(raw).ok()?;
    let obj = v.as_object_mut()?;
    if let Some(fr) = obj
        .get_mut("functionResponse")
        .and_then(Value::as_object_mut)
    {
        fr.insert("response".into(), serde_json::json!({ "result": text }));
    } else if obj.get("type").and_then(Value::as_str) == Some("function_call_output") {
        obj.insert("output".into(), Value::String(text.to_owned()));
    } else if obj.contains_key("content") {
        obj.insert("content".into(), Value::String(text.to_owned()));
    } else {
        return None;
    }
    serde_json::to_vec(&v).ok().map(Bytes::from)
}

fn trimmable(m: &Message, config: &TrimConfig) -> bool {
    m.kind == MessageKind::ToolResult
        && m.origin == Origin::Client
        && m.pin.is_none()
        && m.media.is_empty()
        && m.r#ref.is_some()
        && m.text.len() > config.min_chars
        && m.text.chars().count() > config.min_chars
}

#[async_trait]
impl Stage for ToolTrim {
    fn name(&self) -> &'static str {
        NAME
    }
    fn requires(&self) -> &'static [Fact] {
        // After fold: folds archive whole originals, and only what stays on the wire trims.
        &[Fact::Folded, Fact::Archived]
    }
    async fn run(&self, turn: &mut Turn, cx: &StageCx) -> Result<(), StageError> {
        let config = self.config;
        let mut trims = TrimState::load(&turn.state);
        let protection = UsedProtection::of(turn);
        let Some(conv) = turn.conversation.as_mut() else {
            return Err(StageError::NotDecoded { stage: NAME });
        };
        // Earlier trims first, the same way each turn.
        let mut reapplied = 0u64;
        for m in conv.messages.iter_mut() {
            let (Some(r), Some(_)) = (m.r#ref, trims.trims.get(&m.id.0)) else {
                continue;
            };
            if !trimmable(m, &config) {
                continue;
            }
            if let Some(raw) = with_text(&m.raw, &trimmed_text(&m.text, r, &config)) {
                m.replace_raw(raw);
                reapplied += 1;
            }
        }
        turn.report.count("tool.trim.reapplied", reapplied);
        let Some(archive) = cx.archive.clone() else {
            return Ok(());
        };

        // Where this turn's request is rewritten from anyway: its first unit the previous
        // request did not hold (a new summary, a changed unit; on a turn that only appends,
        // the new units at the end). Membership, not position: the layout may send units in
        // another order (a reset's head first) or add some later (a reset's transition).
        let head = HeadState::load(&turn.state).unwrap_or_default();
        let units = &conv.messages;
        let previous: HashSet<&foldwire_core::MessageId> =
            head.previous.iter().map(|p| &p.id).collect();
        let rewrite_from = units
            .iter()
            .position(|m| !previous.contains(&unit_key(m)))
            .unwrap_or(units.len());
        let estimator = cx.estimator.as_ref();
        let zone = protection.zone(conv.wire, units, &Coverage::default(), estimator);
        let tools = protection.protected_tools(units, &Links::new(units));
        // On a session's first turn the layout has not recorded the head yet: take the
        // head it will record, as `ranges.build` does.
        let first_head = crate::layout_head_window::with_first_head(
            &turn.state,
            conv,
            estimator,
            crate::layout_head_window::default_head_tokens(turn.budget.available()),
            turn.extensions.get::<KnownUnitTokens>(),
        )
        .ok()
        .flatten();
        let head_units = protection.head(units, first_head.as_ref().unwrap_or(&turn.state));
        let candidates: Vec<usize> = units
            .iter()
            .enumerate()
            .filter(|(i, m)| {
                !zone.contains(i)
                    && !tools.contains(i)
                    && !head_units.contains(i)
                    && !m.modified
                    && !trims.trims.contains_key(&m.id.0)
                    && trimmable(m, &config)
            })
            .map(|(i, _)| i)
            .collect();
        if candidates.is_empty() {
            trims.store(&mut turn.state);
            return Ok(());
        }
        let tokens: Vec<u64> = units.iter().map(|m| estimator.raw_tokens(&m.raw)).collect();
        let saved = |i: usize| {
            units.get(i).map_or(0, |m| {
                let kept = (config.head_chars + config.tail_chars + 120) as u64;
                estimator
                    .text_tokens(&m.text)
                    .saturating_sub(kept.div_ceil(4))
            })
        };
        let (free, costly): (Vec<usize>, Vec<usize>) =
            candidates.iter().partition(|&&i| i >= rewrite_from);
        let mut chosen: HashSet<usize> = free.into_iter().collect();
        if let Some(&first) = costly.first() {
            let all_saved: u64 = candidates.iter().map(|&i| saved(i)).sum();
            let extra: u64 = tokens
                .get(first..rewrite_from)
                .map_or(0, |t| t.iter().sum());
            let gain = all_saved as f64 * READ * f64::from(config.payback_turns);
            if gain >= extra as f64 * (WRITE - READ) {
                chosen.extend(costly);
            }
        }
        let mut done = 0u64;
        let mut bytes_archived = 0u64;
        let mut failed = Vec::new();
        let mut order: Vec<usize> = chosen.into_iter().collect();
        order.sort_unstable();
        for i in order {
            let Some(m) = conv.messages.get_mut(i) else {
                continue;
            };
            let Some(r) = m.r#ref else { continue };
            let Some(raw) = with_text(&m.raw, &trimmed_text(&m.text, r, &config)) else {
                continue;
            };
            let write = archive.put_content(&turn.session, TRIMMED_MEDIA_TYPE, m.raw.clone());
            let stored = match tokio::time::timeout(cx.archive_timeout, write).await {
                Ok(Ok(s)) => s,
                Ok(Err(e)) => {
                    failed.push(format!("{r}: {e}"));
                    continue;
                }
                Err(_) => {
                    failed.push(format!("{r}: archive write timed out"));
                    continue;
                }
            };
            let item = ArchivedItem {
                r#ref: Some(r),
                key: stored.key.clone(),
                media_type: stored.media_type,
                size: stored.size,
                trimmed: true,
                ..ArchivedItem::default()
            };
            if trimmed_key(&turn.state, r) != Some(stored.key.as_str()) {
                turn.state.archive.push(item);
            }
            bytes_archived += stored.size;
            trims.trims.insert(
                m.id.0.clone(),
                TrimRecord {
                    r#ref: r,
                    key: stored.key,
                },
            );
            m.replace_raw(raw);
            done += 1;
        }
        trims.store(&mut turn.state);
        turn.report.count("tool.trim.trimmed", done);
        turn.report
            .count("tool.trim.archived_bytes", bytes_archived);
        if !failed.is_empty() {
            turn.report.warn(
                NAME,
                "trim_not_archived",
                format!(
                    "{} tool output(s) stay whole because their original could not be archived: {}",
                    failed.len(),
                    failed.join("; ")
                ),
            );
        }
        Ok(())
    }
}
