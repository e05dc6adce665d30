//! OAuth 2.1 for remote MCP upstreams (SPEC §10), as the MCP authorization specification of
//! 2025-11-25 and 2026-07-28 defines it.
//!
//! The protocol steps rmcp's `auth` module implements well are used as they are: discovery
//! (RFC 9728 from the 401's `resource_metadata`, then the well-known paths; RFC 8414, then
//! OpenID discovery), the `issuer` checks of metadata and of the redirect's `iss` (RFC 9207),
//! PKCE S256, the `resource` parameter (RFC 8707), the scope selection rules and the token
//! requests. What this crate adds (see ARCHITECTURE.md, *OAuth upstreams*):
//!
//! - a login that spans two processes and two RPCs ([`login::begin`] returns the URL, the
//!   redirect arrives later at [`login::Pending::complete`]);
//! - the persisted form of a login, [`Grant`], which holds everything a refresh needs (the
//!   server metadata, the client identity, the tokens) so that a refresh after a restart
//!   needs no discovery ([`Grant::refresh`]);
//! - dynamic registration called by us, so the registered client (its secret too) is part of
//!   the [`Grant`] and never only in rmcp's memory;
//! - revocation (RFC 7009), which rmcp does not offer ([`Grant::revoke`]);
//! - the manifest URL rule ([`check_url`]), and for every URL a remote document names the
//!   endpoint rule and the address rule of the one OAuth HTTP client ([`OAuthHttp`], [`Reach`]),
//!   which every request of this crate goes through, rmcp's included.
//!
//! Nothing here logs or displays a token: [`Grant`]'s `Debug` shows none.

#![forbid(unsafe_code)]

mod account;
mod address;
mod common;
mod error;
mod grant;
pub mod login;
mod net;
mod par;
mod probe;

pub use account::Account;
pub use common::{ClientSettings, OAuthError, check_authorization_url, check_url};
pub use grant::Grant;
pub use login::RegisteredClient;
pub use net::{AddressClass, MAX_BODY, OAuthHttp, Reach};
