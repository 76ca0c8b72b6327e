//! What may be shown of a request: URLs without credentials and with secret-looking query
//! values masked, header values masked by name. Used for every log line, message and result.

use reqwest::Url;

/// What replaces a hidden value.
pub(crate) const MASK: &str = "***";

/// Name fragments that mark a query parameter or header as secret (compared without case,
/// `-` and `_`): `access_token`, `X-Api-Key`, `client_secret`, `sig`, …
const SECRET_WORDS: [&str; 10] = [
    "token", "secret", "password", "passwd", "pwd", "apikey", "key", "auth", "session", "sig",
];

/// Whether a header or query parameter of this name likely carries a secret.
pub(crate) fn is_secret_name(name: &str) -> bool {
    let folded: String = name
        .chars()
        .filter(|c| *c != '-' && *c != '_')
        .flat_map(char::to_lowercase)
        .collect();
    folded == "cookie" || folded == "setcookie" || SECRET_WORDS.iter().any(|w| folded.contains(w))
}

/// `url` as shown: no user info, secret-looking query values masked.
pub(crate) fn url(url: &Url) -> String {
    let mut shown = url.clone();
    let _ = shown.set_username("");
    let _ = shown.set_password(None);
    shown.set_fragment(None);
    if shown.query().is_some() {
        let pairs: Vec<(String, String)> = url
            .query_pairs()
            .map(|(k, v)| {
                let v = if is_secret_name(&k) {
                    MASK.to_string()
                } else {
                    v.into_owned()
                };
                (k.into_owned(), v)
            })
            .collect();
        shown.query_pairs_mut().clear().extend_pairs(pairs);
    }
    shown.to_string()
}

/// A URL as text that may not even parse (for messages about a bad one): parsed, as
/// [`url`]; else everything between `//` (or the start) and an `@` hidden, so a password
/// never shows.
pub(crate) fn url_text(raw: &str) -> String {
    match Url::parse(raw.trim()) {
        Ok(u) if u.has_host() => url(&u),
        _ => match raw.rfind('@') {
            Some(at) => {
                let start = raw.find("//").map_or(0, |i| i + 2).min(at);
                format!("{}{MASK}{}", &raw[..start], &raw[at..])
            }
            None => raw.trim().escape_debug().to_string(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_are_masked() {
        let u = Url::parse("https://u:pw@h/x?line=3&access_token=abc&X-Api-Key=k#frag").unwrap();
        assert_eq!(url(&u), "https://h/x?line=3&access_token=***&X-Api-Key=***");
        assert_eq!(url_text("htp//u:pw@h/x"), "htp//***@h/x");
        assert_eq!(url_text("u:pw@h"), "***@h");
        for name in [
            "Authorization",
            "X-API-KEY",
            "apikey",
            "Cookie",
            "set-cookie",
            "sig",
        ] {
            assert!(is_secret_name(name), "{name}");
        }
        for name in ["Accept", "Content-Type", "line", "X-Request-Id"] {
            assert!(!is_secret_name(name), "{name}");
        }
    }
}
