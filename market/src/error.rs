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
