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
//! **Environment.** [`injection_variable`] names the loader and interpreter-injection
//! variables (they make a program load code from outside the hashed release): refused in
//! `mcp.env` and as secret names unless the install gives `--allow-env NAME`.

use std::path::{Component, Path, PathBuf};

pub const DEFAULT_ALLOWED: &[&str] = &[
    "node", "npx", "python", "python3", "uv", "uvx", "deno", "bun", "docker",
];

/// Name prefixes of loader variables (the dynamic linker of Linux/glibc/musl and of macOS).
pub const INJECTION_PREFIXES: &[&str] = &["LD_", "DYLD_"];

/// Variables that make a shell, a loader or an interpreter run or load code the release did
/// not ship (the one list; SPEC §12 gives its first members). Compared ignoring ASCII case
/// (Windows environment names are case-insensitive).
pub const INJECTION_NAMES: &[&str] = &[
    // Where programs and libraries are found.
    "PATH",
    "GCONV_PATH",
    // Node.js
    "NODE_OPTIONS",
    "NODE_PATH",
    // Python
    "PYTHONPATH",
    "PYTHONSTARTUP",
    "PYTHONHOME",
    "PYTHONUSERBASE",
    "PYTHONINSPECT",
    // Perl, Ruby
    "PERL5LIB",
    "PERLLIB",
    "PERL5OPT",
    "RUBYOPT",
    "RUBYLIB",
    // Shells that source a file at start
    "BASH_ENV",
    "ENV",
    // The JVM
    "JAVA_TOOL_OPTIONS",
    "_JAVA_OPTIONS",
    "JDK_JAVA_OPTIONS",
];

/// Whether `name` is a loader or interpreter-injection variable ([`INJECTION_NAMES`],
/// [`INJECTION_PREFIXES`]).
pub fn injection_variable(name: &str) -> bool {
    let upper = name.to_ascii_uppercase();
    INJECTION_NAMES.contains(&upper.as_str())
        || INJECTION_PREFIXES.iter().any(|p| upper.starts_with(p))
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
        crate::spawn::resolve_program(entry, path_var)
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
            assert!(injection_variable(name), "{name}");
        }
        for name in ["LOG_LEVEL", "GITHUB_TOKEN", "PATHS", "OLD_PATH"] {
            assert!(!injection_variable(name), "{name}");
        }
        assert!(env_allowed("PYTHONPATH", &["pythonpath".into()]));
        assert!(!env_allowed("PYTHONPATH", &[]));
    }
}
