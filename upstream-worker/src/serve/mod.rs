//! What the worker serves: the `tutti.worker.v1.Worker` gRPC service ([`service`]; calls from
//! the frontend, `Fence` and `Shutdown` from the kernel) and the frame data plane the frontend
//! sends calls on ([`frames`]). Both go through [`Shared::call`] ([`shared`]), which admits a
//! call only for this worker's own generation ([`admission`]).

mod admission;
mod frames;
mod service;
mod shared;
#[cfg(test)]
mod tests;

pub(crate) use admission::Event;
pub(crate) use frames::FrameServer;
pub(crate) use service::WorkerService;
pub(crate) use shared::Shared;
