//! Which headers cross the proxy: hop-by-hop headers stay on their own connection, and the
//! session header and content encoding are foldwire's to handle.

use axum::http::{HeaderMap, HeaderName, header};

use super::identity;

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

/// Whether a client request header is sent upstream.
pub fn passes_upstream(name: &HeaderName, headers: &HeaderMap) -> bool {
    !is_hop_by_hop(name, headers) && name != "content-encoding" && name != identity::SESSION_HEADER
}

/// The upstream response headers the client gets.
pub fn response_headers(upstream: &HeaderMap) -> HeaderMap {
    let mut out = HeaderMap::new();
    for (name, value) in upstream {
        if !is_hop_by_hop(name, upstream) {
            out.append(name.clone(), value.clone());
        }
    }
    out
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
