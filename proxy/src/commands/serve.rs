//! `foldwire serve`: merge the configuration layers and run the proxy until interrupted.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context as _, Result};

use super::StateArgs;
use crate::serve::{self, ServeConfig};

/// `foldwire serve`. Precedence: defaults, then `--config FILE`, then environment, then flags.
#[derive(Debug, clap::Args)]
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

/// The effective configuration: defaults, then the file, then environment and flags.
///
/// # Errors
/// An unreadable or invalid config file.
pub fn config(args: ServeArgs) -> Result<ServeConfig> {
    let mut config = match &args.config {
        Some(path) => ServeConfig::from_file(path)?,
        None => ServeConfig::default(),
    };
    if let Some(v) = args.listen {
        config.listen = v;
    }
    if let Some(v) = args.state.state {
        config.state = Some(v);
    }
    if let Some(v) = args.pipeline {
        config.pipeline = v;
    }
    if let Some(v) = args.upstream_anthropic {
        config.upstreams.anthropic = v;
    }
    if let Some(v) = args.upstream_openai {
        config.upstreams.openai = v;
    }
    if let Some(v) = args.upstream_gemini {
        config.upstreams.gemini = v;
    }
    if let Some(v) = args.workers {
        config.workers = v;
    }
    Ok(config)
}

/// Runs the proxy.
///
/// # Errors
/// Bad configuration, or the listener cannot be bound.
pub fn run(args: ServeArgs) -> Result<ExitCode> {
    let config = config(args)?;
    let runtime = serve::runtime(&config).context("starting the async runtime")?;
    runtime.block_on(async move {
        let running = serve::start(config).await?;
        eprintln!("foldwire: listening on http://{}", running.addr);
        tokio::select! {
            result = running.task => { result.context("server task")?.context("server")?; }
            _ = tokio::signal::ctrl_c() => { eprintln!("foldwire: interrupted, stopping"); }
        }
        Ok(ExitCode::SUCCESS)
    })
}
