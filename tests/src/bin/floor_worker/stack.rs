//! `tutti-floor-worker --stack tokio`: the floor's worker on the runtime's stack, built as the
//! runtime's worker is: a current-thread tokio runtime, a tokio `UnixListener` with a task per
//! connection, the upstream through `tokio::process` (piped stdin/stdout, its lines read with a
//! tokio `BufReader`). One call at a time per upstream (a tokio mutex around the pair), as the
//! blocking floor; frames and lines pass through unparsed.

use std::path::Path;
use std::process::Stdio;
use std::sync::Arc;

use anyhow::{Context, Result, bail};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::{UnixListener, UnixStream};
use tokio::process::{ChildStdin, ChildStdout, Command};
use tokio::sync::Mutex;
use tutti_tests::floor::{INITIALIZE, INITIALIZED, frame_len, read_frame_async, write_frame_async};

use crate::args::Args;

pub fn main(args: Args) -> Result<()> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?
        .block_on(run(args))
}

struct Upstream {
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl Upstream {
    /// Writes `msg` (a line, with its newline) and reads the reply line into `out` after what
    /// `out` holds already.
    async fn round_trip(&mut self, msg: &[u8], out: &mut Vec<u8>) -> Result<()> {
        self.stdin.write_all(msg).await?;
        self.stdin.flush().await?;
        if self.stdout.read_until(b'\n', out).await? == 0 {
            bail!("the upstream closed its stdout");
        }
        if out.last() == Some(&b'\n') {
            out.pop();
        }
        Ok(())
    }
}

async fn run(args: Args) -> Result<()> {
    if args.verifier {
        let listener = bind(&args.socket)?;
        loop {
            let Ok((conn, _)) = listener.accept().await else {
                continue;
            };
            tokio::spawn(async move {
                if let Err(e) = verify(conn).await {
                    eprintln!("tutti-floor-worker: connection ended: {e:#}");
                }
            });
        }
    }
    let (cmd, rest) = args.upstream.split_first().context("no upstream command")?;
    // Held for the worker's life; the upstream is killed with it.
    let mut child = Command::new(cmd)
        .args(rest)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .with_context(|| format!("starting the upstream {cmd}"))?;
    let mut up = Upstream {
        stdin: child.stdin.take().context("upstream stdin")?,
        stdout: BufReader::new(child.stdout.take().context("upstream stdout")?),
    };
    let mut scratch = Vec::new();
    up.round_trip(INITIALIZE, &mut scratch).await?;
    up.stdin.write_all(INITIALIZED).await?;
    up.stdin.flush().await?;
    let listener = bind(&args.socket)?;
    let up = Arc::new(Mutex::new(up));
    loop {
        let Ok((conn, _)) = listener.accept().await else {
            continue;
        };
        let up = Arc::clone(&up);
        tokio::spawn(async move {
            if let Err(e) = serve(conn, &up).await {
                eprintln!("tutti-floor-worker: connection ended: {e:#}");
            }
        });
    }
}

/// Binds the socket (replacing a stale one) and says `ready`.
fn bind(socket: &Path) -> Result<UnixListener> {
    let _ = std::fs::remove_file(socket);
    let listener =
        UnixListener::bind(socket).with_context(|| format!("binding {}", socket.display()))?;
    println!("ready");
    std::io::Write::flush(&mut std::io::stdout())?;
    Ok(listener)
}

async fn verify(mut conn: UnixStream) -> Result<()> {
    let mut msg = Vec::new();
    loop {
        msg.clear();
        if !read_frame_async(&mut conn, &mut msg).await? {
            return Ok(());
        }
        write_frame_async(&mut conn, b"ok").await?;
    }
}

async fn serve(mut conn: UnixStream, up: &Mutex<Upstream>) -> Result<()> {
    let mut msg = Vec::new();
    let mut reply = Vec::new();
    loop {
        msg.clear();
        if !read_frame_async(&mut conn, &mut msg).await? {
            return Ok(());
        }
        msg.push(b'\n');
        // The reply line is read after a 4-byte hole, filled with its length: one write.
        reply.clear();
        reply.extend_from_slice(&[0; 4]);
        up.lock().await.round_trip(&msg, &mut reply).await?;
        let len = frame_len(reply.len() - 4)?;
        reply[..4].copy_from_slice(&len.to_be_bytes());
        conn.write_all(&reply).await?;
    }
}
