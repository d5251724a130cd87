//! The `foldwire` binary.

use std::process::ExitCode;

fn main() -> ExitCode {
    foldwire_proxy::cli::main()
}
