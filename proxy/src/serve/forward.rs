//! The provider routes: run the pipeline, forward upstream, stream the answer back.

use std::sync::Arc;

use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use foldwire_core::{CharEstimator, SessionId, TurnOutcome, TurnReport, TurnRequest, Wire};
use foldwire_stages::ranges_build::CLIENT_TOKENS_COUNTER;
use foldwire_stages::tool_loop::{ADDED_TOKENS_COUNTER, INJECTED_COUNTER};
use foldwire_wire::dialect::WireDialect as _;
use serde_json::json;

use super::AppState;
use super::body::WholeBody;
use super::error;
use super::identity;
use super::relay::{self, Exchange, LoopState};
use super::route::{self, Route};
use super::side;
use super::usage;

/// Every provider route lands here.
pub async fn handle(
    State(app): State<Arc<AppState>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    WholeBody(body): WholeBody,
) -> Response {
    let path_and_query = uri.path_and_query().map_or("/", |p| p.as_str());
    let route = match route::resolve(path_and_query, &app.config.upstreams, &headers) {
        Ok(r) => r,
        Err(e) => return error(StatusCode::NOT_FOUND, "not_found", &e.to_string()),
    };
    if route.wire.is_some() && super::websocket::wants_websocket(&headers) {
        app.metrics.websocket_refused();
        tracing::debug!(path = %path_and_query, "WebSocket upgrade refused; the client is told to use HTTP.");
        return super::websocket::refused();
    }
    let processed = match (route.wire, method == Method::POST) {
        (Some(wire), true) => match process(&app, &route, wire, &headers, body.clone()).await {
            Ok(out) => out,
            Err(resp) => return *resp,
        },
        _ => {
            app.metrics.passthrough();
            Processed {
                body,
                session: None,
                estimated: 0,
                looped: None,
            }
        }
    };
    let mut route = route;
    let mut looped = processed.looped;
    if let Some(looped) = looped.as_mut()
        && route.is_array_stream()
    {
        // The loop reads SSE; the client still gets the JSON array it asked for.
        route = route.with_alt_sse();
        looped.array_stream = true;
    }
    let exchange = Exchange {
        app: app.clone(),
        route,
        method,
        headers,
        session: processed.session,
        estimated: processed.estimated,
        looped,
    };
    relay::respond(exchange, processed.body).await
}

/// A request after the pipeline.
struct Processed {
    /// The body to forward.
    body: Bytes,
    /// Its wire and session, when it was processed.
    session: Option<(Wire, SessionId)>,
    /// Estimated tokens of the forwarded body.
    estimated: u64,
    /// Set when the proxy's tools were injected.
    looped: Option<LoopState>,
}

/// The window this session's turns are laid out for: the configured one, or less once an
/// overflow error taught the session its real window.
async fn window_for(app: &AppState, session: &SessionId) -> u64 {
    let cached = app.windows.get(session).map(|w| *w);
    let learned = match cached {
        Some(w) => w,
        None => {
            let w = app
                .engine
                .snapshot(session)
                .await
                .ok()
                .and_then(|s| usage::learned_window(&s));
            app.windows.insert(session.clone(), w);
            w
        }
    };
    learned.map_or(app.config.window, |w| w.min(app.config.window))
}

/// Estimated tokens of the body to forward and of the body the client sent. Each is the
/// pipeline's own measure where it made one (the layout's `request_tokens` plus the tool
/// loop's additions; `ranges.build`'s measure of the request as received), else a pass over
/// the bytes, made once when the pipeline forwards the client's body unchanged: at 10,000
/// messages that pass is 4 ms on every turn.
fn sent_and_raw_tokens(wire: Wire, outcome: &TurnOutcome, body: &Bytes) -> (u64, u64) {
    let scan = |bytes: &Bytes| foldwire_wire::tokens::raw_tokens(wire, bytes, &CharEstimator);
    let raw = match outcome.report.counter(CLIENT_TOKENS_COUNTER) {
        0 => scan(body),
        n => n,
    };
    let sent = match outcome.report.counter("request_tokens") {
        0 if same_bytes(&outcome.output, body) => raw,
        0 => scan(&outcome.output),
        n => n + outcome.report.counter(ADDED_TOKENS_COUNTER),
    };
    (sent, raw)
}

/// True when `a` and `b` hold the same bytes (the same buffer is not read at all).
fn same_bytes(a: &Bytes, b: &Bytes) -> bool {
    (a.as_ptr() == b.as_ptr() && a.len() == b.len()) || a == b
}

/// Runs the pipeline; returns the body to forward, or a response to give the client
/// instead (bad session header, refusal).
async fn process(
    app: &AppState,
    route: &Route,
    wire: Wire,
    headers: &HeaderMap,
    body: Bytes,
) -> Result<Processed, Box<Response>> {
    if let Some(held) = foldwire_wire::request::provider_held(wire, &body) {
        let body = on_last_round(app, wire, body);
        return Ok(provider_held(app, held, body));
    }
    app.metrics.request(wire);
    let query = route.path_and_query.split_once('?').map(|(_, q)| q);
    let (session, decoded) = identity::resolve_by_history(
        &app.engine,
        &app.recent_decodes,
        headers,
        query,
        wire,
        &route.upstream,
        &body,
        &app.identity_key,
    )
    .await
    .map_err(|e| Box::new(error(StatusCode::BAD_REQUEST, "invalid_session", &e)))?;
    if route.counts {
        return Ok(count_view(app, &session, wire, body, decoded.map(|(c, _)| c)).await);
    }
    super::newtopic::apply_command(app, &session, wire, &body).await;
    let mut request = TurnRequest::new(wire, body.clone());
    let reused = decoded.as_ref().map_or(0, |(_, reused)| *reused);
    request.decoded = decoded.map(|(conversation, _)| conversation);
    if let Some(upstream) =
        side::summarizer_upstream(&app.engine.pipeline(), route, wire, headers, &body)
    {
        request.options.extensions.insert(upstream);
    }
    let window = window_for(app, &session).await;
    request.budget = request.budget.with_window(window);
    match app.engine.run_turn(&session, request).await {
        Ok(mut outcome) => {
            if reused > 0 {
                // Decoded here, not by the engine's `wire.decode`: counted the same way.
                outcome.report.count("wire.reused_entries", reused as u64);
            }
            app.metrics.report(&outcome.report);
            let refusal = outcome.report.refusal.clone();
            let failed = outcome.report.fail_open.is_some();
            if failed {
                app.metrics.fail_open();
            } else if !app.metrics.store_circuit_open() {
                // Kept for the session commands (`foldwire inspect` …), off the request's
                // path: the client does not wait on a write only a later command reads.
                let recorder = app.last_requests.clone();
                let ticket = recorder.ticket();
                let (session, body) = (session.clone(), body.clone());
                tokio::spawn(async move {
                    if let Err(e) = recorder.record(ticket, &session, wire, &body).await {
                        // The session commands then see the previous request; nothing else.
                        tracing::warn!(session = %session, error = %format!("{e:#}"), "The request could not be recorded for the session commands.");
                    }
                });
            }
            let injected = outcome.report.counter(INJECTED_COUNTER) > 0;
            let (estimated, raw) = sent_and_raw_tokens(wire, &outcome, &body);
            let mut report = outcome.report;
            // What the client sent, in the units the pipeline estimates with, so the panel
            // can chart sent vs raw tokens.
            report.count("raw_tokens", raw);
            app.remember(&session, report);
            if let Some(refusal) = refusal {
                app.metrics.refused();
                let body = json!({
                    "type": "error",
                    "error": {
                        "type": "foldwire_refused",
                        "message": refusal.to_string(),
                        "numbers": refusal.numbers,
                        "levers": refusal.levers,
                    }
                });
                return Err(Box::new(
                    (StatusCode::UNPROCESSABLE_ENTITY, axum::Json(body)).into_response(),
                ));
            }
            // The tools were added in the turn (`tools.inject`); the loop runs on its output
            // and the conversation it produced.
            let looped = (injected && !failed).then(|| LoopState {
                body: outcome.output.clone(),
                view: outcome.conversation,
                array_stream: false,
            });
            Ok(Processed {
                body: outcome.output,
                session: Some((wire, session.clone())),
                estimated,
                looped,
            })
        }
        Err(e) => {
            // Fail open: nothing the client sent is lost.
            tracing::warn!(session = %session, error = %e, "Engine failed; forwarding the request unchanged.");
            app.metrics.fail_open();
            app.remember(
                &session,
                TurnReport {
                    session: session.to_string(),
                    wire: wire.to_string(),
                    fail_open: Some(e.to_string()),
                    ..TurnReport::default()
                },
            );
            Ok(Processed {
                body,
                session: Some((wire, session)),
                estimated: 0,
                looped: None,
            })
        }
    }
}

/// A request that continues a conversation the provider keeps: forwarded as sent, with no
/// session (its history is not here to fold, and each request would otherwise open one) and
/// no proxy tools (a `compress` call could fold nothing). Said once per process at `warn`,
/// then at `debug`, and counted.
fn provider_held(
    app: &AppState,
    held: foldwire_wire::request::WireError,
    body: Bytes,
) -> Processed {
    static SAID: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    if SAID.swap(true, std::sync::atomic::Ordering::Relaxed) {
        tracing::debug!(reason = %held, "Forwarding the request unchanged.");
    } else {
        tracing::warn!(reason = %held, "Forwarding the request unchanged; foldwire manages the context of clients that send their whole history (this warning is given once).");
    }
    app.metrics.provider_held();
    Processed {
        body,
        session: None,
        estimated: 0,
        looped: None,
    }
}

/// `body`, chaining on the last round of a stitched answer when it names the id that answer
/// was shown under ([`super::chained_ids`]); as sent otherwise.
fn on_last_round(app: &AppState, wire: Wire, body: Bytes) -> Bytes {
    let Some(key) = wire.dialect().chain_key() else {
        return body;
    };
    if app.chained_ids.is_empty() {
        return body;
    }
    let named = serde_json::from_slice::<serde_json::Value>(&body)
        .ok()
        .and_then(|v| v.get(key)?.as_str().map(str::to_owned));
    let Some(shown) = named else {
        return body;
    };
    let Some(last) = app.chained_ids.last_round_of(&shown) else {
        return body;
    };
    match super::chained_ids::with_chained_id(&body, key, &shown, &last) {
        Some(chained) => {
            tracing::debug!(shown = %shown, last = %last, "Chaining on the last round of a stitched answer.");
            Bytes::from(chained)
        }
        None => body,
    }
}

/// A token-count request: the body the session's next turn would forward for this
/// conversation (folded, laid out, the proxy's tools added), made by a dry run of the
/// pipeline that keeps nothing, so the provider counts what the model would be sent and a
/// client that counts before it sends does not compact what foldwire already folds. When the
/// pipeline cannot make that body (it failed, or would refuse the turn), the client's body
/// is counted as sent.
async fn count_view(
    app: &AppState,
    session: &SessionId,
    wire: Wire,
    body: Bytes,
    decoded: Option<foldwire_core::Conversation>,
) -> Processed {
    let mut request = TurnRequest::new(wire, body.clone());
    request.decoded = decoded;
    request.options.dry_run = true;
    // A count body that cannot carry tools (Gemini's) is counted without the proxy's.
    request.options.skip_tool_loop = !wire.dialect().count_takes_tools();
    request.budget = request.budget.with_window(window_for(app, session).await);
    let counted = match app.engine.run_turn(session, request).await {
        Ok(outcome) if outcome.report.fail_open.is_none() && outcome.report.refusal.is_none() => {
            // The provider's count of a body foldwire estimated is a calibration sample
            // like a turn's usage ([`relay`] records it once the count comes back).
            let (estimated, _) = sent_and_raw_tokens(wire, &outcome, &body);
            return Processed {
                body: outcome.output,
                session: Some((wire, session.clone())),
                estimated,
                looped: None,
            };
        }
        Ok(outcome) => {
            let why = outcome
                .report
                .fail_open
                .or(outcome.report.refusal.map(|r| r.to_string()));
            tracing::warn!(session = %session, why = ?why, "A token count could not be made for the folded request; counting the request as sent.");
            body
        }
        Err(e) => {
            tracing::warn!(session = %session, error = %e, "A token count could not be made for the folded request; counting the request as sent.");
            body
        }
    };
    // Counted as sent: no estimate of foldwire's to calibrate against.
    Processed {
        body: counted,
        session: None,
        estimated: 0,
        looped: None,
    }
}
