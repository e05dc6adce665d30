//! The one error type of the CLI. Every variant renders as `<problem>; <what to do>`, and
//! `main` prints it as the single stderr line `tutti: <problem>; <what to do>`. No variant
//! ever carries a secret value or a token.

use std::io;
use std::path::PathBuf;

/// Everything that can make a `tutti` command fail.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    #[error("no kernel is running for state dir {}; start it with `{up}`", state_dir.display())]
    NoKernel {
        state_dir: PathBuf,
        /// `tutti up`, with `--state-dir` when the dir is not the one it would use anyway.
        up: String,
    },

    #[error(
        "cannot reach the kernel at {endpoint}: {reason}; check that `tutti up` runs for state dir {}",
        state_dir.display()
    )]
    KernelUnreachable {
        endpoint: String,
        reason: String,
        state_dir: PathBuf,
    },

    #[error("the login of {key} failed: {reason}; run `tutti connector connect {key}` again")]
    Login { key: String, reason: String },

    #[error(
        "lost the connection to the kernel for state dir {} ({reason}); check `tutti status` and retry",
        state_dir.display()
    )]
    KernelLost { state_dir: PathBuf, reason: String },

    #[error(
        "lost the connection to the kernel while connecting {key} ({reason}): the values of {names} may have been saved already; `tutti status` shows whether {key} still needs them, and running the same `tutti connector connect` again is safe"
    )]
    ConnectInterrupted {
        key: String,
        names: String,
        reason: String,
    },

    #[error("the stdio bridge cannot start: {reason}; check `tutti status`")]
    Bridge { reason: String },

    #[error("{what} is neither a client nor a file; name one of {known}, or a JSON/TOML file")]
    ImportSource { what: String, known: String },

    #[error("cannot read the MCP servers of {}: {reason}; fix the file or leave it out with --from", path.display())]
    ImportFile { path: PathBuf, reason: String },

    #[error(
        "nothing to undo for {what}: no backup from `tutti connector import --rewrite` was found"
    )]
    NothingToUndo { what: String },

    /// A gRPC status from the kernel: its message is already user-facing.
    #[error("{message}")]
    Kernel { code: tonic::Code, message: String },

    #[error(
        "cannot determine the state directory: {reason}; pass --state-dir DIR or set TUTTI_STATE_DIR"
    )]
    NoStateDir { reason: String },

    #[error(
        "cannot find {}; install tutti-kernel next to tutti or set TUTTI_LIBEXEC_DIR to its directory",
        path.display()
    )]
    KernelBinaryMissing { path: PathBuf },

    #[error(
        "the service manager runs this runtime (kernel pid {pid}) and would start it again; stop it with `{stop}`"
    )]
    OwnedByServiceManager { pid: u32, stop: String },

    #[error("cannot stop the kernel (pid {pid}): {reason}")]
    StopFailed { pid: u32, reason: String },

    #[error(
        "the kernel (pid {pid}) did not stop within {seconds} s; see `tutti logs`, or end it with `kill -KILL {pid}`"
    )]
    StopTimedOut { pid: u32, seconds: u64 },

    #[error("cannot start {}: {source}; check that it is an executable tutti-kernel", path.display())]
    Exec { path: PathBuf, source: io::Error },

    #[error(
        "{} is not a directory; give the path of a connector release (a directory holding connector.json)",
        path.display()
    )]
    NotADirectory { path: PathBuf },

    /// A market step refused (SPEC §17), its one line as the market wrote it.
    #[error("{0}")]
    Market(String),

    #[error("confirmation needed; re-run with --yes to install non-interactively")]
    ConfirmationNeeded,

    #[error("install cancelled, nothing was installed; re-run and answer y to install")]
    Cancelled,

    #[error(
        "confirmation needed: probing a release directory runs its upstream; re-run with --yes to probe non-interactively"
    )]
    ProbeConfirmationNeeded,

    #[error("probe cancelled, nothing was run; re-run and answer y to probe")]
    ProbeCancelled,

    #[error(
        "environment variable {name} is not set or empty; set it to the secret value and re-run"
    )]
    EnvMissing { name: String },

    #[error("environment variable {name} is not valid UTF-8; set it to a UTF-8 value and re-run")]
    EnvNotUnicode { name: String },

    #[error(
        "standard input ended before a value for {name} was read; give one line per --stdin name, in order"
    )]
    StdinEnded { name: String },

    #[error(
        "the line read from standard input for {name} is empty; give one non-empty line per --stdin name"
    )]
    StdinEmpty { name: String },

    #[error("the line read from standard input for {name} is not valid UTF-8; give a UTF-8 value")]
    StdinNotUnicode { name: String },

    #[error("secret {name} is given more than once; name each secret once")]
    DuplicateSecret { name: String },

    #[error("{what} must not be empty; give a non-empty value")]
    EmptyArgument { what: &'static str },

    #[error("{flag} applies only to --format {formats}; drop it or change --format")]
    FlagNotForFormat {
        flag: &'static str,
        formats: &'static str,
    },

    #[error("cannot {action} {}: {source}; check the path and its permissions", path.display())]
    Io {
        action: &'static str,
        path: PathBuf,
        source: io::Error,
    },

    #[error(
        "cannot read standard input: {source}; pipe the values in, one line per --stdin name, or run on a terminal"
    )]
    StdinRead { source: io::Error },

    #[error(
        "cannot write to standard output: {source}; check where the output is redirected and retry"
    )]
    StdoutWrite { source: io::Error },

    #[error("cannot {action}: {source}; check the terminal and retry")]
    Terminal {
        action: &'static str,
        source: io::Error,
    },

    #[error("{} is not valid TOML ({reason}); fix that file or move it away and re-run", path.display())]
    CodexConfig { path: PathBuf, reason: String },

    #[error("{} has `mcp_servers` that is not a table; fix that file and re-run", path.display())]
    CodexMcpServers { path: PathBuf },

    #[error("cannot encode the output as JSON: {reason}; report this as a bug")]
    Json { reason: String },

    #[error("cannot write {}: permission denied; re-run as root (e.g. with sudo), or use --user", path.display())]
    ServiceNeedsRoot { path: PathBuf },

    #[error("`{command}` failed: {reason}; run it yourself to see why")]
    ToolFailed { command: String, reason: String },

    #[error("--platform {platform} works only with --print on this system; add --print")]
    ForeignPlatform { platform: &'static str },

    #[error("--user has no meaning for {what}; drop it")]
    UserScopeUnsupported { what: &'static str },

    #[error("the path {} is not valid UTF-8; use a UTF-8 path", path.display())]
    NotUtf8Path { path: PathBuf },

    #[error("cannot find the home directory ({var} is not set); set {var} and re-run")]
    NoHome { var: &'static str },

    #[error(
        "cannot listen on 127.0.0.1:{port} for the console: {source}; choose another --port or leave it out for a free one"
    )]
    ConsoleBind { port: u16, source: io::Error },

    #[error("the console stopped: {source}; run `tutti console` again")]
    ConsoleServe { source: io::Error },

    #[error("the runtime stopped (state dir {}); the console ended; start it again with `{up}`", state_dir.display())]
    ConsoleKernelGone { state_dir: PathBuf, up: String },

    #[error("cannot start the async runtime: {source}; check the system's limits and retry")]
    Runtime { source: io::Error },

    #[error(
        "no log for connector {key:?} in {}: it is not installed or has not run yet; see `tutti status` for the installed keys",
        dir.display()
    )]
    NoConnectorLog { key: String, dir: PathBuf },

    #[error("no kernel log at {}: the kernel has not run with this state dir; start it with `tutti up`", path.display())]
    NoKernelLog { path: PathBuf },

    #[error(
        "--since {given:?} is not a duration; give a number and a unit, like 30s, 15m, 2h or 1d"
    )]
    BadDuration { given: String },

    /// `tutti doctor` found at least one FAIL (each was printed with its fix).
    #[error(
        "{failed} check(s) failed; fix them as each FAIL line says and run `tutti doctor` again"
    )]
    DoctorFailed { failed: usize },
}

impl CliError {
    pub(crate) fn io(action: &'static str, path: impl Into<PathBuf>, source: io::Error) -> Self {
        Self::Io {
            action,
            path: path.into(),
            source,
        }
    }
}
