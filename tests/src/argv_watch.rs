//! Every command line seen while a test runs: a thread reads `/proc/*/cmdline` of every
//! process over and over (Linux; elsewhere it sees nothing), so a test can assert afterwards
//! that no argv ever held a secret, even one that lived a few milliseconds.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use crate::proc_tree;

/// The watching thread; [`ArgvWatch::stop`] returns what it saw.
pub struct ArgvWatch {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<BTreeSet<String>>>,
}

impl ArgvWatch {
    pub fn start() -> ArgvWatch {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut seen = BTreeSet::new();
            while !flag.load(Ordering::SeqCst) {
                for process in proc_tree::snapshot() {
                    seen.insert(process.cmdline);
                }
                std::thread::sleep(Duration::from_millis(2));
            }
            seen
        });
        ArgvWatch {
            stop,
            thread: Some(thread),
        }
    }

    /// Stops watching: every distinct command line seen (argv joined with spaces).
    pub fn stop(mut self) -> BTreeSet<String> {
        self.stop.store(true, Ordering::SeqCst);
        self.thread
            .take()
            .and_then(|t| t.join().ok())
            .unwrap_or_default()
    }

    /// Stops watching and panics naming every command line that held one of `secrets`.
    pub fn assert_never_held(self, secrets: &[(&str, &str)]) {
        let seen = self.stop();
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
