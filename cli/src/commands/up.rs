//! `tutti up [--demo]`: hand the terminal to `tutti-kernel`.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use tutti_rules::sibling::{LIBEXEC_ENV, Libexec};

use crate::error::CliError;

const KERNEL: &str = "tutti-kernel";

pub(crate) fn run(state_dir: &Path, demo: bool) -> Result<ExitCode, CliError> {
    let kernel = locate_kernel(std::env::var_os(LIBEXEC_ENV), std::env::current_exe().ok())?;
    let mut args: Vec<OsString> = vec!["--state-dir".into(), state_dir.as_os_str().to_owned()];
    if demo {
        args.push("--demo".into());
    }
    tracing::debug!(kernel = %kernel.display(), "starting the kernel");
    imp::launch(&kernel, &args)
}

/// `tutti-kernel` by the rule every binary shares ([`Libexec`]: `TUTTI_LIBEXEC_DIR` if set,
/// else next to this executable, then next to the file it links to).
pub(crate) fn locate_kernel(
    libexec: Option<OsString>,
    exe: Option<PathBuf>,
) -> Result<PathBuf, CliError> {
    Libexec::new(libexec, exe)
        .locate(KERNEL)
        .map_err(|path| CliError::KernelBinaryMissing { path })
}

/// Unix: exec, so the kernel is this process: signals from the terminal or a service manager
/// reach it directly, and its exit status is ours.
#[cfg(unix)]
mod imp {
    use std::ffi::OsString;
    use std::os::unix::process::CommandExt as _;
    use std::path::Path;
    use std::process::ExitCode;

    use crate::error::CliError;

    pub(super) fn launch(kernel: &Path, args: &[OsString]) -> Result<ExitCode, CliError> {
        let source = std::process::Command::new(kernel).args(args).exec();
        Err(CliError::Exec {
            path: kernel.to_path_buf(),
            source,
        })
    }
}

/// Windows: no exec. Run the kernel as a child in this console (it gets Ctrl-C itself), wait,
/// and return its exit code.
#[cfg(windows)]
mod imp {
    use std::ffi::OsString;
    use std::path::Path;
    use std::process::ExitCode;

    use crate::error::CliError;

    pub(super) fn launch(kernel: &Path, args: &[OsString]) -> Result<ExitCode, CliError> {
        let exec_err = |source| CliError::Exec {
            path: kernel.to_path_buf(),
            source,
        };
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|source| CliError::Runtime { source })?;
        runtime.block_on(async {
            let mut child = tokio::process::Command::new(kernel)
                .args(args)
                .spawn()
                .map_err(exec_err)?;
            loop {
                tokio::select! {
                    status = child.wait() => {
                        let status = status.map_err(exec_err)?;
                        return Ok(status
                            .code()
                            .and_then(|c| u8::try_from(c).ok())
                            .map(ExitCode::from)
                            .unwrap_or(ExitCode::FAILURE));
                    }
                    // The kernel receives the same Ctrl-C and shuts down; keep waiting for it.
                    _ = tokio::signal::ctrl_c() => {}
                }
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_util::TempDir;

    #[test]
    fn libexec_dir_overrides_the_sibling() {
        let dir = TempDir::new("libexec");
        let kernel = dir
            .path()
            .join(format!("{KERNEL}{}", std::env::consts::EXE_SUFFIX));
        std::fs::write(&kernel, b"").unwrap_or_else(|e| panic!("{e}"));
        let got = locate_kernel(Some(dir.path().into()), Some("/nowhere/tutti".into()));
        assert_eq!(got.ok(), Some(kernel.clone()));
        let got = locate_kernel(None, Some(dir.path().join("tutti")));
        assert_eq!(got.ok(), Some(kernel));
    }

    #[test]
    fn missing_kernel_names_the_path() {
        let dir = TempDir::new("nokernelbin");
        let got = locate_kernel(Some(dir.path().into()), None);
        let msg = got.err().map(|e| e.to_string()).unwrap_or_default();
        assert!(
            msg.starts_with(&format!(
                "cannot find {}",
                dir.path().join(KERNEL).display()
            )),
            "{msg}"
        );
        assert!(msg.contains("TUTTI_LIBEXEC_DIR"), "{msg}");
        let got = locate_kernel(None, Some(dir.path().join("tutti")));
        assert!(matches!(got, Err(CliError::KernelBinaryMissing { .. })));
    }
}
