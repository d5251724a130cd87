//! `foldwire reset`: start a new head window at a transition message (topic reset).

use std::process::ExitCode;

use anyhow::{Result, anyhow};
use foldwire_stages::layout_head_window;

use super::{SessionArgs, print_json, runtime};
use crate::offline::OfflineSession;

/// What `foldwire reset` is told.
#[derive(Debug, clap::Args)]
pub struct ResetArgs {
    /// The session and its state location.
    #[command(flatten)]
    pub session: SessionArgs,
    /// The transition text.
    #[arg(long)]
    pub transition: String,
}

/// `foldwire reset`: starts a new head at a transition message on the session's next turn.
///
/// # Errors
/// Unusable session or an empty transition.
pub fn run(args: ResetArgs) -> Result<ExitCode> {
    let session = &args.session;
    runtime()?.block_on(async {
        let mut s = OfflineSession::open(&session.session, session.state.state.as_deref()).await?;
        let generation = s
            .update(async |s| {
                let generation = layout_head_window::reset(&mut s.state, &args.transition)
                    .map_err(|e| anyhow!("{e}"))?;
                Ok((generation, true))
            })
            .await?;
        print_json(&serde_json::json!({ "session": s.id, "reset_generation": generation }))?;
        Ok(ExitCode::SUCCESS)
    })
}
