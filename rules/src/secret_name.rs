//! How a name from elsewhere (a header, an input id, a bundle setting) becomes a secret name: the
//! shape of an environment variable, since secrets reach stdio upstreams as variables.

/// `X-Api-Key` → `X_API_KEY`, `api.key` → `API_KEY`; a name that would start with a digit (or is
/// empty) gets `SECRET_` in front.
pub fn from_any(name: &str) -> String {
    let mut out: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_uppercase()
            } else {
                '_'
            }
        })
        .collect();
    if out.is_empty() || out.starts_with(|c: char| c.is_ascii_digit()) {
        out.insert_str(0, "SECRET_");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::from_any;

    #[test]
    fn names_become_variable_shaped() {
        for (given, want) in [
            ("X-Api-Key", "X_API_KEY"),
            ("api.key", "API_KEY"),
            ("token", "TOKEN"),
            ("2fa", "SECRET_2FA"),
            ("", "SECRET_"),
            ("ключ", "____"),
        ] {
            assert_eq!(from_any(given), want, "{given:?}");
        }
    }
}
