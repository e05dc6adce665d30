//! A server process a test starts beside the runtime (a Python MCP server, server-everything
//! over HTTP, the fixture in `--http` mode): spawned with its stderr in a file, waited for
//! until its loopback port accepts, killed and reaped on drop.

use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::{file_tail, free_port, require_node22};

/// A listening server process, killed and reaped on drop.
pub struct Server {
    child: Child,
    what: String,
    stderr: PathBuf,
}

impl Server {
    /// Spawns `cmd` (stdin and stdout null, stderr to the file `stderr`) and waits up to
    /// `within` until 127.0.0.1:`port` accepts. Panics, with the tail of its stderr, when it
    /// exits first or does not listen in time; `what` names it in the message.
    pub fn spawn(
        what: &str,
        mut cmd: Command,
        port: u16,
        stderr: PathBuf,
        within: Duration,
    ) -> Server {
        let err = std::fs::File::create(&stderr)
            .unwrap_or_else(|e| panic!("cannot create {}: {e}", stderr.display()));
        let child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(err)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {what}: {e}"));
        let mut server = Server {
            child,
            what: what.to_owned(),
            stderr,
        };
        server.wait_listening(port, within);
        server
    }

    fn wait_listening(&mut self, port: u16, within: Duration) {
        let deadline = Instant::now() + within;
        loop {
            if TcpStream::connect(("127.0.0.1", port)).is_ok() {
                return;
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!(
                    "{} exited with {status} before listening on {port}:\n{}",
                    self.what,
                    file_tail(&self.stderr, 40)
                );
            }
            assert!(
                Instant::now() < deadline,
                "{} did not listen on {port} within {within:?}:\n{}",
                self.what,
                file_tail(&self.stderr, 40)
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// `@modelcontextprotocol/server-everything` in its `streamableHttp` mode (Node 22) on a
    /// free port, run in `dir` with its stderr in `dir/<stderr>`; returns it and its MCP URL.
    pub fn everything_http(dir: &Path, stderr: &str, within: Duration) -> (Server, String) {
        let port = free_port();
        let server = Server::everything_http_on(port, dir, stderr, within);
        (server, format!("http://127.0.0.1:{port}/mcp"))
    }

    /// [`Server::everything_http`] on a given port (e.g. to start it again in place).
    pub fn everything_http_on(port: u16, dir: &Path, stderr: &str, within: Duration) -> Server {
        let mut cmd = Command::new(require_node22());
        cmd.arg(crate::everything_entry())
            .arg("streamableHttp")
            .env("PORT", port.to_string())
            .current_dir(dir);
        Server::spawn("server-everything", cmd, port, dir.join(stderr), within)
    }

    /// The server's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Kills the server and reaps it (again on drop: a no-op then).
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill();
    }
}
