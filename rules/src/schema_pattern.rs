//! How an upstream's schema `pattern`s (and `patternProperties`) are compiled, by the kernel
//! at commit and by the frontend for every call: the linear-time `regex` engine, never a
//! backtracking one, with bounds on what one pattern may compile to. A pattern the engine
//! refuses (lookaround, backreferences, or over a bound) makes the tool's input schema
//! invalid, so the kernel refuses the tool set at commit and the frontend never sees it.
//!
//! The two processes must agree: a schema the kernel accepts must compile in the frontend.

/// Largest compiled program of one pattern, in bytes (the `regex` crate's default is 10 MiB).
/// Ordinary patterns (`^[\w.-]{1,64}$`, an e-mail pattern, `\p{L}+`) need a few KiB.
pub const PATTERN_SIZE_LIMIT: usize = 1024 * 1024;

/// Capacity of one pattern's lazy-DFA transition cache, in bytes, per thread that matches it.
/// When it fills the engine falls back to its other linear-time matchers.
pub const PATTERN_DFA_SIZE_LIMIT: usize = 1024 * 1024;

/// Why the engine refuses a pattern, for the person reading a refused commit.
pub const PATTERN_RULE: &str = "patterns must be linear-time regular expressions (no lookaround, no backreferences) compiling to at most 1 MiB";
