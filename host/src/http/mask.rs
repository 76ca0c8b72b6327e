//! Secret-looking values masked in every response: job params and run results go out with
//! the value of any key that looks like a secret (password, secret, token, key, credential,
//! connection string) replaced by [`MASK`], and any string that looks like a connection
//! string with a password (`Password=…;`, `postgres://user:pass@…`) likewise.
//!
//! An edit sends a job back as it was read, masks included: [`unmask`] puts the stored value
//! back wherever the edit still carries the mask at the same place, so reading and writing a
//! job through the API never overwrites a password with asterisks.

use serde_json::Value;

/// What a masked value reads as.
pub const MASK: &str = "********";

/// Whether a key of params or results names a secret.
pub fn is_secret_key(key: &str) -> bool {
    let k: String = key
        .chars()
        .filter(|c| c.is_ascii_alphanumeric())
        .map(|c| c.to_ascii_lowercase())
        .collect();
    [
        "password",
        "passwd",
        "pwd",
        "secret",
        "token",
        "credential",
        "connectionstring",
        "connstr",
    ]
    .iter()
    .any(|s| k.contains(s))
        || k.ends_with("key")
}

/// Whether a string value looks like a connection string or URL carrying a password.
pub fn looks_like_secret_value(v: &str) -> bool {
    let l = v.to_ascii_lowercase();
    if l.contains("password=") || l.contains("pwd=") {
        return true;
    }
    // scheme://user:password@host
    if let Some(rest) = l.split_once("://").map(|(_, r)| r)
        && let Some((userinfo, _)) = rest.split_once('@')
    {
        return userinfo.contains(':') && !userinfo.contains('/');
    }
    false
}

/// `value` with every secret masked (recursively).
pub fn mask(value: &Value) -> Value {
    match value {
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(k, v)| {
                    let v = if is_secret_key(k) && !v.is_null() {
                        Value::String(MASK.into())
                    } else {
                        mask(v)
                    };
                    (k.clone(), v)
                })
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(mask).collect()),
        Value::String(s) if looks_like_secret_value(s) => Value::String(MASK.into()),
        other => other.clone(),
    }
}

/// A JSON text with its secrets masked (a text that is not JSON is masked as one string).
pub fn mask_text(text: &str) -> Value {
    match serde_json::from_str::<Value>(text) {
        Ok(v) => mask(&v),
        Err(_) if looks_like_secret_value(text) => Value::String(MASK.into()),
        Err(_) => Value::String(text.to_string()),
    }
}

/// `edited` with each [`MASK`] that stands where `stored` has a value replaced by that value.
pub fn unmask(edited: &mut Value, stored: &Value) {
    match (edited, stored) {
        (Value::Object(e), Value::Object(s)) => {
            for (k, v) in e.iter_mut() {
                if let Some(old) = s.get(k) {
                    unmask(v, old);
                }
            }
        }
        (Value::Array(e), Value::Array(s)) => {
            for (v, old) in e.iter_mut().zip(s) {
                unmask(v, old);
            }
        }
        (e @ Value::String(_), old) if e.as_str() == Some(MASK) => *e = old.clone(),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn secrets_are_masked_by_key_and_by_look() {
        let params = json!({
            "url": "https://mes/api", "password": "p", "apiKey": "k", "client_secret": "s",
            "headers": {"X-Token": "t", "Accept": "json"},
            "dsn": "Server=db;User Id=sa;Password=x;", "pg": "postgres://u:pw@h/db",
            "plain": "postgres://h/db", "keyword": "stays", "list": [{"token": 1}]
        });
        let m = mask(&params);
        assert_eq!(
            m,
            json!({
                "url": "https://mes/api", "password": MASK, "apiKey": MASK,
                "client_secret": MASK, "headers": {"X-Token": MASK, "Accept": "json"},
                "dsn": MASK, "pg": MASK, "plain": "postgres://h/db", "keyword": "stays",
                "list": [{"token": MASK}]
            })
        );
        let mut back = m.clone();
        if let Some(o) = back.as_object_mut() {
            o.insert("url".into(), json!("https://mes/v2"));
        }
        unmask(&mut back, &params);
        let mut expected = params.clone();
        expected["url"] = json!("https://mes/v2");
        assert_eq!(back, expected, "masks restored, edits kept");
    }
}
