//! `tutti-auth-proxy --upstream 127.0.0.1:PORT [--port P]`: a loopback proxy that adds
//! `Authorization: Bearer <token>` to every request (see `tutti_tests::auth_proxy`).
//!
//! The token is the first line of stdin (never argv, never the environment). The proxy
//! prints `listening <port>` once bound and exits when stdin reaches EOF, so it never
//! outlives the process that started it.
#![forbid(unsafe_code)]

use std::net::{Ipv4Addr, SocketAddr};

use anyhow::Context;
use clap::Parser;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};

/// Adds a bearer token to every request and forwards it to the upstream, unchanged.
#[derive(Debug, Parser)]
#[command(name = "tutti-auth-proxy", version)]
struct Args {
    /// The frontend's address, `127.0.0.1:PORT`.
    #[arg(long, value_name = "HOST:PORT")]
    upstream: SocketAddr,
    /// Port on 127.0.0.1 to listen on (0 = pick one).
    #[arg(long, default_value_t = 0)]
    port: u16,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let mut stdin = BufReader::new(tokio::io::stdin());
    let mut token = String::new();
    stdin
        .read_line(&mut token)
        .await
        .context("cannot read the token from stdin")?;
    let token = token.trim().to_owned();
    anyhow::ensure!(!token.is_empty(), "no token on the first line of stdin");
    let listener = tokio::net::TcpListener::bind((Ipv4Addr::LOCALHOST, args.port))
        .await
        .context("cannot listen on 127.0.0.1")?;
    let port = listener.local_addr().context("no local address")?.port();
    println!("listening {port}");
    let proxy = tutti_tests::auth_proxy::serve(listener, args.upstream, &token);
    let eof = async move {
        let mut sink = Vec::new();
        let _ = stdin.read_to_end(&mut sink).await;
    };
    tokio::select! {
        served = proxy => served.context("the proxy failed")?,
        () = eof => {}
    }
    Ok(())
}
