//! Who is calling: the verified-session cache ([`sessions`]), each token's client state
//! ([`clients`]: capabilities, log level, parked calls, waiting questions) and resource
//! subscriptions ([`notify`]), and the `Mcp-Session-Id`s derived from tokens ([`ids`]).

pub(crate) mod clients;
pub(crate) mod ids;
pub(crate) mod notify;
pub(crate) mod sessions;
