//! The accept loop: how many connections the proxy holds and how long a client may take.
//!
//! axum's own `serve` has neither a connection cap nor a header timeout, so a client that
//! opens connections and never finishes its headers holds them forever (300 half-open
//! connections were still held 35 s later). Here every connection takes a permit from a
//! semaphore (at the cap, new connections wait in the kernel's backlog until one closes), and
//! hyper's HTTP/1 header-read timeout runs from the moment the connection waits for a request
//! head: it bounds slow headers on a new connection and idle time between keep-alive requests
//! alike, never a response in progress.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::ConnectInfo;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto::Builder;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tower::ServiceExt as _;

/// Connection limits of the listener.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Connections held at once.
    pub max_connections: usize,
    /// Longest wait for a request's headers, from when the connection waits for one.
    pub header_timeout: Duration,
}

/// Serves `app` on `listener` until the task is dropped.
///
/// # Errors
/// None in practice: accept errors (out of file descriptors) are logged and retried.
pub async fn serve(listener: TcpListener, app: Router, limits: Limits) -> std::io::Result<()> {
    let permits = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    let mut builder = Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout);
    builder.http2().timer(TokioTimer::new());
    let builder = Arc::new(builder);
    loop {
        // The semaphore is never closed, so acquiring only waits.
        let Ok(permit) = Arc::clone(&permits).acquire_owned().await else {
            return Ok(());
        };
        let (tcp, peer) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(e) => {
                tracing::warn!(error = %e, "Could not accept a connection; retrying.");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        // Stream events are small writes; with Nagle's algorithm each one after the first
        // waits for the client's delayed ACK (~40 ms) before it leaves.
        if let Err(e) = tcp.set_nodelay(true) {
            tracing::debug!(error = %e, "Could not set TCP_NODELAY on a client connection.");
        }
        let app = app.clone();
        let builder = Arc::clone(&builder);
        tokio::spawn(async move {
            let service = TowerToHyperService::new(
                app.map_request(move |mut request: hyper::Request<Incoming>| {
                    request.extensions_mut().insert(ConnectInfo(peer));
                    request.map(Body::new)
                })
                .map_err(|never: Infallible| match never {}),
            );
            if let Err(e) = builder
                .serve_connection_with_upgrades(TokioIo::new(tcp), service)
                .await
            {
                tracing::debug!(peer = %peer, error = %e, "Connection ended with an error.");
            }
            drop(permit);
        });
    }
}
