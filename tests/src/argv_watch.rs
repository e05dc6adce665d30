//! Every command line seen while a test runs: a thread reads `/proc/*/cmdline` of every
//! process over and over (Linux; elsewhere it sees nothing), so a test can assert that no argv
//! ever held a secret, even one that lived a few milliseconds.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::proc_tree;

/// The watching thread; it stops when this is dropped.
pub struct ArgvWatch {
    stop: Arc<AtomicBool>,
    /// Every distinct command line seen so far (argv joined with spaces).
    seen: Arc<Mutex<BTreeSet<String>>>,
}

impl ArgvWatch {
    pub fn start() -> ArgvWatch {
        let stop = Arc::new(AtomicBool::new(false));
        let seen = Arc::new(Mutex::new(BTreeSet::new()));
        let (flag, into) = (stop.clone(), seen.clone());
        std::thread::spawn(move || {
            while !flag.load(Ordering::SeqCst) {
                let lines = proc_tree::snapshot().into_iter().map(|p| p.cmdline);
                into.lock().unwrap_or_else(|p| p.into_inner()).extend(lines);
                std::thread::sleep(Duration::from_millis(2));
            }
        });
        ArgvWatch { stop, seen }
    }

    /// Panics naming every command line seen so far that held one of `secrets` (what, value).
    pub fn assert_never_held(&self, secrets: &[(&str, &str)]) {
        let seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        assert!(seen.len() > 1, "the watch saw no processes");
        for (what, secret) in secrets {
            assert!(!secret.is_empty(), "no {what} to look for");
            let holding: Vec<&String> = seen.iter().filter(|c| c.contains(secret)).collect();
            assert!(
                holding.is_empty(),
                "the {what} was on a command line every local user can read: {holding:?}"
            );
        }
    }
}

impl Drop for ArgvWatch {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}
