//! The `foldwire` binary.

use std::process::ExitCode;

/// mimalloc instead of the system allocator: under many concurrent turns glibc's per-thread
/// arenas kept the high-water mark resident long after the load ended (`--bench proxy_memory`
/// measures both side by side); mimalloc returns freed pages to the system.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    foldwire_proxy::cli::main()
}
