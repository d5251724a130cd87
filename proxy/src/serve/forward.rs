//! The provider routes: run the pipeline, forward upstream, stream the answer back.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderName, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use foldwire_core::{SessionId, TurnReport, TurnRequest, Wire};
use serde_json::json;

use super::AppState;
use super::identity;
use super::route::{self, Route};

/// Headers that describe one connection, not the request (RFC 9110 §7.6.1), plus those the
/// proxy recomputes.
const HOP_BY_HOP: [&str; 11] = [
    "connection",
    "keep-alive",
    "proxy-authenticate",
    "proxy-authorization",
    "proxy-connection",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "host",
    "content-length",
];

/// Every provider route lands here.
pub async fn handle(
    State(app): State<Arc<AppState>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let path_and_query = uri.path_and_query().map_or("/", |p| p.as_str());
    let route = match route::resolve(path_and_query, &app.config.upstreams) {
        Ok(r) => r,
        Err(e) => return error(StatusCode::NOT_FOUND, "not_found", &e.to_string()),
    };
    let forwarded = match (route.wire, method == Method::POST) {
        (Some(wire), true) => match process(&app, &route, wire, &headers, body.clone()).await {
            Ok(out) => out,
            Err(resp) => return *resp,
        },
        _ => {
            app.metrics.passthrough();
            body
        }
    };
    forward(&app, &route, method, &headers, forwarded).await
}

/// Runs the pipeline; returns the body to forward, or a response to give the client
/// instead (bad session header, refusal).
async fn process(
    app: &AppState,
    route: &Route,
    wire: Wire,
    headers: &HeaderMap,
    body: Bytes,
) -> Result<Bytes, Box<Response>> {
    app.metrics.request(wire);
    let session = identity::resolve(headers, wire, &route.upstream, &body, &app.identity_key)
        .map_err(|e| Box::new(error(StatusCode::BAD_REQUEST, "invalid_session", &e)))?;
    match app
        .engine
        .run_turn(&session, TurnRequest::new(wire, body.clone()))
        .await
    {
        Ok(outcome) => {
            app.metrics.report(&outcome.report);
            let refusal = outcome.report.refusal.clone();
            if outcome.report.fail_open.is_some() {
                app.metrics.fail_open();
            }
            app.remember(&session, outcome.report);
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
            Ok(outcome.output)
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
            Ok(body)
        }
    }
}

async fn forward(
    app: &AppState,
    route: &Route,
    method: Method,
    headers: &HeaderMap,
    body: Bytes,
) -> Response {
    let url = format!("{}{}", route.upstream, route.path_and_query);
    let mut request = app.client.request(method, &url).body(body);
    for (name, value) in headers {
        if !is_hop_by_hop(name, headers)
            && name != "content-encoding"
            && name != identity::SESSION_HEADER
        {
            request = request.header(name, value);
        }
    }
    let upstream = match request.send().await {
        Ok(r) => r,
        Err(e) => {
            app.metrics.upstream_error();
            return error(
                StatusCode::BAD_GATEWAY,
                "upstream_unreachable",
                &format!("cannot reach {url}: {e}"),
            );
        }
    };
    let mut response = Response::builder().status(upstream.status());
    for (name, value) in upstream.headers() {
        if !is_hop_by_hop(name, upstream.headers()) {
            response = response.header(name, value);
        }
    }
    // Bytes reach the client as they arrive: no buffering, no added time to first byte.
    let stream = upstream.bytes_stream();
    response
        .body(Body::from_stream(stream))
        .unwrap_or_else(|e| {
            error(
                StatusCode::BAD_GATEWAY,
                "bad_upstream_response",
                &e.to_string(),
            )
        })
}

fn is_hop_by_hop(name: &HeaderName, headers: &HeaderMap) -> bool {
    if HOP_BY_HOP.contains(&name.as_str()) {
        return true;
    }
    // Headers named in Connection are hop-by-hop too.
    headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|n| n.trim().eq_ignore_ascii_case(name.as_str()))
}

/// A JSON error in the shape every provider's clients parse (`error.type`, `error.message`).
pub fn error(status: StatusCode, kind: &str, message: &str) -> Response {
    let body = json!({ "type": "error", "error": { "type": kind, "message": message } });
    (status, axum::Json(body)).into_response()
}

/// Keeps the last reports of a session for the admin API.
pub fn remember(
    reports: &dashmap::DashMap<SessionId, std::collections::VecDeque<TurnReport>>,
    keep: usize,
    session: &SessionId,
    report: TurnReport,
) {
    let mut list = reports.entry(session.clone()).or_default();
    list.push_back(report);
    while list.len() > keep {
        list.pop_front();
    }
}
