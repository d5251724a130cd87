//! Command-line parsing. Flags are stable: scripts depend on them.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};
use foldwire_core::Wire;

use crate::commands;

/// Exit code when the pipeline failed and the body was passed through unchanged.
pub const EXIT_PASSED_THROUGH: u8 = 2;
/// Exit code when the request was refused (cannot fit its budget).
pub const EXIT_REFUSED: u8 = 3;

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
    Plugins {
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Run one request through the pipeline offline: body on stdin (or --input), the body to
    /// forward on stdout. Exit 2 when the pipeline failed and the body passed through
    /// unchanged, 3 when the request was refused.
    Run(RunArgs),
    /// Run the proxy: point an agent's base URL at it. Listens on 127.0.0.1:8787 with state
    /// and archive under the user's data dir unless told otherwise.
    Serve(ServeArgs),
    /// Fold a range of refs (or block ids) of a session into a block with this summary;
    /// prints the blocks created and per-range errors as JSON.
    Fold {
        /// The session.
        #[arg(long)]
        session: String,
        /// State location.
        #[command(flatten)]
        state: StateArgs,
        /// First ref (`mNNNNN`) or block id (`bN`).
        #[arg(long)]
        from: String,
        /// Last ref or block id.
        #[arg(long)]
        to: String,
        /// The summary that stands in for the range.
        #[arg(long)]
        summary: String,
        /// A topic line.
        #[arg(long)]
        topic: Option<String>,
    },
    /// Print the originals of a block exactly as received (one unit per line), or archived
    /// media bytes (`--image-ref mNNNNN [-o FILE]`, `--image-ref list`).
    Restore {
        /// The session.
        #[arg(long)]
        session: String,
        /// State location.
        #[command(flatten)]
        state: StateArgs,
        /// The block to restore.
        #[arg(
            long,
            conflicts_with = "image_ref",
            required_unless_present = "image_ref"
        )]
        block: Option<String>,
        /// With --block: also the units of the blocks it consumed.
        #[arg(long, requires = "block")]
        full: bool,
        /// With --block: print JSON (refs and units) instead of the exact units.
        #[arg(long, requires = "block")]
        json: bool,
        /// An archived media ref, or `list`; also (as `--ref`) a tool output `tool.trim`
        /// trimmed, printed exactly as the client sent it.
        #[arg(long, visible_alias = "ref")]
        image_ref: Option<String>,
        /// With --image-ref: write the bytes to this file.
        #[arg(short = 'o', long = "output", requires = "image_ref")]
        output: Option<PathBuf>,
    },
    /// Print a session's refs, blocks and current compressible ranges as JSON.
    Inspect {
        /// The session.
        #[arg(long)]
        session: String,
        /// State location.
        #[command(flatten)]
        state: StateArgs,
    },
    /// Search a session's block summaries and topics.
    Search {
        /// The session.
        #[arg(long)]
        session: String,
        /// State location.
        #[command(flatten)]
        state: StateArgs,
        /// The words to look for.
        query: String,
    },
    /// Start a new head window at a transition message (topic reset).
    Reset {
        /// The session.
        #[arg(long)]
        session: String,
        /// State location.
        #[command(flatten)]
        state: StateArgs,
        /// The transition text.
        #[arg(long)]
        transition: String,
    },
    /// Replay a recorded session (JSONL: one request body per line, or
    /// `{"foldwire_reset": "TEXT"}` lines) through the pipeline; prints per-turn tokens,
    /// folds and rewrite.
    Replay(ReplayArgs),
    /// Apply retention to a state location: remove sessions idle too long and archived
    /// objects nothing points to; prints what it freed.
    Gc(commands::gc::GcArgs),
    /// Pipeline specs.
    Pipeline {
        /// The action.
        #[command(subcommand)]
        action: PipelineCommand,
    },
}

/// `foldwire pipeline …`.
#[derive(Debug, Subcommand)]
pub enum PipelineCommand {
    /// Validate a spec (a TOML/JSON file or a built-in name) and print the resolved ordering.
    Check {
        /// The spec file or built-in name.
        spec: String,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
}

/// Where session state lives; every session command takes it.
#[derive(Debug, Clone, Args)]
pub struct StateArgs {
    /// State directory or URL (`file://DIR`, `memory://`, `s3://bucket/prefix`). Default: the
    /// user's data dir, e.g. `~/.local/share/foldwire`.
    #[arg(long, env = "FOLDWIRE_STATE")]
    pub state: Option<String>,
}

/// `foldwire run`.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// The request's wire.
    #[arg(long, value_parser = parse_wire)]
    pub wire: Wire,
    /// The session id (letters, digits, '.', '_', '-').
    #[arg(long)]
    pub session: String,
    /// State location.
    #[command(flatten)]
    pub state: StateArgs,
    /// A built-in pipeline name (`default`, `passthrough`) or a spec file.
    #[arg(long, default_value = "default")]
    pub pipeline: String,
    /// Write the turn report (JSON: stage timings, counters, warnings) here.
    #[arg(long)]
    pub report: Option<PathBuf>,
    /// Read the request body from this file instead of stdin.
    #[arg(long)]
    pub input: Option<PathBuf>,
    /// The budget: the model's context window in tokens (overrides the pipeline's default).
    #[arg(long)]
    pub window: Option<u64>,
    /// The layout strategy for this run (e.g. `layout.store_order_fill`, `layout.head_first`).
    #[arg(long)]
    pub layout: Option<String>,
    /// Head-window size in tokens for this run.
    #[arg(long)]
    pub head_tokens: Option<u64>,
    /// Recent-window size in tokens for this run.
    #[arg(long)]
    pub recent_tokens: Option<u64>,
}

impl RunArgs {
    /// The per-turn overrides these flags set, as stages read them from `Turn::options`.
    pub fn turn_options(&self) -> foldwire_core::TurnOptions {
        let mut o = foldwire_core::TurnOptions::new();
        if let Some(v) = self.window {
            o.insert("window".into(), v.into());
        }
        if let Some(v) = &self.layout {
            o.insert("layout".into(), v.clone().into());
        }
        if let Some(v) = self.head_tokens {
            o.insert("head_tokens".into(), v.into());
        }
        if let Some(v) = self.recent_tokens {
            o.insert("recent_tokens".into(), v.into());
        }
        o
    }
}

/// `foldwire replay`.
#[derive(Debug, Args)]
pub struct ReplayArgs {
    /// The recorded session (JSONL).
    pub file: PathBuf,
    /// The wire of the requests (detected from each body when absent).
    #[arg(long, value_parser = parse_wire)]
    pub wire: Option<Wire>,
    /// A built-in pipeline name or a spec file.
    #[arg(long, default_value = "default")]
    pub pipeline: String,
    /// The budget (context window) in tokens.
    #[arg(long)]
    pub window: Option<u64>,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
    /// A TOML price table (`[anthropic]`, `[openai]`, `[gemini]`; every key optional) to
    /// price the turns and the baselines with instead of the list prices.
    #[arg(long)]
    pub prices: Option<PathBuf>,
}

/// `foldwire serve`. Precedence: defaults, then `--config FILE`, then environment, then flags.
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// TOML config file (every key optional).
    #[arg(long, env = "FOLDWIRE_CONFIG")]
    pub config: Option<PathBuf>,
    /// Listen address.
    #[arg(long, env = "FOLDWIRE_LISTEN")]
    pub listen: Option<std::net::SocketAddr>,
    /// State and archive location.
    #[command(flatten)]
    pub state: StateArgs,
    /// A built-in pipeline name or a spec file.
    #[arg(long, env = "FOLDWIRE_PIPELINE")]
    pub pipeline: Option<String>,
    /// Anthropic upstream base URL.
    #[arg(long, env = "FOLDWIRE_UPSTREAM_ANTHROPIC")]
    pub upstream_anthropic: Option<String>,
    /// OpenAI upstream base URL (Chat and Responses).
    #[arg(long, env = "FOLDWIRE_UPSTREAM_OPENAI")]
    pub upstream_openai: Option<String>,
    /// Gemini upstream base URL.
    #[arg(long, env = "FOLDWIRE_UPSTREAM_GEMINI")]
    pub upstream_gemini: Option<String>,
    /// Worker threads of the actor engine (0 = one per core).
    #[arg(long, env = "FOLDWIRE_WORKERS")]
    pub workers: Option<usize>,
}

fn parse_wire(s: &str) -> Result<Wire, String> {
    s.parse::<Wire>().map_err(|e| e.to_string())
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
    let result = match cli.command {
        Command::Plugins { json } => commands::plugins::run(json),
        Command::Run(args) => commands::run::run(args),
        Command::Serve(args) => commands::serve::run(args),
        Command::Fold {
            session,
            state,
            from,
            to,
            summary,
            topic,
        } => commands::session_cmds::fold(
            &session,
            state.state.as_deref(),
            &from,
            &to,
            &summary,
            topic.as_deref(),
        ),
        Command::Restore {
            session,
            state,
            block,
            full,
            json,
            image_ref,
            output,
        } => {
            let target = match (block, image_ref) {
                (Some(block), _) => {
                    Ok(commands::session_cmds::RestoreTarget::Block { block, full, json })
                }
                (None, Some(r#ref)) => {
                    Ok(commands::session_cmds::RestoreTarget::Image { r#ref, out: output })
                }
                (None, None) => Err(anyhow::anyhow!(
                    "restore needs --block bN or --image-ref mNNNNN|list"
                )),
            };
            target
                .and_then(|t| commands::session_cmds::restore(&session, state.state.as_deref(), t))
        }
        Command::Inspect { session, state } => {
            commands::session_cmds::inspect(&session, state.state.as_deref())
        }
        Command::Search {
            session,
            state,
            query,
        } => commands::session_cmds::search(&session, state.state.as_deref(), &query),
        Command::Reset {
            session,
            state,
            transition,
        } => commands::session_cmds::reset(&session, state.state.as_deref(), &transition),
        Command::Replay(args) => commands::replay::run(args),
        Command::Gc(args) => commands::gc::run(args),
        Command::Pipeline {
            action: PipelineCommand::Check { spec, json },
        } => commands::pipeline::check(&spec, json),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("foldwire: {e:#}");
            ExitCode::FAILURE
        }
    }
}
