//! `tutti-floor-worker`: the worker process of the benchmark's architectural floor
//! (`tutti_tests::floor`). Starts the upstream (`-- CMD ARGS...`), initializes it, then serves
//! frames on a Unix socket: each frame is written to the upstream's stdin as one line, the
//! upstream's next stdout line goes back as one frame. One call at a time per upstream (a
//! mutex): the floor measures a call's path, not pipelining.
//!
//! `--verifier`: no upstream; every frame is answered `ok` at once (the third process of the
//! "floor with a token check hop" row).
//!
//! `--stack tokio`: the same on the runtime's stack (`floor_worker/stack.rs`): a
//! current-thread tokio runtime, a task per connection, the upstream through `tokio::process`.
//!
//! Prints `ready` on stdout once the socket accepts connections.

/// The command line, shared by both stacks.
#[cfg(unix)]
mod args {
    use std::path::PathBuf;

    use clap::Parser;
    use tutti_tests::floor::Stack;

    #[derive(Parser)]
    #[command(name = "tutti-floor-worker")]
    pub struct Args {
        /// The Unix socket to serve frames on (replaced if it exists).
        #[arg(long)]
        pub socket: PathBuf,
        /// The upstream's command line.
        #[arg(last = true, required_unless_present = "verifier")]
        pub upstream: Vec<String>,
        /// No upstream: answer every frame at once with `ok` (the floor's token check hop).
        #[arg(long)]
        pub verifier: bool,
        /// The I/O stack: `blocking` (the floor), or `tokio` (the runtime's stack).
        #[arg(long, value_enum, default_value = "blocking")]
        pub stack: Stack,
    }
}

#[cfg(unix)]
#[path = "floor_worker/stack.rs"]
mod stack;

#[cfg(unix)]
mod worker {
    use std::io::{BufRead, BufReader, Write};
    use std::os::unix::net::{UnixListener, UnixStream};
    use std::process::{ChildStdin, ChildStdout, Command, Stdio};
    use std::sync::{Arc, Mutex};

    use anyhow::{Context, Result, bail};
    use tutti_tests::floor::{INITIALIZE, INITIALIZED, frame_len, read_frame_into, write_frame};

    use crate::args::Args;

    struct Upstream {
        stdin: ChildStdin,
        stdout: BufReader<ChildStdout>,
    }

    impl Upstream {
        /// Writes `msg` (a line, with its newline) and reads the reply line into `out`
        /// after what `out` holds already.
        fn round_trip(&mut self, msg: &[u8], out: &mut Vec<u8>) -> Result<()> {
            self.stdin.write_all(msg)?;
            self.stdin.flush()?;
            if self.stdout.read_until(b'\n', out)? == 0 {
                bail!("the upstream closed its stdout");
            }
            if out.last() == Some(&b'\n') {
                out.pop();
            }
            Ok(())
        }
    }

    pub fn main(args: Args) -> Result<()> {
        if args.verifier {
            let listener = bind(&args.socket)?;
            for conn in listener.incoming() {
                let Ok(stream) = conn else { continue };
                std::thread::spawn(move || {
                    if let Err(e) = verify(stream) {
                        eprintln!("tutti-floor-worker: connection ended: {e:#}");
                    }
                });
            }
            return Ok(());
        }
        let (cmd, rest) = args.upstream.split_first().context("no upstream command")?;
        let mut child = Command::new(cmd)
            .args(rest)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .with_context(|| format!("starting the upstream {cmd}"))?;
        let mut up = Upstream {
            stdin: child.stdin.take().context("upstream stdin")?,
            stdout: BufReader::new(child.stdout.take().context("upstream stdout")?),
        };
        let mut scratch = Vec::new();
        up.round_trip(INITIALIZE, &mut scratch)?;
        up.stdin.write_all(INITIALIZED)?;
        up.stdin.flush()?;
        let listener = bind(&args.socket)?;
        let up = Arc::new(Mutex::new(up));
        for conn in listener.incoming() {
            let Ok(stream) = conn else { continue };
            let up = Arc::clone(&up);
            std::thread::spawn(move || {
                if let Err(e) = serve(stream, &up) {
                    eprintln!("tutti-floor-worker: connection ended: {e:#}");
                }
            });
        }
        Ok(())
    }

    /// Binds the socket (replacing a stale one) and says `ready`.
    fn bind(socket: &std::path::Path) -> Result<UnixListener> {
        let _ = std::fs::remove_file(socket);
        let listener =
            UnixListener::bind(socket).with_context(|| format!("binding {}", socket.display()))?;
        println!("ready");
        std::io::stdout().flush()?;
        Ok(listener)
    }

    fn verify(mut conn: UnixStream) -> Result<()> {
        let mut msg = Vec::new();
        loop {
            msg.clear();
            if !read_frame_into(&mut conn, &mut msg)? {
                return Ok(());
            }
            write_frame(&mut conn, b"ok")?;
        }
    }

    fn serve(mut conn: UnixStream, up: &Mutex<Upstream>) -> Result<()> {
        let mut msg = Vec::new();
        let mut reply = Vec::new();
        loop {
            msg.clear();
            if !read_frame_into(&mut conn, &mut msg)? {
                return Ok(());
            }
            msg.push(b'\n');
            // The reply line is read after a 4-byte hole, filled with its length: one write.
            reply.clear();
            reply.extend_from_slice(&[0; 4]);
            {
                let mut up = up
                    .lock()
                    .map_err(|_| anyhow::anyhow!("a connection panicked holding the upstream"))?;
                up.round_trip(&msg, &mut reply)?;
            }
            let len = frame_len(reply.len() - 4)?;
            reply[..4].copy_from_slice(&len.to_be_bytes());
            conn.write_all(&reply)?;
        }
    }
}

#[cfg(unix)]
fn main() -> anyhow::Result<()> {
    use clap::Parser;
    let args = args::Args::parse();
    match args.stack {
        tutti_tests::floor::Stack::Blocking => worker::main(args),
        tutti_tests::floor::Stack::Tokio => stack::main(args),
    }
}

#[cfg(not(unix))]
fn main() {
    eprintln!("tutti-floor-worker runs on Unix only (the floor's hop is a Unix socket)");
}
