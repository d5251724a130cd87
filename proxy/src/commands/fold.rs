//! `foldwire fold`: a person folds a range of a session's refs into a block with a summary.

use std::process::ExitCode;

use anyhow::{Context as _, Result, anyhow, bail};
use foldwire_core::AnyRef;
use foldwire_stages::kernel::{self, CompressConfig, CompressRequest, MinSummary};

use super::{SessionArgs, print_json, runtime};
use crate::offline::OfflineSession;

/// What `foldwire fold` is told.
#[derive(Debug, clap::Args)]
pub struct FoldArgs {
    /// The session and its state location.
    #[command(flatten)]
    pub session: SessionArgs,
    /// First ref (`mNNNNN`) or block id (`bN`).
    #[arg(long)]
    pub from: String,
    /// Last ref or block id.
    #[arg(long)]
    pub to: String,
    /// The summary that stands in for the range; without it a summarizer writes one.
    #[arg(long)]
    pub summary: Option<String>,
    /// A topic line.
    #[arg(long)]
    pub topic: Option<String>,
    /// The summarizer that writes the summary when `--summary` is not given.
    #[arg(long, default_value = "summarizer.llm")]
    pub summarizer: String,
    /// Its params as JSON (for `summarizer.llm`: base_url, wire, model, api_key_env, …).
    #[arg(long)]
    pub summarizer_params: Option<String>,
}

/// `foldwire fold`: folds one range of refs (or block ids) into a block with a summary,
/// given or written by a summarizer. Exit 1 when the range did not apply (the JSON says
/// why).
///
/// # Errors
/// Unusable session or refs that do not parse.
pub fn run(args: FoldArgs) -> Result<ExitCode> {
    let start: AnyRef = args.from.parse().context("--from")?;
    let end: AnyRef = args.to.parse().context("--to")?;
    runtime()?.block_on(async {
        let mut s =
            OfflineSession::open(&args.session.session, args.session.state.state.as_deref())
                .await?;
        let view = s.view().await?;
        let (summary, written_topic, author) = match args.summary {
            Some(text) => (text, None, "cli".to_owned()),
            None => {
                let w = written_summary(
                    &s,
                    &view,
                    start,
                    end,
                    &args.summarizer,
                    args.summarizer_params.as_deref(),
                )
                .await?;
                (w.text, w.topic, w.author)
            }
        };
        let mut request = CompressRequest::new(start, end, summary).with_author(author);
        request.topic = args.topic.or(written_topic);
        // The summary is written once; the fold itself runs again on a reloaded state when a
        // live proxy saved a turn in between (its refs and blocks are then current).
        let mut view = Some(view);
        let result = s
            .update(async |s| {
                let view = match view.take() {
                    Some(v) => v,
                    None => s.view().await?,
                };
                let result = fold_range(s, &view, &request).await;
                let changed = !result.blocks_created.is_empty();
                Ok((result, changed))
            })
            .await?;
        print_json(&result)?;
        Ok(if result.blocks_created.is_empty() {
            ExitCode::FAILURE
        } else {
            ExitCode::SUCCESS
        })
    })
}
/// Folds one range in the session's state; the originals go to the archive before the
/// state is saved, and any that cannot be stored stay in the state (nothing is lost) and are
/// named.
async fn fold_range(
    s: &mut OfflineSession,
    view: &foldwire_core::Conversation,
    request: &CompressRequest,
) -> kernel::CompressionResult {
    let cx = s.cx();
    let result = kernel::apply_compression(
        &mut s.state,
        view,
        std::slice::from_ref(request),
        // A person's explicit fold: no minimum summary length (that rule is the model's).
        &CompressConfig {
            min_summary: MinSummary::OFF,
            ..CompressConfig::default()
        },
        cx.estimator.as_ref(),
    );
    if !result.blocks_created.is_empty() {
        let archived = kernel::archive_originals(
            &mut s.state,
            s.backends.media.as_ref(),
            &s.id,
            cx.archive_timeout,
        )
        .await;
        for (r, why) in &archived.failed {
            eprintln!("foldwire: the original of {r} stays in the session state: {why}");
        }
    }
    result
}

/// Longest summary a summarizer is asked for by `foldwire fold`, in characters.
const CLI_SUMMARY_CHARS: usize = 1500;

/// The units a span covers in the view: the messages from `start` to `end`, or, for a span
/// of block ids, the summaries of the blocks.
fn span_units(
    view: &foldwire_core::Conversation,
    state: &foldwire_core::SessionState,
    start: AnyRef,
    end: AnyRef,
) -> Result<Vec<foldwire_core::Message>> {
    match (start, end) {
        (AnyRef::Message(a), AnyRef::Message(b)) => {
            let (Some(i), Some(j)) = (view.position_of_ref(a), view.position_of_ref(b)) else {
                bail!(
                    "{a}..{b} is not in the session's last request; `foldwire inspect` lists its refs"
                );
            };
            Ok(view
                .messages
                .get(i..=j)
                .map(<[_]>::to_vec)
                .unwrap_or_default())
        }
        (AnyRef::Block(a), AnyRef::Block(b)) => Ok(state
            .blocks
            .iter()
            .filter(|blk| blk.id >= a && blk.id <= b && blk.active)
            .map(|blk| {
                foldwire_core::Message::synthesized(
                    0,
                    foldwire_core::Role::User,
                    kernel::summary_text(blk),
                    foldwire_core::Origin::Summary(blk.id),
                    bytes::Bytes::new(),
                )
            })
            .collect()),
        _ => bail!("--from and --to must both be refs or both block ids"),
    }
}

/// A summary written by the named summarizer, its warnings on stderr.
async fn written_summary(
    s: &OfflineSession,
    view: &foldwire_core::Conversation,
    start: AnyRef,
    end: AnyRef,
    summarizer: &str,
    params: Option<&str>,
) -> Result<foldwire_core::Summary> {
    let params: serde_json::Value = match params {
        Some(p) => serde_json::from_str(p).context("--summarizer-params is not JSON")?,
        None => serde_json::Value::Null,
    };
    let summarizer = crate::setup::registry()?
        .summarizer(summarizer, &params)
        .context("--summarizer")?;
    let units = span_units(view, &s.state, start, end)?;
    if units.is_empty() {
        bail!("{start}..{end} covers nothing to summarize");
    }
    let scope = foldwire_stages::strategy_scope::StrategyScope::default();
    let summary = scope
        .scoped(summarizer.summarize(foldwire_core::SummaryRequest {
            wire: view.wire,
            messages: &units,
            max_chars: CLI_SUMMARY_CHARS,
        }))
        .await
        .map_err(|e| anyhow!("{e}"))?;
    for w in scope.take_warnings() {
        eprintln!("foldwire: {}: {}", w.strategy, w.message);
    }
    Ok(summary)
}
