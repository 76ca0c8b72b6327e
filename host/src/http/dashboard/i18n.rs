//! The dashboard's two languages: English and Simplified Chinese (the seeds' users).
//!
//! Every string a page shows comes from one of two catalogues, `i18n/en.json` and
//! `i18n/zh-CN.json` (flat objects: key → text, `{name}` marking a value put in), compiled
//! into the binary. A test proves both have the same keys and that every key a template asks
//! for exists, so a page can never show a key instead of a word in either language. Data
//! (job names, errors written by plugins, the `why` report's sentences from the host) stays
//! as recorded: it is the same text the CLI and the logs show, which is what a support call
//! quotes.
//!
//! The language: the `takt_lang` cookie the switch sets, else the browser's
//! `Accept-Language` (highest quality first), else English.

use std::collections::BTreeMap;
use std::sync::LazyLock;

use axum::http::{HeaderMap, header};

/// The switch's cookie.
pub const LANG_COOKIE: &str = "takt_lang";

/// A language of the dashboard.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lang {
    /// English.
    En,
    /// Simplified Chinese.
    ZhCn,
}

impl Lang {
    /// Both, in the switch's order.
    pub const ALL: [Lang; 2] = [Lang::En, Lang::ZhCn];

    /// The BCP 47 tag (`en`, `zh-CN`): the `lang` attribute, the cookie's value.
    pub fn code(self) -> &'static str {
        match self {
            Lang::En => "en",
            Lang::ZhCn => "zh-CN",
        }
    }

    /// The language named by `code` (case-insensitive; `zh`, `zh-Hans`, `zh-CN`, `zh-SG` are
    /// Simplified Chinese; `en-*` English), if it is one of the two.
    pub fn from_code(code: &str) -> Option<Lang> {
        let c = code.trim().to_ascii_lowercase();
        if c == "en" || c.starts_with("en-") {
            Some(Lang::En)
        } else if c == "zh" || c == "zh-cn" || c == "zh-sg" || c.starts_with("zh-hans") {
            Some(Lang::ZhCn)
        } else {
            None
        }
    }

    /// The request's language: the cookie, else `Accept-Language`, else English.
    pub fn of(headers: &HeaderMap) -> Lang {
        if let Some(l) =
            super::session::cookie_value(headers, LANG_COOKIE).and_then(|c| Lang::from_code(&c))
        {
            return l;
        }
        headers
            .get(header::ACCEPT_LANGUAGE)
            .and_then(|v| v.to_str().ok())
            .and_then(from_accept_language)
            .unwrap_or(Lang::En)
    }

    /// The catalogue.
    pub fn catalogue(self) -> &'static BTreeMap<String, String> {
        &CATALOGUES[match self {
            Lang::En => 0,
            Lang::ZhCn => 1,
        }]
    }

    /// The text of `key` (the key itself if the catalogue lacks it, which the tests forbid).
    pub fn t(self, key: &str) -> &str {
        self.catalogue().get(key).map_or(key, String::as_str)
    }
}

/// The first language of an `Accept-Language` value, by quality, that the dashboard has.
fn from_accept_language(value: &str) -> Option<Lang> {
    let mut offers: Vec<(f32, usize, &str)> = value
        .split(',')
        .enumerate()
        .filter_map(|(i, part)| {
            let mut it = part.split(';');
            let tag = it.next()?.trim();
            let q = it
                .find_map(|p| p.trim().strip_prefix("q="))
                .and_then(|q| q.trim().parse::<f32>().ok())
                .unwrap_or(1.0);
            (q > 0.0 && !tag.is_empty()).then_some((q, i, tag))
        })
        .collect();
    offers.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
    offers.iter().find_map(|(_, _, tag)| {
        Lang::from_code(tag).or_else(|| {
            // `zh-TW` / `zh-Hant` readers read Simplified better than English, but the
            // dashboard does not claim to speak Traditional: a plain `zh-*` counts.
            (tag.to_ascii_lowercase().starts_with("zh-")).then_some(Lang::ZhCn)
        })
    })
}

static CATALOGUES: LazyLock<[BTreeMap<String, String>; 2]> = LazyLock::new(|| {
    let parse = |name: &str, text: &str| -> BTreeMap<String, String> {
        // The catalogues are compiled in and checked by the tests: a malformed one is a
        // build defect, never a user's input.
        serde_json::from_str(text)
            .unwrap_or_else(|e| panic!("the dashboard catalogue {name} is not valid: {e}"))
    };
    [
        parse("en.json", include_str!("i18n/en.json")),
        parse("zh-CN.json", include_str!("i18n/zh-CN.json")),
    ]
});

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_catalogues_have_the_same_keys_and_no_empty_text() {
        let en: Vec<&String> = Lang::En.catalogue().keys().collect();
        let zh: Vec<&String> = Lang::ZhCn.catalogue().keys().collect();
        let only_en: Vec<_> = en.iter().filter(|k| !zh.contains(k)).collect();
        let only_zh: Vec<_> = zh.iter().filter(|k| !en.contains(k)).collect();
        assert!(
            only_en.is_empty() && only_zh.is_empty(),
            "only in en.json: {only_en:?}; only in zh-CN.json: {only_zh:?}"
        );
        for l in Lang::ALL {
            for (k, v) in l.catalogue() {
                assert!(!v.trim().is_empty(), "{}: {k} is empty", l.code());
            }
        }
        // The placeholders match too: a translation may move `{n}`, not lose it.
        for (k, v) in Lang::En.catalogue() {
            let holes = |s: &str| {
                let mut h: Vec<String> = s
                    .split('{')
                    .skip(1)
                    .filter_map(|p| p.split_once('}').map(|(n, _)| n.to_string()))
                    .collect();
                h.sort();
                h
            };
            assert_eq!(holes(v), holes(Lang::ZhCn.t(k)), "placeholders of {k}");
        }
    }

    #[test]
    fn accept_language_and_the_cookie_decide() {
        let of = |al: Option<&str>, cookie: Option<&str>| {
            let mut h = HeaderMap::new();
            if let Some(v) = al {
                h.insert(header::ACCEPT_LANGUAGE, v.parse().unwrap());
            }
            if let Some(c) = cookie {
                h.insert(header::COOKIE, format!("takt_lang={c}").parse().unwrap());
            }
            Lang::of(&h)
        };
        assert_eq!(of(None, None), Lang::En);
        assert_eq!(of(Some("zh-CN,zh;q=0.9,en;q=0.8"), None), Lang::ZhCn);
        assert_eq!(of(Some("en-US,en;q=0.9,zh-CN;q=0.8"), None), Lang::En);
        assert_eq!(of(Some("de-DE, zh;q=0.5, en;q=0.4"), None), Lang::ZhCn);
        assert_eq!(of(Some("fr"), None), Lang::En);
        assert_eq!(of(Some("en;q=0.1, zh-Hans;q=0.9"), None), Lang::ZhCn);
        assert_eq!(of(Some("zh-CN"), Some("en")), Lang::En, "the switch wins");
        assert_eq!(of(Some("en"), Some("zh-CN")), Lang::ZhCn);
        assert_eq!(of(Some("en"), Some("klingon")), Lang::En);
    }
}
