//! Caches of one daemon that any process on the database invalidates
//! through PostgreSQL notifications: projections advanced and policies
//! stored (the read cache), tokens revoked (the token cache). They hear
//! them on the daemon's one listening connection ([`Listener`]).

use std::sync::Arc;

use memd_projectors::notifications::{Heard, Listener};

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

/// Subscribes `caches` to their channels on `listener`, and runs until the
/// listener stops: every cache forgets everything whenever the listener
/// (again) listens, since changes may have been missed while it was away.
/// `listening` turns true once the caches have been told the listener
/// listens: what they hold from then on is kept right by notifications.
pub fn subscribe(
    listener: &mut Listener,
    caches: Vec<Arc<dyn Invalidated>>,
    listening: tokio::sync::watch::Sender<bool>,
) -> impl Future<Output = ()> + Send + 'static {
    let channels: Vec<&'static str> = caches
        .iter()
        .flat_map(|cache| cache.channels().iter().copied())
        .collect();
    let mut heard = listener.subscribe(&channels);
    async move {
        while let Some(heard) = heard.recv().await {
            match heard {
                Heard::Notification { channel, payload } => {
                    for cache in caches.iter().filter(|c| c.channels().contains(&&*channel)) {
                        cache.heard(&channel, &payload);
                    }
                }
                Heard::Listening => {
                    caches.iter().for_each(|cache| cache.forget_all());
                    listening.send_replace(true);
                }
            }
        }
    }
}
