//! Session identity: which session a request belongs to.
//!
//! In order: an explicit `x-foldwire-session` header; the session headers well-known clients
//! send; else a fingerprint of (wire, upstream, keyed hash of the credential, first user
//! message). Credentials are never stored or logged: only a keyed SHA-256 of them enters the
//! fingerprint, so two users sharing an opener still get different sessions.

use axum::http::HeaderMap;
use foldwire_core::{Role, SessionId, Wire};
use sha2::{Digest as _, Sha256};

/// The explicit header.
pub const SESSION_HEADER: &str = "x-foldwire-session";

/// Session headers sent by known clients, in priority order.
pub const CLIENT_SESSION_HEADERS: [&str; 6] = [
    "x-claude-code-session-id",
    "x-session-affinity",
    "x-session-id",
    "x-opencode-session",
    "session-id",
    "session_id",
];

/// Headers that carry credentials.
const CREDENTIAL_HEADERS: [&str; 3] = ["authorization", "x-api-key", "x-goog-api-key"];

/// Resolves the session of a request.
///
/// # Errors
/// An explicit header whose value is not a valid session id (the message says why).
pub fn resolve(
    headers: &HeaderMap,
    wire: Wire,
    upstream: &str,
    body: &bytes::Bytes,
    key: &[u8],
) -> Result<SessionId, String> {
    if let Some(v) = headers.get(SESSION_HEADER) {
        let s = v
            .to_str()
            .map_err(|_| format!("{SESSION_HEADER} is not ASCII"))?;
        return SessionId::new(s).map_err(|e| format!("{SESSION_HEADER}: {e}"));
    }
    let mut h = Sha256::new();
    h.update(wire.as_str());
    h.update([0]);
    h.update(upstream);
    h.update([0]);
    let mut keyed = Sha256::new();
    keyed.update(key);
    for name in CREDENTIAL_HEADERS {
        if let Some(v) = headers.get(name) {
            keyed.update(name);
            keyed.update(v.as_bytes());
        }
    }
    h.update(keyed.finalize());
    let client = CLIENT_SESSION_HEADERS
        .iter()
        .find_map(|name| headers.get(*name).map(|v| (name, v)));
    let prefix = match client {
        Some((name, v)) => {
            h.update(name);
            h.update(v.as_bytes());
            "client"
        }
        None => {
            h.update(first_user_message(wire, body));
            "fp"
        }
    };
    let digest = h.finalize();
    let hex: String = digest.iter().take(10).map(|b| format!("{b:02x}")).collect();
    SessionId::new(format!("{prefix}-{hex}")).map_err(|e| e.to_string())
}

/// The raw bytes of the first user unit, or the whole body when it does not decode (the
/// pipeline will then fail open; identity just needs to be deterministic).
fn first_user_message(wire: Wire, body: &bytes::Bytes) -> bytes::Bytes {
    match foldwire_wire::request::decode(wire, body.clone()) {
        Ok(conv) => conv
            .messages
            .iter()
            .find(|m| m.role == Role::User)
            .map(|m| m.raw.clone())
            .unwrap_or_default(),
        Err(_) => body.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    #[test]
    fn explicit_header_wins_and_credentials_separate_sessions() {
        let body = bytes::Bytes::from_static(
            br#"{"model":"m","messages":[{"role":"user","content":"hi"}]}"#,
        );
        let mut h = HeaderMap::new();
        h.insert(SESSION_HEADER, HeaderValue::from_static("mine"));
        assert_eq!(
            resolve(&h, Wire::Anthropic, "u", &body, b"k")
                .unwrap()
                .as_str(),
            "mine"
        );
        h.insert(SESSION_HEADER, HeaderValue::from_static("../x"));
        assert!(resolve(&h, Wire::Anthropic, "u", &body, b"k").is_err());

        let mut a = HeaderMap::new();
        a.insert("x-api-key", HeaderValue::from_static("sk-a"));
        let mut b = HeaderMap::new();
        b.insert("x-api-key", HeaderValue::from_static("sk-b"));
        let sa = resolve(&a, Wire::Anthropic, "u", &body, b"k").unwrap();
        let sb = resolve(&b, Wire::Anthropic, "u", &body, b"k").unwrap();
        assert_ne!(sa, sb);
        assert_eq!(sa, resolve(&a, Wire::Anthropic, "u", &body, b"k").unwrap());
        assert!(!sa.as_str().contains("sk-a"));
        a.insert("x-claude-code-session-id", HeaderValue::from_static("abc"));
        assert!(
            resolve(&a, Wire::Anthropic, "u", &body, b"k")
                .unwrap()
                .as_str()
                .starts_with("client-")
        );
    }
}
