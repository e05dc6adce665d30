//! The control plane to the kernel: `RegisterWorker`, `OfferTools`, `ReportWorker` and the
//! token refresh, over the kernel's gRPC endpoint ([`KernelLink`]), and what an offer carries
//! within its limits ([`offer`]).

mod link;
mod offer;

pub(crate) use link::KernelLink;
