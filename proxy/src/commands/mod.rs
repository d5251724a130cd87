//! One module per command, each with its own args struct and `run`; what several commands
//! share (the state location, exit codes, writing to stdout) is here, so no command reaches
//! back into `cli`.

pub mod fold;
pub mod gc;
pub mod inspect;
pub mod pipeline;
pub mod plugins;
pub mod replay;
pub mod reset;
pub mod restore;
pub mod run;
pub mod search;
pub mod serve;

use std::io::Write as _;

use anyhow::Context as _;
use foldwire_core::Wire;

/// Exit code when the pipeline failed and the body was passed through unchanged.
pub const EXIT_PASSED_THROUGH: u8 = 2;
/// Exit code when the request was refused (cannot fit its budget).
pub const EXIT_REFUSED: u8 = 3;

/// Where session state lives; every session command takes it.
#[derive(Debug, Clone, clap::Args)]
pub struct StateArgs {
    /// State directory or URL (`file://DIR`, `memory://`, `s3://bucket/prefix`). Default: the
    /// user's data dir, e.g. `~/.local/share/foldwire`.
    #[arg(long, env = "FOLDWIRE_STATE")]
    pub state: Option<String>,
}

/// The session a session command works on, and where its state lives.
#[derive(Debug, Clone, clap::Args)]
pub struct SessionArgs {
    /// The session.
    #[arg(long)]
    pub session: String,
    /// State location.
    #[command(flatten)]
    pub state: StateArgs,
}

/// Parses a `--wire` value.
fn parse_wire(s: &str) -> Result<Wire, String> {
    s.parse::<Wire>().map_err(|e| e.to_string())
}

/// Writes bytes to stdout, flushing; a closed pipe is not an error worth a panic.
///
/// # Errors
/// Any other write failure.
pub fn write_stdout(bytes: &[u8]) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    match out.write_all(bytes).and_then(|()| out.flush()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        other => Ok(other?),
    }
}

/// Prints a value as pretty JSON on stdout.
fn print_json(value: &impl serde::Serialize) -> anyhow::Result<()> {
    let mut s = serde_json::to_string_pretty(value)?;
    s.push('\n');
    write_stdout(s.as_bytes())
}

/// A single-threaded runtime for a command that works on a session offline.
fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")
}
