//! The plugin SDK: ordinary Rust functions in, a stable-ABI plugin out.
//!
//! ```ignore
//! fn plugin() -> Plugin {
//!     Plugin::new("examples")
//!         .handler("hello", "greets someone", hello)
//!         .timeout(Duration::from_secs(10))
//!         .async_handler("fetch", "downloads a report", fetch)
//! }
//! takt_plugin_api::export_plugin!(plugin);
//! ```
//!
//! What the SDK guarantees around every handler call:
//!
//! * the params JSON is decoded into the handler's type; a mismatch is an `invalid-params` error
//!   that names the field (`invalid params: keepDays: invalid type: string "x", expected u32`);
//!   empty params mean `{}`;
//! * a panic becomes a `panicked` error carrying the panic message and location — it never
//!   unwinds into the host;
//! * `tracing` events emitted by the handler (debug and above) become run-log lines;
//! * an async handler runs on a current-thread tokio runtime created inside the call (never the
//!   host's) and is dropped, returning `cancelled`, as soon as the host cancels the run;
//! * the [`JobContext`] is closed when the call returns, so nothing can call into the host late.

mod context;
mod guard;
mod log_layer;
pub mod testing;

use std::future::Future;
use std::sync::OnceLock;
use std::time::Duration;

use abi_stable::prefix_type::PrefixTypeTrait;
use abi_stable::std_types::{RErr, ROk, ROption, RResult, RStr, RString, RVec};
use serde::Serialize;
use serde::de::DeserializeOwned;

pub use context::JobContext;
pub use testing::TestHost;

use crate::abi::{
    API_VERSION, ErrorKind, HandlerInfo, HandlerInfoRef, HostCtxRef, PluginError, PluginMod,
    PluginRef,
};

/// A handler's failure.
///
/// Build one with the constructors; `?` converts I/O errors (retryable unless the file is
/// missing or access is denied), JSON errors and strings.
#[derive(Clone, Debug, PartialEq)]
pub struct JobError {
    kind: ErrorKind,
    message: String,
    retryable: bool,
    data: Option<serde_json::Value>,
}

impl JobError {
    /// A failure that retrying will not fix.
    pub fn failed(message: impl Into<String>) -> JobError {
        JobError {
            kind: ErrorKind::FAILED,
            message: message.into(),
            retryable: false,
            data: None,
        }
    }

    /// A failure that may go away on another attempt (network blip, locked file, deadlock).
    pub fn retryable(message: impl Into<String>) -> JobError {
        JobError {
            retryable: true,
            ..JobError::failed(message)
        }
    }

    /// The params are unusable (beyond what decoding already checks).
    pub fn invalid_params(message: impl Into<String>) -> JobError {
        JobError {
            kind: ErrorKind::INVALID_PARAMS,
            ..JobError::failed(message)
        }
    }

    /// The run stopped because the host asked it to.
    pub fn cancelled() -> JobError {
        JobError {
            kind: ErrorKind::CANCELLED,
            ..JobError::failed("cancelled by the host")
        }
    }

    /// Attaches JSON details (recorded with the run).
    pub fn with_data(mut self, data: serde_json::Value) -> JobError {
        self.data = Some(data);
        self
    }

    /// The kind of failure.
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// The message.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// Whether another attempt may succeed.
    pub fn is_retryable(&self) -> bool {
        self.retryable
    }

    fn into_abi(self) -> PluginError {
        PluginError {
            kind: self.kind,
            message: self.message.into(),
            retryable: self.retryable,
            data: self.data.map(|d| RString::from(d.to_string())).into(),
        }
    }
}

impl std::fmt::Display for JobError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.kind, self.message)
    }
}

impl From<std::io::Error> for JobError {
    fn from(e: std::io::Error) -> JobError {
        use std::io::ErrorKind as K;
        let permanent = matches!(
            e.kind(),
            K::NotFound | K::PermissionDenied | K::InvalidInput
        );
        let message = e.to_string();
        if permanent {
            JobError::failed(message)
        } else {
            JobError::retryable(message)
        }
    }
}

impl From<serde_json::Error> for JobError {
    fn from(e: serde_json::Error) -> JobError {
        JobError::failed(e.to_string())
    }
}

impl From<String> for JobError {
    fn from(message: String) -> JobError {
        JobError::failed(message)
    }
}

impl From<&str> for JobError {
    fn from(message: &str) -> JobError {
        JobError::failed(message)
    }
}

type CallFn = dyn Fn(&JobContext, &str) -> Result<String, JobError> + Send + Sync;

struct Handler {
    name: String,
    description: String,
    schema: Option<String>,
    timeout: Option<Duration>,
    call: Box<CallFn>,
}

/// A plugin under construction: its name and handlers.
///
/// Build it in a plain function and pass that function to [`crate::export_plugin!`]; the SDK
/// calls it once, when the host loads the library.
pub struct Plugin {
    name: String,
    handlers: Vec<Handler>,
}

impl Plugin {
    /// A plugin named `name`: lowercase ASCII letters, digits, `_` and `-`, starting with a
    /// letter. HandlerTypes are `name::handler`.
    pub fn new(name: impl Into<String>) -> Plugin {
        Plugin {
            name: name.into(),
            handlers: Vec::new(),
        }
    }

    fn push(mut self, name: &str, description: &str, call: Box<CallFn>) -> Plugin {
        self.handlers.push(Handler {
            name: name.to_string(),
            description: description.to_string(),
            schema: None,
            timeout: None,
            call,
        });
        self
    }

    /// Registers a blocking handler with serde-typed params and result.
    pub fn handler<P, R, F>(self, name: &str, description: &str, f: F) -> Plugin
    where
        P: DeserializeOwned,
        R: Serialize,
        F: Fn(&JobContext, P) -> Result<R, JobError> + Send + Sync + 'static,
    {
        self.push(
            name,
            description,
            Box::new(move |ctx, params| encode(&f(ctx, decode(params)?)?)),
        )
    }

    /// Registers an async handler. Each call gets a fresh current-thread tokio runtime (with
    /// timers) that lives for the call; when the host cancels the run, the future is dropped
    /// and the run ends as `cancelled`.
    pub fn async_handler<P, R, F, Fut>(self, name: &str, description: &str, f: F) -> Plugin
    where
        P: DeserializeOwned,
        R: Serialize,
        F: Fn(JobContext, P) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<R, JobError>>,
    {
        self.push(
            name,
            description,
            Box::new(move |ctx, params| {
                let p = decode(params)?;
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_time()
                    .build()
                    .map_err(|e| {
                        JobError::retryable(format!("cannot start an async runtime: {e}"))
                    })?;
                let fut = f(ctx.clone(), p);
                let watcher = ctx.clone();
                let result = runtime.block_on(async move {
                    tokio::select! {
                        r = fut => r,
                        () = until_cancelled(watcher) => Err(JobError::cancelled()),
                    }
                });
                encode(&result?)
            }),
        )
    }

    /// Sets the default timeout of the handler registered last.
    pub fn timeout(mut self, timeout: Duration) -> Plugin {
        if let Some(h) = self.handlers.last_mut() {
            h.timeout = Some(timeout);
        }
        self
    }

    /// Attaches a JSON schema of the params to the handler registered last.
    pub fn schema(mut self, json_schema: &str) -> Plugin {
        if let Some(h) = self.handlers.last_mut() {
            h.schema = Some(json_schema.to_string());
        }
        self
    }

    /// The problems that make this plugin unusable, in words (empty when it is fine).
    fn problems(&self) -> Vec<String> {
        let mut out = Vec::new();
        if !valid_name(&self.name) {
            out.push(format!(
                "plugin name \"{}\" is invalid; use lowercase letters, digits, '_' and '-', starting with a letter",
                self.name
            ));
        }
        for (i, h) in self.handlers.iter().enumerate() {
            if !valid_name(&h.name) {
                out.push(format!(
                    "handler name \"{}\" is invalid; use lowercase letters, digits, '_' and '-', starting with a letter",
                    h.name
                ));
            }
            if self.handlers[..i].iter().any(|o| o.name == h.name) {
                out.push(format!("handler \"{}\" is registered twice", h.name));
            }
        }
        out
    }
}

/// Whether `s` is a valid plugin or handler name.
pub fn valid_name(s: &str) -> bool {
    let mut chars = s.chars();
    matches!(chars.next(), Some('a'..='z'))
        && chars.all(|c| matches!(c, 'a'..='z' | '0'..='9' | '_' | '-'))
}

async fn until_cancelled(ctx: JobContext) {
    // The host's flag is a cheap atomic read; 20 ms keeps cancellation prompt without busy work.
    while !ctx.is_cancelled() {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn decode<P: DeserializeOwned>(params: &str) -> Result<P, JobError> {
    // The trials use error types that do not allocate, so a handler pays nothing for the one
    // that does not fit; only when none fits is serde_json's detailed message built.
    use serde::de::value::UnitDeserializer;
    let nothing = || P::deserialize(UnitDeserializer::<Mismatch>::new()).ok();
    let empty_object = || P::deserialize(EmptyObject).ok();
    if params.trim().is_empty() {
        // No params: a unit or Option reads "nothing", an all-defaults struct reads `{}`.
        return nothing()
            .or_else(empty_object)
            .map_or_else(|| decode_text("{}"), Ok);
    }
    if is_empty_object(params) {
        // `{}` is what a job without params stores (job params are a JSON object), so it is
        // what most runs decode: read as JSON reads it where that fits, without parsing it;
        // then a handler that takes none (`()`, an `Option`) accepts it as "nothing".
        // (serde_json's private types, `RawValue`, fit only the text: an `Option` of one
        // reads `None`.)
        if let Some(p) = empty_object().or_else(nothing) {
            return Ok(p);
        }
    }
    decode_text(params)
}

/// The JSON text `{}` as a deserializer that neither parses nor allocates: a map with no
/// entries, as serde_json gives it to any type (`Some` of it to an `Option`, and to a
/// newtype's inner type), so a type reads from it exactly what it reads from the text.
struct EmptyObject;

impl<'de> serde::Deserializer<'de> for EmptyObject {
    type Error = Mismatch;

    fn deserialize_any<V: serde::de::Visitor<'de>>(self, v: V) -> Result<V::Value, Mismatch> {
        v.visit_map(serde::de::value::MapDeserializer::<_, Mismatch>::new(
            std::iter::empty::<((), ())>(),
        ))
    }

    fn deserialize_option<V: serde::de::Visitor<'de>>(self, v: V) -> Result<V::Value, Mismatch> {
        v.visit_some(self)
    }

    fn deserialize_newtype_struct<V: serde::de::Visitor<'de>>(
        self,
        _name: &'static str,
        v: V,
    ) -> Result<V::Value, Mismatch> {
        v.visit_newtype_struct(self)
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf
        unit unit_struct seq tuple tuple_struct map struct enum identifier ignored_any
    }
}

fn is_empty_object(text: &str) -> bool {
    let t = text.trim();
    t.len() >= 2 && t.starts_with('{') && t.ends_with('}') && t[1..t.len() - 1].trim().is_empty()
}

/// A deserialisation error that carries nothing (and so allocates nothing): used for trial
/// decodes whose failure is not reported.
#[derive(Debug)]
struct Mismatch;

impl std::fmt::Display for Mismatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("mismatch")
    }
}

impl std::error::Error for Mismatch {}

impl serde::de::Error for Mismatch {
    fn custom<T: std::fmt::Display>(_: T) -> Mismatch {
        Mismatch
    }
}

fn decode_text<P: DeserializeOwned>(text: &str) -> Result<P, JobError> {
    let mut de = serde_json::Deserializer::from_str(text);
    let value = serde_path_to_error::deserialize(&mut de).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        if path == "." || path == "?" || path.is_empty() {
            JobError::invalid_params(format!("invalid params: {inner}"))
        } else {
            JobError::invalid_params(format!("invalid params: {path}: {inner}"))
        }
    })?;
    de.end()
        .map_err(|e| JobError::invalid_params(format!("invalid params: {e}")))?;
    Ok(value)
}

fn encode<R: Serialize>(r: &R) -> Result<String, JobError> {
    serde_json::to_string(r).map_err(|e| JobError::failed(format!("cannot encode the result: {e}")))
}

struct Registered {
    plugin: Plugin,
    infos: Vec<HandlerInfoRef>,
}

/// Where one plugin's registration lives. [`crate::export_plugin!`] and
/// [`crate::static_plugin!`] each make one per use, next to the two `extern "C"` entries that
/// read it: several static plugins in one host binary therefore never share state, and each
/// module's `run` dispatches to its own handlers.
#[doc(hidden)]
pub struct __Slot {
    registered: OnceLock<Registered>,
    module: OnceLock<PluginRef>,
}

impl __Slot {
    /// An empty slot, for a `static`.
    #[allow(clippy::new_without_default)]
    pub const fn new() -> __Slot {
        __Slot {
            registered: OnceLock::new(),
            module: OnceLock::new(),
        }
    }
}

/// The `handlers` entry of a root module.
#[doc(hidden)]
pub type __HandlersFn = extern "C" fn() -> RVec<HandlerInfoRef>;
/// The `run` entry of a root module.
#[doc(hidden)]
pub type __RunFn = extern "C" fn(RStr<'_>, RStr<'_>, HostCtxRef) -> RResult<RString, PluginError>;

/// Builds the plugin once into `slot` (later calls reuse it), or says why it is invalid.
fn register(slot: &'static __Slot, build: impl FnOnce() -> Plugin) -> Result<(), String> {
    if slot.registered.get().is_some() {
        return Ok(());
    }
    let plugin = build();
    let problems = plugin.problems();
    if !problems.is_empty() {
        return Err(problems.join("; "));
    }
    let infos = plugin
        .handlers
        .iter()
        .map(|h| {
            HandlerInfo {
                name: leak(&h.name),
                description: leak(&h.description),
                params_schema: h.schema.as_deref().map(leak).into(),
                default_timeout_ms: h
                    .timeout
                    .map(|t| u64::try_from(t.as_millis()).unwrap_or(u64::MAX))
                    .into(),
            }
            .leak_into_prefix()
        })
        .collect();
    // Two threads racing here build twice; the first stored wins and both see it.
    let _ = slot.registered.set(Registered { plugin, infos });
    Ok(())
}

/// The root module of the plugin in `slot` (made once per slot).
fn module(
    slot: &'static __Slot,
    version: &'static str,
    handlers: __HandlersFn,
    run: __RunFn,
) -> PluginRef {
    *slot.module.get_or_init(|| {
        let name = slot
            .registered
            .get()
            .map_or(RStr::from_str(""), |r| leak(&r.plugin.name));
        PluginMod {
            name,
            version: RStr::from_str(version),
            api_version: RStr::from_str(API_VERSION),
            panic_unwind: cfg!(panic = "unwind"),
            handlers,
            run,
        }
        .leak_into_prefix()
    })
}

/// Builds the root module of a `cdylib`; called by [`crate::export_plugin!`] from the
/// library's constructor, which runs inside abi_stable's catch_unwind: an invalid plugin
/// panics there, the host reports a failed constructor, and the plugin's panic hook prints
/// the reason.
#[doc(hidden)]
pub fn __export(
    slot: &'static __Slot,
    version: &'static str,
    build: fn() -> Plugin,
    handlers: __HandlersFn,
    run: __RunFn,
) -> PluginRef {
    guard::install_panic_hook();
    if let Err(problems) = register(slot, build) {
        panic!("{problems}");
    }
    module(slot, version, handlers, run)
}

/// Builds the root module of a plugin compiled into the host; called by
/// [`crate::static_plugin!`].
#[doc(hidden)]
pub fn __static(
    slot: &'static __Slot,
    version: &'static str,
    build: impl FnOnce() -> Plugin,
    handlers: __HandlersFn,
    run: __RunFn,
) -> Result<PluginRef, String> {
    guard::install_panic_hook();
    register(slot, build).map_err(|p| format!("invalid static plugin: {p}"))?;
    Ok(module(slot, version, handlers, run))
}

/// Plugin metadata lives as long as the library, which is never unloaded.
fn leak(s: &str) -> RStr<'static> {
    RStr::from_str(Box::leak(s.to_string().into_boxed_str()))
}

/// The body of a root module's `handlers` entry.
#[doc(hidden)]
pub fn __handlers(slot: &'static __Slot) -> RVec<HandlerInfoRef> {
    guard::guard(|| {
        slot.registered
            .get()
            .map(|r| r.infos.iter().copied().collect())
            .unwrap_or_default()
    })
    .unwrap_or_default()
}

/// The body of a root module's `run` entry.
#[doc(hidden)]
pub fn __run(
    slot: &'static __Slot,
    handler: RStr<'_>,
    params_json: RStr<'_>,
    raw: HostCtxRef,
) -> RResult<RString, PluginError> {
    let ctx = match guard::guard(|| JobContext::open(raw)) {
        Ok(ctx) => ctx,
        Err(panic) => {
            return RErr(PluginError {
                kind: ErrorKind::PANICKED,
                message: format!("the sdk could not set up the call: {panic}").into(),
                retryable: true,
                data: ROption::RNone,
            });
        }
    };
    let outcome = guard::guard(|| dispatch(slot, handler.as_str(), params_json.as_str(), &ctx));
    // Closed whether the handler returned or panicked: from here on nothing the handler left
    // behind (a thread, a task, a clone of the context) can reach the host's call state.
    ctx.close();
    match outcome {
        Ok(Ok(json)) => ROk(json.into()),
        Ok(Err(e)) => RErr(e.into_abi()),
        Err(panic) => RErr(PluginError {
            kind: ErrorKind::PANICKED,
            message: format!("handler panicked: {panic}").into(),
            retryable: false,
            data: ROption::RNone,
        }),
    }
}

fn dispatch(
    slot: &'static __Slot,
    handler: &str,
    params: &str,
    ctx: &JobContext,
) -> Result<String, JobError> {
    let registered = slot
        .registered
        .get()
        .ok_or_else(|| JobError::failed("plugin is not initialised"))?;
    let h = registered
        .plugin
        .handlers
        .iter()
        .find(|h| h.name == handler)
        .ok_or_else(|| JobError {
            kind: ErrorKind::UNKNOWN_HANDLER,
            ..JobError::failed(format!(
                "plugin {} has no handler \"{handler}\"; it has: {}",
                registered.plugin.name,
                registered
                    .plugin
                    .handlers
                    .iter()
                    .map(|h| h.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ))
        })?;
    log_layer::with_run_log(ctx, || (h.call)(ctx, params))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    #[derive(Debug, Deserialize, PartialEq)]
    #[serde(rename_all = "camelCase", deny_unknown_fields)]
    struct CleanParams {
        dir: String,
        #[serde(default = "default_keep")]
        keep_days: u32,
    }

    fn default_keep() -> u32 {
        30
    }

    #[test]
    fn params_errors_name_the_field() {
        let e = decode::<CleanParams>(r#"{"dir": "/tmp", "keepDays": "x"}"#).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::INVALID_PARAMS);
        assert!(
            e.message()
                .starts_with("invalid params: keepDays: invalid type: string \"x\", expected u32"),
            "{e}"
        );
        let e = decode::<CleanParams>(r#"{"keepDays": 3}"#).unwrap_err();
        assert!(e.message().contains("missing field `dir`"), "{e}");
        let e = decode::<CleanParams>(r#"{"dir": "/tmp", "keep": 3}"#).unwrap_err();
        assert!(e.message().contains("unknown field `keep`"), "{e}");
        let e = decode::<CleanParams>("{").unwrap_err();
        assert!(e.message().starts_with("invalid params: EOF"), "{e}");
        let e = decode::<CleanParams>(r#"{"dir": "/tmp"} trailing"#).unwrap_err();
        assert!(e.message().contains("trailing characters"), "{e}");
        assert_eq!(
            decode::<CleanParams>(r#"{"dir": "/tmp"}"#).unwrap(),
            CleanParams {
                dir: "/tmp".into(),
                keep_days: 30
            }
        );
    }

    #[test]
    fn empty_params_read_as_empty_object_or_null() {
        #[derive(Deserialize)]
        struct AllDefault {
            #[serde(default)]
            n: u32,
        }
        assert_eq!(decode::<AllDefault>("").unwrap().n, 0);
        decode::<()>("  ").unwrap();
        decode::<()>("{}").unwrap();
        decode::<()>(" { } ").unwrap();
        assert_eq!(decode::<Option<u32>>("{}").unwrap(), None);
        let e = decode::<()>(r#"{"a": 1}"#).unwrap_err();
        assert!(e.message().contains("expected unit"), "{e}");
        assert_eq!(decode::<Option<u32>>("").unwrap(), None);
        let e = decode::<CleanParams>("").unwrap_err();
        assert!(e.message().contains("missing field `dir`"), "{e}");
    }

    /// `{}` is read without parsing, and must read as the text does for every kind of type.
    #[test]
    fn an_empty_object_reads_as_its_json_text() {
        use std::collections::{BTreeMap, HashMap};

        #[derive(Deserialize, Debug, PartialEq)]
        struct AllDefault {
            #[serde(default)]
            n: u32,
            #[serde(default)]
            tags: Vec<String>,
        }
        #[derive(Deserialize, Debug, PartialEq)]
        struct Wrapper(AllDefault);
        #[derive(Deserialize, Debug, PartialEq)]
        #[serde(untagged)]
        enum Either {
            Number(u32),
            Defaults {
                #[serde(default)]
                k: u32,
            },
        }
        #[derive(Deserialize, Debug, PartialEq)]
        enum Tagged {
            A,
            B { k: u32 },
        }
        #[derive(Deserialize, Debug, PartialEq)]
        struct Strict {
            dir: String,
        }

        fn same<P: DeserializeOwned + PartialEq + std::fmt::Debug>(text: &str) {
            let json = serde_json::from_str::<P>(text).ok();
            let fast = P::deserialize(EmptyObject).ok();
            assert_eq!(fast, json, "{} from {text}", std::any::type_name::<P>());
        }
        for text in ["{}", " { } "] {
            same::<AllDefault>(text);
            same::<Option<AllDefault>>(text);
            same::<Wrapper>(text);
            same::<HashMap<String, u32>>(text);
            same::<BTreeMap<String, String>>(text);
            same::<serde_json::Value>(text);
            same::<Option<serde_json::Value>>(text);
            same::<Either>(text);
            same::<Tagged>(text);
            same::<Strict>(text);
            same::<Option<Strict>>(text);
            same::<()>(text);
            same::<Option<u32>>(text);
            same::<Vec<u32>>(text);
            same::<String>(text);
            same::<u32>(text);
            same::<bool>(text);
        }
        // What `decode` makes of it: JSON's reading where there is one, else "nothing",
        // else JSON's own message.
        assert_eq!(
            decode::<Option<AllDefault>>("{}").unwrap(),
            Some(AllDefault { n: 0, tags: vec![] })
        );
        assert_eq!(
            decode::<serde_json::Value>("{}").unwrap(),
            serde_json::json!({})
        );
        assert_eq!(decode::<Option<Strict>>("{}").unwrap(), None);
        let e = decode::<Strict>(" {} ").unwrap_err();
        assert_eq!(e.kind(), ErrorKind::INVALID_PARAMS);
        assert!(e.message().contains("missing field `dir`"), "{e}");
        let e = decode::<u32>("{}").unwrap_err();
        assert!(
            e.message().contains("invalid type: map, expected u32"),
            "{e}"
        );
    }

    #[test]
    fn names_and_duplicates_are_checked() {
        assert!(valid_name("examples"));
        assert!(valid_name("clean_expired-tokens2"));
        assert!(!valid_name("Examples"));
        assert!(!valid_name("2fast"));
        assert!(!valid_name(""));
        assert!(!valid_name("a::b"));
        let p = Plugin::new("Bad Name")
            .handler("x", "", |_: &JobContext, (): ()| Ok(()))
            .handler("x", "", |_: &JobContext, (): ()| Ok(()));
        let problems = p.problems();
        assert_eq!(problems.len(), 2, "{problems:?}");
        assert!(problems[0].contains("plugin name \"Bad Name\" is invalid"));
        assert!(problems[1].contains("handler \"x\" is registered twice"));
    }

    #[test]
    fn io_errors_know_whether_a_retry_helps() {
        let missing: JobError = std::io::Error::from(std::io::ErrorKind::NotFound).into();
        assert!(!missing.is_retryable());
        let busy: JobError = std::io::Error::from(std::io::ErrorKind::TimedOut).into();
        assert!(busy.is_retryable());
        assert_eq!(JobError::cancelled().kind(), ErrorKind::CANCELLED);
        assert_eq!(JobError::failed("x").to_string(), "failed: x");
    }
}
