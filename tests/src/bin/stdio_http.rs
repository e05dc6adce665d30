//! `tutti-stdio-http [--port P] -- PROGRAM [ARGS...]`: Streamable HTTP in front of a stdio
//! MCP server (see `tutti_tests::stdio_http`): each 2025-era session, and all requests outside
//! one, run PROGRAM of their own. No shell: PROGRAM is run with ARGS as given.
//!
//! Prints `listening <port>` once bound and exits when stdin reaches EOF, so it never
//! outlives the process that started it.
#![forbid(unsafe_code)]

use std::ffi::OsString;
use std::net::Ipv4Addr;

use anyhow::Context;
use clap::Parser;
use tokio::io::AsyncReadExt;

/// Serves a stdio MCP server over Streamable HTTP on 127.0.0.1.
#[derive(Debug, Parser)]
#[command(name = "tutti-stdio-http", version)]
struct Args {
    /// Port on 127.0.0.1 to listen on (0 = pick one).
    #[arg(long, default_value_t = 0)]
    port: u16,
    /// The stdio server's program and arguments.
    #[arg(last = true, required = true)]
    command: Vec<OsString>,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let listener = tokio::net::TcpListener::bind((Ipv4Addr::LOCALHOST, args.port))
        .await
        .context("cannot listen on 127.0.0.1")?;
    let port = listener.local_addr().context("no local address")?.port();
    println!("listening {port}");
    let served = tutti_tests::stdio_http::serve(listener, args.command);
    let eof = async {
        let mut sink = Vec::new();
        let _ = tokio::io::stdin().read_to_end(&mut sink).await;
    };
    tokio::select! {
        served = served => served.context("the adapter failed")?,
        () = eof => {}
    }
    Ok(())
}
