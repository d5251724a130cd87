//! Which wire a request path speaks and where it goes upstream.

use axum::http::HeaderMap;
use foldwire_core::Wire;
use foldwire_wire::dialect::{self, Provider, WireDialect};

use super::config::Upstreams;

/// A resolved route.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Route {
    /// The wire, when the path is one foldwire processes; `None` to forward untouched.
    pub wire: Option<Wire>,
    /// The upstream base URL (scheme://host[:port], maybe a path prefix).
    pub upstream: String,
    /// The path (and query) to request upstream.
    pub path_and_query: String,
    /// The model named in the path (Gemini).
    pub model: Option<String>,
    /// A token-count request of `wire`: answered for the body the session's next turn
    /// would forward, and not a turn itself.
    pub counts: bool,
}

/// Why a path has no route.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RouteError {
    /// A `/u/` prefix without a usable URL.
    #[error("bad upstream in {0:?}: expected /u/http(s)://host[:port]/<provider path>")]
    BadUpstream(String),
}

/// Classifies a path (with query) against the provider routes. A path foldwire does not
/// process (`GET /v1/models`, file uploads, …) still has a route: it is forwarded untouched
/// to the upstream its path and `headers` point at (see [`passthrough_upstream`]).
///
/// # Errors
/// A malformed `/u/` upstream.
pub fn resolve(
    path_and_query: &str,
    upstreams: &Upstreams,
    headers: &HeaderMap,
) -> Result<Route, RouteError> {
    let (explicit, rest) = match path_and_query.strip_prefix("/u/") {
        Some(after) => {
            let (base, rest) = split_upstream(after)
                .ok_or_else(|| RouteError::BadUpstream(path_and_query.to_owned()))?;
            (Some(base), rest)
        }
        None => (None, path_and_query.to_owned()),
    };
    let path = rest.split('?').next().unwrap_or_default();
    let counts = dialect::count_route(path);
    let counts_tokens = counts.is_some();
    let (wire, default_upstream, model) = match counts.or_else(|| dialect::route(path)) {
        Some((wire, model)) => (Some(wire), provider_upstream(wire, upstreams), model),
        None => (None, passthrough_upstream(path, headers, upstreams), None),
    };
    Ok(Route {
        wire,
        upstream: explicit.unwrap_or_else(|| default_upstream.trim_end_matches('/').to_owned()),
        path_and_query: rest,
        model,
        counts: counts_tokens,
    })
}

impl Route {
    /// True for a stream answered as a JSON array (Gemini without `alt=sse` in the query).
    pub fn is_array_stream(&self) -> bool {
        self.wire
            .is_some_and(|w| w.dialect().array_stream(&self.path_and_query))
    }

    fn has_alt_sse(&self) -> bool {
        self.path_and_query
            .split_once('?')
            .is_some_and(|(_, query)| query.split('&').any(|p| p == "alt=sse"))
    }

    /// The same route asking upstream for SSE framing.
    pub fn with_alt_sse(&self) -> Route {
        let mut route = self.clone();
        if !self.has_alt_sse() {
            let sep = if self.path_and_query.contains('?') {
                '&'
            } else {
                '?'
            };
            route.path_and_query = format!("{}{sep}alt=sse", self.path_and_query);
        }
        route
    }
}

/// The upstream of a route foldwire only forwards: Gemini for its API versions and upload
/// paths (or its key header), Anthropic when the client sends Anthropic's headers, else
/// OpenAI (whose paths share `/v1` with Anthropic's).
pub fn passthrough_upstream<'u>(
    path: &str,
    headers: &HeaderMap,
    upstreams: &'u Upstreams,
) -> &'u String {
    let gemini_path = ["/v1beta", "/v1alpha", "/upload/"]
        .iter()
        .any(|p| path.starts_with(p));
    if gemini_path || headers.contains_key("x-goog-api-key") {
        &upstreams.gemini
    } else if ["anthropic-version", "anthropic-beta", "x-api-key"]
        .iter()
        .any(|h| headers.contains_key(*h))
    {
        &upstreams.anthropic
    } else {
        &upstreams.openai
    }
}

/// The configured upstream of the provider that serves `wire`.
fn provider_upstream(wire: Wire, upstreams: &Upstreams) -> &String {
    match wire.dialect().provider() {
        Provider::Anthropic => &upstreams.anthropic,
        Provider::OpenAi => &upstreams.openai,
        Provider::Google => &upstreams.gemini,
    }
}

/// Splits `http://host:port/v1/messages` (or `http:/host…` after slash merging) into the
/// base and the rest.
fn split_upstream(after: &str) -> Option<(String, String)> {
    let (scheme, rest) = after.split_once(':')?;
    if scheme != "http" && scheme != "https" {
        return None;
    }
    let rest = rest.trim_start_matches('/');
    let (host, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    if host.is_empty() || host.contains(['@', ' ']) {
        return None;
    }
    Some((format!("{scheme}://{host}"), path.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn provider_paths_and_prefix_form_resolve() {
        let u = Upstreams::default();
        let h = HeaderMap::new();
        let r = resolve("/v1/messages", &u, &h).unwrap();
        assert_eq!(r.wire, Some(Wire::Anthropic));
        assert_eq!(r.upstream, "https://api.anthropic.com");
        let r = resolve(
            "/v1beta/models/gemini-2.5-pro:streamGenerateContent?alt=sse",
            &u,
            &h,
        )
        .unwrap();
        assert_eq!(r.wire, Some(Wire::Gemini));
        assert_eq!(r.model.as_deref(), Some("gemini-2.5-pro"));
        assert_eq!(
            r.path_and_query,
            "/v1beta/models/gemini-2.5-pro:streamGenerateContent?alt=sse"
        );
        let r = resolve("/u/http://127.0.0.1:9000/v1/chat/completions", &u, &h).unwrap();
        assert_eq!(r.upstream, "http://127.0.0.1:9000");
        assert_eq!(r.path_and_query, "/v1/chat/completions");
        assert_eq!(r.wire, Some(Wire::OpenAiChat));
        let r = resolve("/u/https:/api.example.com/v1/responses", &u, &h).unwrap();
        assert_eq!(r.upstream, "https://api.example.com");
        let count = resolve("/v1/messages/count_tokens", &u, &h).unwrap();
        assert_eq!((count.wire, count.counts), (Some(Wire::Anthropic), true));
        let count = resolve("/v1/responses/input_tokens", &u, &h).unwrap();
        assert_eq!(
            (count.wire, count.counts),
            (Some(Wire::OpenAiResponses), true)
        );
        assert!(!resolve("/v1/messages", &u, &h).unwrap().counts);
        let count = resolve("/v1beta/models/gemini-2.5-pro:countTokens?key=k", &u, &h).unwrap();
        assert_eq!((count.wire, count.counts), (Some(Wire::Gemini), true));
        assert_eq!(count.model.as_deref(), Some("gemini-2.5-pro"));
        let nope = resolve("/nope", &u, &h).unwrap();
        assert_eq!(
            (nope.wire, nope.upstream.as_str()),
            (None, "https://api.openai.com")
        );
        let models = resolve("/v1beta/models?pageSize=5", &u, &h).unwrap();
        assert_eq!(models.upstream, u.gemini);
        assert_eq!(models.path_and_query, "/v1beta/models?pageSize=5");
        let mut anthropic = HeaderMap::new();
        anthropic.insert("anthropic-version", "2023-06-01".parse().unwrap());
        let models = resolve("/v1/models", &u, &anthropic).unwrap();
        assert_eq!((models.wire, models.upstream), (None, u.anthropic.clone()));
        let models = resolve("/u/http://127.0.0.1:9000/v1/models?x=1", &u, &anthropic).unwrap();
        assert_eq!(models.upstream, "http://127.0.0.1:9000");
        assert_eq!(models.path_and_query, "/v1/models?x=1");
        let array = resolve("/v1beta/models/g:streamGenerateContent?key=k", &u, &h).unwrap();
        assert!(array.is_array_stream());
        let sse = array.with_alt_sse();
        assert_eq!(
            sse.path_and_query,
            "/v1beta/models/g:streamGenerateContent?key=k&alt=sse"
        );
        assert!(!sse.is_array_stream());
        assert_eq!(sse.with_alt_sse(), sse);
        let bare = resolve("/v1beta/models/g:streamGenerateContent", &u, &h).unwrap();
        assert!(
            bare.with_alt_sse()
                .path_and_query
                .ends_with(":streamGenerateContent?alt=sse")
        );
        assert!(
            !resolve("/v1beta/models/g:generateContent", &u, &h)
                .unwrap()
                .is_array_stream()
        );
        assert!(matches!(
            resolve("/u/ftp://x/v1/messages", &u, &h),
            Err(RouteError::BadUpstream(_))
        ));
    }
}
