//! A tiny seeded xorshift generator for the tests that choose at random (chaos, crash loops,
//! the soak): no dependency, and a run's seed is printed so its choices can be repeated.

use std::time::{SystemTime, UNIX_EPOCH};

/// xorshift64; never seeded with 0 (the seed's lowest bit is set).
pub struct Rng(u64);

impl Rng {
    /// From `seed`, else from the clock.
    pub fn new(seed: Option<u64>) -> Rng {
        let seed = seed.unwrap_or_else(|| {
            SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map(|d| d.as_nanos() as u64)
                .unwrap_or(1)
        }) | 1;
        Rng(seed)
    }

    /// From the environment variable `var` when it holds a number, else from the clock; the
    /// seed is printed as `<what> seed: VAR=N` so a failing run can be repeated.
    pub fn seeded(var: &str, what: &str) -> Rng {
        let rng = Rng::new(std::env::var(var).ok().and_then(|s| s.parse().ok()));
        eprintln!("{what} seed: {var}={}", rng.0);
        rng
    }

    /// The seed, until the first draw (after it, the state the next draws follow from).
    pub fn seed(&self) -> u64 {
        self.0
    }

    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }

    /// A number in `0..n` (0 when `n` is 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }

    /// An index into a slice of `len` items (0 when it is empty).
    pub fn index(&mut self, len: usize) -> usize {
        self.below(len as u64) as usize
    }
}

#[cfg(test)]
mod tests {
    use super::Rng;

    #[test]
    fn the_generator_repeats_from_its_seed() {
        let (mut a, mut b) = (Rng::new(Some(7)), Rng::new(Some(7)));
        let xs: Vec<u64> = (0..5).map(|_| a.below(100)).collect();
        let ys: Vec<u64> = (0..5).map(|_| b.below(100)).collect();
        assert_eq!(xs, ys);
        assert!(xs.iter().all(|x| *x < 100));
        assert_eq!(Rng::new(None).below(0), 0);
    }
}
