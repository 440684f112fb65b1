//! Per-tenant request and byte rates, so one busy tenant cannot starve the
//! others sharing a daemon.
//!
//! Two token buckets per tenant, refilled continuously: one counts
//! requests, one counts request-body bytes. A request is admitted while its
//! tenant has a whole request token and a positive byte balance. Its body
//! is charged after it is read, and may push the byte balance below zero
//! (one body larger than the bucket still goes through); the tenant's next
//! requests then wait until the balance refills. Refusals are 429 with
//! `Retry-After` in whole seconds.
//!
//! Buckets live in the daemon's memory: with several daemons on one
//! database each enforces the limits on its own share of the traffic.

use std::{
    collections::HashMap,
    sync::Mutex,
    time::{Duration, Instant},
};

/// Sustained rates and bursts; a rate of 0 turns that limit off.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RateLimits {
    pub requests_per_second: f64,
    pub request_burst: f64,
    pub bytes_per_second: f64,
    pub byte_burst: f64,
}

impl RateLimits {
    pub const UNLIMITED: Self = Self {
        requests_per_second: 0.0,
        request_burst: 0.0,
        bytes_per_second: 0.0,
        byte_burst: 0.0,
    };

    /// Bursts of twice the sustained rate.
    pub fn new(requests_per_second: f64, bytes_per_second: f64) -> Self {
        Self {
            requests_per_second,
            request_burst: (2.0 * requests_per_second).max(1.0),
            bytes_per_second,
            byte_burst: 2.0 * bytes_per_second,
        }
    }
}

impl Default for RateLimits {
    /// 1,000 requests/s and 16 MiB/s per tenant.
    fn default() -> Self {
        Self::new(1_000.0, 16.0 * 1024.0 * 1024.0)
    }
}

#[derive(Debug, Clone, Copy)]
struct Bucket {
    requests: f64,
    bytes: f64,
    refilled_at: Instant,
}

pub struct RateLimiter {
    limits: RateLimits,
    buckets: Mutex<HashMap<String, Bucket>>,
}

impl RateLimiter {
    pub fn new(limits: RateLimits) -> Self {
        Self {
            limits,
            buckets: Mutex::default(),
        }
    }

    /// Takes one request token from the tenant, or says how long to wait.
    pub fn admit(&self, tenant: &str, now: Instant) -> Result<(), Duration> {
        let limits = self.limits;
        self.with_bucket(tenant, now, |bucket| {
            let mut wait = Duration::ZERO;
            if limits.requests_per_second > 0.0 && bucket.requests < 1.0 {
                wait = wait.max(Duration::from_secs_f64(
                    (1.0 - bucket.requests) / limits.requests_per_second,
                ));
            }
            if limits.bytes_per_second > 0.0 && bucket.bytes <= 0.0 {
                // Until the balance is positive again (plus a byte, so a
                // client retrying exactly then is admitted).
                wait = wait.max(Duration::from_secs_f64(
                    (1.0 - bucket.bytes) / limits.bytes_per_second,
                ));
            }
            if wait > Duration::ZERO {
                return Err(wait);
            }
            bucket.requests -= 1.0;
            Ok(())
        })
    }

    /// Charges a body the tenant sent; never refuses (see the module doc).
    pub fn charge_bytes(&self, tenant: &str, bytes: usize, now: Instant) {
        self.with_bucket(tenant, now, |bucket| bucket.bytes -= bytes as f64);
    }

    fn with_bucket<T>(&self, tenant: &str, now: Instant, f: impl FnOnce(&mut Bucket) -> T) -> T {
        let limits = self.limits;
        let mut buckets = self.buckets.lock().expect("rate limiter lock");
        let bucket = buckets.entry(tenant.to_owned()).or_insert(Bucket {
            requests: limits.request_burst,
            bytes: limits.byte_burst,
            refilled_at: now,
        });
        let elapsed = now
            .saturating_duration_since(bucket.refilled_at)
            .as_secs_f64();
        bucket.requests =
            (bucket.requests + elapsed * limits.requests_per_second).min(limits.request_burst);
        bucket.bytes = (bucket.bytes + elapsed * limits.bytes_per_second).min(limits.byte_burst);
        bucket.refilled_at = bucket.refilled_at.max(now);
        f(bucket)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECOND: Duration = Duration::from_secs(1);

    #[test]
    fn a_burst_passes_then_requests_wait_for_the_refill() {
        let limiter = RateLimiter::new(RateLimits::new(5.0, 0.0));
        let start = Instant::now();
        for _ in 0..10 {
            limiter.admit("acme", start).unwrap();
        }
        let wait = limiter.admit("acme", start).unwrap_err();
        assert!((wait.as_secs_f64() - 0.2).abs() < 1e-9, "{wait:?}");
        limiter
            .admit("globex", start)
            .expect("tenants have their own buckets");
        limiter.admit("acme", start + wait).unwrap();
        assert!(limiter.admit("acme", start + wait).is_err());
        // A long pause refills up to the burst, not beyond.
        let later = start + 60 * SECOND;
        for _ in 0..10 {
            limiter.admit("acme", later).unwrap();
        }
        assert!(limiter.admit("acme", later).is_err());
    }

    #[test]
    fn a_large_body_goes_through_and_the_next_request_waits_for_its_bytes() {
        let limiter = RateLimiter::new(RateLimits::new(0.0, 1_000.0));
        let start = Instant::now();
        limiter.admit("acme", start).unwrap();
        limiter.charge_bytes("acme", 5_000, start);
        // Balance 2000 - 5000 = -3000: back above zero after 3.001 s.
        let wait = limiter.admit("acme", start).unwrap_err();
        assert!((wait.as_secs_f64() - 3.001).abs() < 1e-9, "{wait:?}");
        assert!(limiter.admit("acme", start + 3 * SECOND).is_err());
        limiter.admit("acme", start + wait).unwrap();
    }

    #[test]
    fn unlimited_never_refuses() {
        let limiter = RateLimiter::new(RateLimits::UNLIMITED);
        let now = Instant::now();
        for _ in 0..10_000 {
            limiter.admit("acme", now).unwrap();
            limiter.charge_bytes("acme", 1 << 20, now);
        }
    }
}
