//! Caches of one daemon that any process on the database invalidates
//! through PostgreSQL notifications: projections advanced and policies
//! stored (the read cache), tokens revoked (the token cache). One
//! connection listens for all of them.

use std::{sync::Arc, time::Duration};

use memd_projectors::runtime::backoff;
use sqlx::{PgPool, postgres::PgListener};
use tokio::sync::watch;

/// A cache that notifications invalidate.
pub trait Invalidated: Send + Sync {
    /// The channels it listens on.
    fn channels(&self) -> &'static [&'static str];

    /// A notification on one of its channels.
    fn heard(&self, channel: &str, payload: &str);

    /// Notifications may have been missed (the listener was away): drop
    /// everything.
    fn forget_all(&self);
}

/// Listens for `caches`' channels until `stopped` turns true, reconnecting
/// with backoff; every cache forgets everything whenever the listener was
/// away, since changes may have been missed.
pub async fn listen(
    pool: PgPool,
    caches: Vec<Arc<dyn Invalidated>>,
    mut stopped: watch::Receiver<bool>,
) {
    let channels: Vec<&str> = caches
        .iter()
        .flat_map(|cache| cache.channels().iter().copied())
        .collect();
    let forget_all = || caches.iter().for_each(|cache| cache.forget_all());
    let mut retry = backoff();
    loop {
        let connected = async {
            let mut listener = PgListener::connect_with(&pool).await?;
            listener.listen_all(channels.iter().copied()).await?;
            Ok::<_, sqlx::Error>(listener)
        }
        .await;
        let mut listener = match connected {
            Ok(listener) => listener,
            Err(err) => {
                let delay = retry.next().unwrap_or(Duration::from_secs(5));
                tracing::warn!(error = %err, ?delay, "cache invalidation listener cannot connect");
                tokio::select! {
                    _ = stopped.changed() => return,
                    () = tokio::time::sleep(delay) => continue,
                }
            }
        };
        retry = backoff();
        forget_all();
        loop {
            tokio::select! {
                _ = stopped.changed() => return,
                received = listener.try_recv() => match received {
                    Ok(Some(notification)) => {
                        let channel = notification.channel();
                        for cache in caches.iter().filter(|c| c.channels().contains(&channel)) {
                            cache.heard(channel, notification.payload());
                        }
                    }
                    Ok(None) => forget_all(),
                    Err(err) => {
                        tracing::warn!(error = %err, "cache invalidation listener failed; reconnecting");
                        break;
                    }
                },
            }
        }
    }
}
