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
//! Prints `listening on http://ADDR/mcp` on stdout once it accepts connections.

#[cfg(unix)]
mod front {
    use std::io::{BufReader, Read, Write};
    use std::net::{TcpListener, TcpStream};
    use std::os::unix::net::UnixStream;
    use std::path::PathBuf;

    use anyhow::{Context, Result, bail};
    use clap::Parser;
    use tutti_tests::floor::{
        http_ok_head, read_frame_into, read_frame_len, read_http_body, request_id,
        strip_tool_prefix, write_frame,
    };

    #[derive(Parser, Clone)]
    #[command(name = "tutti-floor-front")]
    struct Args {
        /// Address to listen on.
        #[arg(long, default_value = "127.0.0.1:0")]
        listen: String,
        /// The worker's Unix socket.
        #[arg(long, required_unless_present = "trivial")]
        worker: Option<PathBuf>,
        /// The connector key whose `<key>_` prefix is stripped from tool names.
        #[arg(long, default_value = "bench")]
        key: String,
        /// Answer every request itself with a canned result (no worker, no upstream).
        #[arg(long, conflicts_with = "worker")]
        trivial: bool,
        /// Before forwarding a request, wait for one frame round trip to this Unix socket
        /// (a `tutti-floor-worker --verifier`): the runtime's per-request token check, as a
        /// process hop without the check's work.
        #[arg(long, requires = "worker")]
        verifier: Option<PathBuf>,
    }

    pub fn main() -> Result<()> {
        let args = Args::parse();
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
                None => canned(&body),
            };
            out.write_all(&reply)?;
        }
        Ok(())
    }

    /// What a verification frame carries: a stand-in for a session token of the runtime's size.
    const VERIFY: &[u8] = b"tutti_s1_0123456789abcdef0123456789abcdef0123456789abcdef";

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

    fn canned(body: &[u8]) -> Vec<u8> {
        let mut json = Vec::with_capacity(96);
        json.extend_from_slice(b"{\"jsonrpc\":\"2.0\",\"id\":");
        json.extend_from_slice(request_id(body));
        json.extend_from_slice(b",\"result\":{\"content\":[{\"type\":\"text\",\"text\":\"x\"}]}}");
        let mut reply = http_ok_head(json.len()).into_bytes();
        reply.extend_from_slice(&json);
        reply
    }
}

#[cfg(unix)]
fn main() -> anyhow::Result<()> {
    front::main()
}

#[cfg(not(unix))]
fn main() {
    eprintln!("tutti-floor-front runs on Unix only (the floor's hop is a Unix socket)");
}
