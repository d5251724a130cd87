#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! The `foldwire` binary as scripts run it.

use std::io::Write as _;
use std::process::{Command, Output, Stdio};

/// Runs `foldwire ARGS` with `stdin` on its standard input (`FOLDWIRE_STATE` unset, so only
/// the flags name a state location).
pub fn foldwire(args: &[&str], stdin: &[u8]) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_foldwire"))
        .args(args)
        .env_remove("FOLDWIRE_STATE")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // A command that refuses its arguments exits before reading its input: a closed pipe
    // here is its answer, not a test failure.
    if let Err(e) = child.stdin.take().unwrap().write_all(stdin) {
        assert_eq!(e.kind(), std::io::ErrorKind::BrokenPipe, "{e}");
    }
    child.wait_with_output().unwrap()
}

/// Output bytes as text.
pub fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}
