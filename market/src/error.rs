//! The one error type of the market. Each message is one line that names the problem and the fix.

/// Everything that can end a market step.
#[derive(Debug, thiserror::Error)]
pub enum MarketError {
    /// A local file or folder could not be read or written.
    #[error("{path}: {source}")]
    Io {
        path: std::path::PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// An ecosystem tool the pinning step runs is not installed.
    #[error("{tool} not found on PATH: {fix}")]
    ToolMissing { tool: String, fix: String },
    /// An ecosystem tool ended with an error (its own words, shortened to one line).
    #[error(
        "{tool} failed for {package}: {detail}; check the name, the version and the network, then retry"
    )]
    ToolFailed {
        tool: String,
        package: String,
        detail: String,
    },
    /// A fetched artefact is not what its source published.
    #[error(
        "{artefact}: hash mismatch: expected {expected}, got {got}; the download is not what the source published, check the source and retry"
    )]
    HashMismatch {
        artefact: String,
        expected: String,
        got: String,
    },
    /// An artefact comes without a hash from its source, so it cannot be checked.
    #[error("{artefact}: {problem}")]
    Unpinnable { artefact: String, problem: String },
    /// npm packages of the tree have install scripts and scripts were not allowed.
    #[error(
        "npm package {packages} has install scripts, refused: review the package and install with --allow-scripts to run them"
    )]
    InstallScripts { packages: String },
    /// No wheel of a PyPI distribution fits this platform and interpreter.
    #[error(
        "no wheel of {package} for this platform and {interpreter} ({detail}): check the version, or allow building from source with --allow-sdist"
    )]
    NoWheel {
        package: String,
        interpreter: String,
        detail: String,
    },
    /// The package has nothing to launch (no npm `bin`, no console script, no bundle command).
    #[error("{package}: {problem}")]
    NoEntryPoint { package: String, problem: String },
    /// An MCP bundle is malformed or unsafe to unpack.
    #[error("{bundle}: {problem}")]
    Bundle { bundle: String, problem: String },
    /// An artefact could not be downloaded.
    #[error("{url}: cannot download: {problem}; check the URL and the network, then retry")]
    Download { url: String, problem: String },
    /// No docker or podman that can run containers.
    #[error(
        "container engine not found: no docker or podman on PATH can run containers ({detail}); install or start one to use oci: packages"
    )]
    EngineMissing { detail: String },
    /// The release folder to create exists already.
    #[error("{}: the release folder exists and is not empty; remove it or choose another", path.display())]
    ReleaseExists { path: std::path::PathBuf },
    /// A file of the release is a link or special file (the kernel hashes regular files only).
    #[error("{}: a release holds regular files and folders only (links are refused); the package cannot be pinned as it is", path.display())]
    NotRegular { path: std::path::PathBuf },
    /// A release's `tutti-lock.json` cannot be read.
    #[error("{}: {problem}; pin the package again to write a new lock", path.display())]
    Lock {
        path: std::path::PathBuf,
        problem: String,
    },
    /// A registry did not answer, or not with the v0.1 API.
    #[error(
        "registry {url} is unreachable: {reason}; check it with `tutti registry list` or try again later"
    )]
    RegistryUnreachable { url: String, reason: String },
    /// A registry answered something that is not the v0.1 API.
    #[error("registry {url} answered {reason}; check the URL with `tutti registry list`")]
    RegistryAnswer { url: String, reason: String },
    /// No configured registry knows the server.
    #[error(
        "no server {name:?} in the registries ({registries}); find its name with `tutti connector search WORDS`"
    )]
    NoSuchServer { name: String, registries: String },
    /// The server exists but not at that version.
    #[error(
        "server {name:?} has no version {version:?} in registry {registry}; leave `@VERSION` out for the latest"
    )]
    NoSuchVersion {
        name: String,
        version: String,
        registry: String,
    },
    /// The registry marks this version deleted (or another status than active/deprecated).
    #[error(
        "server {name:?} {version} is {status} in its registry and cannot be installed; choose another version with `registry:{name}@VERSION`"
    )]
    NotInstallable {
        name: String,
        version: String,
        status: String,
    },
    /// A registry list entry or a registry command is wrong.
    #[error("{0}")]
    Registries(String),
    /// A `server.json` document that cannot be read as one.
    #[error("server.json: {0}")]
    ServerJson(String),
    /// A package type the runtime does not run.
    #[error(
        "server.json: package type {kind:?} is not supported (npm, pypi, mcpb and oci are); choose another entry with --package N or --remote N"
    )]
    UnsupportedType { kind: String },
    /// An input the document requires and the person did not give.
    #[error("server.json: {what} needs a value: give it with --set {name}=…")]
    MissingInput { what: String, name: String },
    /// An install source that names nothing the market knows.
    #[error("{0}")]
    Source(String),
    /// The pinning step failed.
    #[error("{0}")]
    Pin(String),
}
