//! systemd readiness (`Type=notify`): `READY=1` once the kernel socket is bound and the
//! frontend answers an MCP request; `STOPPING=1` at shutdown. A no-op without NOTIFY_SOCKET.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

pub fn notify(state: &str) {
    imp::send(state);
}

/// True once `url` (http://127.0.0.1:P/mcp/connector) answers a POST with any HTTP status.
pub async fn frontend_answers(url: &str) -> bool {
    let Some(rest) = url.strip_prefix("http://") else {
        return false;
    };
    let Some((authority, path)) = rest.split_once('/') else {
        return false;
    };
    let fut = async {
        let mut s = tokio::net::TcpStream::connect(authority).await.ok()?;
        let body = r#"{"jsonrpc":"2.0","id":0,"method":"ping"}"#;
        let req = format!(
            "POST /{path} HTTP/1.1\r\nHost: {authority}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        );
        s.write_all(req.as_bytes()).await.ok()?;
        let mut buf = [0u8; 12];
        s.read_exact(&mut buf).await.ok()?;
        Some(buf.starts_with(b"HTTP/1.1 "))
    };
    tokio::time::timeout(Duration::from_secs(2), fut)
        .await
        .ok()
        .flatten()
        .unwrap_or(false)
}

#[cfg(unix)]
mod imp {
    pub(super) fn send(state: &str) {
        let Some(path) = std::env::var_os("NOTIFY_SOCKET") else {
            return;
        };
        let Ok(sock) = std::os::unix::net::UnixDatagram::unbound() else {
            return;
        };
        let bytes = path.as_encoded_bytes();
        #[cfg(target_os = "linux")]
        if let Some(name) = bytes.strip_prefix(b"@") {
            use std::os::linux::net::SocketAddrExt;
            if let Ok(addr) = std::os::unix::net::SocketAddr::from_abstract_name(name) {
                let _ = sock.send_to_addr(state.as_bytes(), &addr);
            }
            return;
        }
        let _ = bytes;
        let _ = sock.send_to(state.as_bytes(), &path);
    }
}

#[cfg(not(unix))]
mod imp {
    pub(super) fn send(_state: &str) {}
}
