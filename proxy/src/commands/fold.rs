//! `foldwire fold`: a person folds a range of a session's refs into a block with a summary.

use std::process::ExitCode;

use anyhow::{Context as _, Result};
use foldwire_core::AnyRef;
use foldwire_stages::kernel::{self, CompressConfig, CompressRequest, MinSummary};

use super::{SessionArgs, print_json, runtime};
use crate::session::OfflineSession;

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
    /// The summary that stands in for the range.
    #[arg(long)]
    pub summary: String,
    /// A topic line.
    #[arg(long)]
    pub topic: Option<String>,
}

/// `foldwire fold`: folds one range of refs (or block ids) into a block with a summary.
/// Exit 1 when the range did not apply (the JSON says why).
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
        let request = CompressRequest {
            start,
            end,
            summary: args.summary,
            topic: args.topic,
            author: Some("cli".to_owned()),
            max_summary_chars: None,
        };
        let cx = s.cx();
        let result = kernel::apply_compression(
            &mut s.state,
            &view,
            std::slice::from_ref(&request),
            // A person's explicit fold: no minimum summary length (that rule is the model's).
            &CompressConfig {
                min_summary: MinSummary::OFF,
                ..CompressConfig::default()
            },
            cx.estimator.as_ref(),
        );
        if !result.blocks_created.is_empty() {
            // The originals go to the archive before the state is saved; any that cannot be
            // stored stay in the state (nothing is lost) and are named.
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
            s.save().await?;
        }
        print_json(&result)?;
        Ok(if result.blocks_created.is_empty() {
            ExitCode::FAILURE
        } else {
            ExitCode::SUCCESS
        })
    })
}
