//! An entry's launch line read as a package the market can pin (SPEC §18): `npx -y pkg@1.2.3
//! arg…`, `bunx pkg`, `pnpm dlx pkg`, `uvx pkg==1.2`, `uvx --from pkg pkg`, `pipx run pkg`,
//! `docker run … image`. A pure function of the command and its arguments.

use std::path::Path;

/// A launch that runs a package: the market source and what stays around it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Packaged {
    /// `npm:NAME[@VERSION]`, `pypi:NAME[@VERSION]` or `oci:IMAGE` (no version: the latest).
    pub(crate) source: String,
    /// The package's own arguments (after the package in the launch line).
    pub(crate) args: Vec<String>,
    /// `docker run` options other than `-i`/`--rm`/`-t` (before the image).
    pub(crate) runtime_args: Vec<String>,
}

/// `Ok(None)`: not a package launcher. `Err`: a package launcher whose line is not read as
/// one package (the reason).
pub(crate) fn packaged(command: &str, args: &[String]) -> Result<Option<Packaged>, String> {
    let program = Path::new(command)
        .file_stem()
        .and_then(|s| s.to_str())
        .unwrap_or_default();
    let sub = |name: &str| (args.first().map(String::as_str) == Some(name)).then(|| &args[1..]);
    let subcommand = |name: &str| sub(name).ok_or(format!("{program} without {name}"));
    match program {
        "npx" | "bunx" => npm(args).map(Some),
        "pnpm" => npm(subcommand("dlx")?).map(Some),
        "uvx" => pypi(args, "--from").map(Some),
        "pipx" => pypi(subcommand("run")?, "--spec").map(Some),
        "docker" | "podman" => oci(subcommand("run")?).map(Some),
        _ => Ok(None),
    }
}

/// Options of the npm runners that change nothing a pinned release runs.
const NPM_FLAGS: &[&str] = &["-y", "--yes", "-q", "--quiet", "--silent", "-s", "--bun"];

fn npm(args: &[String]) -> Result<Packaged, String> {
    let (spec, rest) = first_positional(args, NPM_FLAGS, &[])?;
    let bad = spec.starts_with(['.', '/', '~']) || spec.contains(':') || spec.contains('#');
    let name_end = spec
        .char_indices()
        .skip(1)
        .find(|(_, c)| *c == '@')
        .map_or(spec.len(), |(i, _)| i);
    if bad || spec[..name_end].is_empty() {
        return Err(format!("{spec:?} is not an npm package name"));
    }
    Ok(Packaged {
        source: format!("npm:{spec}"),
        args: rest,
        runtime_args: Vec::new(),
    })
}

fn pypi(args: &[String], from: &str) -> Result<Packaged, String> {
    let (first, rest) = first_positional(args, &["-q", "--quiet"], &[from])?;
    let given = option_value(args, from);
    let spec = given.clone().unwrap_or(first.clone());
    let (name, version) = match spec.split_once("==").or_else(|| spec.split_once('@')) {
        Some((n, v)) => (n.trim(), Some(v.trim())),
        None => (spec.trim(), None),
    };
    let plain = |c: char| c.is_ascii_alphanumeric() || "-_.".contains(c);
    if name.is_empty() || !name.chars().all(plain) {
        return Err(format!(
            "{spec:?} is not a PyPI package name (or name==version)"
        ));
    }
    // `--from pkg cmd`: the pinned release runs the console script named after pkg.
    if given.is_some() && normal(&first) != normal(name) {
        return Err(format!(
            "it runs {first:?} from {name}; a pinned release runs the command named after the package"
        ));
    }
    Ok(Packaged {
        source: match version {
            Some(v) => format!("pypi:{name}@{v}"),
            None => format!("pypi:{name}"),
        },
        args: rest,
        runtime_args: Vec::new(),
    })
}

/// `docker run` options that take a value as the next item.
const DOCKER_VALUED: &[&str] = &[
    "-e",
    "--env",
    "--env-file",
    "-v",
    "--volume",
    "--mount",
    "--network",
    "--name",
    "-p",
    "--publish",
    "-w",
    "--workdir",
    "-u",
    "--user",
    "-l",
    "--label",
    "--platform",
    "--entrypoint",
];

fn oci(args: &[String]) -> Result<Packaged, String> {
    let mut runtime_args = Vec::new();
    let mut i = 0;
    while i < args.len() && args[i].starts_with('-') {
        let option = args[i].as_str();
        if DOCKER_VALUED.contains(&option) {
            let value = args.get(i + 1).ok_or(format!("{option} without a value"))?;
            runtime_args.extend([option.to_owned(), value.clone()]);
            i += 2;
            continue;
        }
        if !matches!(
            option,
            "-i" | "--interactive" | "--rm" | "-t" | "-it" | "--tty"
        ) {
            runtime_args.push(option.to_owned());
        }
        i += 1;
    }
    let image = args.get(i).ok_or("docker run without an image")?;
    Ok(Packaged {
        source: format!("oci:{image}"),
        args: args[i + 1..].to_vec(),
        runtime_args,
    })
}

/// The first argument that is not an option (nor an option's value), and those after it.
fn first_positional(
    args: &[String],
    flags: &[&str],
    valued: &[&str],
) -> Result<(String, Vec<String>), String> {
    let mut i = 0;
    while let Some(arg) = args.get(i) {
        if arg == "--" {
            i += 1;
            break;
        }
        if valued.contains(&arg.as_str()) {
            i += 2;
        } else if flags.contains(&arg.as_str()) || valued.iter().any(|v| is_assigned(arg, v)) {
            i += 1;
        } else if arg.starts_with('-') {
            return Err(format!("option {arg} is not read here"));
        } else {
            break;
        }
    }
    let first = args.get(i).ok_or("no package named")?;
    Ok((first.clone(), args[i + 1..].to_vec()))
}

fn is_assigned(arg: &str, option: &str) -> bool {
    arg.strip_prefix(option).is_some_and(|r| r.starts_with('='))
}

/// The value of `option` (`--from X` or `--from=X`).
fn option_value(args: &[String], option: &str) -> Option<String> {
    args.iter().enumerate().find_map(|(i, a)| {
        if a == option {
            args.get(i + 1).cloned()
        } else {
            a.strip_prefix(option)
                .and_then(|r| r.strip_prefix('='))
                .map(str::to_owned)
        }
    })
}

/// A PyPI name as PyPI compares them (case, `-`, `_` and `.` alike).
fn normal(name: &str) -> String {
    name.to_ascii_lowercase().replace(['_', '.'], "-")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(line: &str) -> Result<Option<Packaged>, String> {
        let mut words = line.split_whitespace().map(str::to_owned);
        let command = words.next().unwrap_or_default();
        packaged(&command, &words.collect::<Vec<_>>())
    }

    #[test]
    fn package_launch_lines_become_market_sources() {
        let table: &[(&str, &str, &[&str], &[&str])] = &[
            (
                "npx -y @scope/pkg@1.2.3 stdio --x",
                "npm:@scope/pkg@1.2.3",
                &["stdio", "--x"],
                &[],
            ),
            ("npx pkg", "npm:pkg", &[], &[]),
            ("/usr/bin/npx --yes -- pkg@2 a", "npm:pkg@2", &["a"], &[]),
            ("bunx --bun pkg", "npm:pkg", &[], &[]),
            ("pnpm dlx @a/b@1 c", "npm:@a/b@1", &["c"], &[]),
            (
                "uvx mcp-server-time==1.2 --tz x",
                "pypi:mcp-server-time@1.2",
                &["--tz", "x"],
                &[],
            ),
            ("uvx mcp-server-time", "pypi:mcp-server-time", &[], &[]),
            (
                "uvx --from mcp_server_time==0.6 mcp-server-time -v",
                "pypi:mcp_server_time@0.6",
                &["-v"],
                &[],
            ),
            ("pipx run pkg a", "pypi:pkg", &["a"], &[]),
            ("pipx run --spec pkg==1 pkg", "pypi:pkg@1", &[], &[]),
            (
                "docker run -i --rm -e GITHUB_TOKEN ghcr.io/a/b:1 stdio",
                "oci:ghcr.io/a/b:1",
                &["stdio"],
                &["-e", "GITHUB_TOKEN"],
            ),
            ("podman run ghcr.io/a/b", "oci:ghcr.io/a/b", &[], &[]),
        ];
        for (line, source, args, runtime_args) in table {
            let got = read(line)
                .unwrap_or_else(|e| panic!("{line}: {e}"))
                .unwrap_or_else(|| panic!("{line}: not a package"));
            assert_eq!(got.source, *source, "{line}");
            assert_eq!(got.args, *args, "{line}");
            assert_eq!(got.runtime_args, *runtime_args, "{line}");
        }
    }

    #[test]
    fn other_programs_are_not_packages_and_unreadable_lines_are_refused() {
        for line in [
            "node server.js",
            "python -m x",
            "/opt/bin/tutti-fixture-server",
        ] {
            assert_eq!(read(line), Ok(None), "{line}");
        }
        for line in [
            "npx",
            "npx ./local-dir",
            "npx github:a/b",
            "npx --registry https://x pkg",
            "pnpm install pkg",
            "uvx --from pkg other-command",
            "uvx --python 3.12 pkg",
            "uvx git+https://x/y",
            "pipx install pkg",
            "docker build .",
            "docker run -i --rm",
        ] {
            assert!(read(line).is_err(), "{line}: {:?}", read(line));
        }
    }
}
