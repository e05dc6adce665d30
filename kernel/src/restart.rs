//! Restart intensity (OTP style) and capped exponential backoff with jitter. Pure: the
//! caller passes the clock.

use std::collections::VecDeque;
use std::time::Duration;

/// When to give up and how long to wait between restarts.
#[derive(Clone, Debug)]
pub struct RestartPolicy {
    /// More than `intensity` restarts within `period` → give up (crash loop).
    pub intensity: u32,
    pub period: Duration,
    pub base: Duration,
    pub max_delay: Duration,
    /// Uptime after which the backoff resets.
    pub stable_after: Duration,
    /// How long a crash loop waits before one more try.
    pub crash_loop_retry: Duration,
}

impl Default for RestartPolicy {
    fn default() -> Self {
        Self {
            intensity: 5,
            period: Duration::from_secs(60),
            base: Duration::from_millis(100),
            max_delay: Duration::from_secs(30),
            stable_after: Duration::from_secs(10),
            crash_loop_retry: Duration::from_secs(60),
        }
    }
}

#[derive(Debug, PartialEq, Eq)]
pub enum Decision {
    RestartAfter(Duration),
    GiveUp,
}

/// Restart history of one supervised child. Times are durations since any fixed origin.
#[derive(Debug, Default)]
pub struct RestartTracker {
    recent: VecDeque<Duration>,
    consecutive: u32,
}

impl RestartTracker {
    /// The child exited at `now` after running for `uptime`; `jitter` is in [0, 1).
    pub fn on_exit(
        &mut self,
        policy: &RestartPolicy,
        now: Duration,
        uptime: Duration,
        jitter: f64,
    ) -> Decision {
        if uptime >= policy.stable_after {
            self.consecutive = 0;
        }
        while self
            .recent
            .front()
            .is_some_and(|t| now.saturating_sub(*t) > policy.period)
        {
            self.recent.pop_front();
        }
        self.recent.push_back(now);
        if self.recent.len() as u32 > policy.intensity {
            return Decision::GiveUp;
        }
        let exp = self.consecutive.min(16);
        self.consecutive += 1;
        let delay = policy.base.saturating_mul(1 << exp).min(policy.max_delay);
        let jitter = jitter.clamp(0.0, 1.0);
        // Up to +25 % jitter, so many crashing children do not restart in lockstep.
        Decision::RestartAfter(delay.mul_f64(1.0 + 0.25 * jitter))
    }

    /// Forget history (a manual `connect`/`install` retries a crash loop at once).
    pub fn reset(&mut self) {
        self.recent.clear();
        self.consecutive = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn backoff_doubles_and_gives_up_past_intensity() {
        let p = RestartPolicy::default();
        let mut t = RestartTracker::default();
        assert_eq!(t.on_exit(&p, ms(0), ms(5), 0.0), Decision::RestartAfter(ms(100)));
        assert_eq!(t.on_exit(&p, ms(200), ms(5), 0.0), Decision::RestartAfter(ms(200)));
        assert_eq!(t.on_exit(&p, ms(500), ms(5), 0.0), Decision::RestartAfter(ms(400)));
        assert_eq!(t.on_exit(&p, ms(1000), ms(5), 0.0), Decision::RestartAfter(ms(800)));
        assert_eq!(t.on_exit(&p, ms(2000), ms(5), 0.0), Decision::RestartAfter(ms(1600)));
        assert_eq!(t.on_exit(&p, ms(4000), ms(5), 0.0), Decision::GiveUp);
    }

    #[test]
    fn backoff_resets_only_after_stable_uptime_and_window_slides() {
        let p = RestartPolicy::default();
        let mut t = RestartTracker::default();
        t.on_exit(&p, ms(0), ms(5), 0.0);
        t.on_exit(&p, ms(100), ms(5), 0.0);
        // Ran 9 s: not stable yet, keeps doubling.
        assert_eq!(t.on_exit(&p, ms(9_000), ms(9_000), 0.0), Decision::RestartAfter(ms(400)));
        // Ran 10 s: stable, back to base.
        assert_eq!(t.on_exit(&p, ms(20_000), ms(10_000), 0.0), Decision::RestartAfter(ms(100)));
        // Old exits fall out of the 60 s window.
        for i in 0..5 {
            assert_ne!(t.on_exit(&p, ms(200_000 + i * 70_000), ms(1), 0.0), Decision::GiveUp);
        }
    }

    #[test]
    fn delay_is_capped_and_jittered() {
        let p = RestartPolicy { intensity: 100, ..RestartPolicy::default() };
        let mut t = RestartTracker::default();
        let mut last = Decision::GiveUp;
        for i in 0..20 {
            last = t.on_exit(&p, ms(i * 100), ms(1), 0.5);
        }
        assert_eq!(last, Decision::RestartAfter(Duration::from_secs(30).mul_f64(1.125)));
    }
}
