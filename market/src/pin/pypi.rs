//! PyPI: pip resolves the whole tree for this platform and interpreter
//! (`install --dry-run --report`, wheels only unless sdists are allowed) with the index's
//! SHA-256 of every file; `pip download --require-hashes` fetches exactly those files, each is
//! checked again here, and `pip install --no-index --require-hashes --target` puts them into
//! `site-packages/` of the release. A small launcher in the release puts that folder first on
//! `sys.path` and calls the console script's entry point (no shell, no `PYTHONPATH`, which the
//! kernel refuses in `env`); it runs under `python3 -I -B` (isolated, no bytecode written into
//! the hashed release).

use std::collections::BTreeMap;
use std::path::Path;

use tokio::process::Command;

use super::event::{PinEvent, Progress};
use super::files::{blocking, file_sha256, io};
use super::tool::{Tool, summary};
use crate::error::MarketError;
use crate::plan::{LockedArtefact, PinOptions, Pinned};

const PYTHON: Tool = Tool {
    name: "pip",
    program: if cfg!(windows) { "python" } else { "python3" },
    fix: "install Python 3 with pip to pin PyPI packages",
};

/// The launcher's file name in the release.
const LAUNCHER: &str = "tutti-launch.py";

/// One file of the resolved tree: distribution, version, URL and the index's SHA-256.
struct Resolved {
    name: String,
    version: String,
    url: String,
    sha256: String,
}

pub(super) async fn pin(
    name: &str,
    version: &str,
    dir: &Path,
    options: &PinOptions,
    progress: Progress<'_>,
) -> Result<Pinned, MarketError> {
    let spec = requirement(name, version);
    progress(PinEvent::Resolving {
        source: format!("pypi:{spec}"),
    });
    let interpreter = python_version().await?;
    let work = tempfile::tempdir().map_err(|source| io(&std::env::temp_dir(), source))?;
    let resolved = resolve(&spec, work.path(), options, &interpreter).await?;
    progress(PinEvent::Downloading {
        artefacts: resolved.len(),
        bytes: 0,
    });
    let requirements = work.path().join("requirements.txt");
    let lines: String = resolved
        .iter()
        .map(|r| format!("{}=={} --hash=sha256:{}\n", r.name, r.version, r.sha256))
        .collect();
    std::fs::write(&requirements, lines).map_err(|source| io(&requirements, source))?;
    let wheels = work.path().join("files");
    let mut download = pip(work.path(), options, "download");
    download.args(["--require-hashes", "--no-deps", "-d"]);
    download.arg(&wheels).arg("-r").arg(&requirements);
    run_pip(&spec, &mut download).await?;
    let (resolved, artefacts) = {
        let wheels = wheels.clone();
        blocking(move || {
            let artefacts = check_files(&wheels, &resolved)?;
            Ok((resolved, artefacts))
        })
        .await?
    };
    let version = resolved_version(&resolved, name)
        .unwrap_or(version)
        .to_string();
    progress(PinEvent::Downloading {
        artefacts: artefacts.len(),
        bytes: artefacts.iter().map(|a| a.size).sum(),
    });
    progress(PinEvent::Installing {
        artefacts: artefacts.len(),
    });
    install(
        &spec,
        work.path(),
        &wheels,
        &dir.join("site-packages"),
        options,
    )
    .await?;
    write_launcher(dir, name, &version)?;
    Ok(Pinned {
        command: PYTHON.program.into(),
        args: vec!["-I".into(), "-B".into(), format!("${{release}}/{LAUNCHER}")],
        env: BTreeMap::new(),
        artefacts,
        interpreter: Some(interpreter),
        scripts: Vec::new(),
        version,
        secrets: Vec::new(),
    })
}

/// Installs the checked files (`-r requirements.txt` in `work`) from `wheels` into `target`,
/// then compiles their bytecode.
async fn install(
    spec: &str,
    work: &Path,
    wheels: &Path,
    target: &Path,
    options: &PinOptions,
) -> Result<(), MarketError> {
    let mut install = pip(work, options, "install");
    install.args(["--require-hashes", "--no-deps", "--no-compile"]);
    if options.allow_sdist {
        // A source build may need its build requirements from the index.
        install.args(["--find-links"]).arg(wheels);
    } else {
        install.args(["--no-index", "--find-links"]).arg(wheels);
    }
    install.arg("--target").arg(target);
    install.arg("-r").arg(work.join("requirements.txt"));
    run_pip(spec, &mut install).await?;
    // Bytecode validated by the source's hash (not its time), so it stays valid in the
    // kernel's copy and starts are faster; a file that does not compile is left to the source.
    // The staging folder's path is stripped from the file names the bytecode records, so the
    // same wheels give the same bytes wherever they are pinned (`connector sync`).
    let mut compile = PYTHON.command();
    compile.args([
        "-m",
        "compileall",
        "-q",
        "--invalidation-mode",
        "checked-hash",
        "-s",
    ]);
    compile.arg(target);
    PYTHON.output(compile.arg(target)).await?;
    Ok(())
}

/// The requirement pip resolves: `NAME==VERSION`, or `NAME` (the latest) without a version.
fn requirement(name: &str, version: &str) -> String {
    if version.is_empty() {
        name.to_string()
    } else {
        format!("{name}=={version}")
    }
}

/// The version pip resolved for the distribution `name` itself.
fn resolved_version<'a>(resolved: &'a [Resolved], name: &str) -> Option<&'a str> {
    let normal = normalize(name);
    resolved
        .iter()
        .find(|r| normalize(&r.name) == normal)
        .map(|r| r.version.as_str())
}

/// `python3 -m pip SUBCOMMAND` with a private cache under `work`, quiet and never asking.
fn pip(work: &Path, options: &PinOptions, subcommand: &str) -> Command {
    let mut cmd = PYTHON.command();
    cmd.args([
        "-m",
        "pip",
        "--disable-pip-version-check",
        "--no-input",
        "-q",
    ]);
    cmd.arg("--cache-dir").arg(work.join("cache"));
    cmd.arg(subcommand);
    let binary = if options.allow_sdist {
        "--prefer-binary"
    } else {
        "--only-binary=:all:"
    };
    cmd.env("PIP_ROOT_USER_ACTION", "ignore");
    cmd.arg(binary);
    cmd
}

/// `Python 3.12.3`.
async fn python_version() -> Result<String, MarketError> {
    let out = PYTHON
        .run("python3 --version", PYTHON.command().arg("--version"))
        .await?;
    Ok(out.trim().to_string())
}

/// The whole tree of `spec` with the index's hashes, from pip's installation report.
async fn resolve(
    spec: &str,
    work: &Path,
    options: &PinOptions,
    interpreter: &str,
) -> Result<Vec<Resolved>, MarketError> {
    let report = work.join("report.json");
    let mut cmd = pip(work, options, "install");
    cmd.args(["--dry-run", "--ignore-installed", "--report"]);
    cmd.arg(&report).arg(spec);
    let out = PYTHON.output(&mut cmd).await?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() && stderr.contains("No matching distribution") && !options.allow_sdist
    {
        return Err(MarketError::NoWheel {
            package: spec.to_string(),
            interpreter: interpreter.to_string(),
            detail: summary(&stderr, out.status),
        });
    }
    if let Some(refusal) = hash_refusal(&stderr) {
        return Err(refusal);
    }
    PYTHON.check(spec, &out)?;
    let text = std::fs::read_to_string(&report).map_err(|source| io(&report, source))?;
    parse_report(&text, options)
}

/// Runs a pip command to its end: pip's refusal of a file unlike its hash is a hash mismatch,
/// any other failure the tool's.
async fn run_pip(spec: &str, cmd: &mut Command) -> Result<(), MarketError> {
    let out = PYTHON.output(cmd).await?;
    if let Some(refusal) = hash_refusal(&String::from_utf8_lossy(&out.stderr)) {
        return Err(refusal);
    }
    PYTHON.check(spec, &out)
}

/// pip's own refusal of a downloaded file unlike the hash its index or our requirements give
/// (`NAME==VERSION from URL:`, then `Expected sha256 A` and `Got B`), as the market's hash
/// mismatch naming the distribution and the file.
fn hash_refusal(stderr: &str) -> Option<MarketError> {
    let mut artefact = None;
    let mut expected = None;
    for line in stderr.lines().map(str::trim) {
        if let Some(hash) = line.strip_prefix("Expected sha256 ") {
            expected = expected.or(Some(hash.trim()));
        } else if let (Some(hash), Some(expected)) = (line.strip_prefix("Got "), expected) {
            return Some(MarketError::HashMismatch {
                artefact: artefact.unwrap_or_else(|| "pypi file".to_string()),
                expected: format!("sha256-{expected}"),
                got: format!("sha256-{}", hash.trim()),
            });
        } else if let Some((requirement, url)) =
            line.strip_suffix(':').and_then(|l| l.split_once(" from "))
        {
            let file = url.split(['#', '?']).next().unwrap_or_default();
            let file = file.rsplit('/').next().unwrap_or_default();
            artefact = Some(format!("pypi {requirement} ({file})"));
        }
    }
    None
}

/// The `install` entries of a pip report; a file without a SHA-256 from its index, or an
/// sdist when sdists are not allowed, is refused.
fn parse_report(text: &str, options: &PinOptions) -> Result<Vec<Resolved>, MarketError> {
    let report: serde_json::Value =
        serde_json::from_str(text).map_err(|e| MarketError::Unpinnable {
            artefact: "pip's installation report".into(),
            problem: format!("unreadable ({e}); use pip 23 or later"),
        })?;
    let mut out = Vec::new();
    for item in report["install"].as_array().into_iter().flatten() {
        let name = item["metadata"]["name"].as_str().unwrap_or_default();
        let version = item["metadata"]["version"].as_str().unwrap_or_default();
        let url = item["download_info"]["url"].as_str().unwrap_or_default();
        let label = format!("pypi {name}=={version}");
        let Some(sha256) = item["download_info"]["archive_info"]["hashes"]["sha256"].as_str()
        else {
            return Err(MarketError::Unpinnable {
                artefact: label,
                problem: format!(
                    "{url} comes without a SHA-256 from its index; use an index that publishes hashes (PyPI does)"
                ),
            });
        };
        if !url.ends_with(".whl") && !options.allow_sdist {
            return Err(MarketError::Unpinnable {
                artefact: label,
                problem:
                    "only a source distribution was found; allow building it with --allow-sdist"
                        .into(),
            });
        }
        out.push(Resolved {
            name: name.to_string(),
            version: version.to_string(),
            url: url.to_string(),
            sha256: sha256.to_ascii_lowercase(),
        });
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(out)
}

/// Checks every downloaded file against the index's SHA-256 (by its file name in the URL).
fn check_files(files: &Path, resolved: &[Resolved]) -> Result<Vec<LockedArtefact>, MarketError> {
    let mut out = Vec::new();
    for r in resolved {
        let file_name = r.url.rsplit('/').next().unwrap_or_default();
        let file_name = file_name.split(['#', '?']).next().unwrap_or_default();
        let (got, size) = file_sha256(&files.join(file_name))?;
        if got != r.sha256 {
            return Err(MarketError::HashMismatch {
                artefact: format!("pypi {}=={} ({file_name})", r.name, r.version),
                expected: format!("sha256-{}", r.sha256),
                got: format!("sha256-{got}"),
            });
        }
        out.push(LockedArtefact {
            name: r.name.clone(),
            version: r.version.clone(),
            url: r.url.clone(),
            hash: format!("sha256-{got}"),
            size,
        });
    }
    Ok(out)
}

/// Writes the launcher that runs the distribution's console script (the one named after it,
/// or its only one), else its module with `-m`'s semantics.
fn write_launcher(dir: &Path, name: &str, version: &str) -> Result<(), MarketError> {
    let site = dir.join("site-packages");
    let normal = normalize(name);
    let entry_points = dist_info(&site, &normal)
        .and_then(|d| std::fs::read_to_string(d.join("entry_points.txt")).ok())
        .unwrap_or_default();
    let scripts = console_scripts(&entry_points);
    let chosen = scripts
        .iter()
        .find(|(script, _)| normalize(script) == normal)
        .or_else(|| scripts.first().filter(|_| scripts.len() == 1));
    let call = match chosen {
        Some((script, target)) => entry_point_call(script, target).ok_or_else(|| {
            MarketError::NoEntryPoint {
                package: format!("pypi {name}"),
                problem: format!("its console script {script} = {target} is not module:function; write a release folder for this package instead"),
            }
        })?,
        None if identifier(&normal) && site.join(&normal).join("__main__.py").is_file() => format!(
            "import runpy\nsys.argv[0] = {normal:?}\nrunpy.run_module({normal:?}, run_name=\"__main__\", alter_sys=True)\n"
        ),
        None => {
            return Err(MarketError::NoEntryPoint {
                package: format!("pypi {name}"),
                problem: "no console script named after it and no runnable module; choose the distribution that provides the server's command".into(),
            });
        }
    };
    let text = format!(
        "# Written by tutti at install: runs {name} {version} from this release's own files.\nimport sys\nfrom os.path import abspath, dirname, join\nsys.dont_write_bytecode = True\nsys.path[:0] = [join(dirname(abspath(__file__)), \"site-packages\")]\n{call}"
    );
    let path = dir.join(LAUNCHER);
    std::fs::write(&path, text).map_err(|source| io(&path, source))
}

/// `[console_scripts]` of an `entry_points.txt`: (name, `module:attr`), in file order.
fn console_scripts(text: &str) -> Vec<(String, String)> {
    let mut in_section = false;
    let mut out = Vec::new();
    for line in text.lines().map(str::trim) {
        if line.starts_with('[') {
            in_section = line == "[console_scripts]";
        } else if let Some((key, value)) = line.split_once('=').filter(|_| in_section) {
            out.push((key.trim().to_string(), value.trim().to_string()));
        }
    }
    out
}

/// The Python lines that call `module:attr.attr` (extras dropped). `None` unless every part
/// is a plain identifier, so nothing from the wheel can inject code into the launcher.
fn entry_point_call(script: &str, target: &str) -> Option<String> {
    let target = target.split('[').next()?.trim();
    let (module, attrs) = target.split_once(':')?;
    let (module, attrs) = (module.trim(), attrs.trim());
    let dotted = |s: &str| s.split('.').all(identifier);
    let script_ok = script
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c));
    if !(dotted(module) && dotted(attrs) && script_ok) {
        return None;
    }
    Some(format!(
        "from importlib import import_module\nsys.argv[0] = {script:?}\ntarget = import_module({module:?})\nfor attr in {attrs:?}.split(\".\"):\n    target = getattr(target, attr)\nsys.exit(target())\n"
    ))
}

/// A plain ASCII Python identifier.
fn identifier(s: &str) -> bool {
    let mut chars = s.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// The `.dist-info` folder of the distribution whose normalized name is `normal`.
fn dist_info(site: &Path, normal: &str) -> Option<std::path::PathBuf> {
    std::fs::read_dir(site).ok()?.flatten().find_map(|entry| {
        let file_name = entry.file_name();
        let file_name = file_name.to_str()?;
        let stem = file_name.strip_suffix(".dist-info")?;
        let dist = stem.split('-').next()?;
        (normalize(dist) == normal).then(|| entry.path())
    })
}

/// A distribution name as wheels spell it in `.dist-info` folders (PEP 503, `-`/`.` → `_`).
fn normalize(name: &str) -> String {
    name.to_ascii_lowercase().replace(['-', '.'], "_")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_downloaded_file_unlike_the_index_hash_is_refused_naming_both() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
        std::fs::write(dir.path().join("a-1.0-py3-none-any.whl"), "not the wheel")
            .unwrap_or_else(|e| panic!("write: {e}"));
        let expected = "ab".repeat(32);
        let resolved = [Resolved {
            name: "a".into(),
            version: "1.0".into(),
            url: "https://files.example/a-1.0-py3-none-any.whl".into(),
            sha256: expected.clone(),
        }];
        let err = check_files(dir.path(), &resolved)
            .err()
            .map(|e| e.to_string());
        let got = crate::pin::files::sha256_hex(b"not the wheel");
        assert_eq!(
            err.unwrap_or_default(),
            format!(
                "pypi a==1.0 (a-1.0-py3-none-any.whl): hash mismatch: expected sha256-{expected}, got sha256-{got}; the download is not what the source published, check the source and retry"
            )
        );
    }

    #[test]
    fn pips_hash_refusal_becomes_a_hash_mismatch_naming_the_file() {
        let stderr = "ERROR: THESE PACKAGES DO NOT MATCH THE HASHES FROM THE REQUIREMENTS FILE. If you have updated the package versions, please update the hashes. Otherwise, examine the package contents carefully; someone may have tampered with them.\n    tutti-tampered==1.0.0 from http://127.0.0.1:9/pypi/files/tutti_tampered-1.0.0-py3-none-any.whl#sha256=df6a:\n        Expected sha256 df6a\n             Got        6a1d\n\n";
        let err = hash_refusal(stderr).map(|e| e.to_string());
        assert_eq!(
            err.unwrap_or_default(),
            "pypi tutti-tampered==1.0.0 (tutti_tampered-1.0.0-py3-none-any.whl): hash mismatch: expected sha256-df6a, got sha256-6a1d; the download is not what the source published, check the source and retry"
        );
        let other = "ERROR: Could not find a version that satisfies the requirement x==1 (from versions: none)\n";
        assert!(hash_refusal(other).is_none());
    }

    #[test]
    fn without_a_version_pip_resolves_the_latest_and_the_resolved_one_is_pinned() {
        assert_eq!(requirement("mcp-server-time", ""), "mcp-server-time");
        assert_eq!(
            requirement("mcp-server-time", "2026.10.19"),
            "mcp-server-time==2026.10.19"
        );
        let resolved = |name: &str, version: &str| Resolved {
            name: name.into(),
            version: version.into(),
            url: String::new(),
            sha256: String::new(),
        };
        let tree = [
            resolved("mcp", "1.2.0"),
            resolved("MCP_Server.Time", "2026.10.19"),
        ];
        assert_eq!(
            resolved_version(&tree, "mcp-server-time"),
            Some("2026.10.19")
        );
    }

    #[test]
    fn console_scripts_are_read_from_their_section_only() {
        let text =
            "[gui_scripts]\nx = a:b\n\n[console_scripts]\nmcp-server-time = mcp_server_time:main\n";
        assert_eq!(
            console_scripts(text),
            vec![(
                "mcp-server-time".to_string(),
                "mcp_server_time:main".to_string()
            )]
        );
    }

    #[test]
    fn an_entry_point_that_is_not_module_and_function_is_refused() {
        assert!(entry_point_call("s", "pkg.mod:main.run [extra]").is_some());
        assert!(entry_point_call("s", "os; import x:main").is_none());
        assert!(entry_point_call("s", "mod:main()").is_none());
        assert!(entry_point_call("s\"", "mod:main").is_none());
    }
}
