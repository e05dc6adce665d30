//! npm: npm itself resolves the exact version's whole tree into `package-lock.json`
//! (`--package-lock-only`, nothing run), refuses install scripts unless allowed, then
//! `npm ci` fetches every tarball and checks it against the lockfile's `integrity`. npm works
//! with a private cache in a temporary folder; each tarball is checked again here from that
//! cache (which also gives its size). `--no-bin-links`: a release holds no links.

use std::collections::BTreeMap;
use std::path::Path;

use base64::Engine;
use sha2::Digest;

use super::event::{PinEvent, Progress};
use super::files::{blocking, io};
use super::tool::Tool;
use crate::error::MarketError;
use crate::plan::{LockedArtefact, PinOptions, Pinned};

const NPM: Tool = Tool {
    name: "npm",
    program: if cfg!(windows) { "npm.cmd" } else { "npm" },
    fix: "install Node.js with npm to pin npm packages",
};

const NODE: Tool = Tool {
    name: "node",
    program: "node",
    fix: "install Node.js to run npm packages",
};

/// One package of `package-lock.json`'s `packages` map.
#[derive(Debug, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct LockEntry {
    name: Option<String>,
    version: Option<String>,
    resolved: Option<String>,
    integrity: Option<String>,
    #[serde(default)]
    has_install_script: bool,
    #[serde(default)]
    in_bundle: bool,
    #[serde(default)]
    link: bool,
}

/// A package of the tree: its path under the release (`node_modules/a/node_modules/b`).
struct TreePackage {
    path: String,
    name: String,
    entry: LockEntry,
}

pub(super) async fn pin(
    name: &str,
    version_asked: &str,
    dir: &Path,
    options: &PinOptions,
    progress: Progress<'_>,
) -> Result<Pinned, MarketError> {
    let spec = format!("{name}@{version_asked}");
    progress(PinEvent::Resolving {
        source: format!("npm:{spec}"),
    });
    let manifest = serde_json::json!({
        "name": "tutti-release",
        "private": true,
        "dependencies": { name: version_asked },
    });
    write_json(&dir.join("package.json"), &manifest)?;
    let cache = tempfile::tempdir().map_err(|source| io(&std::env::temp_dir(), source))?;
    let mut resolve = npm_command(dir, cache.path());
    resolve.args(["install", "--package-lock-only", "--ignore-scripts"]);
    NPM.run(&spec, &mut resolve).await?;

    let tree = read_tree(dir)?;
    let scripts = check_tree(&tree, options)?;
    progress(PinEvent::Downloading {
        artefacts: tree.len(),
        bytes: 0,
    });
    let mut install = npm_command(dir, cache.path());
    install.args(["ci", "--no-bin-links"]);
    if !options.allow_scripts {
        install.arg("--ignore-scripts");
    }
    let out = NPM.output(&mut install).await?;
    if let Some(refusal) = integrity_refusal(&String::from_utf8_lossy(&out.stderr), &tree) {
        return Err(refusal);
    }
    NPM.check(&spec, &out)?;

    let (tree, artefacts) = {
        let (dir, cache) = (dir.to_path_buf(), cache.path().to_path_buf());
        blocking(move || {
            let artefacts = installed_artefacts(&dir, &cache, &tree)?;
            Ok((tree, artefacts))
        })
        .await?
    };
    let bytes = artefacts.iter().map(|a| a.size).sum();
    progress(PinEvent::Downloading {
        artefacts: artefacts.len(),
        bytes,
    });
    progress(PinEvent::Installing {
        artefacts: artefacts.len(),
    });
    let bin = bin_file(dir, name)?;
    // The version npm resolved (the same as asked for an exact version).
    let top = format!("node_modules/{name}");
    let resolved = tree.iter().find(|p| p.path == top);
    let version = resolved.and_then(|p| p.entry.version.clone());
    Ok(Pinned {
        command: "node".into(),
        args: vec![format!("${{release}}/node_modules/{name}/{bin}")],
        env: BTreeMap::new(),
        artefacts,
        interpreter: node_version().await,
        scripts,
        version: version.unwrap_or_else(|| version_asked.to_string()),
        secrets: Vec::new(),
    })
}

/// `npm` in `dir` with its cache (and logs) in `cache`, the lockfile recording `resolved`
/// URLs whatever the user's config says, and no audit, fund or update checks.
fn npm_command(dir: &Path, cache: &Path) -> tokio::process::Command {
    let mut cmd = NPM.command();
    cmd.current_dir(dir)
        .arg("--prefix")
        .arg(dir)
        .arg("--cache")
        .arg(cache)
        .args([
            "--omit-lockfile-registry-resolved=false",
            "--package-lock=true",
            "--no-audit",
            "--no-fund",
            "--no-update-notifier",
            "--loglevel=error",
        ]);
    cmd
}

/// The packages of the tree that have install scripts; refused unless scripts are allowed,
/// and a package without an `integrity` (a git or URL dependency) is refused.
fn check_tree(tree: &[TreePackage], options: &PinOptions) -> Result<Vec<String>, MarketError> {
    let scripts: Vec<String> = tree
        .iter()
        .filter(|p| p.entry.has_install_script)
        .map(|p| p.name.clone())
        .collect();
    if !scripts.is_empty() && !options.allow_scripts {
        return Err(MarketError::InstallScripts {
            packages: scripts.join(", "),
        });
    }
    for package in tree {
        if package.entry.integrity.is_none() {
            return Err(MarketError::Unpinnable {
                artefact: format!("npm {}", package.name),
                problem: "no integrity in the lockfile (a git or URL dependency); only registry packages can be pinned, choose a version that depends on registry packages".into(),
            });
        }
    }
    Ok(scripts)
}

/// npm's own refusal of a tarball unlike its integrity (`EINTEGRITY`: "… wanted sha512-A but
/// got sha512-B"), as the market's hash mismatch naming the package of the tree it is for.
fn integrity_refusal(stderr: &str, tree: &[TreePackage]) -> Option<MarketError> {
    let rest = stderr.split(" wanted ").nth(1)?;
    let (expected, rest) = rest.split_once(" but got ")?;
    let got = rest.split_whitespace().next()?.trim_end_matches('.');
    let package = tree.iter().find(|p| {
        let integrity = p.entry.integrity.as_deref().unwrap_or_default();
        integrity.split_whitespace().any(|hash| hash == expected)
    });
    let artefact = package.map_or_else(
        || "npm tarball".to_string(),
        |p| {
            let version = p.entry.version.as_deref().unwrap_or_default();
            format!("npm {}@{version}", p.name)
        },
    );
    Some(MarketError::HashMismatch {
        artefact,
        expected: expected.to_string(),
        got: got.to_string(),
    })
}

/// The packages of `dir/package-lock.json`, the root excluded, sorted by path.
fn read_tree(dir: &Path) -> Result<Vec<TreePackage>, MarketError> {
    #[derive(serde::Deserialize)]
    struct Lockfile {
        packages: BTreeMap<String, LockEntry>,
    }
    let path = dir.join("package-lock.json");
    let text = std::fs::read_to_string(&path).map_err(|source| io(&path, source))?;
    let lockfile: Lockfile = serde_json::from_str(&text).map_err(|e| MarketError::Unpinnable {
        artefact: path.display().to_string(),
        problem: format!(
            "not a package-lock.json npm could have written ({e}); use npm 7 or later"
        ),
    })?;
    Ok(lockfile
        .packages
        .into_iter()
        .filter(|(path, entry)| !path.is_empty() && !entry.in_bundle && !entry.link)
        .map(|(path, entry)| {
            let from_path = path.rsplit("node_modules/").next().unwrap_or(&path);
            let name = entry.name.clone().unwrap_or_else(|| from_path.to_string());
            TreePackage { path, name, entry }
        })
        .collect())
}

/// The artefacts npm installed (optional packages for other platforms are in the lockfile but
/// not on disk), each checked against its integrity from npm's cache.
fn installed_artefacts(
    dir: &Path,
    cache: &Path,
    tree: &[TreePackage],
) -> Result<Vec<LockedArtefact>, MarketError> {
    let mut out = Vec::new();
    for package in tree.iter().filter(|p| dir.join(&p.path).is_dir()) {
        let integrity = package.entry.integrity.clone().unwrap_or_default();
        let version = package.entry.version.clone().unwrap_or_default();
        let label = format!("npm {}@{version}", package.name);
        let size = cached_tarball_size(cache, &integrity, &label)?;
        out.push(LockedArtefact {
            name: package.name.clone(),
            version,
            url: package.entry.resolved.clone().unwrap_or_default(),
            hash: integrity,
            size,
        });
    }
    Ok(out)
}

/// Finds the tarball with `integrity` in npm's content-addressed cache
/// (`_cacache/content-v2/<algo>/<hex>`), hashes it again and returns its size.
fn cached_tarball_size(cache: &Path, integrity: &str, label: &str) -> Result<u64, MarketError> {
    for hash in integrity.split_whitespace() {
        let Some((algo, b64)) = hash.split_once('-') else {
            continue;
        };
        let Ok(digest) = base64::engine::general_purpose::STANDARD.decode(b64) else {
            continue;
        };
        let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
        if hex.len() < 5 {
            continue;
        }
        let path = cache
            .join("_cacache")
            .join("content-v2")
            .join(algo)
            .join(&hex[..2])
            .join(&hex[2..4])
            .join(&hex[4..]);
        let Ok(bytes) = std::fs::read(&path) else {
            continue;
        };
        let got = match algo {
            "sha512" => sha2::Sha512::digest(&bytes).to_vec(),
            "sha384" => sha2::Sha384::digest(&bytes).to_vec(),
            "sha256" => sha2::Sha256::digest(&bytes).to_vec(),
            _ => continue,
        };
        if got != digest {
            return Err(MarketError::HashMismatch {
                artefact: label.to_string(),
                expected: hash.to_string(),
                got: format!(
                    "{algo}-{}",
                    base64::engine::general_purpose::STANDARD.encode(got)
                ),
            });
        }
        return Ok(bytes.len() as u64);
    }
    Err(MarketError::Unpinnable {
        artefact: label.to_string(),
        problem: format!(
            "its tarball with integrity {integrity} is not in npm's cache after the install; use npm 7 or later (sha256, sha384 or sha512 integrity)"
        ),
    })
}

/// The file of the package's `bin` (the one named after the package, or its only one),
/// relative to the package folder, checked to be a file inside it.
fn bin_file(dir: &Path, name: &str) -> Result<String, MarketError> {
    let package_dir = dir.join("node_modules").join(name);
    let path = package_dir.join("package.json");
    let text = std::fs::read_to_string(&path).map_err(|source| io(&path, source))?;
    let manifest: serde_json::Value = serde_json::from_str(&text).unwrap_or_default();
    let no_entry = |problem: String| MarketError::NoEntryPoint {
        package: format!("npm {name}"),
        problem,
    };
    let unscoped = name.rsplit('/').next().unwrap_or(name);
    let file = match &manifest["bin"] {
        serde_json::Value::String(file) => file.clone(),
        serde_json::Value::Object(bins) => {
            let chosen = bins.get(unscoped).or_else(|| {
                let mut values = bins.values();
                values.next().filter(|_| bins.len() == 1)
            });
            let names: Vec<&str> = bins.keys().map(String::as_str).collect();
            chosen.and_then(|v| v.as_str()).map(str::to_string).ok_or_else(|| {
                no_entry(format!(
                    "several bins ({}) and none named {unscoped}; the market launches one bin, write a release folder for this package instead",
                    names.join(", ")
                ))
            })?
        }
        _ => {
            return Err(no_entry(
                "no bin in its package.json, so there is nothing to launch; choose the package that provides the server's command".into(),
            ));
        }
    };
    let file = file.trim_start_matches("./").replace('\\', "/");
    let inside = !file.is_empty()
        && !file.starts_with('/')
        && !file.split('/').any(|part| part == "..")
        && package_dir.join(&file).is_file();
    if !inside {
        return Err(no_entry(format!(
            "its bin {file:?} is not a file inside the package; choose another version"
        )));
    }
    Ok(file)
}

/// `node --version` (`v22.1.0`), or `None` when node does not answer.
async fn node_version() -> Option<String> {
    let out = NODE.output(NODE.command().arg("--version")).await.ok()?;
    let text = String::from_utf8_lossy(&out.stdout).trim().to_string();
    (out.status.success() && !text.is_empty()).then_some(text)
}

fn write_json(path: &Path, value: &serde_json::Value) -> Result<(), MarketError> {
    let text = serde_json::to_string_pretty(value).unwrap_or_default();
    std::fs::write(path, text + "\n").map_err(|source| io(path, source))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Writes `bytes` into a fake npm cache under the path of `integrity`.
    fn cache_with(cache: &Path, integrity_of: &[u8], bytes: &[u8]) -> String {
        let digest = sha2::Sha512::digest(integrity_of);
        let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
        let dir = cache
            .join("_cacache/content-v2/sha512")
            .join(&hex[..2])
            .join(&hex[2..4]);
        std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("mkdir: {e}"));
        std::fs::write(dir.join(&hex[4..]), bytes).unwrap_or_else(|e| panic!("write: {e}"));
        format!(
            "sha512-{}",
            base64::engine::general_purpose::STANDARD.encode(digest)
        )
    }

    fn package(name: &str, integrity: Option<&str>, has_install_script: bool) -> TreePackage {
        TreePackage {
            path: format!("node_modules/{name}"),
            name: name.to_string(),
            entry: LockEntry {
                name: None,
                version: Some("1.0.0".into()),
                resolved: None,
                integrity: integrity.map(str::to_string),
                has_install_script,
                in_bundle: false,
                link: false,
            },
        }
    }

    #[test]
    fn a_dependency_with_scripts_or_without_integrity_is_refused_by_name() {
        let with_script = [
            package("top", Some("sha512-A"), false),
            package("dep", Some("sha512-B"), true),
        ];
        let err = check_tree(&with_script, &PinOptions::default())
            .err()
            .map(|e| e.to_string());
        assert!(
            err.unwrap_or_default()
                .starts_with("npm package dep has install scripts")
        );
        let allowed = PinOptions {
            allow_scripts: true,
            ..PinOptions::default()
        };
        assert_eq!(
            check_tree(&with_script, &allowed).ok(),
            Some(vec!["dep".to_string()])
        );
        let from_git = [
            package("top", Some("sha512-A"), false),
            package("gitdep", None, false),
        ];
        let err = check_tree(&from_git, &allowed).err().map(|e| e.to_string());
        assert!(
            err.unwrap_or_default()
                .starts_with("npm gitdep: no integrity in the lockfile")
        );
    }

    #[test]
    fn npms_integrity_refusal_becomes_a_hash_mismatch_naming_the_package() {
        let stderr = "npm error code EINTEGRITY\nnpm error sha512-u86s== integrity checksum failed when using sha512: wanted sha512-u86s== but got sha512-MvGf==. (51 bytes)\nnpm error A complete log of this run can be found in: /tmp/x.log\n";
        let tree = [
            package("other", Some("sha512-AAAA=="), false),
            package("tampered", Some("sha1-x sha512-u86s=="), false),
        ];
        let err = integrity_refusal(stderr, &tree).map(|e| e.to_string());
        assert_eq!(
            err.unwrap_or_default(),
            "npm tampered@1.0.0: hash mismatch: expected sha512-u86s==, got sha512-MvGf==; the download is not what the source published, check the source and retry"
        );
        assert!(integrity_refusal("npm error 404 Not Found - GET x", &tree).is_none());
    }

    #[test]
    fn a_cached_tarball_is_measured_when_it_matches_its_integrity() {
        let cache = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
        let integrity = cache_with(cache.path(), b"tarball", b"tarball");
        let size = cached_tarball_size(cache.path(), &integrity, "npm a@1.0.0");
        assert_eq!(size.ok(), Some(7));
    }

    #[test]
    fn a_cached_tarball_unlike_its_integrity_is_refused_naming_both() {
        let cache = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
        let integrity = cache_with(cache.path(), b"tarball", b"tampered");
        let got =
            base64::engine::general_purpose::STANDARD.encode(sha2::Sha512::digest(b"tampered"));
        let err = cached_tarball_size(cache.path(), &integrity, "npm a@1.0.0")
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(
            err.starts_with(&format!(
                "npm a@1.0.0: hash mismatch: expected {integrity}, got sha512-{got};"
            )),
            "{err}"
        );
    }
}
