//! The admin API and metrics, served to loopback clients only, with the Host header checked
//! so a web page cannot reach them through DNS rebinding.

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::sync::Arc;

use axum::Json;
use axum::extract::{ConnectInfo, Path, Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use foldwire_core::{PipelineSpec, Registry, SessionId, SessionState, derived};
use foldwire_plugins::sandbox::{PluginError, PluginStore};
use serde_json::json;

use super::{AppState, ServeConfig, newtopic};

/// Refuses non-loopback peers and foreign Host headers.
pub async fn loopback_only(
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    request: Request,
    next: Next,
) -> Response {
    let host_ok = request
        .headers()
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .is_some_and(is_local_host);
    if !peer.ip().is_loopback() || !host_ok {
        return (
            StatusCode::FORBIDDEN,
            "the admin API answers loopback clients with a localhost Host header only\n",
        )
            .into_response();
    }
    next.run(request).await
}

fn is_local_host(host: &str) -> bool {
    let name = if let Some(rest) = host.strip_prefix('[') {
        rest.split(']').next().unwrap_or_default()
    } else {
        host.split(':').next().unwrap_or_default()
    };
    matches!(name, "localhost" | "127.0.0.1" | "::1")
}

/// `GET /admin/`: the web panel (sessions table, a session's fold timeline, sent vs raw
/// tokens per turn). One static page that reads the admin API.
pub async fn panel() -> Response {
    axum::response::Html(include_str!("panel.html")).into_response()
}

/// `GET /admin/sessions`.
pub async fn sessions(State(app): State<Arc<AppState>>) -> Response {
    // Sessions with a live actor, and those served since start whose actor was retired
    // while idle (a snapshot loads them again).
    let mut ids = app.engine.sessions();
    ids.extend(app.reports.sessions());
    ids.sort();
    ids.dedup();
    let mut rows = Vec::new();
    for id in ids {
        if let Ok(state) = app.engine.snapshot(&id).await {
            rows.push(json!({
                "session": id,
                "turns": state.turns,
                "refs": state.refs.len(),
                "blocks": state.blocks.len(),
                "active_blocks": state.active_blocks().count(),
            }));
        }
    }
    Json(json!({ "sessions": rows })).into_response()
}

/// `GET /admin/sessions/{id}`.
pub async fn session(State(app): State<Arc<AppState>>, Path(id): Path<String>) -> Response {
    let id = match SessionId::new(id) {
        Ok(id) => id,
        Err(e) => return (StatusCode::BAD_REQUEST, e.to_string()).into_response(),
    };
    let reports = app.reports.of(&id);
    // What is stored, not this replica's cached copy: another replica may have served the
    // session's later turns. Only when the store cannot be read is the cached copy shown,
    // and then the view says so.
    match app.engine.store().load(&id).await {
        Ok(stored) => {
            let (state, version) = match stored {
                Some((state, version)) => (state, Some(version.0)),
                None => (SessionState::new(id.clone()), None),
            };
            let economy = economy_of(&app, &state, &reports);
            Json(json!({
                "session": id, "state": whole(&state), "source": "stored", "version": version,
                "reports": reports, "economy": economy
            }))
            .into_response()
        }
        Err(store_error) => match app.engine.snapshot(&id).await {
            Ok(state) => {
                let economy = economy_of(&app, &state, &reports);
                Json(json!({
                    "session": id, "state": whole(&state), "source": "cached",
                    "stale": format!("the stored state could not be read ({store_error}); this is this replica's copy as of its last turn here"),
                    "reports": reports, "economy": economy
                }))
                .into_response()
            }
            Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
        },
    }
}

/// The state with every list whole ([`derived::whole_json`]), not in its stored form; should
/// that fail, the stored form, which reads back the same.
fn whole(state: &SessionState) -> serde_json::Value {
    derived::whole_json(state).unwrap_or_else(|_| json!(state))
}

/// The cost of the session's recent turns and the baselines on them, at the session's
/// window (learned, else the configured one).
fn economy_of(
    app: &AppState,
    state: &SessionState,
    reports: &[foldwire_core::TurnReport],
) -> crate::economy::Economy {
    let window = super::usage::learned_window(state).unwrap_or(app.config.window);
    crate::economy::of_reports(reports, window, &app.config.prices)
}

/// `POST /admin/sessions/{id}/reset`: resets the session's topic. The body is the
/// transition text (plain text, or JSON `{"transition": "..."}`); a new head starts at it on
/// the session's next turn and the old head becomes history that can fold.
pub async fn reset_session(
    State(app): State<Arc<AppState>>,
    Path(id): Path<String>,
    body: String,
) -> Response {
    let id = match SessionId::new(id) {
        Ok(id) => id,
        Err(e) => return (StatusCode::BAD_REQUEST, e.to_string()).into_response(),
    };
    match app.engine.snapshot(&id).await {
        Ok(state) if state.turns == 0 => {
            let message = format!("session {id} has had no turn on this server's state");
            return (StatusCode::NOT_FOUND, Json(json!({ "error": message }))).into_response();
        }
        Ok(_) => {}
        Err(e) => return (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
    }
    let transition = serde_json::from_str::<serde_json::Value>(&body)
        .ok()
        .and_then(|v| v.get("transition")?.as_str().map(str::to_owned))
        .unwrap_or(body);
    match newtopic::reset(&app.engine, &id, transition.trim(), None).await {
        Ok(generation) => {
            Json(json!({ "session": id, "reset_generation": generation })).into_response()
        }
        Err(e @ newtopic::ResetError::Empty(_)) => (
            StatusCode::BAD_REQUEST,
            Json(json!({ "error": e.to_string() })),
        )
            .into_response(),
        Err(e) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            Json(json!({ "error": e.to_string() })),
        )
            .into_response(),
    }
}

/// `GET /admin/pipeline`.
pub async fn get_pipeline(State(app): State<Arc<AppState>>) -> Response {
    let pipeline = app.engine.pipeline();
    Json(json!({ "name": pipeline.name(), "stages": pipeline.names() })).into_response()
}

/// `PUT /admin/pipeline`: a spec (TOML or JSON) swapped in atomically once it validates.
pub async fn put_pipeline(State(app): State<Arc<AppState>>, body: String) -> Response {
    // A plugin file dropped in a moment ago is usable by this swap.
    sync_plugins(&app).await;
    let built = PipelineSpec::parse(&body, "PUT /admin/pipeline")
        .map_err(|e| e.to_string())
        .and_then(|spec| app.pipeline_from(&spec).map_err(|e| e.to_string()));
    match built {
        Ok(pipeline) => {
            let names = pipeline.names();
            let name = pipeline.name().to_owned();
            app.engine.swap_pipeline(pipeline);
            Json(json!({ "name": name, "stages": names })).into_response()
        }
        Err(e) => (StatusCode::BAD_REQUEST, Json(json!({ "error": e }))).into_response(),
    }
}

/// The directory plugin files live in: `<state>/plugins/` when the state is a local
/// directory (`file://` URL or path); none for `memory://` and object stores.
pub fn plugin_dir(state: Option<&str>) -> Option<std::path::PathBuf> {
    let location = match state {
        Some(s) => s.to_owned(),
        None => crate::setup::default_state_dir().display().to_string(),
    };
    if location.contains("://") && !location.starts_with("file://") {
        return None;
    }
    let path = location.strip_prefix("file://").unwrap_or(&location);
    Some(std::path::Path::new(path).join("plugins"))
}

/// The plugin store of a server, with what its directory holds already loaded (a plugin that
/// does not load is logged and skipped: the server starts without it).
pub fn plugin_store(config: &ServeConfig, registry: &Registry) -> Arc<PluginStore> {
    load_plugins(
        config.plugin_limits,
        config.state.as_deref(),
        registry,
        |problem| tracing::warn!("plugin not loaded: {problem}"),
    )
}

/// The plugins in `<state>/plugins/` loaded into `registry` under `limits`, so a pipeline
/// built afterwards can name them; each file that does not load goes to `skipped` and the
/// caller goes on without it.
pub fn load_plugins(
    limits: foldwire_plugins::sandbox::Limits,
    state: Option<&str>,
    registry: &Registry,
    mut skipped: impl FnMut(PluginError),
) -> Arc<PluginStore> {
    let store = PluginStore::new(limits, plugin_dir(state));
    for problem in store.sync_dir(registry) {
        skipped(problem);
    }
    store
}

/// [`load_plugins`] for a CLI command: default limits, problems named on stderr.
pub fn load_cli_plugins(state: Option<&str>, registry: &Registry) -> Arc<PluginStore> {
    load_plugins(Default::default(), state, registry, |problem| {
        eprintln!("foldwire: plugin not loaded: {problem}");
    })
}

/// Rescans the plugin directory every `plugin_scan_ms`, so a file dropped in (or removed)
/// takes effect while the server runs.
pub fn spawn_plugin_scan(app: &Arc<AppState>) {
    if app.config.plugin_scan_ms == 0 || app.plugins.dir().is_none() {
        return;
    }
    let app = Arc::downgrade(app);
    tokio::spawn(async move {
        loop {
            let Some(period) = app.upgrade().map(|a| a.config.plugin_scan_ms) else {
                return;
            };
            tokio::time::sleep(std::time::Duration::from_millis(period)).await;
            let Some(app) = app.upgrade() else {
                return;
            };
            sync_plugins(&app).await;
        }
    });
}

/// One scan of the plugin directory, off the async threads; problems are logged.
async fn sync_plugins(app: &Arc<AppState>) -> Vec<String> {
    let (plugins, registry) = (app.plugins.clone(), app.registry.clone());
    let problems = tokio::task::spawn_blocking(move || plugins.sync_dir(&registry))
        .await
        .unwrap_or_default();
    problems
        .into_iter()
        .map(|p| {
            tracing::warn!("plugin not loaded: {p}");
            p.to_string()
        })
        .collect()
}

fn plugins_view(app: &AppState, problems: Vec<String>) -> serde_json::Value {
    json!({
        "plugins": app.plugins.list(),
        "dir": app.plugins.dir(),
        "problems": problems,
    })
}

/// `GET /admin/plugins`: the loaded plugins (after a scan of the plugin directory), and the
/// files that did not load.
pub async fn list_plugins(State(app): State<Arc<AppState>>) -> Response {
    let problems = sync_plugins(&app).await;
    Json(plugins_view(&app, problems)).into_response()
}

/// `POST /admin/plugins`: `{"name": "fold.mine", "source": "fn choose(request) { … }"}`
/// adds a plugin or replaces the one of that name; the next pipeline swap can name it.
pub async fn add_plugin(State(app): State<Arc<AppState>>, body: String) -> Response {
    #[derive(serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Add {
        name: String,
        source: String,
    }
    let add: Add = match serde_json::from_str(&body) {
        Ok(a) => a,
        Err(e) => {
            let message = format!(
                "expected {{\"name\": \"fold.<name>\", \"source\": \"<rhai script>\"}}: {e}"
            );
            return (StatusCode::BAD_REQUEST, Json(json!({ "error": message }))).into_response();
        }
    };
    let (plugins, registry) = (app.plugins.clone(), app.registry.clone());
    let added =
        tokio::task::spawn_blocking(move || plugins.add(&registry, &add.name, &add.source)).await;
    match added {
        Ok(Ok(info)) => Json(json!({ "added": info })).into_response(),
        Ok(Err(e @ PluginError::Io { .. })) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            Json(json!({ "error": e.to_string() })),
        )
            .into_response(),
        Ok(Err(e)) => (
            StatusCode::BAD_REQUEST,
            Json(json!({ "error": e.to_string() })),
        )
            .into_response(),
        Err(e) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            Json(json!({ "error": e.to_string() })),
        )
            .into_response(),
    }
}

/// `DELETE /admin/plugins/{name}`: removes a plugin (and its file) and its name from the
/// registry. A pipeline swap naming it is refused from then on; the running pipeline, if
/// it names it, falls back to its built-in strategy, with a warning, until the next swap.
pub async fn remove_plugin(State(app): State<Arc<AppState>>, Path(name): Path<String>) -> Response {
    match app.plugins.remove(&app.registry, &name) {
        Ok(info) => Json(json!({ "removed": info })).into_response(),
        Err(e @ PluginError::NotFound { .. }) => (
            StatusCode::NOT_FOUND,
            Json(json!({ "error": e.to_string() })),
        )
            .into_response(),
        Err(e) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            Json(json!({ "error": e.to_string() })),
        )
            .into_response(),
    }
}

/// `GET /metrics`.
pub async fn metrics(State(app): State<Arc<AppState>>) -> Response {
    let mut text = app.metrics.render();
    let _ = writeln!(
        text,
        "# TYPE foldwire_sessions_live gauge\nfoldwire_sessions_live {}",
        app.engine.live_sessions()
    );
    // Strategies that call out (HTTP, plugins, a model) and had to fall back.
    let fallbacks = foldwire_plugins::fallback::counts();
    if !fallbacks.is_empty() {
        text.push_str("# TYPE foldwire_strategy_fallbacks_total counter\n");
    }
    for (strategy, reason, n) in fallbacks {
        let _ = writeln!(
            text,
            "foldwire_strategy_fallbacks_total{{strategy=\"{strategy}\",reason=\"{reason}\"}} {n}"
        );
    }
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], text).into_response()
}

#[cfg(test)]
mod tests {
    use super::is_local_host;

    #[test]
    fn only_local_host_names_pass() {
        for ok in ["localhost", "localhost:8787", "127.0.0.1:1", "[::1]:8787"] {
            assert!(is_local_host(ok), "{ok}");
        }
        for bad in [
            "evil.example",
            "127.0.0.1.evil.example",
            "[::2]:1",
            "localhost.evil:80",
        ] {
            assert!(!is_local_host(bad), "{bad}");
        }
    }
}
