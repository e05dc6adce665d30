//! Connecting a connector: its secrets, or an OAuth login (`oauth`, with the token record it
//! keeps in `oauth_record`).

pub(crate) mod oauth;
pub(crate) mod oauth_record;
