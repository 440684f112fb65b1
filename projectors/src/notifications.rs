//! One LISTEN connection for everything in a process that waits on
//! PostgreSQL notifications.
//!
//! PostgreSQL signals every listening session of the database at each
//! NOTIFY's commit, whatever channels they listen on, and each session then
//! reads the notification queue to filter it. Every append notifies, so
//! each extra listening session costs every append a signal, a wakeup and a
//! queue read: a daemon whose projection workers, embeddings worker, caches
//! and admin job worker each listened paid that four times. A [`Listener`]
//! listens once on the union of its subscribers' channels and hands each
//! notification to the subscribers of its channel.

use std::time::Duration;

use sqlx::{PgPool, postgres::PgListener};
use tokio::{
    sync::{mpsc, watch},
    task::JoinHandle,
};

use crate::runtime::backoff;

/// What a subscriber hears.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Heard {
    /// A notification on one of the subscriber's channels.
    Notification { channel: String, payload: String },
    /// The listener has just (re)connected and listens again: notifications
    /// sent while it was away (or before it first connected) are lost, so
    /// whatever they would have announced must be looked for.
    Listening,
}

/// Subscriptions to gather before [`Listener::spawn`] listens for them.
#[derive(Default)]
pub struct Listener {
    subscribers: Vec<Subscriber>,
}

struct Subscriber {
    channels: Vec<&'static str>,
    heard: mpsc::UnboundedSender<Heard>,
}

impl Listener {
    /// What will be heard on `channels`. Unbounded: subscribers only hand
    /// each notification on (to a queue, a cache), and at most one arrives
    /// per committed transaction.
    pub fn subscribe(&mut self, channels: &[&'static str]) -> mpsc::UnboundedReceiver<Heard> {
        let (heard, receiver) = mpsc::unbounded_channel();
        self.subscribers.push(Subscriber {
            channels: channels.to_vec(),
            heard,
        });
        receiver
    }

    /// Listens until `stopped` turns true (or it finds every subscriber
    /// gone), reconnecting with backoff; each subscriber hears
    /// [`Heard::Listening`] whenever the connection (again) listens.
    pub fn spawn(self, pool: PgPool, stopped: watch::Receiver<bool>) -> JoinHandle<()> {
        tokio::spawn(self.run(pool, stopped))
    }

    async fn run(mut self, pool: PgPool, mut stopped: watch::Receiver<bool>) {
        let mut channels: Vec<&str> = self
            .subscribers
            .iter()
            .flat_map(|s| s.channels.iter().copied())
            .collect();
        channels.sort_unstable();
        channels.dedup();
        if channels.is_empty() {
            return;
        }
        let mut retry = backoff();
        loop {
            let connected = async {
                let mut listener = PgListener::connect_with(&pool).await?;
                listener.listen_all(channels.iter().copied()).await?;
                Ok::<_, sqlx::Error>(listener)
            };
            let mut listener = tokio::select! {
                _ = stopped.changed() => return,
                connected = connected => match connected {
                    Ok(listener) => listener,
                    Err(err) => {
                        let delay = retry.next().unwrap_or(Duration::from_secs(5));
                        tracing::warn!(error = %err, ?delay, "notification listener cannot connect");
                        tokio::select! {
                            _ = stopped.changed() => return,
                            () = tokio::time::sleep(delay) => continue,
                        }
                    }
                },
            };
            retry = backoff();
            if !self.tell(|_| true, Heard::Listening) {
                return;
            }
            loop {
                tokio::select! {
                    _ = stopped.changed() => return,
                    received = listener.try_recv() => match received {
                        Ok(Some(notification)) => {
                            let channel = notification.channel();
                            let heard = Heard::Notification {
                                channel: channel.to_owned(),
                                payload: notification.payload().to_owned(),
                            };
                            if !self.tell(|s| s.channels.contains(&channel), heard) {
                                return;
                            }
                        }
                        // The connection was lost. Listen again on a new one
                        // before telling anyone, so nothing sent after the
                        // news goes unheard.
                        Ok(None) => {
                            tracing::warn!("notification listener lost its connection; reconnecting");
                            break;
                        }
                        Err(err) => {
                            tracing::warn!(error = %err, "notification listener failed; reconnecting");
                            break;
                        }
                    },
                }
            }
        }
    }

    /// Sends `heard` to the subscribers `to` picks, forgetting those that
    /// went away; false once none is left.
    fn tell(&mut self, to: impl Fn(&Subscriber) -> bool, heard: Heard) -> bool {
        self.subscribers
            .retain(|s| !to(s) || s.heard.send(heard.clone()).is_ok());
        !self.subscribers.is_empty()
    }
}
