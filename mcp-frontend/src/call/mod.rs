//! A call to a worker: `tools/call` for both eras (and the relayed `prompts/get`), from the
//! one decision of how it is sent ([`path`]) through its time in flight ([`ending`]) to its
//! answer. Its state: the breaker ([`circuit`]), the compiled argument schemas ([`validate`]).

pub(crate) mod circuit;
pub(crate) mod confirm;
pub(crate) mod ending;
pub(crate) mod execute;
pub(crate) mod path;
pub(crate) mod progress;
pub(crate) mod prompt_relay;
pub(crate) mod relay;
pub(crate) mod result;
pub(crate) mod validate;
