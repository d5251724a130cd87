//! One module per command.

pub mod gc;
pub mod pipeline;
pub mod plugins;
pub mod replay;
pub mod run;
pub mod serve;
pub mod session_cmds;

use std::io::Write as _;

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
