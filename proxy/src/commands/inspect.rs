//! `foldwire inspect`: a session's refs, blocks and current compressible ranges.

use std::process::ExitCode;

use anyhow::Result;
use foldwire_stages::kernel::{self, RangesConfig};

use super::{SessionArgs, print_json, runtime};
use crate::offline::OfflineSession;

/// What `foldwire inspect` is told.
#[derive(Debug, clap::Args)]
pub struct InspectArgs {
    /// The session and its state location.
    #[command(flatten)]
    pub session: SessionArgs,
}

/// `foldwire inspect`: refs, blocks and the current compressible ranges, as JSON.
///
/// # Errors
/// Unusable session.
pub fn run(args: InspectArgs) -> Result<ExitCode> {
    let session = &args.session;
    runtime()?.block_on(async {
        let s = OfflineSession::open(&session.session, session.state.state.as_deref()).await?;
        // A session with no recorded request still has refs and blocks to show.
        let view = match s.recorded_view().await? {
            Some(view) => view,
            None => {
                eprintln!(
                    "foldwire: session {} has no recorded request; refs and blocks come from its state alone (no roles, previews or ranges)",
                    s.id
                );
                crate::offline::empty_view(foldwire_core::Wire::Anthropic)
            }
        };
        let cx = s.cx();
        print_json(&kernel::inspect(
            &s.state,
            &view,
            &RangesConfig::default(),
            cx.estimator.as_ref(),
        ))?;
        Ok(ExitCode::SUCCESS)
    })
}
