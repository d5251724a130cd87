//! `fold.http`, `layout.http`, `summarizer.http`: strategies whose decisions come from an
//! endpoint the user runs, in any language. Each POSTs the [`protocol`](crate::protocol)
//! request as JSON to `url` and uses the answer once it checks out. A slow endpoint (over
//! `timeout_ms`), a failing one (connection refused, a non-2xx status), or a malformed
//! answer (not JSON, wrong version, an index that does not exist, an order that splits a
//! message) never blocks or breaks the turn: the built-in `fallback` decides, the turn gets
//! a `strategy_fallback` warning and the fallback is counted.
//!
//! Params: `url` (required, http or https), `timeout_ms` (default 1000), `fallback` and
//! `fallback_params` (a built-in of the same kind; defaults `fold.oldest_first`,
//! `layout.store_order_fill`, `summarizer.extractive`).
//!
//! Fold policies and layouts are synchronous traits: their call waits on the calling thread
//! for at most `timeout_ms` (the session's turn waits that long at worst). They declare that
//! they block, so the fold and layout stages make the call on tokio's blocking pool and the
//! worker other sessions share goes on meanwhile.
//! Every request runs on one runtime owned by this module, so connections outlive the
//! runtime of whichever stage made the call.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use foldwire_core::{
    BuildCx, BuildError, Component, ComponentConfig, ComponentKind, FoldDemand, FoldPolicy, Layout,
    LayoutPlan, LayoutRequest, Params, RangeInfo, Refusal, StrategyError, Summarizer, Summary,
    SummaryRequest, async_trait,
};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::fallback::{self, FallbackSpec};
use crate::protocol;
use crate::summarizer::Extractive;

/// Registered name of [`HttpFold`].
pub const FOLD: &str = HttpFoldConfig::NAME;
/// Registered name of [`HttpLayout`].
pub const LAYOUT: &str = HttpLayoutConfig::NAME;
/// Registered name of [`HttpSummarizer`].
pub const SUMMARIZER: &str = HttpSummarizerConfig::NAME;

/// Why a call to an endpoint gave no usable answer.
#[derive(Debug, thiserror::Error)]
pub enum CallError {
    /// No answer within the timeout.
    #[error("no answer within {0} ms")]
    Timeout(u64),
    /// The endpoint could not be reached or the transfer broke.
    #[error("request failed: {0}")]
    Transport(#[source] reqwest::Error),
    /// A status other than 2xx.
    #[error("answered HTTP {status}: {body}")]
    Status {
        /// The status code.
        status: u16,
        /// The start of the body.
        body: String,
    },
    /// The body is not JSON.
    #[error("answered something that is not JSON: {0}")]
    NotJson(#[source] serde_json::Error),
    /// The JSON is not a valid answer.
    #[error("answered {0}")]
    Bad(#[from] protocol::BadAnswer),
    /// This process cannot make HTTP calls (no runtime could start).
    #[error("the HTTP runtime is unavailable: {0}")]
    Unavailable(String),
}

impl CallError {
    /// The reason label of the fallback counter.
    pub fn reason(&self) -> &'static str {
        match self {
            CallError::Timeout(_) => "timeout",
            CallError::Transport(_) => "unreachable",
            CallError::Status { .. } => "http_status",
            CallError::NotJson(_) => "bad_json",
            CallError::Bad(_) => "bad_answer",
            CallError::Unavailable(_) => "unavailable",
        }
    }
}

/// The runtime and client every strategy call goes through.
struct Caller {
    runtime: tokio::runtime::Runtime,
    client: reqwest::Client,
}

fn caller() -> Result<&'static Caller, CallError> {
    static CALLER: OnceLock<Result<Caller, String>> = OnceLock::new();
    CALLER
        .get_or_init(|| {
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .thread_name("foldwire-strategy-http")
                .enable_all()
                .build()
                .map_err(|e| e.to_string())?;
            // Redirects are not followed: an endpoint is configured by its exact URL.
            let client = reqwest::Client::builder()
                .redirect(reqwest::redirect::Policy::none())
                .build()
                .map_err(|e| e.to_string())?;
            Ok(Caller { runtime, client })
        })
        .as_ref()
        .map_err(|e| CallError::Unavailable(e.clone()))
}

/// POSTs `body` and reads a JSON answer, all within `timeout`.
async fn post(
    client: reqwest::Client,
    url: String,
    body: Vec<u8>,
    headers: Vec<(String, String)>,
    timeout: Duration,
) -> Result<Value, CallError> {
    let ms = timeout.as_millis() as u64;
    let mut request = client
        .post(url)
        .timeout(timeout)
        .header("content-type", "application/json")
        .body(body);
    for (k, v) in headers {
        request = request.header(k, v);
    }
    let response = request.send().await.map_err(|e| {
        if e.is_timeout() {
            CallError::Timeout(ms)
        } else {
            CallError::Transport(e)
        }
    })?;
    let status = response.status();
    let bytes = response.bytes().await.map_err(|e| {
        if e.is_timeout() {
            CallError::Timeout(ms)
        } else {
            CallError::Transport(e)
        }
    })?;
    if !status.is_success() {
        let text = String::from_utf8_lossy(&bytes);
        return Err(CallError::Status {
            status: status.as_u16(),
            body: text.chars().take(200).collect(),
        });
    }
    serde_json::from_slice(&bytes).map_err(CallError::NotJson)
}

/// One POST of JSON, awaited (the request itself runs on this module's runtime).
///
/// # Errors
/// See [`CallError`].
pub async fn call(
    url: &str,
    body: &Value,
    headers: Vec<(String, String)>,
    timeout: Duration,
) -> Result<Value, CallError> {
    let caller = caller()?;
    let bytes = serde_json::to_vec(body).map_err(CallError::NotJson)?;
    let task = caller.runtime.spawn(post(
        caller.client.clone(),
        url.to_owned(),
        bytes,
        headers,
        timeout,
    ));
    match task.await {
        Ok(result) => result,
        Err(e) => Err(CallError::Unavailable(e.to_string())),
    }
}

/// One POST of JSON, waited for on this thread for at most `timeout`.
///
/// # Errors
/// See [`CallError`].
pub fn call_blocking(url: &str, body: &Value, timeout: Duration) -> Result<Value, CallError> {
    let caller = caller()?;
    let bytes = serde_json::to_vec(body).map_err(CallError::NotJson)?;
    let (tx, rx) = std::sync::mpsc::channel();
    caller.runtime.spawn({
        let (client, url) = (caller.client.clone(), url.to_owned());
        async move {
            let _ = tx.send(post(client, url, bytes, Vec::new(), timeout).await);
        }
    });
    // The request's own timeout ends it; the margin only covers scheduling.
    match rx.recv_timeout(timeout + Duration::from_millis(100)) {
        Ok(result) => result,
        Err(_) => Err(CallError::Timeout(timeout.as_millis() as u64)),
    }
}

/// Params every HTTP strategy takes.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct HttpConfig {
    /// The endpoint (required: the default, empty, is refused).
    pub url: String,
    /// Longest a call may take, in milliseconds.
    pub timeout_ms: u64,
    /// The built-in that decides when the endpoint cannot.
    pub fallback: Option<String>,
    /// Its params.
    pub fallback_params: Params,
}

impl Default for HttpConfig {
    fn default() -> Self {
        HttpConfig {
            url: String::new(),
            timeout_ms: 1000,
            fallback: None,
            fallback_params: Params::Null,
        }
    }
}

/// Params of `fold.http` (an [`HttpConfig`]).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(transparent)]
pub struct HttpFoldConfig(pub HttpConfig);

/// Params of `layout.http` (an [`HttpConfig`]).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(transparent)]
pub struct HttpLayoutConfig(pub HttpConfig);

/// Params of `summarizer.http` (an [`HttpConfig`]).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(transparent)]
pub struct HttpSummarizerConfig(pub HttpConfig);

impl HttpConfig {
    /// This config, checked for `name`: an http(s) url and a timeout of at least 1 ms.
    fn validate(self, name: &str) -> Result<Self, BuildError> {
        if self.url.is_empty() {
            return Err(BuildError::new(
                name,
                "needs params with the endpoint's \"url\" (and optionally timeout_ms, fallback, fallback_params)",
            ));
        }
        let config = self;
        let url = reqwest::Url::parse(&config.url)
            .map_err(|e| BuildError::new(name, format!("url {:?}: {e}", config.url)))?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(BuildError::new(
                name,
                format!("url {:?} must be http or https", config.url),
            ));
        }
        if config.timeout_ms == 0 {
            return Err(BuildError::new(name, "timeout_ms must be at least 1"));
        }
        Ok(config)
    }

    fn fallback(&self) -> FallbackSpec {
        FallbackSpec {
            fallback: self.fallback.clone(),
            fallback_params: self.fallback_params.clone(),
        }
    }

    fn timeout(&self) -> Duration {
        Duration::from_millis(self.timeout_ms)
    }
}

/// `fold.http`.
#[derive(Debug)]
pub struct HttpFold {
    config: HttpConfig,
    fallback: Arc<dyn FoldPolicy>,
}

impl FoldPolicy for HttpFold {
    fn name(&self) -> &'static str {
        FOLD
    }
    fn blocks(&self) -> bool {
        true
    }
    fn choose(&self, ranges: &[RangeInfo], demand: &FoldDemand) -> Vec<usize> {
        let request = protocol::fold_request(ranges, demand);
        let answer = call_blocking(&self.config.url, &request, self.config.timeout())
            .and_then(|a| Ok(protocol::fold_answer(&a, ranges.len())?));
        match answer {
            Ok(chosen) => chosen,
            Err(e) => {
                let detail = format!("{}: {e}", self.config.url);
                fallback::fell_back(FOLD, e.reason(), &detail, self.fallback.name());
                self.fallback.choose(ranges, demand)
            }
        }
    }
}

/// `layout.http`.
#[derive(Debug)]
pub struct HttpLayout {
    config: HttpConfig,
    fallback: Arc<dyn Layout>,
}

impl Layout for HttpLayout {
    fn name(&self) -> &'static str {
        LAYOUT
    }
    fn blocks(&self) -> bool {
        true
    }
    fn arrange(&self, request: &LayoutRequest<'_>) -> Result<LayoutPlan, Refusal> {
        let body = protocol::layout_request(request);
        let answer = call_blocking(&self.config.url, &body, self.config.timeout())
            .and_then(|a| Ok(protocol::layout_answer(&a, request)?));
        match answer {
            Ok(plan) => Ok(plan),
            Err(e) => {
                let detail = format!("{}: {e}", self.config.url);
                fallback::fell_back(LAYOUT, e.reason(), &detail, self.fallback.name());
                self.fallback.arrange(request)
            }
        }
    }
}

/// `summarizer.http`.
#[derive(Debug)]
pub struct HttpSummarizer {
    config: HttpConfig,
    fallback: Arc<Extractive>,
}

#[async_trait]
impl Summarizer for HttpSummarizer {
    fn name(&self) -> &'static str {
        SUMMARIZER
    }
    async fn summarize(&self, request: SummaryRequest<'_>) -> Result<Summary, StrategyError> {
        let body = protocol::summary_request(&request);
        let answer = call(&self.config.url, &body, Vec::new(), self.config.timeout())
            .await
            .and_then(|a| Ok(protocol::summary_answer(&a, request.max_chars, SUMMARIZER)?));
        match answer {
            Ok(summary) => Ok(summary),
            Err(e) => {
                let detail = format!("{}: {e}", self.config.url);
                fallback::fell_back(SUMMARIZER, e.reason(), &detail, self.fallback.name());
                self.fallback.summarize(request).await
            }
        }
    }
}

impl ComponentConfig for HttpFoldConfig {
    const KIND: ComponentKind = ComponentKind::FoldPolicy;
    const NAME: &'static str = "fold.http";
    const DESCRIPTION: &'static str =
        "Asks an HTTP endpoint which ranges to fold; a built-in policy decides when it cannot.";

    fn build(self, _cx: &BuildCx<'_>) -> Result<Component, BuildError> {
        let config = self.0.validate(FOLD)?;
        let fallback = fallback::fold_policy(FOLD, &config.fallback())?;
        Ok(Component::FoldPolicy(Arc::new(HttpFold {
            config,
            fallback,
        })))
    }
}

impl ComponentConfig for HttpLayoutConfig {
    const KIND: ComponentKind = ComponentKind::Layout;
    const NAME: &'static str = "layout.http";
    const DESCRIPTION: &'static str = "Asks an HTTP endpoint for the order to send units in; a built-in layout decides when it cannot.";

    fn build(self, _cx: &BuildCx<'_>) -> Result<Component, BuildError> {
        let config = self.0.validate(LAYOUT)?;
        let fallback = fallback::layout(LAYOUT, &config.fallback())?;
        Ok(Component::Layout(Arc::new(HttpLayout { config, fallback })))
    }
}

impl ComponentConfig for HttpSummarizerConfig {
    const KIND: ComponentKind = ComponentKind::Summarizer;
    const NAME: &'static str = "summarizer.http";
    const DESCRIPTION: &'static str = "Asks an HTTP endpoint for each summary; the extractive summarizer writes it when it cannot.";

    fn build(self, _cx: &BuildCx<'_>) -> Result<Component, BuildError> {
        let config = self.0.validate(SUMMARIZER)?;
        let fallback = fallback::summarizer(SUMMARIZER, &config.fallback())?;
        Ok(Component::Summarizer(Arc::new(HttpSummarizer {
            config,
            fallback,
        })))
    }
}

foldwire_core::register_config!(HttpFoldConfig);
foldwire_core::register_config!(HttpLayoutConfig);
foldwire_core::register_config!(HttpSummarizerConfig);
