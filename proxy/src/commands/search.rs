//! `foldwire search`: a session's blocks ranked by how well their summary and topic match.

use std::process::ExitCode;

use anyhow::Result;
use foldwire_stages::kernel;

use super::{SessionArgs, print_json, runtime};
use crate::offline::OfflineSession;

/// What `foldwire search` is told.
#[derive(Debug, clap::Args)]
pub struct SearchArgs {
    /// The session and its state location.
    #[command(flatten)]
    pub session: SessionArgs,
    /// The words to look for.
    pub query: String,
}

/// `foldwire search`: blocks ranked by how well their summary and topic match.
///
/// # Errors
/// Unusable session.
pub fn run(args: SearchArgs) -> Result<ExitCode> {
    let session = &args.session;
    runtime()?.block_on(async {
        let s = OfflineSession::open(&session.session, session.state.state.as_deref()).await?;
        print_json(&kernel::search(&s.state, &args.query))?;
        Ok(ExitCode::SUCCESS)
    })
}
