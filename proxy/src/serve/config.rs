//! `foldwire serve` configuration: TOML file, then environment, then flags; every option has
//! a default, so no file is needed.

use std::net::SocketAddr;
use std::path::Path;

use anyhow::{Context as _, Result};
use serde::{Deserialize, Serialize};

/// Upstream base URLs per wire family.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Upstreams {
    /// Anthropic Messages.
    pub anthropic: String,
    /// OpenAI Chat and Responses.
    pub openai: String,
    /// Gemini.
    pub gemini: String,
}

impl Default for Upstreams {
    fn default() -> Self {
        Upstreams {
            anthropic: "https://api.anthropic.com".into(),
            openai: "https://api.openai.com".into(),
            gemini: "https://generativelanguage.googleapis.com".into(),
        }
    }
}

/// Everything `foldwire serve` can be told.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ServeConfig {
    /// Listen address.
    pub listen: SocketAddr,
    /// State and archive location (directory or URL); default the user's data dir.
    pub state: Option<String>,
    /// Pipeline: a built-in name or a spec file.
    pub pipeline: String,
    /// Upstream base URLs.
    pub upstreams: Upstreams,
    /// Largest request body accepted, in bytes (413 above).
    pub max_body_bytes: usize,
    /// Worker arbiters for the actor engine (0 = one per core).
    pub workers: usize,
    /// Key for hashing credentials into session identity; default a random key kept in the
    /// state dir. Set it when several replicas must agree on anonymous session ids.
    pub identity_key: Option<String>,
    /// Reports kept per session for the admin API.
    pub reports_per_session: usize,
    /// Sessions whose reports are kept (the least recently reported go first); their
    /// state stays in the state location either way.
    pub report_sessions: usize,
    /// Inject the `compress`, `restore` and `search_context` tools into processed requests
    /// and run the model's calls to them inside the proxy (`summarizer.model_tool`).
    pub compress_tools: bool,
    /// Most upstream requests one client request may cause in the compress loop (the first
    /// included); at the cap the last answer goes to the client with the proxy calls hidden.
    pub max_rounds: usize,
    /// Context window assumed for every session, in tokens, until an overflow error from
    /// the provider teaches a session a smaller one.
    pub window: u64,
    /// Seconds between SSE keep-alive comments while the proxy works between rounds.
    pub keepalive_secs: u64,
    /// Usage samples kept per session for calibration.
    pub usage_samples: usize,
    /// Seconds a session may sit idle before its in-memory state is dropped (it stays in the
    /// state location and loads again on the next turn); 0 keeps every session in memory.
    pub idle_session_secs: u64,
    /// Store failures in a row after which the state store and archive are skipped (turns
    /// fail open at once) until a probe succeeds; 0 turns the circuit breaker off.
    pub store_breaker_failures: u32,
    /// Seconds an open store circuit waits before probing the store again.
    pub store_breaker_cooldown_secs: u64,
    /// Longest one state or archive call may take, in milliseconds (a frozen store costs
    /// this, not the client's whole retry schedule).
    pub store_timeout_ms: u64,
    /// Sessions idle (no turn) longer than this many days are removed whole, state and
    /// archive; 0 keeps them forever.
    pub retention_session_days: u64,
    /// Archived objects that nothing points to any more (no state, block or ref) are removed
    /// once older than this many days; 0 keeps them. Referenced objects are never removed.
    pub retention_media_days: u64,
    /// Seconds between retention runs (the first runs at start; at least 60).
    pub retention_interval_secs: u64,
    /// Connections held at once; further clients wait in the listen backlog.
    pub max_connections: usize,
    /// Seconds a connection may take to send a request's headers, counted from when it
    /// waits for one (a new connection, or an idle keep-alive one); then it is closed.
    pub header_timeout_secs: u64,
    /// Threads for blocking file I/O (state saves, the local archive); more wait their turn.
    pub max_blocking_threads: usize,
    /// Opt-in: a user message `/newtopic TEXT` typed in any client resets the session's
    /// topic (a new head starts at a transition saying TEXT), as `POST
    /// /admin/sessions/{id}/reset` does. Off by default, so no message is ever read as a
    /// command unless asked for.
    pub newtopic_command: bool,
    /// How often `<state>/plugins/` is scanned for added, changed or removed plugin files,
    /// in milliseconds (0: only at start and at each `/admin/plugins` call).
    pub plugin_scan_ms: u64,
    /// What one call of a sandboxed plugin may use (operations, time, sizes, depth).
    pub plugin_limits: foldwire_plugins::sandbox::Limits,
    /// Prices per provider for the cost the admin API and panel show (`[prices.anthropic]`
    /// …; every key optional, the defaults are list prices).
    pub prices: foldwire_core::PriceTable,
}

impl Default for ServeConfig {
    fn default() -> Self {
        ServeConfig {
            listen: SocketAddr::from(([127, 0, 0, 1], 8787)),
            state: None,
            pipeline: "default".into(),
            upstreams: Upstreams::default(),
            max_body_bytes: 64 * 1024 * 1024,
            workers: 0,
            identity_key: None,
            reports_per_session: 50,
            report_sessions: 1000,
            compress_tools: true,
            max_rounds: 3,
            window: foldwire_core::Budget::default().window,
            keepalive_secs: 5,
            usage_samples: 64,
            idle_session_secs: 900,
            store_breaker_failures: 3,
            store_breaker_cooldown_secs: 15,
            store_timeout_ms: 5000,
            retention_session_days: 30,
            retention_media_days: 7,
            retention_interval_secs: 6 * 3600,
            max_connections: 1024,
            header_timeout_secs: 30,
            max_blocking_threads: 32,
            newtopic_command: false,
            plugin_scan_ms: 2000,
            plugin_limits: foldwire_plugins::sandbox::Limits::default(),
            prices: foldwire_core::PriceTable::default(),
        }
    }
}

impl ServeConfig {
    /// Reads a TOML config file (missing keys take their defaults).
    ///
    /// # Errors
    /// An unreadable file or an invalid/unknown key, naming the file.
    pub fn from_file(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("reading config {}", path.display()))?;
        toml::from_str(&text).with_context(|| format!("config {} is invalid", path.display()))
    }
}
