//! Tool calls through the runtime: the frontend on the wire, both data planes, large results, the
//! circuit breaker, HTTP upstream fidelity, era hygiene and confirmed calls.

mod big_results;
mod circuit;
mod circuit_fences;
mod confirm;
mod confirm_modern;
mod confirm_person;
mod confirm_waits;
mod era_hygiene;
mod frame_data_plane;
mod frontend;
mod frontend_floods;
mod http_fidelity;
