//! The soft open-files limit (`RLIMIT_NOFILE`), raised to the hard limit at start by the
//! kernel and the frontend: the kernel holds a descriptor per child pipe, log file, socket and
//! gRPC connection, the frontend one per client connection, and the common soft default (1024)
//! is low for many connectors or loopback clients. Children inherit the raised limit. Windows
//! has no limit of this kind: there, raising it does nothing.

/// Raises this process's soft open-files limit to its hard limit (Unix) and logs the limit
/// (debug) or why it could not be raised (warning). Never fatal.
pub fn raise_open_files_limit() {
    #[cfg(unix)]
    match imp::raise() {
        Ok(limit) => tracing::debug!(limit, "descriptor limit"),
        Err(e) => tracing::warn!(error = %e, "cannot raise the descriptor limit"),
    }
}

#[cfg(unix)]
mod imp {
    use nix::sys::resource::{Resource, getrlimit, rlim_t, setrlimit};

    /// macOS's `OPEN_MAX`: the highest soft limit it takes when the hard one is unlimited.
    const OPEN_MAX_FALLBACK: rlim_t = 10_240;

    /// Raises the soft limit; the soft limit in force afterwards.
    pub(super) fn raise() -> nix::Result<rlim_t> {
        let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE)?;
        raised(soft, hard, |soft, hard| {
            setrlimit(Resource::RLIMIT_NOFILE, soft, hard)
        })
    }

    /// The soft limit after raising `soft` towards `hard` with `set(soft, hard)`: `hard` itself,
    /// else (macOS reports an unlimited hard limit but refuses a soft limit above `OPEN_MAX`)
    /// `hard` capped at [`OPEN_MAX_FALLBACK`], never below `soft`. Nothing is set when `soft`
    /// already reaches `hard`.
    fn raised<E>(
        soft: rlim_t,
        hard: rlim_t,
        mut set: impl FnMut(rlim_t, rlim_t) -> Result<(), E>,
    ) -> Result<rlim_t, E> {
        if soft >= hard {
            return Ok(soft);
        }
        set(hard, hard).map(|()| hard).or_else(|_| {
            let capped = hard.min(OPEN_MAX_FALLBACK).max(soft);
            set(capped, hard).map(|()| capped)
        })
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        /// Runs [`raised`] against a fake `setrlimit` that refuses soft limits above `max`;
        /// the result and every `(soft, hard)` it was asked to set.
        fn run(
            soft: rlim_t,
            hard: rlim_t,
            max: rlim_t,
        ) -> (Result<rlim_t, ()>, Vec<(rlim_t, rlim_t)>) {
            let mut asked = Vec::new();
            let result = raised(soft, hard, |s, h| {
                asked.push((s, h));
                if s <= max { Ok(()) } else { Err(()) }
            });
            (result, asked)
        }

        #[test]
        fn the_soft_limit_goes_up_to_the_hard_one() {
            assert_eq!(run(1024, 4096, rlim_t::MAX), (Ok(4096), vec![(4096, 4096)]));
        }

        #[test]
        fn a_soft_limit_at_the_hard_one_is_left_alone() {
            assert_eq!(run(4096, 4096, rlim_t::MAX), (Ok(4096), vec![]));
            assert_eq!(run(8192, 4096, rlim_t::MAX), (Ok(8192), vec![]));
        }

        #[test]
        fn an_unlimited_hard_limit_refused_falls_back_to_open_max() {
            let unlimited = rlim_t::MAX;
            assert_eq!(
                run(256, unlimited, OPEN_MAX_FALLBACK),
                (
                    Ok(OPEN_MAX_FALLBACK),
                    vec![(unlimited, unlimited), (OPEN_MAX_FALLBACK, unlimited)]
                )
            );
        }

        #[test]
        fn the_fallback_never_lowers_the_soft_limit_and_errors_pass_through() {
            // Soft already above OPEN_MAX: the fallback keeps it.
            assert_eq!(
                run(20_000, 50_000, 0).1,
                vec![(50_000, 50_000), (20_000, 50_000)]
            );
            assert_eq!(run(20_000, 50_000, 0).0, Err(()));
        }

        #[test]
        fn the_real_limit_is_raised_to_the_hard_one() {
            let (_, hard) = getrlimit(Resource::RLIMIT_NOFILE).unwrap_or((0, 0));
            let limit = raise().unwrap_or(0);
            let (soft, _) = getrlimit(Resource::RLIMIT_NOFILE).unwrap_or((0, 0));
            assert_eq!(soft, limit);
            // Linux gives the hard limit itself; macOS may cap an unlimited one at OPEN_MAX.
            assert!(
                limit == hard || (cfg!(target_os = "macos") && limit < hard),
                "soft limit {limit}, hard limit {hard}"
            );
        }
    }
}
