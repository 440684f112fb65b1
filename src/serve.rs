//! The daemon's HTTP/1.1 server: hyper under axum's router, with the limits
//! a server facing slow or hostile clients needs and `axum::serve` does not
//! set. A client that trickles its headers, or keeps a connection open
//! without asking anything, is closed after `header_read_timeout` (hyper
//! starts that clock whenever a connection waits for a request, the first
//! or the next on a kept-alive one); one that trickles its body gets a 408
//! after `body_read_timeout` ([`crate::api`]'s body deadline); at most
//! `max_connections` are served at once (further ones wait in the kernel's
//! backlog, so silent clients cannot take every file descriptor); and a
//! graceful stop waits at most `shutdown_deadline` for requests in flight.

use std::{future::Future, sync::Arc, time::Duration};

use hyper_util::{
    rt::{TokioIo, TokioTimer},
    server::graceful::GracefulShutdown,
    service::TowerToHyperService,
};
use tokio::{net::TcpListener, sync::Semaphore};

/// How the server treats clients (`memd serve` flags of the same names).
#[derive(Debug, Clone, Copy)]
pub struct HttpLimits {
    /// From when a connection waits for a request to when its headers are
    /// in: a slow or idle client is closed after it.
    pub header_read_timeout: Duration,
    /// From a request's headers to the end of its body.
    pub body_read_timeout: Duration,
    /// Connections served at once.
    pub max_connections: usize,
    /// How long a stop waits for requests in flight before closing them.
    pub shutdown_deadline: Duration,
}

impl Default for HttpLimits {
    fn default() -> Self {
        Self {
            header_read_timeout: Duration::from_secs(10),
            body_read_timeout: Duration::from_secs(30),
            max_connections: default_max_connections(),
            shutdown_deadline: Duration::from_secs(30),
        }
    }
}

/// Connections to serve at once by default: what the process's open-file
/// limit leaves after database connections, files and the like (128), at
/// least 16 and at most 4,096.
pub fn default_max_connections() -> usize {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes the struct it is given, nothing else.
    let known = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } == 0;
    let open_files = if known {
        usize::try_from(limit.rlim_cur).unwrap_or(usize::MAX)
    } else {
        1_024
    };
    open_files.saturating_sub(128).clamp(16, 4_096)
}

/// Serves `router` on `listener` until `stop` completes, then stops
/// accepting and waits for connections to finish their requests, at most
/// `limits.shutdown_deadline`.
pub async fn serve(
    listener: TcpListener,
    router: axum::Router,
    limits: HttpLimits,
    stop: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout);
    let graceful = GracefulShutdown::new();
    let permits = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    let mut connections = tokio::task::JoinSet::new();
    tokio::pin!(stop);
    loop {
        while connections.try_join_next().is_some() {}
        let permit = tokio::select! {
            permit = permits.clone().acquire_owned() => permit.expect("the semaphore is never closed"),
            () = &mut stop => break,
        };
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(err) => {
                    // Out of file descriptors, or a connection reset before
                    // it was accepted: not the server's end.
                    tracing::warn!(error = %err, "accepting a connection failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut stop => break,
        };
        let _ = stream.set_nodelay(true);
        let service = TowerToHyperService::new(router.clone());
        let connection = graceful.watch(http.serve_connection(TokioIo::new(stream), service));
        connections.spawn(async move {
            if let Err(err) = connection.await {
                tracing::debug!(error = %err, "connection ended with an error");
            }
            drop(permit);
        });
    }
    drop(listener);
    if tokio::time::timeout(limits.shutdown_deadline, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!(
            deadline = ?limits.shutdown_deadline,
            open = connections.len(),
            "requests still in flight at the shutdown deadline: their connections are closed"
        );
        connections.abort_all();
    }
    Ok(())
}
