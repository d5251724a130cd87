//! WebSocket upgrades on the provider routes. Codex asks for the Responses API over a
//! WebSocket first (`GET /v1/responses` with `Upgrade: websocket`) and falls back to HTTP.
//! foldwire manages context on the HTTP transport, so it answers the upgrade with
//! `426 Upgrade Required`, the status on which Codex gives up the WebSocket for the whole
//! session at once. Any other answer costs a Codex session five retries with backoff (about
//! six seconds, each printed as an error) before it falls back, and forwarding the upgrade
//! would take the session past foldwire.

use axum::http::{HeaderMap, StatusCode, header};
use axum::response::Response;

/// Whether a request asks to switch to the WebSocket protocol.
pub fn wants_websocket(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::UPGRADE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|v| {
            v.split(',')
                .any(|p| p.trim().eq_ignore_ascii_case("websocket"))
        })
}

/// The answer to a WebSocket upgrade on a provider route.
pub fn refused() -> Response {
    super::error(
        StatusCode::UPGRADE_REQUIRED,
        "websocket_unsupported",
        "foldwire serves this API over HTTP, where it manages the conversation's context: send \
         the request as an HTTP POST to the same path (clients with both transports fall back \
         to HTTP on this status)",
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_websocket_upgrade_is_one() {
        let with = |v: &'static str| {
            let mut h = HeaderMap::new();
            h.insert(header::UPGRADE, axum::http::HeaderValue::from_static(v));
            h
        };
        assert!(wants_websocket(&with("websocket")));
        assert!(wants_websocket(&with("h2c, WebSocket")));
        assert!(!wants_websocket(&with("h2c")));
        assert!(!wants_websocket(&HeaderMap::new()));
        assert_eq!(refused().status(), StatusCode::UPGRADE_REQUIRED);
    }
}
