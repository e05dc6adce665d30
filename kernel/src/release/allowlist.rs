//! Launch rules (SPEC §12 "Launch rules, exactly"): what a stdio connector may run, and which
//! environment variables it may set.
//!
//! **Programs.** A command is checked by its *real* path (`..` and symlinks resolved, see
//! `manifest::stdio_launch_from`), and it may run when that real path is
//! - inside the kernel's hashed copy of the release (`releases/<key>/<sha256>/`; never the
//!   folder it was installed from: an absolute path into that folder is refused),
//! - inside the runtime's own directory (binaries shipped with Tutti, e.g. the demo's fixture),
//! - or the program an allowlist entry stands for. A bare-name entry (`node`) stands only for
//!   the program PATH resolves that name to (its real path), so a file that merely has an
//!   allowlisted name (`/tmp/evil/node`) is not allowlisted; an absolute-path entry stands for
//!   that file. Entries: the defaults, the owner's `TUTTI_ALLOW_COMMANDS` (comma-separated, read
//!   by the kernel at each check) and the install's `--allow-command NAME|PATH`.
//!
//! **Environment.** [`INJECTION_VARIABLES`] is the one table of loader and
//! interpreter-injection variables (they make a program load code from outside the hashed
//! release); [`injection_variable`] looks a name up in it: refused in `mcp.env` and as secret
//! names unless the install gives `--allow-env NAME`.

use std::path::{Component, Path, PathBuf};

pub const DEFAULT_ALLOWED: &[&str] = &[
    "node", "npx", "python", "python3", "uv", "uvx", "deno", "bun", "docker",
];

/// One row of [`INJECTION_VARIABLES`]: a variable name, or a name prefix when it ends in
/// `*`, and what it makes a program load or run.
pub struct Injection {
    pub pattern: &'static str,
    pub what: &'static str,
}

const fn row(pattern: &'static str, what: &'static str) -> Injection {
    Injection { pattern, what }
}

/// Variables that make a shell, a loader, an interpreter or a package manager run or load code
/// the release did not ship: the one list (SPEC §12 gives its first members), checked by
/// install, probe and every other check through [`injection_variable`]. Compared ignoring
/// ASCII case (Windows environment names are case-insensitive; `npm_config_*` is read in
/// either case).
pub const INJECTION_VARIABLES: &[Injection] = &[
    row("LD_*", "the dynamic loader preloads libraries from it"),
    row("DYLD_*", "the macOS loader preloads libraries from it"),
    row("GLIBC_TUNABLES", "it changes how the C library loads"),
    row("GCONV_PATH", "the C library loads charset modules from it"),
    row("PATH", "it decides which programs run"),
    row(
        "PATHEXT",
        "it decides which files run as programs on Windows",
    ),
    row("COMSPEC", "it names the shell Windows programs start"),
    row(
        "HOME",
        "interpreters and tools read startup files and user packages under it (Python's usercustomize, .npmrc, .gitconfig)",
    ),
    row(
        "USERPROFILE",
        "Windows tools read startup files and user packages under it",
    ),
    row("APPDATA", "Windows tools read their configuration under it"),
    row(
        "LOCALAPPDATA",
        "Windows tools read their configuration under it",
    ),
    row("XDG_*", "tools read their configuration and data under it"),
    row("ZDOTDIR", "zsh runs its startup files from it"),
    row("BASH_ENV", "bash runs the file it names"),
    row("ENV", "sh runs the file it names"),
    row("BASH_FUNC_*", "bash imports shell functions from it"),
    row("NODE_OPTIONS", "Node.js loads the modules it names"),
    row("NODE_PATH", "Node.js finds modules in it"),
    row(
        "NPM_CONFIG_*",
        "npm reads its settings (scripts, registry, node options) from it",
    ),
    row("YARN_*", "yarn reads its settings from it"),
    row("BUN_OPTIONS", "bun adds its arguments"),
    row("DENO_DIR", "deno runs cached modules from it"),
    row("PYTHONPATH", "Python imports modules from it"),
    row("PYTHONSTARTUP", "Python runs the file it names"),
    row("PYTHONHOME", "Python loads its standard library from it"),
    row(
        "PYTHONUSERBASE",
        "Python imports user packages and usercustomize from it",
    ),
    row("PYTHONINSPECT", "Python reads commands after the program"),
    row("PYTHONBREAKPOINT", "Python imports the callable it names"),
    row("PYTHONEXECUTABLE", "Python takes it for its own program"),
    row("PYTHONPLATLIBDIR", "Python loads its library from it"),
    row(
        "VIRTUAL_ENV",
        "uv and other tools use the environment it names",
    ),
    row(
        "PIP_*",
        "pip reads its settings (index, packages to install) from it",
    ),
    row(
        "UV_*",
        "uv reads its settings (index, Python, environment) from it",
    ),
    row("PERL5*", "Perl loads modules or options from it"),
    row("PERLLIB", "Perl loads modules from it"),
    row("RUBY*", "Ruby loads libraries or options from it"),
    row("GEM_*", "Ruby loads gems from it"),
    row(
        "BUNDLE_*",
        "bundler reads its settings (the Gemfile) from it",
    ),
    row("LUA_*", "Lua runs code or loads modules from it"),
    row(
        "PHPRC",
        "PHP reads its settings (auto_prepend_file) from it",
    ),
    row("PHP_INI_SCAN_DIR", "PHP reads its settings from it"),
    row(
        "JAVA_TOOL_OPTIONS",
        "the JVM loads the agents and options it names",
    ),
    row("_JAVA_OPTIONS", "the JVM takes its options"),
    row("JDK_JAVA_OPTIONS", "the JVM takes its options"),
    row("CLASSPATH", "the JVM loads classes from it"),
    row("DOTNET_STARTUP_HOOKS", ".NET loads the assemblies it names"),
    row(
        "GIT_CONFIG*",
        "git reads settings (core.sshCommand, hooks) from it",
    ),
    row("GIT_EXEC_PATH", "git runs its commands from it"),
    row("GIT_SSH", "git runs the program it names"),
    row("GIT_SSH_COMMAND", "git runs the command it names"),
    row("GIT_ASKPASS", "git runs the program it names"),
    row("GIT_EDITOR", "git runs the program it names"),
    row("GIT_PAGER", "git runs the program it names"),
    row("GIT_EXTERNAL_DIFF", "git runs the program it names"),
    row("GIT_PROXY_COMMAND", "git runs the command it names"),
    row("GIT_TEMPLATE_DIR", "git copies hooks from it"),
    row("SSH_ASKPASS", "ssh runs the program it names"),
];

/// The row of [`INJECTION_VARIABLES`] that `name` matches, if any.
pub fn injection_variable(name: &str) -> Option<&'static Injection> {
    let upper = name.to_ascii_uppercase();
    INJECTION_VARIABLES
        .iter()
        .find(|i| match i.pattern.strip_suffix('*') {
            Some(prefix) => upper.starts_with(prefix),
            None => upper == i.pattern,
        })
}

/// Whether `allowed` (the install's `--allow-env` names) allows the variable `name`.
pub fn env_allowed(name: &str, allowed: &[String]) -> bool {
    allowed.iter().any(|a| a.eq_ignore_ascii_case(name))
}

/// The program name used in messages: the file name without an executable extension
/// (`node.exe` → `node`).
pub fn program_name(program: &Path) -> String {
    let name = program
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    for ext in [".exe", ".cmd", ".bat", ".com"] {
        if let Some(stem) = name.to_ascii_lowercase().strip_suffix(ext) {
            return name[..stem.len()].to_string();
        }
    }
    name
}

/// Where a launch is checked: the directories and lists the rules above refer to.
pub struct Rules<'a> {
    /// The kernel's copy of the release (it need not exist yet at install time).
    pub release: &'a Path,
    /// The folder the release is installed from, at install time: only to say why a path
    /// into it is refused.
    pub source: Option<&'a Path>,
    pub runtime_dir: &'a Path,
    pub owner_allowed: &'a [String],
    pub install_allowed: &'a [String],
    /// The PATH bare names are resolved on (the upstream's own).
    pub path_var: &'a str,
}

/// `program` with nothing but plain names after `dir`: a path
/// `manifest::stdio_launch_from` built inside the release from a resolved real path.
fn plainly_inside(program: &Path, dir: &Path) -> bool {
    program.strip_prefix(dir).is_ok_and(|rest| {
        rest.components().next().is_some()
            && rest.components().all(|c| matches!(c, Component::Normal(_)))
    })
}

fn real(p: &Path) -> Option<PathBuf> {
    std::fs::canonicalize(p).ok()
}

/// The real path an allowlist entry stands for, if any.
fn entry_target(entry: &str, path_var: &str) -> Option<PathBuf> {
    let p = Path::new(entry);
    if p.is_absolute() {
        real(p)
    } else if p.components().count() == 1 {
        crate::supervisor::spawn::resolve_program(entry, path_var)
            .ok()
            .and_then(|found| real(&found))
    } else {
        None
    }
}

/// `Ok` when `program` (as resolved by the launch plan) may run; `Err` is the refusal line,
/// which says how to allow it.
pub fn check(program: &Path, rules: &Rules<'_>) -> Result<(), String> {
    if plainly_inside(program, rules.release) {
        return Ok(());
    }
    let Some(real_path) = real(program) else {
        return Err(refusal(
            program,
            None,
            "it cannot be resolved to a real file",
        ));
    };
    let inside = |dir: &Path| real(dir).is_some_and(|d| real_path.starts_with(d));
    if let Some(src) = rules.source.filter(|src| inside(src)) {
        // Before any allowlist entry: nothing runs from the source folder, whatever allows it.
        return Err(from_source(program, &real_path, src));
    }
    if inside(rules.release) || inside(rules.runtime_dir) {
        return Ok(());
    }
    let entries = DEFAULT_ALLOWED
        .iter()
        .copied()
        .chain(rules.owner_allowed.iter().map(String::as_str))
        .chain(rules.install_allowed.iter().map(String::as_str));
    let mut named_like_it = None;
    let name = program_name(&real_path);
    for entry in entries {
        let target = entry_target(entry, rules.path_var);
        if target.as_deref() == Some(real_path.as_path()) {
            return Ok(());
        }
        if entry == name || entry == program_name(program) {
            named_like_it = Some((entry, target));
        }
    }
    Err(explain(program, &real_path, named_like_it, rules))
}

fn refusal(program: &Path, real_path: Option<&Path>, why: &str) -> String {
    let really = match real_path {
        Some(r) if r != program => format!(" (really {:?})", r.display().to_string()),
        _ => String::new(),
    };
    format!(
        "connector.json: mcp.command: {:?}{really} is not allowed by the launch allowlist: {why}",
        program.display().to_string()
    )
}

fn from_source(program: &Path, real_path: &Path, source: &Path) -> String {
    let rel = real(source)
        .and_then(|src| real_path.strip_prefix(src).ok().map(Path::to_path_buf))
        .unwrap_or_default();
    let why = format!(
        "it is in the folder the release is installed from, and a release's files run only from the kernel's hashed copy; write it as \"${{release}}/{}\"",
        rel.display()
    );
    refusal(program, Some(real_path), &why)
}

fn explain(
    program: &Path,
    real_path: &Path,
    named_like_it: Option<(&str, Option<PathBuf>)>,
    rules: &Rules<'_>,
) -> String {
    let why = match named_like_it {
        Some((entry, target)) => format!(
            "it is outside the release, and the allowlisted name {entry:?} stands only for the program PATH finds for it ({}); to allow this file, install with --allow-command {}",
            target.map_or_else(
                || "none found".to_string(),
                |t| format!("{:?}", t.display().to_string())
            ),
            real_path.display()
        ),
        None => {
            // Suggest a bare name when PATH finds this very program under it (`sh` for
            // /bin/sh, really /usr/bin/dash), else the file itself.
            let names = [program_name(program), program_name(real_path)];
            let by_name = names
                .iter()
                .find(|n| entry_target(n, rules.path_var).as_deref() == Some(real_path));
            format!(
                "it is outside the release and {:?} is not on the launch allowlist ({}); to allow it, install with --allow-command {}",
                names[0],
                DEFAULT_ALLOWED.join(", "),
                by_name
                    .cloned()
                    .unwrap_or_else(|| real_path.display().to_string())
            )
        }
    };
    refusal(program, Some(real_path), &why)
}

/// `TUTTI_ALLOW_COMMANDS` of the kernel's environment.
pub fn owner_allowed() -> Vec<String> {
    std::env::var("TUTTI_ALLOW_COMMANDS")
        .unwrap_or_default()
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect()
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn exe(path: &Path) {
        if let Some(p) = path.parent() {
            std::fs::create_dir_all(p).expect("mkdir");
        }
        std::fs::write(path, "#!/bin/sh\n").expect("write");
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    }

    #[test]
    fn allowlist_rules() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let root = tmp.path();
        let rel = root.join("state/releases/k/abc");
        let src = root.join("src");
        let rt = root.join("libexec");
        let onpath = root.join("onpath");
        for p in [
            rel.join("bin/server"),
            src.join("bin/server"),
            rt.join("tutti-fixture-server"),
            onpath.join("node"),
            onpath.join("sh"),
            root.join("evil/node"),
        ] {
            exe(&p);
        }
        std::os::unix::fs::symlink(onpath.join("node"), root.join("linked-node")).expect("ln");
        let path_var = onpath.to_string_lossy().into_owned();
        let check_with = |program: &Path, install: &[&str]| {
            let install: Vec<String> = install.iter().map(|s| (*s).to_string()).collect();
            check(
                program,
                &Rules {
                    release: &rel,
                    source: Some(&src),
                    runtime_dir: &rt,
                    owner_allowed: &[],
                    install_allowed: &install,
                    path_var: &path_var,
                },
            )
        };
        // Inside the copy, in the runtime dir, the program PATH gives for an allowlisted name
        // (by any path that really is it).
        assert!(check_with(&rel.join("bin/server"), &[]).is_ok());
        assert!(check_with(&rt.join("tutti-fixture-server"), &[]).is_ok());
        assert!(check_with(&onpath.join("node"), &[]).is_ok());
        assert!(check_with(&root.join("linked-node"), &[]).is_ok());
        // `..` out of the copy: judged by where it really is.
        let escaped = rel.join("../../../../../../../../../../../bin/sh");
        let e = check_with(&escaped, &[]).expect_err("escape refused");
        assert!(e.contains("launch allowlist"), "{e}");
        // A file of the source folder never runs.
        let e = check_with(&src.join("bin/server"), &["server"]).expect_err("source refused");
        assert!(e.contains("${release}/bin/server"), "{e}");
        let by_path = src.join("bin/server").display().to_string();
        assert!(
            check_with(&src.join("bin/server"), &[&by_path]).is_err(),
            "not even allowed by path"
        );
        // A file merely named like an allowlisted program.
        let e = check_with(&root.join("evil/node"), &[]).expect_err("name is not enough");
        assert!(e.contains("stands only for"), "{e}");
        assert!(e.starts_with("connector.json: mcp.command: "), "{e}");
        // Not allowlisted: say how; a bare name when PATH finds this very program.
        let e = check_with(&onpath.join("sh"), &[]).expect_err("sh refused");
        assert!(e.contains("--allow-command sh"), "{e}");
        assert!(check_with(&onpath.join("sh"), &["sh"]).is_ok());
        let evil = root.join("evil/node");
        let evil_entry = evil.display().to_string();
        assert!(check_with(&evil, &[&evil_entry]).is_ok(), "a path entry");
        assert_eq!(program_name(Path::new("C:/x/Node.EXE")), "Node");
        assert_eq!(program_name(Path::new("/usr/bin/python3")), "python3");
    }

    #[test]
    fn injection_variables() {
        for name in [
            "PATH",
            "Path",
            "LD_PRELOAD",
            "LD_LIBRARY_PATH",
            "DYLD_INSERT_LIBRARIES",
            "NODE_OPTIONS",
            "PYTHONPATH",
        ] {
            assert!(injection_variable(name).is_some(), "{name}");
        }
        for name in ["LOG_LEVEL", "GITHUB_TOKEN", "PATHS", "OLD_PATH"] {
            assert!(injection_variable(name).is_none(), "{name}");
        }
        assert!(env_allowed("PYTHONPATH", &["pythonpath".into()]));
        assert!(!env_allowed("PYTHONPATH", &[]));
    }

    #[test]
    fn every_row_of_the_table_is_an_upper_case_name_or_prefix() {
        for row in INJECTION_VARIABLES {
            let name = row.pattern.strip_suffix('*').unwrap_or(row.pattern);
            assert!(
                !name.is_empty() && !name.contains('*') && name == name.to_ascii_uppercase(),
                "{}",
                row.pattern
            );
            assert!(!row.what.is_empty(), "{}", row.pattern);
        }
    }
}
