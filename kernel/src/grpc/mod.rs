//! The kernel's gRPC edge: one service per audience, each a thin adapter that decodes a
//! request, calls a use case and encodes its answer. `Admin` serves the CLI and the console,
//! `Routes` the MCP frontend, the shim manager and the console's live view, `Workers` the
//! upstream workers. Use cases answer `tonic::Status` errors whose messages a person reads
//! (the CLI prints them as they are); none carries a secret.

mod admin;
mod routes;
mod workers;

use std::sync::Arc;

use tonic::transport::server::Router;
use tutti_proto::kernel::admin_server::AdminServer;
use tutti_proto::kernel::routes_server::RoutesServer;
use tutti_proto::kernel::workers_server::WorkersServer;
use tutti_proto::limits::MAX_KERNEL_REQUEST_BYTES;

use crate::error::KernelError;
use crate::state::Kernel;

/// The kernel's services on one server, each request bounded in size: the three above and
/// the market's (`crate::market`, for the CLI and the console).
pub fn router(k: &Arc<Kernel>) -> Result<Router, KernelError> {
    Ok(tonic::transport::Server::builder()
        .add_service(
            AdminServer::new(admin::Admin { k: k.clone() })
                .max_decoding_message_size(MAX_KERNEL_REQUEST_BYTES),
        )
        .add_service(
            RoutesServer::new(routes::Routes { k: k.clone() })
                .max_decoding_message_size(MAX_KERNEL_REQUEST_BYTES),
        )
        .add_service(
            WorkersServer::new(workers::Workers { k: k.clone() })
                .max_decoding_message_size(MAX_KERNEL_REQUEST_BYTES),
        )
        .add_service(
            crate::market::server(&k.paths.state)?
                .max_decoding_message_size(MAX_KERNEL_REQUEST_BYTES),
        ))
}
