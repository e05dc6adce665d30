//! The loopback Host/Origin rule of SPEC §5, shared by the MCP frontend and the console
//! (SPEC §13): a `Host` must name `127.0.0.1`, `localhost` or `[::1]` (any port), and an
//! `Origin`, when present, must be `http://` with one of those hosts.

/// `host[:port]` names one of the loopback hosts we answer for.
pub fn is_loopback_authority(authority: &str) -> bool {
    let (host, port) = if let Some(rest) = authority.strip_prefix('[') {
        let Some(end) = rest.find(']') else {
            return false;
        };
        let host = &rest[..end];
        let after = &rest[end + 1..];
        let port = match after {
            "" => None,
            _ => match after.strip_prefix(':') {
                Some(p) => Some(p),
                None => return false,
            },
        };
        if host != "::1" {
            return false;
        }
        (host, port)
    } else {
        match authority.split_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (authority, None),
        }
    };
    if let Some(port) = port
        && (port.is_empty() || port.len() > 5 || !port.bytes().all(|b| b.is_ascii_digit()))
    {
        return false;
    }
    host == "::1" || host == "127.0.0.1" || host.eq_ignore_ascii_case("localhost")
}

/// An `Origin` value (trimmed) is `http://` with a loopback authority.
pub fn is_loopback_origin(origin: &str) -> bool {
    let v = origin.trim();
    v.get(..7)
        .is_some_and(|s| s.eq_ignore_ascii_case("http://"))
        && is_loopback_authority(&v[7..])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_authorities_and_origins() {
        for ok in [
            "127.0.0.1",
            "127.0.0.1:80",
            "localhost:1",
            "LOCALHOST",
            "[::1]:8",
        ] {
            assert!(is_loopback_authority(ok), "{ok}");
        }
        for bad in [
            "evil.example",
            "127.0.0.1.evil",
            "[::2]",
            "localhost:",
            "127.0.0.1:x",
        ] {
            assert!(!is_loopback_authority(bad), "{bad}");
        }
        assert!(is_loopback_origin("http://127.0.0.1:4000"));
        assert!(!is_loopback_origin("https://127.0.0.1:4000"));
        assert!(!is_loopback_origin("http://evil.example"));
        assert!(!is_loopback_origin("null"));
    }
}
