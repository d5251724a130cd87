//! The request body of a provider route, collected as it arrives.
//!
//! axum's `Bytes` extractor keeps every chunk the connection hands it and copies them all
//! into one buffer once the last has come: for an agent's long session (megabytes resent
//! each turn) that is a copy of the whole body, into fresh memory, between the body's last
//! byte and the pipeline's first step, with the chunks' own buffers held until then. Here
//! each chunk is copied into a buffer sized from `content-length` as it comes (the copy
//! runs while the client is still sending) and let go at once.

use std::sync::Arc;

use axum::extract::{FromRequest, Request};
use axum::http::StatusCode;
use axum::http::header::CONTENT_LENGTH;
use axum::response::Response;
use bytes::{Bytes, BytesMut};
use futures::StreamExt as _;

use super::{AppState, error};

/// A provider request's whole body, at most the configured `max_body_bytes` (413 above,
/// counted after any `content-encoding` is undone).
#[derive(Debug, Clone)]
pub struct WholeBody(pub Bytes);

impl FromRequest<Arc<AppState>> for WholeBody {
    type Rejection = Response;

    async fn from_request(req: Request, app: &Arc<AppState>) -> Result<Self, Response> {
        collect(req, app.config.max_body_bytes).await.map(WholeBody)
    }
}

/// The body of `req`, refused past `limit` bytes.
async fn collect(req: Request, limit: usize) -> Result<Bytes, Response> {
    // A length a client announces sizes the buffer (never past the limit: a larger one is
    // refused when its bytes pass it); an encoded body's is not its decoded length, and the
    // decompression layer takes that header away.
    let announced = req
        .headers()
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok())
        .unwrap_or(0);
    let mut body = BytesMut::new();
    // A body that comes in one chunk (most small ones) is that chunk, not a copy of it.
    let mut only: Option<Bytes> = None;
    let mut chunks = req.into_body().into_data_stream();
    while let Some(chunk) = chunks.next().await {
        let chunk = chunk.map_err(|e| {
            error(
                StatusCode::BAD_REQUEST,
                "invalid_request_error",
                &format!("the request body could not be read: {e}"),
            )
        })?;
        let held = body.len() + only.as_ref().map_or(0, Bytes::len);
        if held.saturating_add(chunk.len()) > limit {
            return Err(error(
                StatusCode::PAYLOAD_TOO_LARGE,
                "request_too_large",
                &format!(
                    "the request body is larger than this proxy accepts ({limit} bytes, `max_body_bytes`)"
                ),
            ));
        }
        match only.take() {
            None if body.is_empty() => only = Some(chunk),
            first => {
                if body.capacity() == 0 {
                    body.reserve(announced.min(limit).max(chunk.len()));
                }
                if let Some(first) = first {
                    body.extend_from_slice(&first);
                }
                body.extend_from_slice(&chunk);
            }
        }
    }
    Ok(only.unwrap_or_else(|| body.freeze()))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use axum::body::Body;

    fn request(chunks: Vec<Result<Bytes, std::io::Error>>, announced: Option<usize>) -> Request {
        let mut builder = axum::http::Request::builder()
            .method("POST")
            .uri("/v1/messages");
        if let Some(n) = announced {
            builder = builder.header(CONTENT_LENGTH, n);
        }
        builder
            .body(Body::from_stream(futures::stream::iter(chunks)))
            .unwrap()
    }

    fn chunks_of(body: &[u8], size: usize) -> Vec<Result<Bytes, std::io::Error>> {
        body.chunks(size)
            .map(|c| Ok(Bytes::copy_from_slice(c)))
            .collect()
    }

    /// Chunks come together in order, with or without an announced length (and with a
    /// wrong one: the length only sizes the buffer).
    #[tokio::test]
    async fn a_body_in_many_chunks_is_collected_whole() {
        let body: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
        for announced in [Some(body.len()), None, Some(10), Some(1 << 30)] {
            let got = collect(request(chunks_of(&body, 7_000), announced), 1 << 20)
                .await
                .unwrap();
            assert_eq!(got, body, "announced {announced:?}");
        }
    }

    /// A body of one chunk is that chunk: the same bytes in memory, not a copy.
    #[tokio::test]
    async fn a_body_in_one_chunk_is_not_copied() {
        let chunk = Bytes::from(vec![7u8; 4096]);
        let got = collect(request(vec![Ok(chunk.clone())], Some(4096)), 1 << 20)
            .await
            .unwrap();
        assert_eq!(got.as_ptr(), chunk.as_ptr());
        assert_eq!(got, chunk);
        let empty = collect(request(Vec::new(), None), 1 << 20).await.unwrap();
        assert!(empty.is_empty());
    }

    /// Past the limit the answer is a 413 naming the setting, whether the excess comes in
    /// the first chunk or a later one; a body exactly at the limit is taken.
    #[tokio::test]
    async fn a_body_past_the_limit_is_refused_with_413() {
        let body = vec![b'x'; 10_000];
        for size in [10_000, 3_000] {
            let refused = collect(request(chunks_of(&body, size), None), 9_999)
                .await
                .unwrap_err();
            assert_eq!(refused.status(), StatusCode::PAYLOAD_TOO_LARGE);
            let text = axum::body::to_bytes(refused.into_body(), 1 << 16)
                .await
                .unwrap();
            assert!(String::from_utf8_lossy(&text).contains("max_body_bytes"));
        }
        let taken = collect(request(chunks_of(&body, 3_000), None), 10_000)
            .await
            .unwrap();
        assert_eq!(taken.len(), 10_000);
    }

    /// A connection that fails mid-body is a 400 that says so.
    #[tokio::test]
    async fn a_body_that_fails_to_arrive_is_a_400() {
        let chunks = vec![
            Ok(Bytes::from_static(b"{\"model\":")),
            Err(std::io::Error::other("connection reset")),
        ];
        let refused = collect(request(chunks, None), 1 << 20).await.unwrap_err();
        assert_eq!(refused.status(), StatusCode::BAD_REQUEST);
        let text = axum::body::to_bytes(refused.into_body(), 1 << 16)
            .await
            .unwrap();
        assert!(String::from_utf8_lossy(&text).contains("could not be read"));
    }
}
