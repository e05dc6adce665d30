//! What a stdio connector may launch (issue: governance). A command is accepted only if it
//! is inside the release, inside the runtime's own directory (binaries shipped with Tutti),
//! or its program name is on the allowlist: the defaults, the owner's `TUTTI_ALLOW_COMMANDS`
//! (comma-separated, read by the kernel at start) and the install's `--allow-command NAME`.

use std::path::Path;

pub const DEFAULT_ALLOWED: &[&str] = &[
    "node", "npx", "python", "python3", "uv", "uvx", "deno", "bun", "docker",
];

/// The program name used for allowlist matching: the file name without an executable
/// extension (`node.exe` → `node`).
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

/// `Ok` when `program` may run; `Err` is the refusal line, which says how to allow it.
pub fn check(
    program: &Path,
    release_dirs: &[&Path],
    runtime_dir: &Path,
    owner_allowed: &[String],
    install_allowed: &[String],
) -> Result<(), String> {
    if release_dirs.iter().any(|d| program.starts_with(d)) || program.starts_with(runtime_dir) {
        return Ok(());
    }
    let name = program_name(program);
    let listed = DEFAULT_ALLOWED.contains(&name.as_str())
        || owner_allowed.iter().any(|a| a == &name)
        || install_allowed.iter().any(|a| a == &name);
    if listed {
        Ok(())
    } else {
        Err(format!(
            "connector.json: mcp.command: {:?} is outside the release and {name:?} is not on the launch allowlist ({}); to allow it, install with --allow-command {name}",
            program.display().to_string(),
            DEFAULT_ALLOWED.join(", ")
        ))
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allowlist_rules() {
        let rel = Path::new("/state/releases/k/abc");
        let rt = Path::new("/usr/libexec/tutti");
        assert!(check(Path::new("/usr/bin/node"), &[rel], rt, &[], &[]).is_ok());
        assert!(
            check(
                Path::new("/state/releases/k/abc/bin/server"),
                &[rel],
                rt,
                &[],
                &[]
            )
            .is_ok()
        );
        assert!(
            check(
                Path::new("/usr/libexec/tutti/tutti-fixture-server"),
                &[rel],
                rt,
                &[],
                &[]
            )
            .is_ok()
        );
        let e = check(Path::new("/bin/sh"), &[rel], rt, &[], &[]).expect_err("sh refused");
        assert!(e.contains("--allow-command sh"), "{e}");
        assert!(e.starts_with("connector.json: mcp.command: "), "{e}");
        assert!(check(Path::new("/bin/sh"), &[rel], rt, &[], &["sh".into()]).is_ok());
        assert!(check(Path::new("/bin/sh"), &[rel], rt, &["sh".into()], &[]).is_ok());
        assert_eq!(program_name(Path::new("C:/x/Node.EXE")), "Node");
        assert_eq!(program_name(Path::new("/usr/bin/python3")), "python3");
    }
}
