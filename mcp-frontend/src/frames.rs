//! The fast path of plain tool calls: `CallToolRequest` as a length-prefixed frame
//! on a pooled local-socket connection to the worker's frame endpoint
//! ([`tutti_proto::frames`]), instead of a gRPC call over HTTP/2.
//!
//! Only calls without progress, relaying or refusal take it (`call/execute.rs` `send_call`); every
//! other worker RPC, `Cancel` included, stays on gRPC. A connection carries one call at a
//! time and goes back to its worker's pool only after a whole answer; a call dropped half-way
//! (client cancel, fence, deadline) drops its connection, which the worker takes as the
//! caller gone (it drops the call and cancels the upstream, as for a dropped gRPC stream).
//! Failures map exactly as the gRPC path's do: a status frame is the status itself (the
//! backend maps it with the same `worker_status`), a broken connection `WorkerUnavailable`.

use std::collections::HashMap;
use std::sync::Mutex;

use tutti_proto::frames::{self, FrameBuffer, Kind};
use tutti_proto::transport::{self, IpcConn, LocalEndpoint};
use tutti_proto::worker::{CallError, CallToolReply, CallToolRequest};

use crate::error::Error;

/// Idle connections kept per worker generation; more are closed when they come back. As many
/// as the concurrent calls a busy agent host sends one connector (the bench's 64 clients):
/// with 8, 56 of every 64 calls under that load opened a new connection (a connect, an
/// accept and a new task in the worker per call), and throughput at 64 clients fell below
/// the gRPC hop's. An idle connection costs the worker one small task (its call future is
/// boxed only while a call runs: `upstream-worker/src/serve/frames.rs`).
const IDLE_PER_WORKER: usize = 64;

/// Idle connections per worker that keep their reply buffer (up to 2 MiB each after big
/// replies, so a stream of big results is read into mapped pages); one that comes back
/// when this many are idle already gives its buffer up, so idle buffers stay within 16 MiB
/// per worker however many connections the pool holds.
const BUFFERED_PER_WORKER: usize = 8;

/// Which data plane plain tool calls use (env `TUTTI_DATA_PLANE`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum DataPlane {
    Grpc,
    Frames,
}

impl DataPlane {
    /// The default when the variable is unset (see ARCHITECTURE.md).
    pub(crate) const DEFAULT: DataPlane = DataPlane::Frames;

    /// Reads `TUTTI_DATA_PLANE`; an unknown value is logged and the default used.
    pub(crate) fn from_env() -> Self {
        let value = std::env::var(frames::DATA_PLANE_ENV).unwrap_or_default();
        Self::parse(&value).unwrap_or_else(|| {
            tracing::warn!(
                value = %value,
                "{} is neither `grpc` nor `frames`; using {:?}",
                frames::DATA_PLANE_ENV,
                Self::DEFAULT
            );
            Self::DEFAULT
        })
    }

    fn parse(value: &str) -> Option<Self> {
        match value.trim() {
            "" => Some(Self::DEFAULT),
            "grpc" => Some(Self::Grpc),
            "frames" => Some(Self::Frames),
            _ => None,
        }
    }
}

/// Idle frame connections, by the worker's frame endpoint (one per generation).
#[derive(Default)]
pub(crate) struct FramePool {
    idle: Mutex<HashMap<String, Vec<Pooled>>>,
}

/// An idle connection and the buffer its replies are read into (used again).
type Pooled = (IpcConn, FrameBuffer);

impl FramePool {
    /// One call over the frame endpoint `data_endpoint` of the worker whose gRPC endpoint is
    /// `endpoint` (named in errors, as on the gRPC path). `Ok(Err(status))`: the worker
    /// answered with the status gRPC `CallTool` would have failed with.
    pub(crate) async fn call(
        &self,
        endpoint: &str,
        data_endpoint: &str,
        request: CallToolRequest,
    ) -> Result<Result<CallToolReply, tonic::Status>, Error> {
        let broken = |detail: String| Error::WorkerUnavailable {
            endpoint: endpoint.to_owned(),
            detail,
        };
        let (mut conn, mut replies) = match self.take(data_endpoint) {
            Some(pooled) => pooled,
            None => transport::open_stream(&LocalEndpoint::from_wire(data_endpoint))
                .await
                .map(|conn| (conn, FrameBuffer::default()))
                .map_err(|e| broken(e.to_string()))?,
        };
        let mut buf = Vec::new();
        frames::write_frame(&mut conn, Kind::Call, &request, &mut buf)
            .await
            .map_err(|e| broken(format!("cannot send the call: {e}")))?;
        let (kind, body) = frames::read_body(&mut conn, &mut replies)
            .await
            .map_err(|e| broken(format!("the call's answer did not come: {e}")))?
            .ok_or_else(|| broken("the worker closed the connection mid-call".to_owned()))?;
        let decode_failed = |e: std::io::Error| broken(e.to_string());
        match kind {
            Kind::Reply => {
                // Decoded from the frame's own buffer: the result is a slice of it.
                let reply = frames::decode_body::<CallToolReply>(body).map_err(decode_failed)?;
                self.put(data_endpoint, (conn, replies));
                Ok(Ok(reply))
            }
            Kind::Status => {
                let status = frames::decode_body::<CallError>(body).map_err(decode_failed)?;
                self.put(data_endpoint, (conn, replies));
                Ok(Err(frames::status_of(status)))
            }
            Kind::Call => Err(broken("the worker sent a call frame".to_owned())),
        }
    }

    fn take(&self, data_endpoint: &str) -> Option<Pooled> {
        self.lock().get_mut(data_endpoint).and_then(Vec::pop)
    }

    /// Returns a connection after a whole answer. A new endpoint (a new generation) first
    /// drops the pools of endpoints whose socket is gone (generations that ended).
    fn put(&self, data_endpoint: &str, mut conn: Pooled) {
        let mut idle = self.lock();
        if !idle.contains_key(data_endpoint) {
            idle.retain(|endpoint, _| still_there(endpoint));
        }
        let pool = idle.entry(data_endpoint.to_owned()).or_default();
        if pool.len() >= BUFFERED_PER_WORKER {
            conn.1 = FrameBuffer::default();
        }
        if pool.len() < IDLE_PER_WORKER {
            pool.push(conn);
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Vec<Pooled>>> {
        // A poisoned pool only ever holds connections; keep using it.
        self.idle.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Whether a worker's frame endpoint may still be served: its socket file exists (Unix; the
/// kernel removes it when the worker exits). A named pipe has no file: kept (Windows).
fn still_there(endpoint: &str) -> bool {
    if cfg!(unix) {
        std::path::Path::new(endpoint).exists()
    } else {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_switch_reads_both_planes_and_defaults() {
        assert_eq!(DataPlane::parse("grpc"), Some(DataPlane::Grpc));
        assert_eq!(DataPlane::parse(" frames "), Some(DataPlane::Frames));
        assert_eq!(DataPlane::parse(""), Some(DataPlane::DEFAULT));
        assert_eq!(DataPlane::parse("quic"), None);
    }
}
