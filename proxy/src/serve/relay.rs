//! The answer side of a provider request: relay the upstream answer to the client, capture
//! its usage, learn from context-overflow errors, and — when the proxy's tools were injected
//! — run the model's calls to them and re-request until the model answers the client
//! (`summarizer.model_tool`).
//!
//! Without injected tools the upstream bytes go to the client exactly as they arrive and are
//! parsed on the side for usage only. With them, SSE streams are parsed, filtered (proxy
//! calls hidden) and stitched across rounds (see [`super::stitch`]); JSON answers are
//! buffered, and the client gets the last round's body with the proxy calls removed and the
//! earlier rounds' visible content in front (see [`super::merge`]). Gemini streams get no
//! keep-alive comments: its clients parse every SSE line as JSON.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::response::Response;
use bytes::Bytes;
use foldwire_core::{Conversation, SessionId, Wire};
use foldwire_wire::dialect::{RoundAnswer, WireDialect};
use foldwire_wire::stream::{
    HiddenCall, ParsedEvent, StreamEvent, StreamFilter, StreamParser, parse_response,
};
use futures::StreamExt as _;
use serde_json::Value;
use tokio::sync::mpsc;

use super::AppState;
use super::array_stream::ArrayFramer;
use super::calls;
use super::error;
use super::headers;
use super::merge;
use super::route::Route;
use super::stitch::Stitcher;
use super::tools;
use super::usage;

/// The SSE comment sent while the proxy works between rounds.
pub const KEEPALIVE: &[u8] = b": keep-alive\n\n";

/// Told to the model with the results of the round before the last one allowed.
const LAST_ROUND_NOTE: &str = "[foldwire] Context tools are done for this turn: continue the \
task now without calling compress, restore or search_context.";

/// Largest non-streamed answer buffered for the compress loop or an error inspected for
/// overflow; larger bodies are relayed untouched.
const MAX_BUFFERED: usize = 32 * 1024 * 1024;

/// One client request on its way upstream and back.
pub struct Exchange {
    /// Shared state.
    pub app: Arc<AppState>,
    /// Where it goes.
    pub route: Route,
    /// The HTTP method.
    pub method: Method,
    /// The client's headers.
    pub headers: HeaderMap,
    /// The wire and session, when the request was processed.
    pub session: Option<(Wire, SessionId)>,
    /// foldwire's estimate of the forwarded request's tokens.
    pub estimated: u64,
    /// The compress loop's state, when the proxy's tools were injected.
    pub looped: Option<LoopState>,
}

/// What the compress loop needs.
pub struct LoopState {
    /// The forwarded request (rounds are appended to it; it is read as JSON only when the
    /// model calls a proxy tool).
    pub body: Bytes,
    /// The conversation the turn produced, refs minted (compress checks refs against it).
    pub view: Option<Arc<Conversation>>,
    /// The client asked for Gemini's JSON-array stream; upstream was asked for SSE and the
    /// client's stream is re-framed (see [`super::array_stream`]).
    pub array_stream: bool,
}

/// Sends `body` upstream and answers the client.
pub async fn respond(mut ex: Exchange, body: Bytes) -> Response {
    let upstream = match send(&ex, body).await {
        Ok(r) => r,
        Err(resp) => return *resp,
    };
    let status = upstream.status();
    let headers = headers::response_headers(upstream.headers());
    if !status.is_success() {
        return relay_error(&ex, upstream, headers).await;
    }
    let content_type = upstream
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    let encoded = upstream.headers().contains_key("content-encoding");
    let sse = content_type.contains("text/event-stream");
    let Some((wire, _)) = ex.session.clone() else {
        return build(status, headers, Body::from_stream(upstream.bytes_stream()));
    };
    if encoded {
        ex.looped = None;
    }
    match (sse, ex.looped.is_some()) {
        (true, true) => {
            let mut headers = headers;
            let framer = ex.looped.as_ref().is_some_and(|l| l.array_stream).then(|| {
                headers.insert(
                    header::CONTENT_TYPE,
                    HeaderValue::from_static("application/json; charset=UTF-8"),
                );
                ArrayFramer::default()
            });
            let (tx, rx) = mpsc::channel::<Result<Bytes, std::io::Error>>(64);
            tokio::spawn(stream_rounds(ex, wire, upstream, tx));
            build(
                status,
                headers,
                Body::from_stream(client_stream(rx, framer)),
            )
        }
        (false, true) if !content_type.contains("stream") => {
            json_rounds(ex, wire, upstream, status, headers).await
        }
        _ if encoded => build(status, headers, Body::from_stream(upstream.bytes_stream())),
        _ => {
            let framed = sse || wire.dialect().streams_by_path(&ex.route.path_and_query);
            tap(ex, wire, framed, upstream, status, headers)
        }
    }
}

/// The client's side of a streamed loop: the stitched SSE as it comes, or re-framed as a
/// JSON array when the client asked for one.
fn client_stream(
    rx: mpsc::Receiver<Result<Bytes, std::io::Error>>,
    framer: Option<ArrayFramer>,
) -> impl futures::Stream<Item = Result<Bytes, std::io::Error>> {
    futures::stream::unfold(Some((rx, framer)), |state| async move {
        let (mut rx, mut framer) = state?;
        match (rx.recv().await, framer.as_mut()) {
            (Some(Ok(chunk)), Some(f)) => Some((Ok(f.push(&chunk)), Some((rx, framer)))),
            (Some(item), _) => Some((item, Some((rx, framer)))),
            (None, Some(f)) => Some((Ok(f.finish()), None)),
            (None, None) => None,
        }
    })
}

/// Sends one upstream request.
async fn send(ex: &Exchange, body: Bytes) -> Result<reqwest::Response, Box<Response>> {
    let url = format!("{}{}", ex.route.upstream, ex.route.path_and_query);
    // In the loop the proxy must read the answer, so it asks for it uncompressed.
    let drop_encoding = ex.looped.is_some();
    let mut request = ex.app.client.request(ex.method.clone(), &url).body(body);
    for (name, value) in &ex.headers {
        if headers::passes_upstream(name, &ex.headers)
            && !(drop_encoding && name == "accept-encoding")
        {
            request = request.header(name, value);
        }
    }
    request.send().await.map_err(|e| {
        ex.app.metrics.upstream_error();
        Box::new(error(
            StatusCode::BAD_GATEWAY,
            "upstream_unreachable",
            &format!("cannot reach {url}: {e}"),
        ))
    })
}

fn build(status: StatusCode, headers: HeaderMap, body: Body) -> Response {
    let mut response = Response::new(body);
    *response.status_mut() = status;
    *response.headers_mut() = headers;
    response
}

/// An upstream error: relayed verbatim; a context overflow teaches the session its window.
async fn relay_error(ex: &Exchange, upstream: reqwest::Response, headers: HeaderMap) -> Response {
    let status = upstream.status();
    let small = upstream
        .content_length()
        .is_none_or(|n| n <= MAX_BUFFERED as u64);
    if !small || upstream.headers().contains_key("content-encoding") {
        return build(status, headers, Body::from_stream(upstream.bytes_stream()));
    }
    let bytes = match upstream.bytes().await {
        Ok(b) => b,
        Err(e) => {
            return error(
                StatusCode::BAD_GATEWAY,
                "bad_upstream_response",
                &e.to_string(),
            );
        }
    };
    if let Some((wire, session)) = &ex.session
        && let Some(window) = usage::overflow_window(*wire, status.as_u16(), &bytes, ex.estimated)
    {
        learn(&ex.app, session, window).await;
    }
    build(status, headers, Body::from(bytes))
}

/// Stores a learned window in the session state and the in-memory cache.
async fn learn(app: &AppState, session: &SessionId, window: u64) {
    let learned = app
        .engine
        .update(session, move |state: &mut foldwire_core::SessionState| {
            usage::learn_window(state, window)
        })
        .await;
    match learned.ok() {
        Some(w) => {
            tracing::info!(session = %session, window = w, "Learned the session's context window from an overflow error.");
            app.windows.insert(session.clone(), Some(w));
        }
        None => tracing::warn!(session = %session, "Could not store the learned window."),
    }
}

/// Records the usage a round reported against foldwire's estimate, off the client's path:
/// the answer does not wait for the state write (a durable one: an fsync on a directory,
/// a PUT on S3), which the session's actor applies in its turn, retrying a lost race like
/// any other update.
fn record_usage(ex: &Exchange, wire: Wire, events: &[StreamEvent]) {
    if let Some(reported) = usage::last_usage(events).and_then(|u| usage::prompt_tokens(wire, &u)) {
        record_sample(ex, reported);
    }
}

/// Records the provider's count of the forwarded request against foldwire's estimate of it,
/// off the client's path (see [`record_usage`]).
fn record_sample(ex: &Exchange, reported: u64) {
    let Some((_, session)) = &ex.session else {
        return;
    };
    let estimated = ex.estimated;
    let keep = ex.app.config.usage_samples;
    let (app, session) = (Arc::clone(&ex.app), session.clone());
    tokio::spawn(async move {
        let stored = app
            .engine
            .update(&session, move |state: &mut foldwire_core::SessionState| {
                usage::record(state, estimated, reported, keep)
            })
            .await;
        if let Err(e) = stored {
            tracing::warn!(session = %session, error = %e, "Could not record usage.");
        }
    });
}

/// No loop: the bytes go to the client as they arrive, parsed on the side for usage (a
/// stream event by event, a JSON body once whole).
fn tap(
    ex: Exchange,
    wire: Wire,
    framed: bool,
    upstream: reqwest::Response,
    status: StatusCode,
    headers: HeaderMap,
) -> Response {
    let (tx, rx) = mpsc::channel::<Result<Bytes, std::io::Error>>(64);
    tokio::spawn(async move {
        let mut stream = upstream.bytes_stream();
        let mut parser = framed.then(|| StreamParser::new(wire));
        let mut whole: Option<Vec<u8>> = (!framed).then(Vec::new);
        let mut usage_events = Vec::new();
        while let Some(chunk) = stream.next().await {
            let chunk = match chunk {
                Ok(c) => c,
                Err(e) => {
                    let _ = tx.send(Err(std::io::Error::other(e))).await;
                    return;
                }
            };
            if let Some(p) = parser.as_mut() {
                match p.feed(&chunk) {
                    Ok(events) => usage_events.extend(usage_of(&events)),
                    Err(_) => {
                        // Not a stream: maybe one JSON body; keep it (bounded) to read its usage.
                        parser = None;
                        whole = Some(Vec::new());
                    }
                }
            }
            if let Some(w) = whole.as_mut().filter(|w| w.len() < MAX_BUFFERED) {
                w.extend_from_slice(&chunk);
            }
            if tx.send(Ok(chunk)).await.is_err() {
                return;
            }
        }
        drop(tx);
        if let Some(p) = parser
            && let Ok(events) = p.finish()
        {
            usage_events.extend(usage_of(&events));
        }
        if ex.route.counts {
            // A token count: its answer is the provider's count of what was forwarded.
            let counted = whole
                .and_then(|w| serde_json::from_slice::<serde_json::Value>(&w).ok())
                .and_then(|answer| wire.dialect().counted_tokens(&answer));
            if let Some(reported) = counted {
                record_sample(&ex, reported);
            }
            return;
        }
        if let Some(w) = whole
            && let Ok(events) = parse_response(wire, &w)
        {
            usage_events.extend(events);
        }
        record_usage(&ex, wire, &usage_events);
    });
    let body = futures::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|item| (item, rx))
    });
    build(status, headers, Body::from_stream(body))
}

fn usage_of(events: &[ParsedEvent]) -> impl Iterator<Item = StreamEvent> + '_ {
    events
        .iter()
        .flat_map(|e| e.events.iter())
        .filter(|e| matches!(e, StreamEvent::Usage(_)))
        .cloned()
}

/// What one round showed.
#[derive(Default)]
struct RoundSeen {
    text: String,
    /// The answer's events (or body) that may hold what the next round sends back of it;
    /// read only when a round follows.
    answer: Vec<String>,
    client_calls: bool,
    events: Vec<StreamEvent>,
}

impl RoundSeen {
    /// Keeps one streamed event's payload, or a whole answer body, if it may hold part of
    /// what a following round sends back.
    fn see_payload(&mut self, wire: Wire, payload: &str) {
        if RoundAnswer::may_hold(wire, payload) {
            self.answer.push(payload.to_owned());
        }
    }

    fn see(&mut self, events: &[StreamEvent]) {
        for e in events {
            match e {
                StreamEvent::TextDelta { text, .. } => self.text.push_str(text),
                StreamEvent::ToolCallStart { name, .. }
                    if !tools::names().contains(&name.as_str()) =>
                {
                    self.client_calls = true;
                }
                _ => {}
            }
            if matches!(e, StreamEvent::Usage(_)) {
                self.events.push(e.clone());
            }
        }
    }
}

/// Whether the loop goes on after a round.
fn goes_on(ex: &Exchange, round: usize, seen: &RoundSeen, hidden: &[HiddenCall]) -> bool {
    !hidden.is_empty()
        && hidden.iter().all(|c| c.complete)
        && !seen.client_calls
        && round + 1 < ex.app.config.max_rounds
}

/// Runs the round's proxy calls and sends the next round upstream.
async fn next_round(
    ex: &mut Exchange,
    wire: Wire,
    round: usize,
    seen: &RoundSeen,
    hidden: &[HiddenCall],
) -> Option<reqwest::Response> {
    let (_, session) = ex.session.clone()?;
    let mut results = Vec::with_capacity(hidden.len());
    for call in hidden {
        let view = ex.looped.as_ref().and_then(|l| l.view.as_ref());
        results.push(calls::run(&ex.app.engine, &session, view, call).await);
        ex.app.metrics.proxy_call();
    }
    if round + 2 >= ex.app.config.max_rounds
        && let Some(last) = results.last_mut()
    {
        last.text.push_str("\n\n");
        last.text.push_str(LAST_ROUND_NOTE);
    }
    let prior = ex.looped.as_ref()?.body.clone();
    let answer = RoundAnswer::from_payloads(wire, seen.answer.iter().map(String::as_str));
    let mut body = calls::append_round(wire, &prior, &answer, &seen.text, hidden, &results)?;
    let mut upstream = send(ex, body.clone()).await.ok()?;
    if upstream.status() == StatusCode::BAD_REQUEST && answer.whole {
        // The provider refused some part of its own answer as input: the round once more
        // in its minimal form, rather than a turn cut short.
        tracing::warn!(
            "A compress-loop round with the model's answer as it came was refused upstream; sending it again with only the text, the calls and the reasoning the wire requires."
        );
        let minimal = answer.minimal();
        body = calls::append_round(wire, &prior, &minimal, &seen.text, hidden, &results)?;
        upstream = send(ex, body.clone()).await.ok()?;
    }
    if let Some(looped) = ex.looped.as_mut() {
        looped.body = body;
    }
    if upstream.status().is_success() {
        Some(upstream)
    } else {
        tracing::warn!(status = %upstream.status(), "A compress-loop round was refused upstream; finishing the turn.");
        None
    }
}

/// When the loop ends on client tool calls, the proxy calls beside them still take effect
/// (the model asked for them); their results are not needed by anyone.
async fn apply_only(ex: &Exchange, seen: &RoundSeen, hidden: &[HiddenCall]) {
    let Some((_, session)) = &ex.session else {
        return;
    };
    if !seen.client_calls {
        return;
    }
    for call in hidden.iter().filter(|c| c.complete) {
        let view = ex.looped.as_ref().and_then(|l| l.view.as_ref());
        let result = calls::run(&ex.app.engine, session, view, call).await;
        tracing::debug!(session = %session, tool = %call.name, result = %result.text, "Proxy call applied beside client calls.");
        ex.app.metrics.proxy_call();
    }
}

/// Runs `work` while sending SSE keep-alive comments every `every`.
async fn with_keepalive<F: std::future::Future>(
    work: F,
    tx: &mpsc::Sender<Result<Bytes, std::io::Error>>,
    every: Duration,
) -> F::Output {
    let _ = tx.send(Ok(Bytes::from_static(KEEPALIVE))).await;
    tokio::pin!(work);
    let mut tick = tokio::time::interval(every.max(Duration::from_millis(100)));
    tick.tick().await;
    loop {
        tokio::select! {
            out = &mut work => return out,
            _ = tick.tick() => {
                let _ = tx.send(Ok(Bytes::from_static(KEEPALIVE))).await;
            }
        }
    }
}

/// The SSE loop: relay, hide, stitch, and re-request while the model only calls the proxy.
async fn stream_rounds(
    mut ex: Exchange,
    wire: Wire,
    first: reqwest::Response,
    tx: mpsc::Sender<Result<Bytes, std::io::Error>>,
) {
    let mut stitcher = Stitcher::new(wire);
    // Keep-alives go only where the client's framing takes them: SSE whose clients accept
    // comments, and the JSON array (where they become whitespace).
    let comments_allowed =
        wire.dialect().sse_comments() || ex.looped.as_ref().is_some_and(|l| l.array_stream);
    let mut upstream = first;
    let mut round = 0;
    loop {
        let mut parser = StreamParser::new(wire);
        let mut filter = StreamFilter::new(wire, tools::names().iter().copied());
        let mut seen = RoundSeen::default();
        let mut pending: Vec<u8> = Vec::new();
        let mut consumed = 0usize;
        let mut raw_mode = false;
        let mut stream = upstream.bytes_stream();
        while let Some(chunk) = stream.next().await {
            let chunk = match chunk {
                Ok(c) => c,
                Err(e) => {
                    let _ = tx.send(Err(std::io::Error::other(e))).await;
                    return;
                }
            };
            if raw_mode {
                if tx.send(Ok(chunk)).await.is_err() {
                    return;
                }
                continue;
            }
            pending.extend_from_slice(&chunk);
            match parser.feed(&chunk) {
                Ok(events) => {
                    for ev in events {
                        consumed = consumed.max(ev.raw.len() + offset_in_round(&ev));
                        if !emit(wire, &mut filter, &mut stitcher, &mut seen, &ev, &tx).await {
                            return;
                        }
                    }
                }
                Err(e) => {
                    // Unparseable: everything not yet sent goes out as received.
                    tracing::warn!(error = %e, "Upstream stream did not parse; relaying it raw.");
                    raw_mode = true;
                    if !send_held(&mut filter, &mut stitcher, &tx).await {
                        return;
                    }
                    let rest = Bytes::copy_from_slice(pending.get(consumed..).unwrap_or_default());
                    if tx.send(Ok(rest)).await.is_err() {
                        return;
                    }
                }
            }
        }
        if raw_mode {
            return;
        }
        if let Ok(events) = parser.finish() {
            for ev in events {
                if !emit(wire, &mut filter, &mut stitcher, &mut seen, &ev, &tx).await {
                    return;
                }
            }
        }
        if !send_held(&mut filter, &mut stitcher, &tx).await {
            return;
        }
        if round == 0 {
            record_usage(&ex, wire, &seen.events);
        }
        let hidden = filter.finish();
        if goes_on(&ex, round, &seen, &hidden) {
            let every = Duration::from_secs(ex.app.config.keepalive_secs);
            let work = next_round(&mut ex, wire, round, &seen, &hidden);
            let next = if comments_allowed {
                with_keepalive(work, &tx, every).await
            } else {
                work.await
            };
            if let Some(next) = next {
                for frame in stitcher.next_round() {
                    if tx.send(Ok(frame)).await.is_err() {
                        return;
                    }
                }
                upstream = next;
                round += 1;
                continue;
            }
        }
        apply_only(&ex, &seen, &hidden).await;
        let all_hidden = !hidden.is_empty() && !seen.client_calls;
        for frame in stitcher.finish(all_hidden) {
            if tx.send(Ok(frame)).await.is_err() {
                return;
            }
        }
        ex.app.metrics.rounds(round as u64 + 1);
        if wire.dialect().chain_key().is_some()
            && let Some((shown, last)) = stitcher.answered_for()
        {
            ex.app.chained_ids.record(shown, last);
        }
        return;
    }
}

/// Where an event starts inside its round's bytes.
fn offset_in_round(ev: &ParsedEvent) -> usize {
    usize::try_from(ev.offset).unwrap_or(usize::MAX)
}

/// Filters and stitches one event and sends what the client should see; false once the
/// client is gone.
async fn emit(
    wire: Wire,
    filter: &mut StreamFilter,
    stitcher: &mut Stitcher,
    seen: &mut RoundSeen,
    ev: &ParsedEvent,
    tx: &mpsc::Sender<Result<Bytes, std::io::Error>>,
) -> bool {
    seen.see(&ev.events);
    if let Some(data) = ev.data.as_deref() {
        seen.see_payload(wire, data);
    }
    let out = match filter.push(ev) {
        Ok(out) => out,
        Err(e) => {
            tracing::warn!(error = %e, "An upstream event could not be filtered; relaying it as received.");
            Some(ev.raw.clone())
        }
    };
    // Events the filter held back (a reasoning item) go first, when it lets them go.
    for (held, bytes) in filter.take_released() {
        if !send_stitched(stitcher, &held, bytes, tx).await {
            return false;
        }
    }
    match out {
        Some(bytes) => send_stitched(stitcher, ev, bytes, tx).await,
        None => true,
    }
}

/// Stitches one event's client bytes and sends what is due; false once the client is gone.
async fn send_stitched(
    stitcher: &mut Stitcher,
    ev: &ParsedEvent,
    bytes: Bytes,
    tx: &mpsc::Sender<Result<Bytes, std::io::Error>>,
) -> bool {
    match stitcher.push(ev, bytes) {
        Some(bytes) => tx.send(Ok(bytes)).await.is_ok(),
        None => true,
    }
}

/// Sends what the filter still holds at a stream's end; false once the client is gone.
async fn send_held(
    filter: &mut StreamFilter,
    stitcher: &mut Stitcher,
    tx: &mpsc::Sender<Result<Bytes, std::io::Error>>,
) -> bool {
    for (ev, bytes) in filter.flush() {
        if !send_stitched(stitcher, &ev, bytes, tx).await {
            return false;
        }
    }
    true
}

/// The JSON loop: buffer each answer, run its proxy calls, re-request; the client gets the
/// last body without proxy calls.
async fn json_rounds(
    mut ex: Exchange,
    wire: Wire,
    first: reqwest::Response,
    status: StatusCode,
    headers: HeaderMap,
) -> Response {
    let mut upstream = first;
    let mut round = 0;
    // What the client would have seen of the earlier rounds, in order.
    let mut earlier: Vec<Value> = Vec::new();
    loop {
        let bytes = match upstream.bytes().await {
            Ok(b) => b,
            Err(e) => {
                return error(
                    StatusCode::BAD_GATEWAY,
                    "bad_upstream_response",
                    &e.to_string(),
                );
            }
        };
        let Ok(events) = parse_response(wire, &bytes) else {
            return build(status, headers, Body::from(bytes));
        };
        let mut seen = RoundSeen::default();
        seen.see(&events);
        if round == 0 {
            record_usage(&ex, wire, &seen.events);
        }
        let hidden = hidden_calls(&events);
        let goes = goes_on(&ex, round, &seen, &hidden);
        // The body is kept for the next round only when one follows.
        if goes && let Ok(body) = std::str::from_utf8(&bytes) {
            seen.see_payload(wire, body);
        }
        if goes && let Some(next) = next_round(&mut ex, wire, round, &seen, &hidden).await {
            if let Ok(mut value) = serde_json::from_slice::<Value>(&bytes) {
                calls::strip_json(wire, &mut value);
                earlier.extend(merge::visible(wire, &value));
            }
            upstream = next;
            round += 1;
            continue;
        }
        ex.app.metrics.rounds(round as u64 + 1);
        apply_only(&ex, &seen, &hidden).await;
        if hidden.is_empty() && earlier.is_empty() {
            return build(status, headers, Body::from(bytes));
        }
        let Ok(mut value) = serde_json::from_slice::<Value>(&bytes) else {
            return build(status, headers, Body::from(bytes));
        };
        calls::strip_json(wire, &mut value);
        merge::prepend(wire, &mut value, earlier);
        let body = serde_json::to_vec(&value).map_or(bytes, Bytes::from);
        return build(status, headers, Body::from(body));
    }
}

/// The proxy calls among a whole answer's events.
fn hidden_calls(events: &[StreamEvent]) -> Vec<HiddenCall> {
    let mut calls: Vec<HiddenCall> = Vec::new();
    let mut open: Option<usize> = None;
    for e in events {
        match e {
            StreamEvent::ToolCallStart {
                index, id, name, ..
            } => {
                open = None;
                if tools::names().contains(&name.as_str()) {
                    calls.push(HiddenCall {
                        index: *index,
                        id: id.clone(),
                        name: name.clone(),
                        arguments: String::new(),
                        complete: true,
                    });
                    open = Some(calls.len() - 1);
                }
            }
            StreamEvent::ToolCallArgsDelta { index, json } => {
                if let Some(call) = open
                    .and_then(|i| calls.get_mut(i))
                    .filter(|c| c.index == *index)
                {
                    call.arguments.push_str(json);
                }
            }
            StreamEvent::ToolCallEnd { .. } => open = None,
            _ => {}
        }
    }
    for c in &mut calls {
        if c.arguments.trim().is_empty() {
            c.arguments = "{}".to_owned();
        }
        if c.id.is_empty() {
            c.id = format!("foldwire_{}", c.index);
        }
    }
    calls
}
