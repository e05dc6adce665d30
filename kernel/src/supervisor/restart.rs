//! Restart intensity (OTP style) and capped exponential backoff with jitter. Pure: the
//! caller passes the clock.

use std::collections::VecDeque;
use std::time::Duration;

/// When to give up and how long to wait between restarts.
///
/// Two kinds of exit are told apart. A child that exits before it ever became ready (for a
/// worker: before its tool set was committed) failed to start: those exits double the
/// backoff and count toward `intensity`. A child that became ready proved that its start
/// path works, so its exit (a crash in service, or a kill from outside) is restarted
/// promptly with the base delay; unless it had run for `stable_after`, it counts toward the
/// wider `flap_intensity`, so an upstream that dies shortly after every start still ends in
/// a crash loop, only later.
#[derive(Clone, Debug)]
pub struct RestartPolicy {
    /// More than `intensity` failed starts within `period` → give up (crash loop).
    pub intensity: u32,
    /// More than `flap_intensity` exits of ready children that had run less than
    /// `stable_after`, within `period` → give up (crash loop).
    pub flap_intensity: u32,
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
            flap_intensity: 30,
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
    failed_starts: VecDeque<Duration>,
    flaps: VecDeque<Duration>,
    consecutive: u32,
}

impl RestartTracker {
    /// The child exited at `now` after running for `uptime`; `was_ready` says whether it
    /// had become ready (see [`RestartPolicy`]); `jitter` is in [0, 1).
    pub fn on_exit(
        &mut self,
        policy: &RestartPolicy,
        now: Duration,
        uptime: Duration,
        was_ready: bool,
        jitter: f64,
    ) -> Decision {
        let stable = uptime >= policy.stable_after;
        if stable || was_ready {
            self.consecutive = 0;
        }
        for window in [&mut self.failed_starts, &mut self.flaps] {
            while window
                .front()
                .is_some_and(|t| now.saturating_sub(*t) > policy.period)
            {
                window.pop_front();
            }
        }
        let (window, limit) = if was_ready {
            (&mut self.flaps, policy.flap_intensity)
        } else {
            (&mut self.failed_starts, policy.intensity)
        };
        if !(was_ready && stable) {
            window.push_back(now);
            if window.len() as u32 > limit {
                return Decision::GiveUp;
            }
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
        self.failed_starts.clear();
        self.flaps.clear();
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
        assert_eq!(
            t.on_exit(&p, ms(0), ms(5), false, 0.0),
            Decision::RestartAfter(ms(100))
        );
        assert_eq!(
            t.on_exit(&p, ms(200), ms(5), false, 0.0),
            Decision::RestartAfter(ms(200))
        );
        assert_eq!(
            t.on_exit(&p, ms(500), ms(5), false, 0.0),
            Decision::RestartAfter(ms(400))
        );
        assert_eq!(
            t.on_exit(&p, ms(1000), ms(5), false, 0.0),
            Decision::RestartAfter(ms(800))
        );
        assert_eq!(
            t.on_exit(&p, ms(2000), ms(5), false, 0.0),
            Decision::RestartAfter(ms(1600))
        );
        assert_eq!(t.on_exit(&p, ms(4000), ms(5), false, 0.0), Decision::GiveUp);
    }

    #[test]
    fn backoff_resets_only_after_stable_uptime_and_window_slides() {
        let p = RestartPolicy::default();
        let mut t = RestartTracker::default();
        t.on_exit(&p, ms(0), ms(5), false, 0.0);
        t.on_exit(&p, ms(100), ms(5), false, 0.0);
        // Ran 9 s: not stable yet, keeps doubling.
        assert_eq!(
            t.on_exit(&p, ms(9_000), ms(9_000), false, 0.0),
            Decision::RestartAfter(ms(400))
        );
        // Ran 10 s: stable, back to base.
        assert_eq!(
            t.on_exit(&p, ms(20_000), ms(10_000), false, 0.0),
            Decision::RestartAfter(ms(100))
        );
        // Old exits fall out of the 60 s window.
        for i in 0..5 {
            assert_ne!(
                t.on_exit(&p, ms(200_000 + i * 70_000), ms(1), false, 0.0),
                Decision::GiveUp
            );
        }
    }

    #[test]
    fn exits_after_ready_restart_promptly_and_only_flapping_gives_up() {
        let p = RestartPolicy::default();
        let mut t = RestartTracker::default();
        // Failed starts back off.
        assert_eq!(
            t.on_exit(&p, ms(0), ms(5), false, 0.0),
            Decision::RestartAfter(ms(100))
        );
        assert_eq!(
            t.on_exit(&p, ms(200), ms(5), false, 0.0),
            Decision::RestartAfter(ms(200))
        );
        // A worker that became ready and was killed a second later: base delay again, and
        // many such exits (a chaos test killing workers every second) are no crash loop.
        for i in 0..30 {
            assert_eq!(
                t.on_exit(&p, ms(1_000 + i * 1_000), ms(900), true, 0.0),
                Decision::RestartAfter(ms(100)),
                "ready exit {i}"
            );
        }
        // The 31st short-lived ready exit within the period is flapping.
        assert_eq!(
            t.on_exit(&p, ms(31_500), ms(900), true, 0.0),
            Decision::GiveUp
        );
        // Failed starts count on their own: ready exits in between do not add to them, and
        // the 6th failed start within the period gives up.
        let mut t2 = RestartTracker::default();
        for i in 0..5 {
            assert_ne!(
                t2.on_exit(&p, ms(i * 10), ms(5), false, 0.0),
                Decision::GiveUp
            );
            assert_ne!(
                t2.on_exit(&p, ms(i * 10 + 5), ms(500), true, 0.0),
                Decision::GiveUp
            );
        }
        assert_eq!(t2.on_exit(&p, ms(60), ms(5), false, 0.0), Decision::GiveUp);
        // A ready child that ran for the stable period counts nowhere.
        let mut t3 = RestartTracker {
            flaps: (0..30).map(|_| ms(0)).collect(),
            ..RestartTracker::default()
        };
        assert_eq!(
            t3.on_exit(&p, ms(20_000), ms(20_000), true, 0.0),
            Decision::RestartAfter(ms(100))
        );
    }

    #[test]
    fn an_exit_exactly_one_period_old_still_counts() {
        let p = RestartPolicy::default();
        let mut t = RestartTracker::default();
        for i in 0..5 {
            assert_ne!(t.on_exit(&p, ms(i), ms(1), false, 0.0), Decision::GiveUp);
        }
        // The first exit (at 0) is exactly `period` old: still inside the window.
        assert_eq!(
            t.on_exit(&p, ms(60_000), ms(1), false, 0.0),
            Decision::GiveUp
        );
        // One millisecond later it has left the window: five failed starts, no crash loop.
        let mut t = RestartTracker::default();
        for i in 0..5 {
            t.on_exit(&p, ms(i), ms(1), false, 0.0);
        }
        assert_ne!(
            t.on_exit(&p, ms(60_001), ms(1), false, 0.0),
            Decision::GiveUp
        );
    }

    #[test]
    fn reset_forgets_a_crash_loop_and_the_backoff() {
        let p = RestartPolicy::default();
        let mut t = RestartTracker::default();
        for i in 0..5 {
            t.on_exit(&p, ms(i * 10), ms(1), false, 0.0);
        }
        for i in 0..30 {
            t.on_exit(&p, ms(100 + i), ms(1), true, 0.0);
        }
        t.reset();
        // No failed start or flap is remembered, and the delay starts at the base again.
        assert_eq!(
            t.on_exit(&p, ms(200), ms(1), false, 0.0),
            Decision::RestartAfter(ms(100))
        );
        assert_eq!(
            t.on_exit(&p, ms(300), ms(1), false, 0.0),
            Decision::RestartAfter(ms(200))
        );
        assert_eq!(
            t.on_exit(&p, ms(400), ms(1), true, 0.0),
            Decision::RestartAfter(ms(100))
        );
    }

    #[test]
    fn delay_is_capped_and_jittered() {
        let p = RestartPolicy {
            intensity: 100,
            ..RestartPolicy::default()
        };
        let mut t = RestartTracker::default();
        let mut last = Decision::GiveUp;
        for i in 0..20 {
            last = t.on_exit(&p, ms(i * 100), ms(1), false, 0.5);
        }
        assert_eq!(
            last,
            Decision::RestartAfter(Duration::from_secs(30).mul_f64(1.125))
        );
    }
}
