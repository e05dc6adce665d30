//! `tutti-floor-front`: the HTTP/1.1 process of the benchmark's architectural floor
//! (`tutti_tests::floor`). Each client connection gets a thread and its own Unix-socket
//! connection to `tutti-floor-worker`; a request's body goes there as one frame (the tool
//! name's `<key>_` prefix stripped), the answer frame comes back as the response body.
//!
//! `--trivial`: no worker at all, every POST gets a canned JSON-RPC result with the request's
//! id (the "trivial HTTP server" row: what one HTTP round trip costs on this machine).
//!
//! `--verifier SOCKET`: one more frame round trip per request, to a third process, before the
//! worker is asked (the "floor with a token check hop" row).
//!
//! `--stack tokio`: the same chain on the runtime's stack (`floor_front/stack.rs`): a
//! current-thread tokio runtime, axum/hyper, the request parsed and serialized again with
//! serde_json, a small pool of idle worker connections. `--trivial` and `--verifier` work
//! there too.
//!
//! Prints `listening on http://ADDR/mcp` on stdout once it accepts connections.

/// The command line, shared by both stacks.
#[cfg(unix)]
mod args {
    use std::path::PathBuf;

    use clap::Parser;
    use tutti_tests::floor::Stack;

    #[derive(Parser, Clone)]
    #[command(name = "tutti-floor-front")]
    pub struct Args {
        /// Address to listen on.
        #[arg(long, default_value = "127.0.0.1:0")]
        pub listen: String,
        /// The worker's Unix socket.
        #[arg(long, required_unless_present = "trivial")]
        pub worker: Option<PathBuf>,
        /// The connector key whose `<key>_` prefix is stripped from tool names.
        #[arg(long, default_value = "bench")]
        pub key: String,
        /// Answer every request itself with a canned result (no worker, no upstream).
        #[arg(long, conflicts_with = "worker")]
        pub trivial: bool,
        /// Before forwarding a request, wait for one frame round trip to this Unix socket
        /// (a `tutti-floor-worker --verifier`): the runtime's per-request token check, as a
        /// process hop without the check's work.
        #[arg(long, requires = "worker")]
        pub verifier: Option<PathBuf>,
        /// The I/O stack: `blocking` (the floor), or `tokio` (the runtime's stack).
        #[arg(long, value_enum, default_value = "blocking")]
        pub stack: Stack,
    }
}

#[cfg(unix)]
#[path = "floor_front/stack.rs"]
mod stack;

#[cfg(unix)]
mod front {
    use std::io::{BufReader, Read, Write};
    use std::net::{TcpListener, TcpStream};
    use std::os::unix::net::UnixStream;

    use crate::args::Args;
    use anyhow::{Context, Result, bail};
    use tutti_tests::floor::{
        VERIFY, canned_response, http_ok_head, read_frame_into, read_frame_len, read_http_body,
        strip_tool_prefix, write_frame,
    };

    pub fn main(args: Args) -> Result<()> {
        let listener =
            TcpListener::bind(&args.listen).with_context(|| format!("binding {}", args.listen))?;
        println!("listening on http://{}/mcp", listener.local_addr()?);
        std::io::stdout().flush()?;
        for conn in listener.incoming() {
            let Ok(stream) = conn else { continue };
            let args = args.clone();
            std::thread::spawn(move || {
                if let Err(e) = serve(stream, &args) {
                    eprintln!("tutti-floor-front: connection ended: {e:#}");
                }
            });
        }
        Ok(())
    }

    fn serve(stream: TcpStream, args: &Args) -> Result<()> {
        stream.set_nodelay(true)?;
        let mut out = stream.try_clone()?;
        let mut reader = BufReader::new(stream);
        let mut worker = match &args.worker {
            Some(path) if !args.trivial => Some(
                UnixStream::connect(path)
                    .with_context(|| format!("connecting to the worker at {}", path.display()))?,
            ),
            _ => None,
        };
        let mut verifier = match &args.verifier {
            Some(path) => Some(
                UnixStream::connect(path)
                    .with_context(|| format!("connecting to the verifier at {}", path.display()))?,
            ),
            None => None,
        };
        let mut line = String::new();
        let mut verdict = Vec::new();
        while let Some(mut body) = read_http_body(&mut reader, &mut line)? {
            if let Some(v) = verifier.as_mut() {
                write_frame(v, VERIFY)?;
                verdict.clear();
                if !read_frame_into(v, &mut verdict)? {
                    bail!("the verifier closed the connection");
                }
            }
            let reply = match worker.as_mut() {
                Some(w) => {
                    strip_tool_prefix(&mut body, &args.key);
                    write_frame(w, &body)?;
                    read_answer(w)?
                }
                None => canned_response(&body),
            };
            out.write_all(&reply)?;
        }
        Ok(())
    }

    /// The worker's answer frame read straight into the HTTP response, after its head.
    fn read_answer(w: &mut UnixStream) -> Result<Vec<u8>> {
        let Some(n) = read_frame_len(w)? else {
            bail!("the worker closed the connection");
        };
        let head = http_ok_head(n);
        let mut reply = Vec::with_capacity(head.len() + n);
        reply.extend_from_slice(head.as_bytes());
        reply.resize(head.len() + n, 0);
        w.read_exact(&mut reply[head.len()..])?;
        Ok(reply)
    }
}

#[cfg(unix)]
fn main() -> anyhow::Result<()> {
    use clap::Parser;
    let args = args::Args::parse();
    match args.stack {
        tutti_tests::floor::Stack::Blocking => front::main(args),
        tutti_tests::floor::Stack::Tokio => stack::main(args),
    }
}

#[cfg(not(unix))]
fn main() {
    eprintln!("tutti-floor-front runs on Unix only (the floor's hop is a Unix socket)");
}
