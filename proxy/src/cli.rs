//! Command-line parsing: the top-level flags and the list of commands. Each command's flags
//! are its own args struct in `commands/<command>.rs`, next to the code that runs it, so this
//! file names commands and nothing reaches back into it. Flags are stable: scripts depend on
//! them.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

use crate::commands::{
    self, fold::FoldArgs, gc::GcArgs, inspect::InspectArgs, pipeline::PipelineCommand,
    plugins::PluginsArgs, reset::ResetArgs, restore::RestoreArgs, search::SearchArgs,
};
// The args structs and exit codes as they were reachable before each command owned them.
pub use crate::commands::{
    EXIT_PASSED_THROUGH, EXIT_REFUSED, SessionArgs, StateArgs, replay::ReplayArgs, run::RunArgs,
    serve::ServeArgs,
};

/// foldwire keeps long LLM agent sessions inside the model's context window without losing
/// anything.
#[derive(Debug, Parser)]
#[command(name = "foldwire", version, about)]
pub struct Cli {
    /// Log filter (tracing `EnvFilter` syntax), e.g. `info` or `foldwire_core=debug`.
    #[arg(long, global = true, env = "FOLDWIRE_LOG", default_value = "warn")]
    pub log: String,
    /// The command.
    #[command(subcommand)]
    pub command: Command,
}

/// The commands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// List every registered stage and strategy: kind, name, crate.
    Plugins(PluginsArgs),
    /// Run one request through the pipeline offline: body on stdin (or --input), the body to
    /// forward on stdout. Exit 2 when the pipeline failed and the body passed through
    /// unchanged, 3 when the request was refused.
    Run(RunArgs),
    /// Run the proxy: point an agent's base URL at it. Listens on 127.0.0.1:8787 with state
    /// and archive under the user's data dir unless told otherwise.
    Serve(ServeArgs),
    /// Fold a range of refs (or block ids) of a session into a block with this summary;
    /// prints the blocks created and per-range errors as JSON.
    Fold(FoldArgs),
    /// Print the originals of a block exactly as received (one unit per line), or archived
    /// media bytes (`--image-ref mNNNNN [-o FILE]`, `--image-ref list`).
    Restore(RestoreArgs),
    /// Print a session's refs, blocks and current compressible ranges as JSON.
    Inspect(InspectArgs),
    /// Search a session's block summaries and topics.
    Search(SearchArgs),
    /// Start a new head window at a transition message (topic reset).
    Reset(ResetArgs),
    /// Replay a recorded session (JSONL: one request body per line, or
    /// `{"foldwire_reset": "TEXT"}` lines) through the pipeline; prints per-turn tokens,
    /// folds and rewrite.
    Replay(ReplayArgs),
    /// Apply retention to a state location: remove sessions idle too long and archived
    /// objects nothing points to; prints what it freed.
    Gc(GcArgs),
    /// Pipeline specs.
    Pipeline {
        /// The action.
        #[command(subcommand)]
        action: PipelineCommand,
    },
}

impl Command {
    /// Runs the command.
    ///
    /// # Errors
    /// Whatever the command reports; `main` prints it and exits 1.
    pub fn run(self) -> anyhow::Result<ExitCode> {
        match self {
            Command::Plugins(args) => commands::plugins::run(args),
            Command::Run(args) => commands::run::run(args),
            Command::Serve(args) => commands::serve::run(args),
            Command::Fold(args) => commands::fold::run(args),
            Command::Restore(args) => commands::restore::run(args),
            Command::Inspect(args) => commands::inspect::run(args),
            Command::Search(args) => commands::search::run(args),
            Command::Reset(args) => commands::reset::run(args),
            Command::Replay(args) => commands::replay::run(args),
            Command::Gc(args) => commands::gc::run(args),
            Command::Pipeline { action } => commands::pipeline::run(action),
        }
    }
}

/// Parses arguments, runs the command, and maps errors to exit codes.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    let filter = tracing_subscriber::EnvFilter::try_new(&cli.log)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    // Colour codes only for a person at a terminal: log files and collectors get plain text.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr())
        && std::env::var_os("NO_COLOR").is_none();
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(ansi)
        .init();
    match cli.command.run() {
        Ok(code) => code,
        Err(e) => {
            eprintln!("foldwire: {e:#}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory as _;

    use super::*;

    #[test]
    fn every_command_s_args_assemble_into_one_valid_cli() {
        // clap's own consistency checks (conflicting ids, `requires` naming a flag that
        // exists, …) across the args structs the command modules own.
        Cli::command().debug_assert();
        let cli = Cli::try_parse_from([
            "foldwire",
            "restore",
            "--session",
            "s1",
            "--state",
            "memory://",
            "--block",
            "b1",
            "--full",
        ])
        .unwrap();
        let Command::Restore(args) = cli.command else {
            panic!("parsed as {:?}", cli.command);
        };
        assert_eq!(args.session.session, "s1");
        assert_eq!(args.session.state.state.as_deref(), Some("memory://"));
        assert!(matches!(
            args.target().unwrap(),
            commands::restore::RestoreTarget::Block { full: true, .. }
        ));
    }

    #[test]
    fn no_command_reaches_back_into_cli() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/commands");
        let mut read = 0;
        for entry in std::fs::read_dir(&dir).unwrap().flatten() {
            let text = std::fs::read_to_string(entry.path()).unwrap();
            read += 1;
            assert!(
                !text.contains("crate::cli"),
                "{} imports from cli; shared flags belong in commands/mod.rs",
                entry.path().display()
            );
        }
        assert!(read > 5, "read only {read} command modules");
    }
}
