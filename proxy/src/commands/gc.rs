//! `foldwire gc`: applies retention to a state location (the server does the same on a
//! schedule, see `retention_*` in the serve config).

use std::process::ExitCode;
use std::time::SystemTime;

use anyhow::{Context as _, Result, bail};
use foldwire_archive::{GcReport, RetentionPolicy, retention};

use super::write_stdout;
use crate::setup;

/// What `foldwire gc` is told.
#[derive(Debug, Clone, clap::Args)]
pub struct GcArgs {
    /// State location.
    #[command(flatten)]
    pub state: super::StateArgs,
    /// Remove sessions idle (no turn) for more than this many days; 0 keeps them.
    #[arg(long, default_value_t = 30)]
    pub session_days: u64,
    /// Remove archived objects nothing points to once older than this many days; 0 keeps them.
    #[arg(long, default_value_t = 7)]
    pub media_days: u64,
    /// Report what would be removed, remove nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
}

/// Runs one collection and prints what it freed.
///
/// # Errors
/// An unusable location, a store that cannot be listed, or a policy that keeps everything.
pub fn run(args: GcArgs) -> Result<ExitCode> {
    let policy = RetentionPolicy::from_days(args.session_days, args.media_days);
    if policy.keeps_everything() {
        bail!("--session-days 0 and --media-days 0 keep everything: nothing to collect");
    }
    let backends = setup::backends(args.state.state.as_deref())?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let report = runtime
        .block_on(retention::collect(
            &backends.store,
            backends.backend,
            policy,
            SystemTime::now(),
            args.dry_run,
        ))
        .context("listing the state location")?;
    let text = if args.json {
        let mut s = serde_json::to_string_pretty(&report)?;
        s.push('\n');
        s
    } else {
        summary(&report)
    };
    write_stdout(text.as_bytes())?;
    Ok(if report.errors.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// One paragraph a person reads.
pub fn summary(r: &GcReport) -> String {
    let verb = if r.dry_run { "would remove" } else { "removed" };
    let mut s = format!(
        "{} sessions seen; {verb} {} idle sessions and {} unreferenced objects: {} objects, {} bytes; kept {} old objects that something still points to\n",
        r.sessions_seen,
        r.sessions_removed.len(),
        r.orphans_removed,
        r.objects_removed,
        r.bytes_freed,
        r.kept_referenced
    );
    for e in &r.errors {
        s.push_str("error: ");
        s.push_str(e);
        s.push('\n');
    }
    s
}
