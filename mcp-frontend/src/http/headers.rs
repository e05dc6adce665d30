//! Pure header logic: the loopback Host/Origin rules, the bearer token, and the MCP
//! 2026-07-28 header value encoding (`=?base64?…?=`) with its comparisons.

use axum::http::HeaderMap;
use axum::http::header::{AUTHORIZATION, HOST, ORIGIN};
use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use serde_json::Value;

use crate::call::validate::{ParamHeader, ParamKind};

/// `host[:port]` names one of the loopback hosts we answer for (the rule is shared with the
/// console: `tutti_rules::loopback`).
pub(crate) fn is_loopback_authority(authority: &str) -> bool {
    tutti_rules::loopback::is_loopback_authority(authority)
}

/// The `Host` header names a loopback host (any port). A missing header fails.
pub(crate) fn host_allowed(headers: &HeaderMap) -> bool {
    let mut values = headers.get_all(HOST).iter();
    match (values.next(), values.next()) {
        (Some(value), None) => value
            .to_str()
            .is_ok_and(|v| is_loopback_authority(v.trim())),
        _ => false,
    }
}

/// No `Origin`, or an `http://` origin naming a loopback host.
pub(crate) fn origin_allowed(headers: &HeaderMap) -> bool {
    let mut values = headers.get_all(ORIGIN).iter();
    match (values.next(), values.next()) {
        (None, _) => true,
        (Some(value), None) => value
            .to_str()
            .is_ok_and(tutti_rules::loopback::is_loopback_origin),
        _ => false,
    }
}

/// The token of `Authorization: Bearer <token>`, if the header has that form.
pub(crate) fn bearer_token(headers: &HeaderMap) -> Option<&str> {
    let mut values = headers.get_all(AUTHORIZATION).iter();
    let value = match (values.next(), values.next()) {
        (Some(value), None) => value.to_str().ok()?,
        _ => return None,
    };
    let (scheme, token) = value.trim().split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

/// The `Mcp-Session-Id` a request carries; an unreadable value is an empty id, which names
/// no session.
pub(crate) fn session_id(headers: &HeaderMap) -> Option<&str> {
    headers
        .get(crate::session::ids::SESSION_ID_HEADER)
        .map(|v| v.to_str().unwrap_or_default())
}

/// Why a header value could not be used.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum HeaderProblem {
    Missing,
    Repeated,
    NotText,
    BadBase64,
}

impl HeaderProblem {
    pub(crate) fn describe(&self, header: &str) -> String {
        match self {
            Self::Missing => format!("{header} header is required"),
            Self::Repeated => format!("{header} header is repeated"),
            Self::NotText => format!("{header} header is not valid text"),
            Self::BadBase64 => format!("{header} header has an invalid base64 value"),
        }
    }
}

/// One header's value: trimmed, with a `=?base64?…?=` value decoded (strict padding and
/// alphabet, UTF-8). A value with only the prefix or only the suffix is literal.
pub(crate) fn decoded(headers: &HeaderMap, name: &str) -> Result<String, HeaderProblem> {
    let mut values = headers.get_all(name).iter();
    let value = match (values.next(), values.next()) {
        (None, _) => return Err(HeaderProblem::Missing),
        (Some(_), Some(_)) => return Err(HeaderProblem::Repeated),
        (Some(value), None) => value,
    };
    let text = value.to_str().map_err(|_| HeaderProblem::NotText)?;
    decode_value(text)
}

pub(crate) fn decode_value(raw: &str) -> Result<String, HeaderProblem> {
    let text = raw.trim_matches([' ', '\t']);
    match text
        .strip_prefix("=?base64?")
        .and_then(|rest| rest.strip_suffix("?="))
    {
        Some(encoded) => {
            let bytes = STANDARD
                .decode(encoded)
                .map_err(|_| HeaderProblem::BadBase64)?;
            String::from_utf8(bytes).map_err(|_| HeaderProblem::BadBase64)
        }
        None => Ok(text.to_owned()),
    }
}

/// The argument value at a parameter's path; `None` when absent or null.
pub(crate) fn argument_at<'a>(arguments: Option<&'a Value>, path: &[String]) -> Option<&'a Value> {
    let mut value = arguments?;
    for key in path {
        value = value.get(key)?;
    }
    (!value.is_null()).then_some(value)
}

/// Whether a decoded `Mcp-Param-*` header value matches the body's value.
pub(crate) fn param_matches(param: &ParamHeader, header: &str, body: &Value) -> bool {
    match body {
        Value::String(s) => s == header,
        Value::Bool(b) => header == if *b { "true" } else { "false" },
        Value::Number(n) => {
            if let Some(i) = n.as_i64() {
                header.parse::<i128>().is_ok_and(|h| h == i128::from(i))
            } else if let Some(u) = n.as_u64() {
                header.parse::<i128>().is_ok_and(|h| h == i128::from(u))
            } else if param.kind == ParamKind::Integer {
                // An integral float such as 3.0 in the body.
                n.as_f64().is_some_and(|f| {
                    f.fract() == 0.0 && header.parse::<i128>().is_ok_and(|h| h as f64 == f)
                })
            } else {
                header == n.to_string()
            }
        }
        other => serde_json::from_str::<Value>(header).is_ok_and(|h| &h == other),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;
    use serde_json::json;

    #[test]
    fn loopback_hosts() {
        for ok in [
            "127.0.0.1",
            "127.0.0.1:8080",
            "localhost",
            "LOCALHOST:1",
            "[::1]",
            "[::1]:443",
        ] {
            assert!(is_loopback_authority(ok), "{ok}");
        }
        for bad in [
            "evil.example.com",
            "127.0.0.1.evil.com",
            "localhost.evil",
            "127.0.0.2",
            "[::2]:80",
            "127.0.0.1:",
            "127.0.0.1:80x",
            "[::1]x",
            "::1",
            "",
            "localhost:80:80",
        ] {
            assert!(!is_loopback_authority(bad), "{bad}");
        }
    }

    #[test]
    fn origins() {
        let mut h = HeaderMap::new();
        assert!(origin_allowed(&h));
        for (value, ok) in [
            ("http://127.0.0.1:3000", true),
            ("http://localhost", true),
            ("http://[::1]:9", true),
            ("https://localhost", false),
            ("http://evil.example.com", false),
            ("null", false),
            ("http://localhost/path", false),
        ] {
            h.insert(ORIGIN, HeaderValue::from_static(value));
            assert_eq!(origin_allowed(&h), ok, "{value}");
        }
    }

    #[test]
    fn bearer() {
        let mut h = HeaderMap::new();
        assert_eq!(bearer_token(&h), None);
        h.insert(AUTHORIZATION, HeaderValue::from_static("Bearer tts_abc"));
        assert_eq!(bearer_token(&h), Some("tts_abc"));
        h.insert(AUTHORIZATION, HeaderValue::from_static("bearer  tts_abc "));
        assert_eq!(bearer_token(&h), Some("tts_abc"));
        h.insert(AUTHORIZATION, HeaderValue::from_static("Basic abc"));
        assert_eq!(bearer_token(&h), None);
        h.insert(AUTHORIZATION, HeaderValue::from_static("Bearer "));
        assert_eq!(bearer_token(&h), None);
    }

    #[test]
    fn base64_values() {
        assert_eq!(decode_value("=?base64?SGVsbG8=?=").as_deref(), Ok("Hello"));
        assert_eq!(decode_value("  plain  ").as_deref(), Ok("plain"));
        assert_eq!(
            decode_value("=?base64?SGVsbG8=").as_deref(),
            Ok("=?base64?SGVsbG8=")
        );
        assert_eq!(decode_value("SGVsbG8=?=").as_deref(), Ok("SGVsbG8=?="));
        assert_eq!(
            decode_value("=?base64?SGVsbG8?="),
            Err(HeaderProblem::BadBase64)
        );
        assert_eq!(
            decode_value("=?base64?SGVs!!!bG8=?="),
            Err(HeaderProblem::BadBase64)
        );
        assert_eq!(
            decode_value("=?base64?/w==?="),
            Err(HeaderProblem::BadBase64)
        );
        assert_eq!(decode_value("=?base64?w6k=?=").as_deref(), Ok("é"));
    }

    #[test]
    fn param_comparisons() {
        let p = |kind| ParamHeader {
            name: "X".into(),
            header: "mcp-param-x".into(),
            path: vec!["x".into()],
            kind,
        };
        assert!(param_matches(&p(ParamKind::String), "abc", &json!("abc")));
        assert!(!param_matches(&p(ParamKind::String), "ABC", &json!("abc")));
        assert!(param_matches(&p(ParamKind::Integer), "42", &json!(42)));
        assert!(param_matches(&p(ParamKind::Integer), "042", &json!(42)));
        assert!(param_matches(&p(ParamKind::Integer), "-7", &json!(-7)));
        assert!(!param_matches(&p(ParamKind::Integer), "4.2e1", &json!(42)));
        assert!(param_matches(&p(ParamKind::Integer), "3", &json!(3.0)));
        assert!(param_matches(&p(ParamKind::Boolean), "true", &json!(true)));
        assert!(!param_matches(&p(ParamKind::Boolean), "True", &json!(true)));
    }

    #[test]
    fn argument_paths() {
        let args = json!({"a":{"b":1},"n":null});
        assert_eq!(
            argument_at(Some(&args), &["a".into(), "b".into()]),
            Some(&json!(1))
        );
        assert_eq!(argument_at(Some(&args), &["n".into()]), None);
        assert_eq!(argument_at(Some(&args), &["z".into()]), None);
        assert_eq!(argument_at(None, &["a".into()]), None);
    }
}
