//! Agent sessions: issue, revoke, verify and list session tokens (`tokens`), the revocation
//! that waits for every session cache (`revocation`, `caches`).

pub(crate) mod caches;
pub(crate) mod revocation;
pub(crate) mod tokens;
