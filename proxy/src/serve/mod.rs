//! `foldwire serve`: the HTTP proxy. Four provider wires in, the same wires out, every
//! processed request run through the session's pipeline first.

pub mod admin;
pub mod array_stream;
pub mod body;
pub mod calls;
pub mod chained_ids;
pub mod config;
pub mod forward;
pub mod headers;
pub mod identity;
pub mod listen;
pub mod merge;
pub mod metrics;
pub mod newtopic;
pub mod recent_decodes;
pub mod relay;
pub mod reports;
pub mod retention;
pub mod route;
pub mod side;
pub mod stitch;
pub mod tools;
pub mod usage;
pub mod websocket;

use std::hash::{BuildHasher as _, Hasher as _};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context as _, Result};
use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::routing::{any, get, post};
use dashmap::DashMap;
use foldwire_archive::object_store::path::Path as ObjectPath;
use foldwire_archive::object_store::{ObjectStore, ObjectStoreExt as _, PutMode, PutOptions};
use foldwire_core::{Engine, Pipeline, PipelineSpec, Registry, SessionId, StageCx, TurnReport};
use tower_http::decompression::RequestDecompressionLayer;

pub use config::ServeConfig;

use crate::setup;

/// What every handler shares.
pub struct AppState {
    /// The actor engine.
    pub engine: Engine,
    /// The registry (for pipeline swaps).
    pub registry: Arc<Registry>,
    /// The configuration.
    pub config: ServeConfig,
    /// The upstream HTTP client.
    pub client: reqwest::Client,
    /// Key for hashing credentials into session identity.
    pub identity_key: Vec<u8>,
    /// Metrics.
    pub metrics: metrics::Metrics,
    /// Recent reports per session.
    pub reports: reports::RecentReports,
    /// Windows learned from overflow errors (`None`: looked up, nothing learned).
    pub windows: DashMap<SessionId, Option<u64>>,
    /// The state location's object store, where each session's last request is kept for
    /// the session commands.
    pub store: Arc<dyn ObjectStore>,
    /// Sandboxed strategy plugins added while the server runs.
    pub plugins: Arc<foldwire_plugins::sandbox::PluginStore>,
    /// Records each session's last request there, a turn writing only what changed.
    pub last_requests: crate::offline::LastRequests,
    /// The last decodes of requests that name no session, resumed from by the next one.
    pub recent_decodes: recent_decodes::RecentDecodes,
    /// The responses stitched answers stand for, for the clients that chain on them.
    pub chained_ids: chained_ids::ChainedIds,
}

impl AppState {
    /// Builds a pipeline from a spec as this proxy runs it: with the tool loop's
    /// `tools.inject` stage when the compress tools are on (see [`setup::with_tool_loop`]).
    ///
    /// # Errors
    /// A spec the registry refuses.
    pub fn pipeline_from(
        &self,
        spec: &PipelineSpec,
    ) -> Result<Pipeline, foldwire_core::PipelineError> {
        build_pipeline(&self.config, spec, &self.registry)
    }

    fn remember(&self, session: &SessionId, report: TurnReport) {
        self.reports.remember(session, report);
    }
}

/// Builds the shared state: registry, pipeline, state store and archive, engine.
///
/// # Errors
/// An invalid pipeline, an unusable state location, or an actor system that cannot start.
pub async fn app_state(config: ServeConfig) -> Result<Arc<AppState>> {
    let registry = setup::registry()?;
    // Plugins load before the pipeline is built, so the configured spec may name them.
    let plugins = admin::plugin_store(&config, &registry);
    let pipeline = build_pipeline(&config, &setup::spec(&config.pipeline)?, &registry)?;
    let backends = setup::backends(config.state.as_deref())?;
    let (backends, store_breaker) = if config.store_breaker_failures > 0 {
        let (guarded, breaker) = backends.with_breaker(foldwire_archive::BreakerConfig {
            failures: config.store_breaker_failures,
            cooldown: Duration::from_secs(config.store_breaker_cooldown_secs),
            call_timeout: Duration::from_millis(config.store_timeout_ms.max(1)),
        });
        (guarded, Some(breaker))
    } else {
        (backends, None)
    };
    let identity_key = match &config.identity_key {
        Some(k) => k.as_bytes().to_vec(),
        None => stored_identity_key(backends.store.as_ref()).await?,
    };
    let store = backends.store.clone();
    let backend = backends.backend;
    let cx = StageCx::new(registry.clone()).with_archive(backends.media);
    let mut builder = Engine::builder(pipeline, backends.state, registry.clone()).context(cx);
    if config.workers > 0 {
        builder = builder.workers(config.workers);
    }
    builder = builder.retire_idle_sessions(
        (config.idle_session_secs > 0).then(|| Duration::from_secs(config.idle_session_secs)),
    );
    let engine = builder.start()?;
    let reports = reports::RecentReports::new(config.reports_per_session, config.report_sessions);
    // A proxy relays redirects instead of following them: following would send the
    // client's credentials (x-api-key, x-goog-api-key, bearer tokens) to another host.
    let client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .context("building the upstream HTTP client")?;
    let app = Arc::new(AppState {
        engine,
        registry,
        config,
        client,
        identity_key,
        metrics: metrics::Metrics::default().with_store_breaker(store_breaker),
        reports,
        windows: DashMap::new(),
        last_requests: crate::offline::LastRequests::new(Arc::clone(&store)),
        recent_decodes: recent_decodes::RecentDecodes::default(),
        chained_ids: chained_ids::ChainedIds::default(),
        store,
        plugins,
    });
    retention::spawn(&app, backend);
    admin::spawn_plugin_scan(&app);
    Ok(app)
}

/// The pipeline a spec makes in this proxy: the tool loop's stage is added when the compress
/// tools are on, so injecting them is part of the turn.
fn build_pipeline(
    config: &ServeConfig,
    spec: &PipelineSpec,
    registry: &Registry,
) -> Result<Pipeline, foldwire_core::PipelineError> {
    if config.compress_tools && config.max_rounds > 0 {
        Pipeline::from_spec(&setup::with_tool_loop(spec.clone()), registry)
    } else {
        Pipeline::from_spec(spec, registry)
    }
}

/// Where the identity key lives beside the sessions, so anonymous session ids survive restarts
/// and replicas sharing a state location agree on them.
const IDENTITY_KEY_PATH: &str = "identity.key";

/// The identity key kept in the state store: read it, or create it once (create-if-absent,
/// so racing replicas end up with the same key).
async fn stored_identity_key(store: &dyn ObjectStore) -> Result<Vec<u8>> {
    let path = ObjectPath::from(IDENTITY_KEY_PATH);
    if let Some(key) = read_key(store, &path).await? {
        return Ok(key);
    }
    let key = random_key();
    let create = PutOptions {
        mode: PutMode::Create,
        ..PutOptions::default()
    };
    match store.put_opts(&path, key.clone().into(), create).await {
        Ok(_) => Ok(key),
        Err(foldwire_archive::object_store::Error::AlreadyExists { .. }) => read_key(store, &path)
            .await?
            .context("the identity key vanished right after another writer created it"),
        Err(e) => Err(anyhow::Error::new(e).context(format!("creating {IDENTITY_KEY_PATH}"))),
    }
}

/// The identity key if it exists.
async fn read_key(store: &dyn ObjectStore, path: &ObjectPath) -> Result<Option<Vec<u8>>> {
    match store.get(path).await {
        Ok(r) => Ok(Some(r.bytes().await?.to_vec())),
        Err(foldwire_archive::object_store::Error::NotFound { .. }) => Ok(None),
        Err(e) => Err(anyhow::Error::new(e).context(format!("reading {IDENTITY_KEY_PATH}"))),
    }
}

/// 32 random bytes from the OS-seeded hasher keys.
fn random_key() -> Vec<u8> {
    (0..4u64)
        .flat_map(|i| {
            let mut h = std::collections::hash_map::RandomState::new().build_hasher();
            h.write_u64(i);
            h.finish().to_le_bytes()
        })
        .collect()
}

/// The router: provider routes, admin API, metrics.
pub fn router(app: Arc<AppState>) -> Router {
    let admin = Router::new()
        .route("/admin", get(admin::panel))
        .route("/admin/", get(admin::panel))
        .route("/admin/sessions", get(admin::sessions))
        .route("/admin/sessions/{id}", get(admin::session))
        .route("/admin/sessions/{id}/reset", post(admin::reset_session))
        .route(
            "/admin/pipeline",
            get(admin::get_pipeline).put(admin::put_pipeline),
        )
        .route(
            "/admin/plugins",
            get(admin::list_plugins).post(admin::add_plugin),
        )
        .route(
            "/admin/plugins/{name}",
            axum::routing::delete(admin::remove_plugin),
        )
        .route("/metrics", get(admin::metrics))
        .layer(axum::middleware::from_fn(admin::loopback_only));
    Router::new()
        .merge(admin)
        .fallback(any(forward::handle))
        .layer(DefaultBodyLimit::max(app.config.max_body_bytes))
        .layer(RequestDecompressionLayer::new())
        .layer(axum::middleware::from_fn(explain_unsupported_encoding))
        .with_state(app)
}

/// Request `content-encoding`s the decompression layer understands.
const ACCEPTED_ENCODINGS: &str = "gzip, br, zstd (or none)";

/// The decompression layer answers an unknown `content-encoding` with a bare 415; the client
/// is told what was refused and what would be accepted.
async fn explain_unsupported_encoding(
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    let encoding = request
        .headers()
        .get(axum::http::header::CONTENT_ENCODING)
        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned());
    let response = next.run(request).await;
    if response.status() != axum::http::StatusCode::UNSUPPORTED_MEDIA_TYPE {
        return response;
    }
    let Some(encoding) = encoding else {
        return response;
    };
    error(
        axum::http::StatusCode::UNSUPPORTED_MEDIA_TYPE,
        "unsupported_content_encoding",
        &format!(
            "content-encoding {encoding:?} is not supported; send the body as {ACCEPTED_ENCODINGS}"
        ),
    )
}

/// A running server.
#[derive(Debug)]
pub struct Running {
    /// The bound address.
    pub addr: SocketAddr,
    /// The server task.
    pub task: tokio::task::JoinHandle<std::io::Result<()>>,
}

/// The runtime `foldwire serve` runs on.
///
/// File-backed state and archive calls run on tokio's blocking pool. With tokio's default cap
/// (512 threads) 256 concurrent clients grew it to ~220 threads, and each kept its stack and
/// allocator arena: ~170 MiB resident after the load was over (`--bench proxy_memory`). Disk
/// I/O on a few cores gains nothing from hundreds of threads, so the pool is capped
/// (`max_blocking_threads`) and idle threads leave after a few seconds.
///
/// # Errors
/// The runtime cannot start (no threads can be spawned).
pub fn runtime(config: &ServeConfig) -> std::io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .max_blocking_threads(config.max_blocking_threads.max(1))
        .thread_keep_alive(Duration::from_secs(5))
        .build()
}

/// Binds and starts serving on the current tokio runtime.
///
/// # Errors
/// The address cannot be bound, or the state cannot be built.
pub async fn start(config: ServeConfig) -> Result<Running> {
    let listen = config.listen;
    let app = app_state(config).await?;
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .with_context(|| format!("binding {listen}"))?;
    let addr = listener.local_addr()?;
    let limits = listen::Limits {
        max_connections: app.config.max_connections,
        header_timeout: Duration::from_secs(app.config.header_timeout_secs.max(1)),
    };
    let task = tokio::spawn(listen::serve(listener, router(app), limits));
    Ok(Running { addr, task })
}

/// A JSON error in the shape every provider's clients parse (`error.type`, `error.message`).
pub fn error(
    status: axum::http::StatusCode,
    kind: &str,
    message: &str,
) -> axum::response::Response {
    let body =
        serde_json::json!({ "type": "error", "error": { "type": kind, "message": message } });
    axum::response::IntoResponse::into_response((status, axum::Json(body)))
}
