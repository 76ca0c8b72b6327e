//! The response body as the run's result keeps it: JSON when it is JSON, else text (decoded
//! from its charset), else only its size.

use serde_json::Value as Json;

/// What the kept body is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum BodyKind {
    /// No body (or none kept: `responseLimit` 0, a `HEAD` request).
    Empty,
    /// Parsed JSON.
    Json,
    /// Text.
    Text,
    /// Bytes that are not text (an image, a PDF, a zip): only counted.
    Binary,
}

/// A decoded body.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Decoded {
    /// What it is.
    pub(crate) kind: BodyKind,
    /// The JSON value, the text as a string, or `null`.
    pub(crate) value: Json,
    /// Why it is not what the content type promised, if so (for the result and the log).
    pub(crate) note: Option<String>,
}

/// Decodes `bytes` (the first ones of the body, `truncated` if there were more) by
/// `content_type`.
pub(crate) fn decode(bytes: &[u8], content_type: Option<&str>, truncated: bool) -> Decoded {
    if bytes.is_empty() {
        return Decoded {
            kind: BodyKind::Empty,
            value: Json::Null,
            note: None,
        };
    }
    let mime = content_type.map(Mime::parse);
    let json_type = mime.as_ref().is_some_and(Mime::is_json);
    let text_type = mime.as_ref().is_some_and(Mime::is_text);
    let charset = mime.as_ref().and_then(|m| m.charset.as_deref());
    if mime.is_some() && !json_type && !text_type {
        return Decoded {
            kind: BodyKind::Binary,
            value: Json::Null,
            note: Some(format!(
                "a {} body of {} bytes{} is not text, so it is not kept",
                mime.as_ref().map_or("", |m| m.essence.as_str()),
                bytes.len(),
                if truncated { " (and more)" } else { "" }
            )),
        };
    }
    let (text, mut note) = match to_text(bytes, charset, truncated) {
        Some(decoded) => decoded,
        None if mime.is_none() => {
            return Decoded {
                kind: BodyKind::Binary,
                value: Json::Null,
                note: Some(format!(
                    "a body of {} bytes without a content type that is not UTF-8 text is not kept",
                    bytes.len()
                )),
            };
        }
        None => (
            String::from_utf8_lossy(bytes).into_owned(),
            Some("the body is not valid UTF-8; unreadable bytes are shown as \u{fffd}".into()),
        ),
    };
    if json_type || mime.is_none() {
        if truncated {
            if json_type {
                note = Some(
                    "the JSON body was cut at responseLimit, so it is kept as text; raise \
                     responseLimit to keep it whole"
                        .into(),
                );
            }
        } else {
            match serde_json::from_str::<Json>(&text) {
                Ok(value) => {
                    return Decoded {
                        kind: BodyKind::Json,
                        value,
                        note,
                    };
                }
                Err(e) if json_type => {
                    note = Some(format!(
                        "the body is not valid JSON ({e}) although its content type says so; \
                         kept as text"
                    ));
                }
                Err(_) => {}
            }
        }
    }
    Decoded {
        kind: BodyKind::Text,
        value: Json::String(text),
        note,
    }
}

/// The text of `bytes` in `charset` (UTF-8 when none is named): `None` when it is not UTF-8
/// and no charset says what it is. A truncated body loses the partial character at its end.
fn to_text(
    bytes: &[u8],
    charset: Option<&str>,
    truncated: bool,
) -> Option<(String, Option<String>)> {
    if let Some(label) = charset {
        let Some(encoding) = encoding_rs::Encoding::for_label(label.as_bytes()) else {
            let text = String::from_utf8_lossy(bytes).into_owned();
            return Some((
                text,
                Some(format!(
                    "charset \"{}\" is unknown; the body is read as UTF-8",
                    label.escape_debug()
                )),
            ));
        };
        if encoding != encoding_rs::UTF_8 {
            let (text, _, had_errors) = encoding.decode(bytes);
            let mut text = text.into_owned();
            if truncated && text.ends_with('\u{fffd}') {
                text.pop();
            }
            let note = had_errors.then(|| {
                format!(
                    "the body has bytes that are not {}; they are shown as \u{fffd}",
                    encoding.name()
                )
            });
            return Some((text, note));
        }
    }
    match std::str::from_utf8(bytes) {
        Ok(s) => Some((s.to_string(), None)),
        // Cut inside a character by the limit: keep what is whole.
        Err(e) if truncated && e.error_len().is_none() => Some((
            String::from_utf8_lossy(&bytes[..e.valid_up_to()]).into_owned(),
            None,
        )),
        Err(_) if charset.is_some() => Some((
            String::from_utf8_lossy(bytes).into_owned(),
            Some("the body is not valid UTF-8; unreadable bytes are shown as \u{fffd}".into()),
        )),
        Err(_) => None,
    }
}

/// The parts of a `Content-Type` that matter here.
struct Mime {
    /// `type/subtype`, lowercase.
    essence: String,
    charset: Option<String>,
}

impl Mime {
    fn parse(header: &str) -> Mime {
        let mut parts = header.split(';');
        let essence = parts.next().unwrap_or("").trim().to_ascii_lowercase();
        let charset = parts.find_map(|p| {
            let (k, v) = p.split_once('=')?;
            k.trim()
                .eq_ignore_ascii_case("charset")
                .then(|| v.trim().trim_matches('"').to_string())
        });
        Mime { essence, charset }
    }

    fn subtype(&self) -> &str {
        self.essence.split_once('/').map_or("", |(_, s)| s)
    }

    fn is_json(&self) -> bool {
        let sub = self.subtype();
        sub == "json" || sub.ends_with("+json")
    }

    fn is_text(&self) -> bool {
        let sub = self.subtype();
        self.essence.starts_with("text/")
            || self.charset.is_some()
            || sub == "xml"
            || sub.ends_with("+xml")
            || matches!(
                sub,
                "javascript"
                    | "ecmascript"
                    | "x-www-form-urlencoded"
                    | "csv"
                    | "yaml"
                    | "x-yaml"
                    | "problem+json"
            )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn json_text_and_binary() {
        let d = decode(
            br#"{"a":1}"#,
            Some("application/json; charset=utf-8"),
            false,
        );
        assert_eq!(
            (d.kind, d.value, d.note),
            (BodyKind::Json, json!({"a": 1}), None)
        );
        let d = decode(br#"[1,2]"#, None, false);
        assert_eq!(d.kind, BodyKind::Json);
        let d = decode(br#"{"a":"#, Some("application/problem+json"), true);
        assert_eq!(d.kind, BodyKind::Text);
        assert!(d.note.unwrap().contains("cut at responseLimit"));
        let d = decode(b"<html>oops", Some("application/json"), false);
        assert_eq!(d.kind, BodyKind::Text);
        assert!(d.note.unwrap().contains("not valid JSON"));
        let d = decode(b"ok", Some("text/plain"), false);
        assert_eq!((d.kind, d.value), (BodyKind::Text, json!("ok")));
        let d = decode(&[0x89, b'P', b'N', b'G', 0xff], Some("image/png"), false);
        assert_eq!((d.kind, d.value), (BodyKind::Binary, Json::Null));
        assert!(d.note.unwrap().contains("image/png body of 5 bytes"));
        let d = decode(&[0xff, 0xfe, 0x00], None, false);
        assert_eq!(d.kind, BodyKind::Binary);
        assert_eq!(decode(b"", Some("text/plain"), false).kind, BodyKind::Empty);
    }

    #[test]
    fn charsets_and_cut_characters() {
        // "产量" in GBK.
        let gbk = [0xb2, 0xfa, 0xc1, 0xbf];
        let d = decode(&gbk, Some("text/plain; charset=GBK"), false);
        assert_eq!(d.value, json!("产量"));
        assert_eq!(d.note, None);
        let d = decode(&gbk[..3], Some("text/plain; charset=gbk"), true);
        assert_eq!(d.value, json!("产"));
        let utf8 = "产量".as_bytes();
        let d = decode(&utf8[..4], Some("text/plain"), true);
        assert_eq!((d.value, d.note), (json!("产"), None));
        let d = decode(b"x", Some("text/plain; charset=klingon"), false);
        assert!(d.note.unwrap().contains("charset \"klingon\" is unknown"));
    }
}
