//! When an OAuth access token is renewed: once 10 % of its lifetime is left, at least 5 s and
//! at most 5 minutes before it expires. The kernel (which refreshes at the authorization
//! server) and the worker (which asks the kernel for a fresh token before using one about to
//! expire) both decide with [`refresh_margin_ms`], so a worker's request for a renewal is
//! never answered with the token it already has.
//!
//! The lifetime is the token's `expires_in` as the kernel received it; a worker takes the time
//! from receiving a token to its expiry (never longer, so its margin is never larger than the
//! kernel's).

/// The least time before expiry at which a token is renewed.
pub const MIN_MARGIN_MS: i64 = 5_000;
/// The most time before expiry at which a token is renewed.
pub const MAX_MARGIN_MS: i64 = 5 * 60_000;

/// How long before expiry a token of `lifetime_ms` is renewed: 10 % of the lifetime, clamped
/// to [[`MIN_MARGIN_MS`], [`MAX_MARGIN_MS`]]. An unknown lifetime (0 or less) gets the least.
pub fn refresh_margin_ms(lifetime_ms: i64) -> i64 {
    (lifetime_ms.max(0) / 10).clamp(MIN_MARGIN_MS, MAX_MARGIN_MS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_margin_is_a_tenth_of_the_lifetime_between_five_seconds_and_five_minutes() {
        for (lifetime_s, margin_s) in [
            (0, 5),
            (-3, 5),
            (1, 5),
            (20, 5),
            (50, 5),
            (60, 6),
            (10 * 60, 60),
            (30 * 60, 180),
            (50 * 60, 300),
            (60 * 60, 300),
            (24 * 60 * 60, 300),
        ] {
            assert_eq!(
                refresh_margin_ms(lifetime_s * 1000),
                margin_s * 1000,
                "lifetime {lifetime_s} s"
            );
        }
        assert_eq!(refresh_margin_ms(i64::MAX), MAX_MARGIN_MS);
    }
}
