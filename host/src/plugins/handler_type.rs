//! HandlerType names: `plugin::handler`, and the seeds' `Namespace.Class, Assembly`.
//!
//! Jobs name what they run with a HandlerType string, as in the seeds' `JobDefinition`
//! (`JobCenter.Jobs.CleanExpiredTokenJob, JobCenter.Jobs`). takt's own form is
//! `plugin::handler`. A .NET-style name is mapped like this (explicit aliases in the config win):
//!
//! * the **plugin** is the one whose name equals the assembly name (`JobCenter.Jobs`) or its last
//!   dot-separated segment (`Jobs`);
//! * the **handler** is the one whose name equals the class name (`CleanExpiredTokenJob`, the part
//!   after the last `.`), with or without a trailing `Job`;
//! * names compare case-insensitively, ignoring `_`, `-` and `.`, so `CleanExpiredTokenJob`
//!   finds `clean_expired_token`, and `EchoJob` finds `echo`.
//!
//! Two candidates for one name is an error that lists both: nothing is picked silently.

/// A parsed HandlerType.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HandlerTypeName {
    /// `plugin::handler`.
    Native {
        /// The plugin's name.
        plugin: String,
        /// The handler's name.
        handler: String,
    },
    /// `Namespace.Class, Assembly`.
    Dotnet {
        /// `Namespace.Class`.
        type_name: String,
        /// `Assembly`.
        assembly: String,
    },
}

/// Parses a HandlerType, or explains the two accepted forms.
pub fn parse_handler_type(text: &str) -> Result<HandlerTypeName, String> {
    let t = text.trim();
    let explain = || {
        format!(
            "handler type \"{t}\" is not valid; write plugin::handler (for example examples::hello) or Namespace.Class, Assembly"
        )
    };
    if let Some((plugin, handler)) = t.split_once("::") {
        let (plugin, handler) = (plugin.trim(), handler.trim());
        if takt_plugin_api::sdk::valid_name(plugin) && takt_plugin_api::sdk::valid_name(handler) {
            return Ok(HandlerTypeName::Native {
                plugin: plugin.to_string(),
                handler: handler.to_string(),
            });
        }
        return Err(explain());
    }
    if let Some((type_name, assembly)) = t.split_once(',') {
        let (type_name, assembly) = (type_name.trim(), assembly.trim());
        let ident = |s: &str| {
            !s.is_empty()
                && s.split('.').all(|seg| {
                    !seg.is_empty() && seg.chars().all(|c| c.is_alphanumeric() || c == '_')
                })
        };
        if ident(type_name) && ident(assembly) {
            return Ok(HandlerTypeName::Dotnet {
                type_name: type_name.to_string(),
                assembly: assembly.to_string(),
            });
        }
    }
    Err(explain())
}

/// The comparison key of the mapping: lowercase, without `_`, `-` and `.`.
pub(crate) fn fold(s: &str) -> String {
    s.chars()
        .filter(|c| !matches!(c, '_' | '-' | '.'))
        .flat_map(char::to_lowercase)
        .collect()
}

/// The plugin-name keys an assembly name may match.
pub(crate) fn assembly_keys(assembly: &str) -> Vec<String> {
    let mut keys = vec![fold(assembly)];
    if let Some(last) = assembly.rsplit('.').next() {
        let k = fold(last);
        if !keys.contains(&k) {
            keys.push(k);
        }
    }
    keys
}

/// The handler-name keys a class name may match.
pub(crate) fn class_keys(type_name: &str) -> Vec<String> {
    let class = type_name.rsplit('.').next().unwrap_or(type_name);
    let mut keys = vec![fold(class)];
    if let Some(stripped) = class.strip_suffix("Job").filter(|s| !s.is_empty()) {
        keys.push(fold(stripped));
    }
    keys
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_both_forms() {
        assert_eq!(
            parse_handler_type(" examples::hello ").unwrap(),
            HandlerTypeName::Native {
                plugin: "examples".into(),
                handler: "hello".into()
            }
        );
        assert_eq!(
            parse_handler_type("JobCenter.Jobs.CleanExpiredTokenJob, JobCenter.Jobs").unwrap(),
            HandlerTypeName::Dotnet {
                type_name: "JobCenter.Jobs.CleanExpiredTokenJob".into(),
                assembly: "JobCenter.Jobs".into()
            }
        );
        for bad in [
            "", "hello", "a::", "::b", "A::b", "a::b::c", "x.y,", ", asm", "a b, c",
        ] {
            let e = parse_handler_type(bad).unwrap_err();
            assert!(e.contains("write plugin::handler"), "{bad}: {e}");
        }
    }

    #[test]
    fn mapping_keys() {
        assert_eq!(assembly_keys("JobCenter.Jobs"), ["jobcenterjobs", "jobs"]);
        assert_eq!(
            class_keys("JobCenter.Jobs.CleanExpiredTokenJob"),
            ["cleanexpiredtokenjob", "cleanexpiredtoken"]
        );
        assert_eq!(class_keys("Job"), ["job"]);
        assert_eq!(fold("clean_expired-token"), "cleanexpiredtoken");
    }
}
