//! `Debug` for the messages that carry secret values (SPEC §9: no secret is ever printed):
//! they show field names and map keys, never the values. prost's derived `Debug` is switched
//! off for exactly these messages in `build.rs` (`skip_debug`), so a `{:?}` or a failed
//! `assert_eq!` anywhere cannot print a credential.

use std::collections::HashMap;
use std::fmt;

use crate::kernel::{
    CompleteLoginRequest, ConnectRequest, LaunchSpec, RefreshWorkerTokenReply,
    RefreshWorkerTokenRequest, ResolveShimReply,
};

/// A map shown by its keys only.
struct Keys<'a>(&'a HashMap<String, String>);

impl fmt::Debug for Keys<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut keys: Vec<&String> = self.0.keys().collect();
        keys.sort();
        f.debug_list().entries(keys).finish()
    }
}

impl fmt::Debug for LaunchSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LaunchSpec")
            .field("transport", &self.transport())
            .field("command", &self.command)
            .field("args", &self.args)
            .field("cwd", &self.cwd)
            .field("env (names)", &Keys(&self.env))
            .field("url", &self.url)
            .field("headers (names)", &Keys(&self.headers))
            .field("start_timeout_ms", &self.start_timeout_ms)
            .field("call_timeout_ms", &self.call_timeout_ms)
            .field("redact (count)", &self.redact.len())
            .field("log_path", &self.log_path)
            .field("oauth", &self.oauth)
            .field("oauth_expires_unix_ms", &self.oauth_expires_unix_ms)
            .finish()
    }
}

impl fmt::Debug for ResolveShimReply {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResolveShimReply")
            .field("live", &self.live)
            .field("status", &self.status)
            .field("generation", &self.generation)
            .field("entrypoint", &self.entrypoint)
            .field("env (names)", &Keys(&self.env))
            .finish()
    }
}

impl fmt::Debug for ConnectRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ConnectRequest")
            .field("key", &self.key)
            .field("secrets (names)", &Keys(&self.secrets))
            .finish()
    }
}

/// The authorization code and `state` of a login: shown as their lengths only.
impl fmt::Debug for CompleteLoginRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CompleteLoginRequest")
            .field("key", &self.key)
            .field("login_id", &self.login_id)
            .field("code (len)", &self.code.len())
            .field("state (len)", &self.state.len())
            .field("iss", &self.iss)
            .finish()
    }
}

impl fmt::Debug for RefreshWorkerTokenRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RefreshWorkerTokenRequest")
            .field("key", &self.key)
            .field("generation", &self.generation)
            .field("rejected (len)", &self.rejected.len())
            .finish()
    }
}

impl fmt::Debug for RefreshWorkerTokenReply {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RefreshWorkerTokenReply")
            .field("access_token (len)", &self.access_token.len())
            .field("expires_unix_ms", &self.expires_unix_ms)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const VALUE: &str = "s3cret-value-never-printed";

    #[test]
    fn secret_values_never_show_in_debug() {
        let secret = || HashMap::from([("API_TOKEN".to_owned(), VALUE.to_owned())]);
        let launch = LaunchSpec {
            env: secret(),
            headers: HashMap::from([("Authorization".to_owned(), format!("Bearer {VALUE}"))]),
            redact: vec![VALUE.to_owned()],
            ..LaunchSpec::default()
        };
        let shim = ResolveShimReply {
            env: secret(),
            ..ResolveShimReply::default()
        };
        let connect = ConnectRequest {
            key: "gh".into(),
            secrets: secret(),
            ..ConnectRequest::default()
        };
        let register = crate::kernel::RegisterWorkerReply {
            launch: Some(launch.clone()),
        };
        let login = CompleteLoginRequest {
            key: "gh".into(),
            code: VALUE.into(),
            state: VALUE.into(),
            ..CompleteLoginRequest::default()
        };
        let refresh = RefreshWorkerTokenReply {
            access_token: VALUE.into(),
            expires_unix_ms: 1,
        };
        let refused = RefreshWorkerTokenRequest {
            rejected: VALUE.into(),
            ..RefreshWorkerTokenRequest::default()
        };
        for shown in [
            format!("{login:?}"),
            format!("{refresh:?}"),
            format!("{refused:?}"),
        ] {
            assert!(!shown.contains(VALUE), "{shown}");
        }
        for shown in [
            format!("{launch:?}"),
            format!("{shim:?}"),
            format!("{connect:?}"),
            format!("{register:#?}"),
        ] {
            assert!(!shown.contains(VALUE), "{shown}");
            assert!(
                shown.contains("API_TOKEN") || shown.contains("Authorization"),
                "{shown}"
            );
        }
    }
}
