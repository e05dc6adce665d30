//! The bridge's stdin and stdout. tokio's `stdin`/`stdout` hand every read and write to a
//! thread of the blocking pool: two more thread crossings per message. On Unix the pipes and
//! socket pairs clients launch servers with are read and written on the runtime's own thread
//! instead, in non-blocking mode (a flag of the open pipe, shared with every process holding
//! it), and put back in blocking mode when the bridge ends. A file, a terminal, and Windows
//! keep tokio's `stdin`/`stdout`.

use tokio::io::{AsyncRead, AsyncWrite};

pub(super) type Input = Box<dyn AsyncRead + Send + Unpin>;
pub(super) type Output = Box<dyn AsyncWrite + Send + Unpin>;

/// stdin, stdout, and what puts their pipes back in blocking mode when dropped.
pub(super) fn open() -> (Input, Output, Restore) {
    #[cfg(unix)]
    {
        let mut restore = Restore::default();
        let input = unix::input(&mut restore.0);
        let output = unix::output(&mut restore.0);
        (input, output, restore)
    }
    #[cfg(not(unix))]
    {
        (
            Box::new(tokio::io::stdin()),
            Box::new(tokio::io::stdout()),
            Restore,
        )
    }
}

/// The descriptors the bridge made non-blocking (duplicates); dropped, they are blocking again.
#[cfg(unix)]
#[derive(Default)]
pub(super) struct Restore(Vec<std::os::fd::OwnedFd>);

#[cfg(not(unix))]
pub(super) struct Restore;

#[cfg(unix)]
impl Drop for Restore {
    fn drop(&mut self) {
        for fd in &self.0 {
            unix::set_nonblocking(fd, false);
        }
    }
}

#[cfg(unix)]
mod unix {
    use std::fs::File;
    use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
    use std::os::unix::fs::FileTypeExt as _;

    use nix::fcntl::{FcntlArg, OFlag, fcntl};
    use tokio::net::unix::pipe;

    use super::{Input, Output};

    /// A pipe or a stream socket: what can wait for readiness on the runtime's thread.
    enum Pollable {
        Pipe(File),
        Socket(std::os::unix::net::UnixStream),
    }

    /// A duplicate of `fd` when it is a pipe or a socket.
    fn pollable(fd: BorrowedFd<'_>) -> Option<Pollable> {
        let file = File::from(fd.try_clone_to_owned().ok()?);
        let kind = file.metadata().ok()?.file_type();
        if kind.is_fifo() {
            Some(Pollable::Pipe(file))
        } else if kind.is_socket() {
            // Only read and write are used on it, which serve any stream socket.
            Some(Pollable::Socket(OwnedFd::from(file).into()))
        } else {
            None
        }
    }

    fn is_nonblocking(fd: BorrowedFd<'_>) -> bool {
        fcntl(fd, FcntlArg::F_GETFL)
            .is_ok_and(|flags| OFlag::from_bits_truncate(flags).contains(OFlag::O_NONBLOCK))
    }

    pub(super) fn set_nonblocking(fd: impl AsFd, on: bool) {
        let fd = fd.as_fd();
        if let Ok(flags) = fcntl(fd, FcntlArg::F_GETFL) {
            let mut flags = OFlag::from_bits_truncate(flags);
            flags.set(OFlag::O_NONBLOCK, on);
            let _ = fcntl(fd, FcntlArg::F_SETFL(flags));
        }
    }

    /// Notes a descriptor about to be made non-blocking that was blocking: it is restored.
    fn remember(fd: BorrowedFd<'_>, restore: &mut Vec<OwnedFd>) {
        if !is_nonblocking(fd)
            && let Ok(dup) = fd.try_clone_to_owned()
        {
            restore.push(dup);
        }
    }

    pub(super) fn input(restore: &mut Vec<OwnedFd>) -> Input {
        let stdin = std::io::stdin();
        let fd = stdin.as_fd();
        let reader: Option<Input> = match pollable(fd) {
            Some(Pollable::Pipe(file)) => {
                remember(fd, restore);
                pipe::Receiver::from_file(file)
                    .ok()
                    .map(|r| Box::new(r) as Input)
            }
            Some(Pollable::Socket(socket)) => {
                remember(fd, restore);
                socket_stream(socket).map(|s| Box::new(s) as Input)
            }
            None => None,
        };
        reader.unwrap_or_else(|| Box::new(tokio::io::stdin()))
    }

    pub(super) fn output(restore: &mut Vec<OwnedFd>) -> Output {
        let stdout = std::io::stdout();
        let fd = stdout.as_fd();
        let writer: Option<Output> = match pollable(fd) {
            Some(Pollable::Pipe(file)) => {
                remember(fd, restore);
                pipe::Sender::from_file(file)
                    .ok()
                    .map(|w| Box::new(w) as Output)
            }
            Some(Pollable::Socket(socket)) => {
                remember(fd, restore);
                socket_stream(socket).map(|s| Box::new(s) as Output)
            }
            None => None,
        };
        writer.unwrap_or_else(|| Box::new(tokio::io::stdout()))
    }

    fn socket_stream(socket: std::os::unix::net::UnixStream) -> Option<tokio::net::UnixStream> {
        socket.set_nonblocking(true).ok()?;
        tokio::net::UnixStream::from_std(socket).ok()
    }
}
