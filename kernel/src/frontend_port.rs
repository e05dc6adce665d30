//! The frontend's port across `tutti up` restarts (SPEC §5): the port it last listened on is
//! recorded in `run/frontend.port`, and a later kernel starts the frontend on it again when
//! it is free, so URLs in agent configurations keep working. When it is taken the frontend
//! moves to a free port and the kernel's log says so.

use std::net::{Ipv4Addr, TcpListener};

use crate::paths::Paths;

/// The port to start the frontend on: the recorded one when it is free now, else `0` (any).
pub fn initial(paths: &Paths) -> u16 {
    let Some(last) = std::fs::read_to_string(paths.frontend_port())
        .ok()
        .and_then(|text| text.trim().parse::<u16>().ok())
        .filter(|port| *port != 0)
    else {
        return 0;
    };
    // A probe bind (SO_REUSEADDR, as the real one): free now, or taken by another program.
    match TcpListener::bind((Ipv4Addr::LOCALHOST, last)) {
        Ok(_free) => {
            tracing::info!(port = last, "the frontend keeps its last port");
            last
        }
        Err(e) => {
            tracing::warn!(
                port = last,
                error = %e,
                "the frontend's last port is taken: it moves to a new port, and bindings \
                 with the old URL need `tutti session issue` again (or use `--via stdio`)"
            );
            0
        }
    }
}

/// Records the port the frontend listens on.
pub fn record(paths: &Paths, port: u16) {
    let path = paths.frontend_port();
    if let Err(e) = crate::registry::write_private(&path, format!("{port}\n").as_bytes()) {
        tracing::warn!(port, error = %e, "cannot record the frontend's port");
    }
}
