//! The project carries its own reference and never points outside itself:
//! - every subcommand and every long flag `tutti <command> --help` prints is in
//!   docs/REFERENCE.md, in the section of its command (runs the built `tutti`);
//! - no link in README.md or docs/*.md leaves the repository or names a file that is missing.

use std::path::{Path, PathBuf};
use std::process::Command;

use tutti_tests::{bin, repo_root};

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
}

fn help(words: &[&str]) -> String {
    let out = Command::new(bin("tutti"))
        .args(words)
        .arg("--help")
        .output()
        .unwrap_or_else(|e| panic!("tutti {words:?} --help: {e}"));
    assert!(out.status.success(), "tutti {words:?} --help failed");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The subcommands a help text lists under `Commands:` (without `help`).
fn subcommands(help: &str) -> Vec<String> {
    help.lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| !l.trim().is_empty())
        .filter_map(|l| l.split_whitespace().next())
        .filter(|name| *name != "help")
        .map(str::to_owned)
        .collect()
}

/// Every `--long-flag` a help text names.
fn long_flags(help: &str) -> Vec<String> {
    let mut flags: Vec<String> = help
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
        .filter(|w| w.starts_with("--") && w.len() > 2)
        .map(str::to_owned)
        .collect();
    flags.sort();
    flags.dedup();
    flags
}

/// The text of the reference's `### tutti <command>` section (to the next heading).
fn section<'a>(reference: &'a str, command: &str) -> Option<&'a str> {
    let heading = format!("\n### tutti {command}\n");
    let start = reference.find(&heading)? + heading.len();
    let rest = &reference[start..];
    let end = rest
        .find("\n## ")
        .into_iter()
        .chain(rest.find("\n### "))
        .min();
    Some(&rest[..end.unwrap_or(rest.len())])
}

#[test]
fn every_subcommand_and_long_flag_of_the_cli_is_in_the_reference() {
    let reference = read(&repo_root().join("docs/REFERENCE.md"));
    let mut missing = Vec::new();
    let global = ["--state-dir", "--help", "--version"];
    let top = help(&[]);
    for flag in long_flags(&top) {
        if !reference.contains(&flag) {
            missing.push(format!("tutti {flag}"));
        }
    }
    for command in subcommands(&top) {
        let Some(text) = section(&reference, &command) else {
            missing.push(format!("section `### tutti {command}`"));
            continue;
        };
        let own = help(&[&command]);
        let nested = subcommands(&own);
        let mut helps = vec![(command.clone(), own)];
        for sub in &nested {
            if !text.contains(&format!("`{sub}")) {
                missing.push(format!("tutti {command} {sub}"));
            }
            helps.push((format!("{command} {sub}"), help(&[&command, sub])));
        }
        for (name, text_of_help) in helps {
            for flag in long_flags(&text_of_help) {
                if !global.contains(&flag.as_str()) && !text.contains(&flag) {
                    missing.push(format!("tutti {name} {flag}"));
                }
            }
        }
    }
    assert!(
        missing.is_empty(),
        "docs/REFERENCE.md lacks (add each to its command's section):\n  {}",
        missing.join("\n  ")
    );
}

/// The target of every Markdown link `[text](target)` in `text`.
fn link_targets(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(i) = rest.find("](") {
        rest = &rest[i + 2..];
        if let Some(end) = rest.find(')') {
            out.push(rest[..end].trim().to_owned());
        }
    }
    out
}

/// Why `target`, linked from `file`, leaves the repository; `None` when it stays inside.
fn leaves_repository(root: &Path, file: &Path, target: &str) -> Option<String> {
    if target.starts_with('#') {
        return None;
    }
    if target.contains("://") || target.starts_with("mailto:") || target.starts_with("//") {
        return Some("an external URL".into());
    }
    let path = target.split('#').next().unwrap_or(target);
    let dir = file.parent().unwrap_or(root);
    let resolved: PathBuf = std::path::absolute(dir.join(path)).unwrap_or_default();
    let normal: PathBuf = resolved.components().fold(PathBuf::new(), |mut p, c| {
        match c {
            std::path::Component::ParentDir => {
                p.pop();
            }
            std::path::Component::CurDir => {}
            other => p.push(other),
        }
        p
    });
    if !normal.starts_with(root) {
        return Some("a path outside the repository".into());
    }
    if !normal.exists() {
        return Some("a file that does not exist".into());
    }
    None
}

#[test]
fn readme_and_docs_link_only_inside_the_repository() {
    let root = std::path::absolute(repo_root()).unwrap_or_else(|e| panic!("{e}"));
    let mut files = vec![root.join("README.md")];
    let docs = std::fs::read_dir(root.join("docs")).unwrap_or_else(|e| panic!("docs/: {e}"));
    files.extend(
        docs.filter_map(Result::ok)
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|x| x == "md")),
    );
    let examples = root.join("docs/examples/README.md");
    if examples.is_file() {
        files.push(examples);
    }
    let mut bad = Vec::new();
    for file in &files {
        let text = read(file);
        let name = file
            .strip_prefix(&root)
            .unwrap_or(file)
            .display()
            .to_string();
        for target in link_targets(&text) {
            if let Some(why) = leaves_repository(&root, file, &target) {
                bad.push(format!("{name}: ({target}) is {why}"));
            }
        }
        for outside in ["../shared", "SPEC §"] {
            if text.contains(outside) {
                bad.push(format!(
                    "{name}: names {outside:?}, which a clone does not have"
                ));
            }
        }
    }
    assert!(
        bad.is_empty(),
        "links must stay inside the repository (link docs/REFERENCE.md sections instead):\n  {}",
        bad.join("\n  ")
    );
}
