//! The on-disk form of a published shim, as pure data: file names, the `tutti-shim`
//! argument that carries a connector key and a state directory, and the choice between a
//! shebang script and a copy of the launcher with a sidecar file.
//!
//! Unix shim (preferred): a text file whose first line is
//! `#!/abs/libexec/tutti-shim tutti-shim:v1:<key>:<absolute state dir>`. Linux hands
//! everything after the interpreter to it as ONE argument, so the state directory may hold
//! spaces; no shell is involved. When that line cannot be written safely (too long for the
//! kernel's 256-byte `#!` buffer, whitespace in the interpreter path, a line break in a path)
//! the shim is a copy (a hard link where possible) of `tutti-shim` plus `.tutti-connector-<key>.shim` next to it,
//! holding the same argument. Windows always uses the copy (`tutti-connector-<key>.exe`).

use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// File-name prefix of every published shim.
pub(crate) const SHIM_PREFIX: &str = "tutti-connector-";

/// Tag that starts the shim argument (and the sidecar content); versioned.
const ARG_TAG: &[u8] = b"tutti-shim:v1:";

/// Longest `#!` line we write, newline included. Linux reads the first 256 bytes of a
/// script (`BINPRM_BUF_SIZE`) and silently truncates a longer line.
pub(crate) const MAX_SHEBANG_LINE: usize = 255;

/// `tutti-connector-<key>` (`.exe` on Windows).
pub(crate) fn shim_file_name(key: &str) -> String {
    format!("{SHIM_PREFIX}{key}{}", std::env::consts::EXE_SUFFIX)
}

/// `.tutti-connector-<key>.shim`, the sidecar of a copied launcher.
pub(crate) fn sidecar_file_name(key: &str) -> String {
    format!(".{SHIM_PREFIX}{key}.shim")
}

/// The sidecar that belongs to a launcher copy at `exe`, if `exe` is named like a shim.
pub(crate) fn sidecar_for_exe(exe: &Path) -> Option<(String, PathBuf)> {
    let stem = exe.file_stem()?.to_str()?;
    let key = stem.strip_prefix(SHIM_PREFIX)?;
    if !tutti_proto::key::is_valid(key) {
        return None;
    }
    let dir = exe.parent()?;
    Some((key.to_owned(), dir.join(sidecar_file_name(key))))
}

/// Which shim forms a platform supports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Style {
    /// Linux: the whole rest of the `#!` line is one argument (spaces allowed inside).
    ShebangOneArgument,
    /// Other Unix kernels may split the rest of the line at whitespace: none allowed.
    ShebangNoWhitespace,
    /// Windows: always a copy of the launcher plus a sidecar.
    CopyOnly,
}

impl Style {
    pub(crate) fn native() -> Self {
        if cfg!(windows) {
            Self::CopyOnly
        } else if cfg!(any(target_os = "linux", target_os = "android")) {
            Self::ShebangOneArgument
        } else {
            Self::ShebangNoWhitespace
        }
    }
}

/// What to write for one shim.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Rendered {
    /// The complete content of `tutti-connector-<key>` (mode 0755).
    Script(Vec<u8>),
    /// Copy the launcher to `tutti-connector-<key>` and write this sidecar content.
    Copy { sidecar: Vec<u8> },
}

/// `tutti-shim:v1:<key>:<state dir>`.
pub(crate) fn encode_arg(key: &str, state_dir: &[u8]) -> Vec<u8> {
    let mut arg = Vec::with_capacity(ARG_TAG.len() + key.len() + 1 + state_dir.len());
    arg.extend_from_slice(ARG_TAG);
    arg.extend_from_slice(key.as_bytes());
    arg.push(b':');
    arg.extend_from_slice(state_dir);
    arg
}

/// The inverse of [`encode_arg`]: `(key, state dir bytes)`.
pub(crate) fn parse_arg(arg: &[u8]) -> Option<(String, Vec<u8>)> {
    let rest = arg.strip_prefix(ARG_TAG)?;
    let colon = rest.iter().position(|b| *b == b':')?;
    let (key, dir) = (&rest[..colon], &rest[colon + 1..]);
    let key = std::str::from_utf8(key).ok()?;
    if !tutti_proto::key::is_valid(key) || dir.is_empty() || dir.contains(&0) {
        return None;
    }
    Some((key.to_owned(), dir.to_vec()))
}

/// Content of a sidecar file.
fn encode_sidecar(key: &str, state_dir: &[u8]) -> Vec<u8> {
    let mut content = encode_arg(key, state_dir);
    content.push(b'\n');
    content
}

/// Parses a sidecar file (one line, the shim argument).
pub(crate) fn parse_sidecar(content: &[u8]) -> Option<(String, Vec<u8>)> {
    let line = content.strip_suffix(b"\n").unwrap_or(content);
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    parse_arg(line)
}

fn is_space_or_tab(b: &u8) -> bool {
    *b == b' ' || *b == b'\t'
}

/// Decides the shim form and renders it. `shim_exe` and `state_dir` are absolute paths as
/// bytes; `key` is valid.
pub(crate) fn render(shim_exe: &[u8], key: &str, state_dir: &[u8], style: Style) -> Rendered {
    match shebang_line(shim_exe, key, state_dir, style) {
        Some(mut script) => {
            script.extend_from_slice(
                format!("# {SHIM_PREFIX}{key}: published by tutti-shim-manager; do not edit.\n")
                    .as_bytes(),
            );
            Rendered::Script(script)
        }
        None => Rendered::Copy {
            sidecar: encode_sidecar(key, state_dir),
        },
    }
}

/// `#!<shim_exe> <arg>\n`, or `None` if such a line would not reach `tutti-shim` intact.
fn shebang_line(shim_exe: &[u8], key: &str, state_dir: &[u8], style: Style) -> Option<Vec<u8>> {
    let one_argument = match style {
        Style::CopyOnly => return None,
        Style::ShebangOneArgument => true,
        Style::ShebangNoWhitespace => false,
    };
    let forbidden = |b: &u8| matches!(*b, b'\n' | b'\r' | 0);
    // The interpreter path ends at the first space or tab, and must be absolute.
    if shim_exe.first() != Some(&b'/')
        || shim_exe.iter().any(|b| forbidden(b) || is_space_or_tab(b))
    {
        return None;
    }
    let arg = encode_arg(key, state_dir);
    // The kernel strips trailing whitespace from the argument; other kernels split at it.
    if arg.iter().any(forbidden)
        || arg.last().is_some_and(is_space_or_tab)
        || (!one_argument && arg.iter().any(is_space_or_tab))
    {
        return None;
    }
    let mut line = Vec::with_capacity(shim_exe.len() + arg.len() + 4);
    line.extend_from_slice(b"#!");
    line.extend_from_slice(shim_exe);
    line.push(b' ');
    line.extend_from_slice(&arg);
    line.push(b'\n');
    (line.len() <= MAX_SHEBANG_LINE).then_some(line)
}

/// How `tutti-shim` was started, recovered from its argv (and a sidecar, if any).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Invocation {
    pub(crate) key: String,
    pub(crate) state_dir: PathBuf,
    /// The user's arguments, verbatim.
    pub(crate) user_args: Vec<OsString>,
}

/// Shebang mode: `argv = [tutti-shim, "tutti-shim:v1:<key>:<dir>", <script path>, args...]`.
pub(crate) fn invocation_from_shebang(args: &[OsString]) -> Option<Invocation> {
    let arg = args.get(1)?;
    let (key, dir) = parse_arg(arg.as_encoded_bytes())?;
    Some(Invocation {
        key,
        state_dir: bytes_to_path(&dir)?,
        user_args: args.iter().skip(3).cloned().collect(),
    })
}

/// Copy mode: `argv = [tutti-connector-<key>, args...]`, key and state dir from the sidecar.
pub(crate) fn invocation_from_sidecar(content: &[u8], args: &[OsString]) -> Option<Invocation> {
    let (key, dir) = parse_sidecar(content)?;
    Some(Invocation {
        key,
        state_dir: bytes_to_path(&dir)?,
        user_args: args.iter().skip(1).cloned().collect(),
    })
}

/// The bytes of a path as written into a shim; `None` if the platform cannot represent it.
pub(crate) fn path_to_bytes(path: &Path) -> Option<Vec<u8>> {
    imp::path_to_bytes(path.as_os_str())
}

/// The inverse of [`path_to_bytes`].
pub(crate) fn bytes_to_path(bytes: &[u8]) -> Option<PathBuf> {
    imp::bytes_to_path(bytes)
}

#[cfg(unix)]
mod imp {
    use std::ffi::OsStr;
    use std::os::unix::ffi::OsStrExt;
    use std::path::PathBuf;

    pub(super) fn path_to_bytes(path: &OsStr) -> Option<Vec<u8>> {
        Some(path.as_bytes().to_vec())
    }

    pub(super) fn bytes_to_path(bytes: &[u8]) -> Option<PathBuf> {
        Some(PathBuf::from(OsStr::from_bytes(bytes)))
    }
}

#[cfg(not(unix))]
mod imp {
    use std::ffi::OsStr;
    use std::path::PathBuf;

    pub(super) fn path_to_bytes(path: &OsStr) -> Option<Vec<u8>> {
        path.to_str().map(|s| s.as_bytes().to_vec())
    }

    pub(super) fn bytes_to_path(bytes: &[u8]) -> Option<PathBuf> {
        std::str::from_utf8(bytes).ok().map(PathBuf::from)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const EXE: &[u8] = b"/usr/libexec/tutti/tutti-shim";

    fn script_first_line(r: &Rendered) -> &[u8] {
        match r {
            Rendered::Script(s) => {
                let end = s.iter().position(|b| *b == b'\n').expect("a newline");
                &s[..end]
            }
            Rendered::Copy { .. } => panic!("expected a script, got {r:?}"),
        }
    }

    #[test]
    fn arg_round_trip_keeps_colons_and_spaces() {
        let dir = b"/home/me/state: with spaces/and:colons";
        let arg = encode_arg("git-hub", dir);
        assert_eq!(
            arg,
            b"tutti-shim:v1:git-hub:/home/me/state: with spaces/and:colons"
        );
        assert_eq!(parse_arg(&arg), Some(("git-hub".to_owned(), dir.to_vec())));
    }

    #[test]
    fn arg_rejects_garbage() {
        assert_eq!(parse_arg(b"tutti-shim:v2:x:/s"), None);
        assert_eq!(parse_arg(b"tutti-shim:v1:X:/s"), None);
        assert_eq!(parse_arg(b"tutti-shim:v1:x:"), None);
        assert_eq!(parse_arg(b"tutti-shim:v1:x"), None);
        assert_eq!(parse_arg(b"tutti-shim:v1:../x:/s"), None);
        assert_eq!(parse_arg(b"--help"), None);
    }

    #[test]
    fn short_paths_render_a_shebang_script() {
        let r = render(
            EXE,
            "github",
            b"/home/me/.local/state/tutti",
            Style::ShebangOneArgument,
        );
        assert_eq!(
            script_first_line(&r),
            b"#!/usr/libexec/tutti/tutti-shim tutti-shim:v1:github:/home/me/.local/state/tutti"
        );
        let Rendered::Script(content) = &r else {
            panic!("script expected")
        };
        assert_eq!(content.iter().filter(|b| **b == b'\n').count(), 2);
        // The script's argument parses back to what was rendered.
        let arg = &script_first_line(&r)[2 + EXE.len() + 1..];
        assert_eq!(
            parse_arg(arg),
            Some(("github".to_owned(), b"/home/me/.local/state/tutti".to_vec()))
        );
    }

    #[test]
    fn spaces_in_state_dir_only_on_one_argument_kernels() {
        let dir = b"/Users/me/Library/Application Support/tutti";
        assert!(matches!(
            render(EXE, "k", dir, Style::ShebangOneArgument),
            Rendered::Script(_)
        ));
        assert!(matches!(
            render(EXE, "k", dir, Style::ShebangNoWhitespace),
            Rendered::Copy { .. }
        ));
    }

    #[test]
    fn unsafe_lines_fall_back_to_a_copy() {
        // Interpreter path with a space, a relative interpreter, a newline, trailing space.
        let cases: [(&[u8], &[u8]); 5] = [
            (b"/opt/my tools/tutti-shim", b"/s"),
            (b"tutti-shim", b"/s"),
            (EXE, b"/state\nx"),
            (EXE, b"/state "),
            (EXE, b"/state\t"),
        ];
        for (exe, dir) in cases {
            let r = render(exe, "k", dir, Style::ShebangOneArgument);
            assert_eq!(
                r,
                Rendered::Copy {
                    sidecar: encode_sidecar("k", dir)
                },
                "{exe:?} {dir:?}"
            );
        }
    }

    #[test]
    fn long_line_falls_back_to_copy_and_sidecar_round_trips() {
        let fixed = b"#!".len() + EXE.len() + 1 + ARG_TAG.len() + "abc".len() + 1 + 1;
        // Exactly at the limit: a script. One more byte: a copy.
        let at_limit = vec![b'd'; MAX_SHEBANG_LINE - fixed - 1];
        let mut dir = b"/".to_vec();
        dir.extend_from_slice(&at_limit);
        let r = render(EXE, "abc", &dir, Style::ShebangOneArgument);
        assert_eq!(script_first_line(&r).len() + 1, MAX_SHEBANG_LINE);

        dir.push(b'e');
        let r = render(EXE, "abc", &dir, Style::ShebangOneArgument);
        let Rendered::Copy { sidecar } = r else {
            panic!("copy expected")
        };
        assert_eq!(
            parse_sidecar(&sidecar),
            Some(("abc".to_owned(), dir.clone()))
        );
        let mut crlf = sidecar.clone();
        crlf.pop();
        crlf.extend_from_slice(b"\r\n");
        assert_eq!(parse_sidecar(&crlf), Some(("abc".to_owned(), dir)));
    }

    #[test]
    fn windows_always_copies() {
        assert!(matches!(
            render(EXE, "k", b"/s", Style::CopyOnly),
            Rendered::Copy { .. }
        ));
    }

    #[test]
    fn shebang_invocation_takes_args_after_the_script_path() {
        let args: Vec<OsString> = [
            "/libexec/tutti-shim",
            "tutti-shim:v1:github:/state dir",
            "/state dir/bin/tutti-connector-github",
            "a b",
            "",
            "ü",
        ]
        .iter()
        .map(OsString::from)
        .collect();
        let inv = invocation_from_shebang(&args).expect("parsed");
        assert_eq!(inv.key, "github");
        assert_eq!(inv.state_dir, PathBuf::from("/state dir"));
        assert_eq!(
            inv.user_args,
            vec![OsString::from("a b"), "".into(), "ü".into()]
        );

        let plain: Vec<OsString> = ["/libexec/tutti-shim", "--help"].map(OsString::from).into();
        assert_eq!(invocation_from_shebang(&plain), None);
    }

    #[test]
    fn sidecar_invocation_takes_args_after_argv0() {
        let args: Vec<OsString> = ["tutti-connector-k", "x", "tutti-shim:v1:k:/s"]
            .map(OsString::from)
            .into();
        let inv = invocation_from_sidecar(b"tutti-shim:v1:k:/state\n", &args).expect("parsed");
        assert_eq!(inv.key, "k");
        assert_eq!(inv.state_dir, PathBuf::from("/state"));
        assert_eq!(
            inv.user_args,
            vec![OsString::from("x"), "tutti-shim:v1:k:/s".into()]
        );
    }

    #[test]
    fn sidecar_location() {
        let exe = Path::new("/s/bin").join(shim_file_name("my-key"));
        assert_eq!(
            sidecar_for_exe(&exe),
            Some((
                "my-key".to_owned(),
                PathBuf::from("/s/bin/.tutti-connector-my-key.shim")
            ))
        );
        assert_eq!(sidecar_for_exe(Path::new("/usr/libexec/tutti-shim")), None);
    }

    #[cfg(unix)]
    #[test]
    fn non_utf8_paths_round_trip() {
        use std::ffi::OsStr;
        use std::os::unix::ffi::OsStrExt;
        let dir = Path::new(OsStr::from_bytes(b"/st\xffate"));
        let bytes = path_to_bytes(dir).expect("bytes");
        let r = render(EXE, "k", &bytes, Style::ShebangOneArgument);
        let arg = &script_first_line(&r)[2 + EXE.len() + 1..];
        let (_, back) = parse_arg(arg).expect("parsed");
        assert_eq!(bytes_to_path(&back).as_deref(), Some(dir));
    }
}
