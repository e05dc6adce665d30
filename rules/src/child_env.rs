//! The environment of every process the kernel starts. Children get nothing inherited
//! implicitly (the kernel clears the environment): each kind has one allowlist of variables
//! copied from the kernel's own environment, documented here, and the kernel adds only
//! what the kind needs on top (the worker's identity, a connector's `mcp.env` and secrets).
//!
//! | kind | Unix | Windows | renamed / passed through |
//! |---|---|---|---|
//! | [`ChildKind::Upstream`] (an MCP server) | `PATH HOME LANG TMPDIR` | `PATH SystemRoot USERPROFILE TEMP PATHEXT` | — |
//! | [`ChildKind::Worker`] (`tutti-upstream-worker`, also for `tutti connector probe`) | `PATH HOME TMPDIR` | `PATH SystemRoot TEMP` | `TUTTI_WORKER_LOG` → `RUST_LOG`, `TUTTI_LOG_FORMAT` |
//! | [`ChildKind::Service`] (`tutti-mcp-frontend`, `tutti-shim-manager`) | `PATH HOME` | `PATH SystemRoot` | `TUTTI_LIBEXEC_DIR`, `RUST_LOG`, `TUTTI_DATA_PLANE`, `TUTTI_LOG_FORMAT` |
//!
//! Workers and services also get the OpenTelemetry variables ([`OTEL`]): export is
//! configured once, for `tutti up`.
//!
//! `PATH` is always set: when the kernel has none, [`DEFAULT_PATH`].
//! A worker's identity ([`WORKER_KEY`], [`WORKER_GENERATION`], [`WORKER_TOKEN`]) comes from
//! [`worker`], never from the kernel's environment.

/// `PATH` for a child when the kernel's own environment has none.
pub const DEFAULT_PATH: &str = "/usr/local/bin:/usr/bin:/bin";

/// The connector key a worker serves.
pub const WORKER_KEY: &str = "TUTTI_WORKER_KEY";
/// The generation a worker serves (decimal).
pub const WORKER_GENERATION: &str = "TUTTI_WORKER_GENERATION";
/// The one-time token a worker proves itself with (never in argv).
pub const WORKER_TOKEN: &str = "TUTTI_WORKER_TOKEN";

/// The key the frontend derives `Mcp-Session-Id`s under (32 bytes, base64url): made by the
/// kernel once per run, so a restarted frontend gives every token the same id (never in argv).
pub const SESSION_ID_KEY: &str = "TUTTI_SESSION_ID_KEY";

/// The frontend's data-plane switch (`grpc` or `frames`, the default), passed from the
/// kernel's environment to the frontend; the wire's side of it is `tutti_proto::frames`.
pub const DATA_PLANE_ENV: &str = "TUTTI_DATA_PLANE";

/// What a child process is; each kind has its own allowlist.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChildKind {
    /// The upstream MCP server a worker runs (its base; `mcp.env` and secrets come on top).
    Upstream,
    /// `tutti-upstream-worker`, supervised or for a probe.
    Worker,
    /// `tutti-mcp-frontend` and `tutti-shim-manager`.
    Service,
}

/// One variable a child gets: `name` in the child, read from `from` in the kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Var {
    pub name: &'static str,
    pub from: &'static str,
}

const fn same(name: &'static str) -> Var {
    Var { name, from: name }
}

#[cfg(not(windows))]
const UPSTREAM: &[Var] = &[same("PATH"), same("HOME"), same("LANG"), same("TMPDIR")];
#[cfg(windows)]
const UPSTREAM: &[Var] = &[
    same("PATH"),
    same("SystemRoot"),
    same("USERPROFILE"),
    same("TEMP"),
    same("PATHEXT"),
];

/// The variables that turn OpenTelemetry export on (any one of them, not empty).
pub const OTEL_ENDPOINTS: [&str; 3] = [
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
];

/// The OpenTelemetry variables, for workers and services: export is configured once, for
/// `tutti up`.
pub const OTEL: &[Var] = &[
    same(OTEL_ENDPOINTS[0]),
    same(OTEL_ENDPOINTS[1]),
    same(OTEL_ENDPOINTS[2]),
    same("OTEL_EXPORTER_OTLP_HEADERS"),
    same("OTEL_EXPORTER_OTLP_TRACES_HEADERS"),
    same("OTEL_EXPORTER_OTLP_METRICS_HEADERS"),
    same("OTEL_EXPORTER_OTLP_TIMEOUT"),
    same("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT"),
    same("OTEL_EXPORTER_OTLP_METRICS_TIMEOUT"),
    same("OTEL_BSP_SCHEDULE_DELAY"),
    same("OTEL_BSP_MAX_QUEUE_SIZE"),
    same("OTEL_BSP_MAX_EXPORT_BATCH_SIZE"),
    same("OTEL_METRIC_EXPORT_INTERVAL"),
    same("OTEL_RESOURCE_ATTRIBUTES"),
];

const WORKER_LOG: Var = Var {
    name: "RUST_LOG",
    from: "TUTTI_WORKER_LOG",
};
#[cfg(not(windows))]
const WORKER: &[Var] = &[
    same("PATH"),
    same("HOME"),
    same("TMPDIR"),
    WORKER_LOG,
    same(super::log_format::ENV),
];
// SystemRoot: without it Winsock cannot load its providers (HTTP upstreams, the kernel socket).
#[cfg(windows)]
const WORKER: &[Var] = &[
    same("PATH"),
    same("SystemRoot"),
    same("TEMP"),
    WORKER_LOG,
    same(super::log_format::ENV),
];

#[cfg(not(windows))]
const SERVICE: &[Var] = &[
    same("PATH"),
    same("HOME"),
    same(super::sibling::LIBEXEC_ENV),
    same("RUST_LOG"),
    same(DATA_PLANE_ENV),
    same(super::log_format::ENV),
];
#[cfg(windows)]
const SERVICE: &[Var] = &[
    same("PATH"),
    same("SystemRoot"),
    same(super::sibling::LIBEXEC_ENV),
    same("RUST_LOG"),
    same(DATA_PLANE_ENV),
    same(super::log_format::ENV),
];

/// The allowlist of `kind` on this platform.
pub fn allowlist(kind: ChildKind) -> impl Iterator<Item = &'static Var> {
    let (base, otel): (&[Var], &[Var]) = match kind {
        ChildKind::Upstream => (UPSTREAM, &[]),
        ChildKind::Worker => (WORKER, OTEL),
        ChildKind::Service => (SERVICE, OTEL),
    };
    base.iter().chain(otel)
}

/// The inherited part of a `kind` child's environment, read through `parent` (the kernel
/// passes `std::env::var`; tests pass a map). `PATH` is always present.
pub fn inherited(
    kind: ChildKind,
    parent: impl Fn(&str) -> Option<String>,
) -> Vec<(String, String)> {
    let mut env: Vec<(String, String)> = allowlist(kind)
        .filter_map(|v| parent(v.from).map(|value| (v.name.to_owned(), value)))
        .collect();
    if !env.iter().any(|(n, _)| n == "PATH") {
        env.insert(0, ("PATH".to_owned(), DEFAULT_PATH.to_owned()));
    }
    env
}

/// The kernel's own variable, for [`inherited`].
pub fn from_process(name: &str) -> Option<String> {
    std::env::var(name).ok()
}

/// A worker's whole environment: its allowlist plus its identity.
pub fn worker(
    parent: impl Fn(&str) -> Option<String>,
    key: &str,
    generation: u64,
    token: &str,
) -> Vec<(String, String)> {
    let mut env = inherited(ChildKind::Worker, parent);
    env.push((WORKER_KEY.to_owned(), key.to_owned()));
    env.push((WORKER_GENERATION.to_owned(), generation.to_string()));
    env.push((WORKER_TOKEN.to_owned(), token.to_owned()));
    env
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn parent(vars: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: BTreeMap<String, String> = vars
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        move |name| map.get(name).cloned()
    }

    #[cfg(not(windows))]
    fn names(env: &[(String, String)]) -> Vec<&str> {
        env.iter().map(|(n, _)| n.as_str()).collect()
    }

    const EVERYTHING: &[(&str, &str)] = &[
        ("PATH", "/bin"),
        ("HOME", "/home/u"),
        ("LANG", "C.UTF-8"),
        ("TMPDIR", "/tmp/u"),
        ("SystemRoot", "C:\\Windows"),
        ("USERPROFILE", "C:\\Users\\u"),
        ("TEMP", "C:\\Temp"),
        ("PATHEXT", ".EXE"),
        ("RUST_LOG", "debug"),
        ("TUTTI_WORKER_LOG", "trace"),
        ("TUTTI_LIBEXEC_DIR", "/opt/tutti"),
        ("AWS_SECRET_ACCESS_KEY", "do-not-leak"),
        ("LD_PRELOAD", "/tmp/evil.so"),
    ];

    #[cfg(not(windows))]
    #[test]
    fn each_kind_gets_exactly_its_allowlist() {
        let p = parent(EVERYTHING);
        assert_eq!(
            names(&inherited(ChildKind::Upstream, &p)),
            ["PATH", "HOME", "LANG", "TMPDIR"]
        );
        assert_eq!(
            names(&inherited(ChildKind::Worker, &p)),
            ["PATH", "HOME", "TMPDIR", "RUST_LOG"]
        );
        assert_eq!(
            names(&inherited(ChildKind::Service, &p)),
            ["PATH", "HOME", "TUTTI_LIBEXEC_DIR", "RUST_LOG"]
        );
    }

    #[test]
    fn the_log_format_reaches_workers_and_services_but_not_upstreams() {
        let p = parent(&[("TUTTI_LOG_FORMAT", "json"), ("PATH", "/bin")]);
        let format = |kind| {
            inherited(kind, &p)
                .into_iter()
                .find(|(n, _)| n == "TUTTI_LOG_FORMAT")
                .map(|(_, v)| v)
        };
        assert_eq!(format(ChildKind::Worker).as_deref(), Some("json"));
        assert_eq!(format(ChildKind::Service).as_deref(), Some("json"));
        assert_eq!(format(ChildKind::Upstream), None);
    }

    #[test]
    fn nothing_outside_an_allowlist_reaches_a_child() {
        let p = parent(EVERYTHING);
        for kind in [ChildKind::Upstream, ChildKind::Worker, ChildKind::Service] {
            let env = inherited(kind, &p);
            for (name, value) in &env {
                assert!(allowlist(kind).any(|v| v.name == name), "{kind:?}: {name}");
                assert_ne!(value, "do-not-leak");
                assert_ne!(value, "/tmp/evil.so");
            }
        }
    }

    #[test]
    fn a_worker_logs_at_tutti_worker_log_not_rust_log() {
        let env = inherited(ChildKind::Worker, parent(EVERYTHING));
        let log: Vec<_> = env.iter().filter(|(n, _)| n == "RUST_LOG").collect();
        assert_eq!(log, [&("RUST_LOG".to_owned(), "trace".to_owned())]);
        let quiet = inherited(ChildKind::Worker, parent(&[("RUST_LOG", "debug")]));
        assert!(!quiet.iter().any(|(n, _)| n == "RUST_LOG"), "{quiet:?}");
    }

    #[test]
    fn path_is_always_set() {
        for kind in [ChildKind::Upstream, ChildKind::Worker, ChildKind::Service] {
            let env = inherited(kind, parent(&[]));
            assert_eq!(env, [("PATH".to_owned(), DEFAULT_PATH.to_owned())]);
        }
    }

    #[test]
    fn the_kernels_own_environment_is_read_as_it_is() {
        // PATH is set wherever the tests run; the other name is set nowhere.
        assert!(from_process("PATH").is_some_and(|p| !p.is_empty()));
        assert_eq!(from_process("PATH"), std::env::var("PATH").ok());
        assert_eq!(from_process("TUTTI_TEST_NEVER_SET_ANYWHERE"), None);
    }

    #[test]
    fn a_worker_gets_its_identity() {
        let env = worker(parent(&[("PATH", "/bin")]), "github", 7, "tok");
        assert_eq!(
            env,
            [
                ("PATH".to_owned(), "/bin".to_owned()),
                (WORKER_KEY.to_owned(), "github".to_owned()),
                (WORKER_GENERATION.to_owned(), "7".to_owned()),
                (WORKER_TOKEN.to_owned(), "tok".to_owned()),
            ]
        );
    }
}
