//! Session identity: which session a request belongs to.
//!
//! In order: an explicit `x-foldwire-session` header; the session headers well-known clients
//! send; else a fingerprint of (wire, upstream, keyed hash of the credential, first user
//! message). Credentials are never stored or logged: only a keyed SHA-256 of them enters the
//! fingerprint, so two users sharing an opener still get different sessions.
//!
//! A fingerprint alone merges every conversation that opens alike (an agent whose first
//! message is the date and the directory), so anonymous requests are told apart by their
//! history ([`resolve_by_history`]): a request continues the session whose last history it
//! extends; one that extends none (another conversation, or an edited or rewound one) forks a
//! session of its own. The known histories live in the fingerprint session's state, so
//! restarts and replicas sharing a state location agree.
//!
//! Instructions count too: an agent's sub-agents often open with the same message as the
//! agent but run under instructions of their own (the system prompt, Responses
//! `instructions`, Gemini `systemInstruction`). The first instructions a fingerprint sees
//! anchor it and keep its sessions; requests under other instructions get a namespace of
//! their own (`<fingerprint>-sub-<hash>`), stable per instructions, whose histories are
//! told apart within it. A request without instructions never anchors and joins the
//! anchor's namespace. A request that continues a conversation already under way keeps its
//! session whatever its instructions say now, so instructions that change from turn to turn
//! split a conversation at most once, after its opener.

use axum::http::HeaderMap;
use foldwire_core::{
    Conversation, Engine, HostError, MessageKind, Role, SessionId, SessionState, Wire,
};
use serde::{Deserialize, Serialize};
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

/// Headers that carry credentials (bearer tokens ride in `authorization`).
const CREDENTIAL_HEADERS: [&str; 4] = ["authorization", "x-api-key", "x-goog-api-key", "api-key"];

/// Query parameters that carry credentials (Gemini's `?key=`, and the usual others).
const CREDENTIAL_PARAMS: [&str; 4] = ["key", "api_key", "api-key", "access_token"];

/// A keyed hash of every credential the request carries, in headers and in the query, so
/// callers with different keys never share an anonymous session and no key is kept.
fn credential_digest(key: &[u8], headers: &HeaderMap, query: Option<&str>) -> [u8; 32] {
    let mut keyed = Sha256::new();
    keyed.update(key);
    for name in CREDENTIAL_HEADERS {
        if let Some(v) = headers.get(name) {
            keyed.update(name);
            keyed.update([0]);
            keyed.update(v.as_bytes());
            keyed.update([0]);
        }
    }
    for pair in query.unwrap_or_default().split('&') {
        let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
        if CREDENTIAL_PARAMS.contains(&name) {
            keyed.update(b"?");
            keyed.update(name);
            keyed.update([0]);
            keyed.update(value);
            keyed.update([0]);
        }
    }
    keyed.finalize().into()
}

/// Resolves the session of a request.
///
/// # Errors
/// An explicit header whose value is not a valid session id (the message says why).
pub fn resolve(
    headers: &HeaderMap,
    query: Option<&str>,
    wire: Wire,
    upstream: &str,
    body: &bytes::Bytes,
    key: &[u8],
) -> Result<SessionId, String> {
    let decoded = foldwire_wire::request::decode(wire, body.clone()).ok();
    resolve_decoded(headers, query, wire, upstream, body, decoded.as_ref(), key)
}

/// [`resolve`] on a body already decoded (`None`: it does not decode).
fn resolve_decoded(
    headers: &HeaderMap,
    query: Option<&str>,
    wire: Wire,
    upstream: &str,
    body: &bytes::Bytes,
    decoded: Option<&Conversation>,
    key: &[u8],
) -> Result<SessionId, String> {
    if let Some(v) = headers.get(SESSION_HEADER) {
        let s = v
            .to_str()
            .map_err(|_| format!("{SESSION_HEADER} is not ASCII"))?;
        return SessionId::new(s).map_err(|e| format!("{SESSION_HEADER}: {e}"));
    }
    let mut h = client_hasher(wire, upstream, key, headers, query);
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
            h.update(first_user_message(decoded, body));
            "fp"
        }
    };
    let digest = h.finalize();
    let hex: String = digest.iter().take(10).map(|b| format!("{b:02x}")).collect();
    SessionId::new(format!("{prefix}-{hex}")).map_err(|e| e.to_string())
}

/// The raw bytes of the first user unit, or the whole body when it does not decode (the
/// pipeline will then fail open; identity just needs to be deterministic).
fn first_user_message(decoded: Option<&Conversation>, body: &bytes::Bytes) -> bytes::Bytes {
    match decoded {
        Some(conv) => conv
            .messages
            .iter()
            .find(|m| m.role == Role::User)
            .map(|m| m.raw.clone())
            .unwrap_or_default(),
        None => body.clone(),
    }
}

/// Key in the fingerprint session's `SessionState::extra` of the histories its requests
/// were last seen with.
const KNOWN_HISTORIES: &str = "identity_histories";

/// Histories kept per fingerprint; the least recently continued is forgotten first (its
/// conversation then forks a new session if it ever comes back).
pub const MAX_KNOWN_HISTORIES: usize = 64;

/// Shorter prefixes of a history kept beside it (see `KnownHistory::recent`).
const RECENT_PREFIXES: usize = 8;

/// Key in the fingerprint session's `SessionState::extra` of the digest of the first
/// instructions it saw (see the module docs).
const ANCHOR_INSTRUCTIONS: &str = "identity_instructions";

/// Attempts at recording a choice when another replica writes the same fingerprint state.
const RECORD_ATTEMPTS: usize = 8;

/// One conversation's history as of its last request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct KnownHistory {
    /// The session it belongs to.
    session: SessionId,
    /// How many units the history had.
    units: usize,
    /// The rolling hash of those units.
    hash: u64,
    /// The rolling hashes of its last few shorter prefixes, oldest first, so a request that
    /// resends an earlier state of the conversation (the real request after a side request
    /// that appended to it) still finds it.
    #[serde(default)]
    recent: Vec<u64>,
    /// When it was last continued (a counter of this fingerprint's requests).
    stamp: u64,
    /// The instructions namespace it lives in: 0 for the anchor's, else the digest of its
    /// instructions.
    #[serde(default)]
    namespace: u64,
}

/// The instructions of a request: its top-level system prompt (Anthropic `system`,
/// Responses `instructions`, Gemini `systemInstruction`) and the system and developer
/// messages among its messages, as one digest; 0 when it has none.
pub fn instructions_digest(conversation: &Conversation) -> u64 {
    #[derive(Deserialize)]
    struct TopLevel<'a> {
        #[serde(borrow, default)]
        system: Option<&'a serde_json::value::RawValue>,
        #[serde(borrow, default)]
        instructions: Option<&'a serde_json::value::RawValue>,
        #[serde(
            borrow,
            default,
            rename = "systemInstruction",
            alias = "system_instruction"
        )]
        system_instruction: Option<&'a serde_json::value::RawValue>,
    }
    let mut h = Sha256::new();
    let mut any = false;
    if let Ok(top) = serde_json::from_slice::<TopLevel<'_>>(&conversation.source) {
        for (name, v) in [
            ("system", top.system),
            ("instructions", top.instructions),
            ("systemInstruction", top.system_instruction),
        ] {
            if let Some(v) = v.filter(|v| v.get() != "null") {
                h.update(name);
                h.update([0]);
                h.update(v.get());
                h.update([0]);
                any = true;
            }
        }
    }
    for unit in conversation.messages.iter().filter(|u| u.is_frame()) {
        h.update(b"frame\0");
        h.update(&unit.raw);
        h.update([0]);
        any = true;
    }
    if !any {
        return 0;
    }
    let digest = h.finalize();
    let mut word = [0u8; 8];
    word.copy_from_slice(&digest[..8]);
    // 0 means "none"; a digest of 0 is as good as any other once moved off it.
    u64::from_be_bytes(word).max(1)
}

/// Rolling hashes of a request's history: entry `i` covers units `0..=i`. Each unit counts
/// by its role, kind and text (and the bytes of media), not its raw JSON, so markers a
/// client moves between requests (`cache_control`) do not break the chain.
pub fn history_hashes(conversation: &Conversation) -> Vec<u64> {
    let mut rolling = Sha256::new();
    let mut out = Vec::with_capacity(conversation.messages.len());
    for unit in &conversation.messages {
        let mut h = Sha256::new();
        h.update(format!("{:?}/{:?}", unit.role, unit.kind));
        h.update([0]);
        h.update(unit.text.as_str());
        if unit.kind == MessageKind::Media {
            h.update([0]);
            h.update(&unit.raw);
        }
        rolling.update(h.finalize());
        let digest = rolling.clone().finalize();
        let mut word = [0u8; 8];
        word.copy_from_slice(&digest[..8]);
        out.push(u64::from_be_bytes(word));
    }
    out
}

/// Chooses the session of an anonymous request by its history among those recorded in the
/// fingerprint session's state, and records the request's history as that session's last.
fn choose_and_record(
    state: &mut SessionState,
    fingerprint: &SessionId,
    history: &[u64],
    instructions: u64,
) -> SessionId {
    // The first instructions seen anchor the fingerprint; other instructions get their own
    // namespace (acp §26 #123).
    let anchor = state
        .extra
        .get(ANCHOR_INSTRUCTIONS)
        .and_then(|v| v.as_u64());
    let anchor = match anchor {
        None if instructions != 0 => {
            state
                .extra
                .insert(ANCHOR_INSTRUCTIONS.to_owned(), instructions.into());
            Some(instructions)
        }
        other => other,
    };
    let namespace = if instructions == 0 || Some(instructions) == anchor {
        0
    } else {
        instructions
    };
    let sub;
    let base = if namespace == 0 {
        fingerprint
    } else {
        sub = SessionId::new(format!("{fingerprint}-sub-{namespace:016x}"))
            .unwrap_or_else(|_| fingerprint.clone());
        &sub
    };
    let mut known: Vec<KnownHistory> = state
        .extra
        .get(KNOWN_HISTORIES)
        .and_then(|v| serde_json::from_value(v.clone()).ok())
        .unwrap_or_default();
    let stamp = known.iter().map(|k| k.stamp).max().unwrap_or(0) + 1;
    let (Some(&last), units) = (history.last(), history.len()) else {
        // Nothing to tell conversations apart by.
        return base.clone();
    };
    // The longest recorded history this request extends (a resent request extends its own),
    // in its namespace first. Only then, across namespaces, a conversation already under
    // way (a reply in it) that the request carries further: an agent whose instructions
    // change between turns (a date line) keeps its session, while a sub-agent, which sends
    // what its agent sent at most, does not join its agent's.
    let extends = |k: &KnownHistory| k.units >= 1 && history.get(k.units - 1) == Some(&k.hash);
    let longest = |same: bool| {
        known
            .iter()
            .enumerate()
            .filter(|(_, k)| {
                extends(k)
                    && if same {
                        k.namespace == namespace
                    } else {
                        k.namespace != namespace && k.units >= 2 && units > k.units
                    }
            })
            .max_by_key(|(_, k)| (k.units, k.stamp))
            .map(|(i, _)| i)
    };
    let extended = longest(true).or_else(|| longest(false));
    // Else the history a request is a recent part of: an earlier state resent, which
    // continues that session and leaves its history as it is.
    let resent = || {
        known
            .iter()
            .enumerate()
            .filter(|(_, k)| {
                k.namespace == namespace
                    && k.units > units
                    && k.units - units <= k.recent.len()
                    && k.recent.get(k.recent.len() - (k.units - units)) == Some(&last)
            })
            .max_by_key(|(_, k)| k.stamp)
            .map(|(i, _)| i)
    };
    let recent = history[units.saturating_sub(RECENT_PREFIXES + 1)..units - 1].to_vec();
    let session = match (extended, resent()) {
        (Some(i), _) => {
            let k = &mut known[i];
            k.units = units;
            k.hash = last;
            k.recent = recent;
            k.stamp = stamp;
            k.session.clone()
        }
        (None, Some(i)) => {
            let k = &mut known[i];
            k.stamp = stamp;
            k.session.clone()
        }
        (None, None) => {
            let session = if known.iter().all(|k| k.namespace != namespace) {
                // The first conversation of a namespace keeps its id.
                base.clone()
            } else {
                fork_id(base, last, &known)
            };
            known.push(KnownHistory {
                session: session.clone(),
                units,
                hash: last,
                recent,
                stamp,
                namespace,
            });
            session
        }
    };
    if known.len() > MAX_KNOWN_HISTORIES {
        known.sort_by_key(|k| std::cmp::Reverse(k.stamp));
        known.truncate(MAX_KNOWN_HISTORIES);
    }
    if let Ok(v) = serde_json::to_value(&known) {
        state.extra.insert(KNOWN_HISTORIES.to_owned(), v);
    }
    session
}

/// A new session for a history that extends none recorded: the fingerprint and the hash of
/// the history at the fork, so every replica derives the same id; a counter when that id is
/// taken (a conversation rewound to the same point twice).
fn fork_id(base: &SessionId, hash: u64, known: &[KnownHistory]) -> SessionId {
    let stem = format!("{base}-{hash:016x}");
    let taken = |id: &str| known.iter().any(|k| k.session.as_str() == id);
    let mut candidate = stem.clone();
    let mut n = 1u32;
    while taken(&candidate) {
        n += 1;
        candidate = format!("{stem}-{n}");
    }
    // Ids are short ASCII by construction; the base is kept if that ever fails.
    SessionId::new(candidate).unwrap_or_else(|_| base.clone())
}

/// Resolves the session of a request as [`resolve`] does, then, for requests that name no
/// session (no explicit or client session header), by their history. Returns the body
/// decoded too when it had to be decoded for that, so the turn does not decode it again,
/// with the number of wire messages that decode took over from the client's last one
/// ([`RecentDecodes`](super::recent_decodes::RecentDecodes)).
///
/// # Errors
/// An explicit header whose value is not a valid session id. An engine that cannot record
/// the choice leaves the request on its fingerprint session (logged), as before histories
/// were told apart.
#[allow(clippy::too_many_arguments)]
pub async fn resolve_by_history(
    engine: &Engine,
    recent: &super::recent_decodes::RecentDecodes,
    headers: &HeaderMap,
    query: Option<&str>,
    wire: Wire,
    upstream: &str,
    body: &bytes::Bytes,
    key: &[u8],
) -> Result<(SessionId, Option<(Conversation, usize)>), String> {
    let named = headers.contains_key(SESSION_HEADER)
        || CLIENT_SESSION_HEADERS
            .iter()
            .any(|h| headers.contains_key(*h));
    if named {
        return resolve_decoded(headers, query, wire, upstream, body, None, key).map(|s| (s, None));
    }
    // The client resends its history each turn: resumed from its last decode, only what
    // it added is decoded.
    let client = client_digest(wire, upstream, key, headers, query);
    let (decoded, reused) = recent.decode(client, wire, body);
    let base = resolve_decoded(headers, query, wire, upstream, body, decoded.as_ref(), key)?;
    // A body that does not decode fails open on its fingerprint session.
    let Some(conversation) = decoded else {
        return Ok((base, None));
    };
    let session = by_history(engine, base, &conversation).await;
    Ok((session, Some((conversation, reused))))
}

/// Who sent a request, as far as identity goes without its history: its wire, upstream and
/// credentials (keyed, as in the session id).
fn client_digest(
    wire: Wire,
    upstream: &str,
    key: &[u8],
    headers: &HeaderMap,
    query: Option<&str>,
) -> [u8; 32] {
    client_hasher(wire, upstream, key, headers, query)
        .finalize()
        .into()
}

/// A hasher fed with the client's wire, upstream and keyed credentials: the start of every
/// session id made without an explicit header, and the whole of [`client_digest`].
fn client_hasher(
    wire: Wire,
    upstream: &str,
    key: &[u8],
    headers: &HeaderMap,
    query: Option<&str>,
) -> Sha256 {
    let mut h = Sha256::new();
    h.update(wire.as_str());
    h.update([0]);
    h.update(upstream);
    h.update([0]);
    h.update(credential_digest(key, headers, query));
    h
}

/// The session a decoded request without a session header continues, recorded in the
/// fingerprint session `base`'s state.
async fn by_history(engine: &Engine, base: SessionId, conversation: &Conversation) -> SessionId {
    let history = std::sync::Arc::new(history_hashes(conversation));
    let instructions = instructions_digest(conversation);
    for _ in 0..RECORD_ATTEMPTS {
        let (b, h) = (base.clone(), history.clone());
        let chosen = engine
            .update(&base, move |state: &mut SessionState| {
                choose_and_record(state, &b, &h, instructions)
            })
            .await;
        match chosen {
            Ok(session) => return session,
            // Another writer (a replica) recorded first: choose again on its state.
            Err(HostError::Contention { .. }) => continue,
            Err(e) => {
                tracing::warn!(session = %base, error = %e, "Session identity by history is unavailable; using the fingerprint session.");
                return base;
            }
        }
    }
    tracing::warn!(session = %base, "The fingerprint session's state kept changing underneath this writer; using the fingerprint session.");
    base
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    /// Chooses for a request without instructions.
    fn choose(state: &mut SessionState, base: &SessionId, history: &[u64]) -> SessionId {
        choose_and_record(state, base, history, 0)
    }

    // acp §26 #123: the first instructions anchor the fingerprint; others get a stable
    // namespace of their own, and histories are told apart within each.
    #[test]
    fn other_instructions_get_a_namespace_of_their_own() {
        let base = SessionId::new("fp-base").unwrap();
        let mut state = SessionState::default();
        // No instructions never anchor.
        assert_eq!(choose_and_record(&mut state, &base, &[1], 0), base);
        assert!(!state.extra.contains_key(ANCHOR_INSTRUCTIONS));
        // The first instructions anchor and keep the fingerprint's sessions: [1, 2]
        // continues the conversation above.
        assert_eq!(choose_and_record(&mut state, &base, &[1, 2], 7), base);
        // A sub-agent with the same opener under other instructions: its own namespace,
        // even for a history the anchor's conversation already holds.
        let sub = choose_and_record(&mut state, &base, &[1], 9);
        assert_eq!(sub.as_str(), format!("fp-base-sub-{:016x}", 9));
        assert_eq!(choose_and_record(&mut state, &base, &[1, 5], 9), sub);
        // Both go on in their own sessions.
        assert_eq!(choose_and_record(&mut state, &base, &[1, 2, 3], 7), base);
        assert_eq!(choose_and_record(&mut state, &base, &[1, 5, 6], 9), sub);
        // Another conversation under the sub-agent's instructions forks inside its namespace.
        let other = choose_and_record(&mut state, &base, &[1, 8], 9);
        assert!(
            other.as_str().starts_with(sub.as_str()) && other != sub,
            "{other}"
        );
        // The lead's instructions change mid-conversation (a date line): it keeps its session.
        assert_eq!(
            choose_and_record(&mut state, &base, &[1, 2, 3, 4], 11),
            base
        );
    }

    #[test]
    fn histories_continue_their_session_and_divergent_ones_fork() {
        let base = SessionId::new("fp-base").unwrap();
        let mut state = SessionState::default();
        let a1 = [1, 2, 3];
        assert_eq!(choose(&mut state, &base, &a1), base);
        // The same opener, another conversation: forks.
        let b1 = [1, 2, 9];
        let b = choose(&mut state, &base, &b1);
        assert_ne!(b, base);
        assert!(b.as_str().starts_with("fp-base-"));
        // Each continues its own; a resent request continues too.
        assert_eq!(choose(&mut state, &base, &[1, 2, 3, 4, 5]), base);
        assert_eq!(choose(&mut state, &base, &[1, 2, 9, 7]), b);
        assert_eq!(choose(&mut state, &base, &[1, 2, 9, 7]), b);
        // A rewind (an edit of the last message) forks, deterministically.
        let mut replica = state.clone();
        let rewound = choose(&mut state, &base, &[1, 2, 3, 6]);
        assert!(rewound != base && rewound != b);
        assert_eq!(choose(&mut replica, &base, &[1, 2, 3, 6]), rewound);
        // The fork continues as its own session.
        assert_eq!(choose(&mut state, &base, &[1, 2, 3, 6, 8]), rewound);
        // Resent as it was a little earlier, it continues the fork.
        assert_eq!(choose(&mut state, &base, &[1, 2, 3, 6]), rewound);
        // Long after, the same point again is a rewind: a session of its own, not the
        // first fork.
        let long: Vec<u64> = [1, 2, 3, 6, 8].into_iter().chain(20..30).collect();
        assert_eq!(choose(&mut state, &base, &long), rewound);
        let twice = choose(&mut state, &base, &[1, 2, 3, 6]);
        assert_eq!(twice.as_str(), format!("{rewound}-2"));
        // An earlier state resent as it was (a request after a side request that appended
        // to the history) continues its session, which keeps its longer history.
        assert_eq!(choose(&mut state, &base, &[1, 2, 9]), b);
        assert_eq!(choose(&mut state, &base, &[1, 2, 9, 7, 11]), b);
    }

    #[test]
    fn explicit_header_wins_and_credentials_separate_sessions() {
        let body = bytes::Bytes::from_static(
            br#"{"model":"m","messages":[{"role":"user","content":"hi"}]}"#,
        );
        let mut h = HeaderMap::new();
        h.insert(SESSION_HEADER, HeaderValue::from_static("mine"));
        assert_eq!(
            resolve(&h, None, Wire::Anthropic, "u", &body, b"k")
                .unwrap()
                .as_str(),
            "mine"
        );
        h.insert(SESSION_HEADER, HeaderValue::from_static("../x"));
        assert!(resolve(&h, None, Wire::Anthropic, "u", &body, b"k").is_err());

        let mut a = HeaderMap::new();
        a.insert("x-api-key", HeaderValue::from_static("sk-a"));
        let mut b = HeaderMap::new();
        b.insert("x-api-key", HeaderValue::from_static("sk-b"));
        let sa = resolve(&a, None, Wire::Anthropic, "u", &body, b"k").unwrap();
        let sb = resolve(&b, None, Wire::Anthropic, "u", &body, b"k").unwrap();
        assert_ne!(sa, sb);
        assert_eq!(
            sa,
            resolve(&a, None, Wire::Anthropic, "u", &body, b"k").unwrap()
        );
        assert!(!sa.as_str().contains("sk-a"));
        a.insert("x-claude-code-session-id", HeaderValue::from_static("abc"));
        assert!(
            resolve(&a, None, Wire::Anthropic, "u", &body, b"k")
                .unwrap()
                .as_str()
                .starts_with("client-")
        );
    }

    #[test]
    fn every_credential_form_tells_callers_apart() {
        let body = bytes::Bytes::from_static(
            br#"{"contents":[{"role":"user","parts":[{"text":"same opener"}]}]}"#,
        );
        let none = HeaderMap::new();
        let at =
            |q: Option<&str>, h: &HeaderMap| resolve(h, q, Wire::Gemini, "u", &body, b"k").unwrap();
        // Gemini's ?key= (alone or among other parameters) counts like a header.
        let a = at(Some("key=AIza-one"), &none);
        let b = at(Some("alt=sse&key=AIza-two"), &none);
        assert_ne!(a, b);
        assert_eq!(a, at(Some("key=AIza-one"), &none));
        assert_ne!(a, at(None, &none));
        // Parameters that are not credentials do not split a caller's session.
        assert_eq!(at(Some("key=AIza-one&alt=sse"), &none), a);
        let mut bearer = HeaderMap::new();
        bearer.insert("authorization", HeaderValue::from_static("Bearer t1"));
        let mut other = HeaderMap::new();
        other.insert("authorization", HeaderValue::from_static("Bearer t2"));
        assert_ne!(at(None, &bearer), at(None, &other));
        // The key itself never appears in the session id.
        assert!(!a.as_str().contains("AIza"));
    }
}
