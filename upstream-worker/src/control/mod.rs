//! The control plane to the kernel: `RegisterWorker`, `OfferTools`, `ReportWorker` and the
//! token refresh, over the kernel's gRPC endpoint ([`KernelLink`]).

mod link;

pub(crate) use link::KernelLink;
