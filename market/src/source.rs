//! The argument of `tutti connector install` (SPEC §17): a release folder, a `server.json`,
//! a registry server, or one package.

use std::path::{Path, PathBuf};

use crate::MarketError;
use crate::plan::PackageRef;
use crate::server_json::{Choices, Package, ReleasePlan, ServerJson};

/// Where a release comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// A release folder (§3), installed as it is.
    Folder(PathBuf),
    /// A `server.json` file.
    ServerJson(PathBuf),
    /// `registry:NAME[@VERSION]`.
    Registry {
        name: String,
        version: Option<String>,
    },
    /// `npm:`, `pypi:`, `mcpb:`, `oci:` or a local `.mcpb` file.
    Package(PackageRef),
}

/// Reads an install argument. Relative paths are taken against `cwd`.
pub fn parse(arg: &str, cwd: &Path) -> Result<Source, MarketError> {
    if let Some(rest) = arg.strip_prefix("registry:") {
        let (name, version) = split_version(rest);
        return Ok(Source::Registry {
            name: non_empty(name, arg)?,
            version,
        });
    }
    if let Some(rest) = arg.strip_prefix("npm:") {
        let (name, version) = split_version(rest);
        return Ok(Source::Package(PackageRef::Npm {
            name: non_empty(name, arg)?,
            version: version.unwrap_or_default(),
        }));
    }
    if let Some(rest) = arg.strip_prefix("pypi:") {
        let (name, version) = split_version(rest);
        return Ok(Source::Package(PackageRef::Pypi {
            name: non_empty(name, arg)?,
            version: version.unwrap_or_default(),
        }));
    }
    if let Some(rest) = arg.strip_prefix("mcpb:") {
        return mcpb_url(rest, arg);
    }
    if let Some(rest) = arg.strip_prefix("oci:") {
        return Ok(Source::Package(PackageRef::Oci {
            image: non_empty(rest, arg)?,
        }));
    }
    let path = cwd.join(arg);
    if arg.ends_with(".mcpb") {
        return Ok(Source::Package(PackageRef::Mcpb {
            location: path.display().to_string(),
            sha256: None,
        }));
    }
    if path.is_file() && arg.ends_with(".json") {
        return Ok(Source::ServerJson(path));
    }
    Ok(Source::Folder(path))
}

/// `NAME@VERSION` (a leading `@` is an npm scope, not a version).
fn split_version(s: &str) -> (&str, Option<String>) {
    match s.rfind('@') {
        Some(i) if i > 0 => (
            &s[..i],
            Some(s[i + 1..].to_owned()).filter(|v| !v.is_empty()),
        ),
        _ => (s, None),
    }
}

fn non_empty(name: &str, arg: &str) -> Result<String, MarketError> {
    if name.is_empty() {
        return Err(MarketError::Source(format!(
            "{arg:?} names nothing; write registry:NAME[@VERSION], npm:PACKAGE[@VERSION], pypi:PACKAGE[@VERSION], mcpb:URL#sha256=HEX or oci:IMAGE"
        )));
    }
    Ok(name.to_owned())
}

fn mcpb_url(rest: &str, arg: &str) -> Result<Source, MarketError> {
    let (url, hash) = rest.split_once("#sha256=").unwrap_or((rest, ""));
    let hex = hash.len() == 64 && hash.bytes().all(|b| b.is_ascii_hexdigit());
    if !url.starts_with("https://") || !hex {
        return Err(MarketError::Source(format!(
            "{arg:?}: an MCP bundle URL is https:// and carries its hash: mcpb:https://…/x.mcpb#sha256=HEX"
        )));
    }
    Ok(Source::Package(PackageRef::Mcpb {
        location: url.to_owned(),
        sha256: Some(hash.to_ascii_lowercase()),
    }))
}

/// A one-package source as a release plan: the package's last name segment is the key, the
/// version is the one given (or the pinned one, filled in by `compose`).
pub fn package_plan(package: &PackageRef, choices: &Choices) -> Result<ReleasePlan, MarketError> {
    let (kind, identifier, version) = match package {
        PackageRef::Npm { name, version } => ("npm", name.clone(), version.clone()),
        PackageRef::Pypi { name, version } => ("pypi", name.clone(), version.clone()),
        PackageRef::Mcpb { location, .. } => ("mcpb", location.clone(), String::new()),
        PackageRef::Oci { image } => ("oci", image.clone(), String::new()),
    };
    let short = identifier
        .rsplit(['/', '\\'])
        .next()
        .unwrap_or_default()
        .trim_end_matches(".mcpb")
        .split([':', '@'])
        .next()
        .unwrap_or_default()
        .to_owned();
    let doc = ServerJson {
        name: short,
        title: Some(identifier.clone()),
        description: Some(format!("{kind} package {identifier}")),
        version,
        packages: vec![Package {
            registry_type: kind.to_owned(),
            identifier,
            version: None,
            file_sha256: None,
            transport: None,
            runtime_arguments: Vec::new(),
            package_arguments: Vec::new(),
            environment_variables: Vec::new(),
        }],
        remotes: Vec::new(),
    };
    crate::server_json::plan_with(&doc, choices, Some(package))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_source_form() {
        let cwd = Path::new("/work");
        let p = |s: &str| parse(s, cwd).unwrap_or_else(|e| panic!("{s}: {e}"));
        assert_eq!(
            p("registry:io.github.a/b@1.0.2"),
            Source::Registry {
                name: "io.github.a/b".into(),
                version: Some("1.0.2".into())
            }
        );
        assert_eq!(
            p("registry:a/b"),
            Source::Registry {
                name: "a/b".into(),
                version: None
            }
        );
        assert_eq!(
            p("npm:@scope/pkg@2.1.0"),
            Source::Package(PackageRef::Npm {
                name: "@scope/pkg".into(),
                version: "2.1.0".into()
            })
        );
        assert_eq!(
            p("pypi:mcp-server-time"),
            Source::Package(PackageRef::Pypi {
                name: "mcp-server-time".into(),
                version: String::new()
            })
        );
        let hash = "ab".repeat(32);
        assert_eq!(
            p(&format!("mcpb:https://x.example/a.mcpb#sha256={hash}")),
            Source::Package(PackageRef::Mcpb {
                location: "https://x.example/a.mcpb".into(),
                sha256: Some(hash)
            })
        );
        assert!(
            parse("mcpb:https://x.example/a.mcpb", cwd).is_err(),
            "a URL needs its hash"
        );
        assert!(parse("registry:", cwd).is_err());
        assert_eq!(
            p("oci:ghcr.io/a/b:1"),
            Source::Package(PackageRef::Oci {
                image: "ghcr.io/a/b:1".into()
            })
        );
        assert_eq!(
            p("./x.mcpb"),
            Source::Package(PackageRef::Mcpb {
                location: "/work/./x.mcpb".into(),
                sha256: None
            })
        );
        assert_eq!(p("./release"), Source::Folder("/work/./release".into()));
    }

    #[test]
    fn a_package_source_plans_like_a_document() {
        let npm = PackageRef::Npm {
            name: "@modelcontextprotocol/server-memory".into(),
            version: "1.0.0".into(),
        };
        let plan = package_plan(&npm, &Choices::default()).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(plan.manifest["key"], "server-memory");
        assert_eq!(plan.package, Some(npm));
        let oci = PackageRef::Oci {
            image: "ghcr.io/a/time-server:2".into(),
        };
        let plan = package_plan(&oci, &Choices::default()).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(plan.manifest["key"], "time-server");
        let bundle = PackageRef::Mcpb {
            location: "/work/tools/bundled.mcpb".into(),
            sha256: None,
        };
        let plan = package_plan(&bundle, &Choices::default()).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(plan.manifest["key"], "bundled");
        assert_eq!(plan.package, Some(bundle));
    }
}
