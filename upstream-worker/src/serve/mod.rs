//! What the worker serves: the `tutti.worker.v1.Worker` gRPC service (calls from the frontend,
//! `Fence` and `Shutdown` from the kernel) and the frame data plane the frontend sends calls
//! on ([`frames`]). Both go through [`Shared::call`].

mod frames;
mod shared;

pub(crate) use frames::FrameServer;
pub(crate) use shared::{Event, Shared, WorkerService};
