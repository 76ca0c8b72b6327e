//! `examples::clean_expired_tokens`: deletes files older than `keepDays` days from a directory.
//!
//! The "clean expired tokens" job of the scheduler stories, made real on files: token files
//! (or any files) in `dir` whose modification time is older than now − `keepDays` days are
//! removed. Only regular files are touched: directories are never removed and symbolic links
//! are skipped, never followed (the `dir` itself may be a link: the operator named it).

use std::ffi::OsStr;
use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};
use takt_plugin_api::sdk::{JobContext, JobError};

/// The largest accepted `keepDays` (100 years).
const MAX_KEEP_DAYS: u32 = 36_500;

const SECONDS_PER_DAY: u64 = 86_400;

/// JSON schema of [`CleanParams`], shipped with the handler for operators and UIs.
pub(crate) const PARAMS_SCHEMA: &str = r#"{
  "$schema": "https://json-schema.org/draft/2020-12/schema",
  "title": "examples::clean_expired_tokens params",
  "type": "object",
  "properties": {
    "dir": {
      "type": "string",
      "minLength": 1,
      "description": "directory to clean"
    },
    "keepDays": {
      "type": "integer",
      "minimum": 0,
      "maximum": 36500,
      "description": "files modified less than this many days ago are kept"
    },
    "suffix": {
      "type": "string",
      "description": "only files whose name ends with this (for example \".token\")"
    },
    "dryRun": {
      "type": "boolean",
      "default": false,
      "description": "report what would be removed without removing anything"
    },
    "recursive": {
      "type": "boolean",
      "default": false,
      "description": "also clean subdirectories (symbolic links are never followed)"
    }
  },
  "required": ["dir", "keepDays"],
  "additionalProperties": false
}"#;

/// Params of `clean_expired_tokens` (camelCase in JSON).
#[derive(Debug, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct CleanParams {
    /// The directory to clean.
    dir: PathBuf,
    /// Files modified less than this many days ago are kept; 0 removes every file older than
    /// now.
    keep_days: u32,
    /// Only files whose name ends with this.
    #[serde(default)]
    suffix: Option<String>,
    /// Count and log, remove nothing.
    #[serde(default)]
    dry_run: bool,
    /// Descend into subdirectories.
    #[serde(default)]
    recursive: bool,
}

/// Result of `clean_expired_tokens`.
#[derive(Debug, Default, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub(crate) struct CleanSummary {
    /// Regular files that matched `suffix` and whose age was checked.
    scanned: u64,
    /// Files removed (in a dry run: files that would have been removed).
    removed: u64,
    /// Total size of the removed files.
    bytes: u64,
    /// Whether this was a dry run.
    dry_run: bool,
    /// Files and subdirectories that could not be examined or removed (each logged as a
    /// warning).
    failed: u64,
}

/// What the cleanup needs from the run: the handler passes its [`JobContext`], tests a fake.
trait Run {
    fn check_cancelled(&self) -> Result<(), JobError>;
    fn progress(&self, done: u64, total: u64, note: &str);
}

impl Run for JobContext {
    fn check_cancelled(&self) -> Result<(), JobError> {
        JobContext::check_cancelled(self)
    }

    fn progress(&self, done: u64, total: u64, note: &str) {
        JobContext::progress(self, done, total, note);
    }
}

/// `examples::clean_expired_tokens`: params `{ "dir", "keepDays", "suffix"?, "dryRun"?,
/// "recursive"? }`, result `{ "scanned", "removed", "bytes", "dryRun", "failed" }`.
///
/// Deletes the regular files in `dir` (and its subdirectories when `recursive`) whose
/// modification time is older than now − `keepDays` days and whose name ends with `suffix`.
/// Reports progress per file and stops between files when the run is cancelled. A file that
/// cannot be removed is logged as a warning and counted in `failed`; the run fails only when
/// `dir` itself cannot be read.
pub(crate) fn clean_expired_tokens(
    ctx: &JobContext,
    p: CleanParams,
) -> Result<CleanSummary, JobError> {
    clean(ctx, &p, SystemTime::now())
}

fn clean(run: &dyn Run, p: &CleanParams, now: SystemTime) -> Result<CleanSummary, JobError> {
    validate(p)?;
    let suffix = p.suffix.as_deref().filter(|s| !s.is_empty());
    let cutoff = cutoff(now, p.keep_days);
    let dir = p.dir.display();
    tracing::info!(
        dir = %dir,
        keep_days = p.keep_days,
        suffix = suffix.unwrap_or(""),
        dry_run = p.dry_run,
        recursive = p.recursive,
        "cleaning files older than {} days",
        p.keep_days
    );

    let mut summary = CleanSummary {
        dry_run: p.dry_run,
        ..CleanSummary::default()
    };
    let files = scan(run, &p.dir, p.recursive, suffix, &mut summary.failed)?;
    let total = files.len() as u64;
    summary.scanned = total;

    for (i, file) in files.iter().enumerate() {
        if let Err(e) = run.check_cancelled() {
            tracing::info!(
                "cancelled after {} of {total} files: {} removed ({} bytes), {} failed",
                i,
                summary.removed,
                summary.bytes,
                summary.failed
            );
            return Err(e);
        }
        if cutoff.is_some_and(|c| is_expired(file.modified, c)) {
            let path = file.path.display();
            if p.dry_run {
                tracing::debug!(path = %path, bytes = file.len, "would remove file");
                summary.removed += 1;
                summary.bytes += file.len;
            } else {
                match std::fs::remove_file(&file.path) {
                    Ok(()) => {
                        tracing::debug!(path = %path, bytes = file.len, "removed file");
                        summary.removed += 1;
                        summary.bytes += file.len;
                    }
                    Err(e) if e.kind() == io::ErrorKind::NotFound => {
                        tracing::debug!(path = %path, "file is already gone");
                    }
                    Err(e) => {
                        tracing::warn!(path = %path, "cannot remove file: {e}");
                        summary.failed += 1;
                    }
                }
            }
        }
        run.progress(i as u64 + 1, total, "files");
    }

    tracing::info!(
        scanned = summary.scanned,
        removed = summary.removed,
        bytes = summary.bytes,
        failed = summary.failed,
        dry_run = summary.dry_run,
        "{} {} of {} files in {dir} ({} bytes), {} failed",
        if p.dry_run { "would remove" } else { "removed" },
        summary.removed,
        summary.scanned,
        summary.bytes,
        summary.failed
    );
    Ok(summary)
}

/// Checks what decoding cannot.
fn validate(p: &CleanParams) -> Result<(), JobError> {
    if p.dir.as_os_str().is_empty() {
        return Err(JobError::invalid_params(
            "invalid params: dir: must not be empty",
        ));
    }
    if p.keep_days > MAX_KEEP_DAYS {
        return Err(JobError::invalid_params(format!(
            "invalid params: keepDays: {} is out of range 0..={MAX_KEEP_DAYS}",
            p.keep_days
        )));
    }
    Ok(())
}

/// Files modified before this instant are expired; `None` when that instant is not
/// representable (nothing is that old).
fn cutoff(now: SystemTime, keep_days: u32) -> Option<SystemTime> {
    now.checked_sub(Duration::from_secs(u64::from(keep_days) * SECONDS_PER_DAY))
}

/// Whether a file last modified at `modified` is older than `cutoff`.
fn is_expired(modified: SystemTime, cutoff: SystemTime) -> bool {
    modified < cutoff
}

/// Whether a file name ends with `suffix` (`None`: every name matches).
///
/// Compares the raw encoded bytes, so names that are not valid UTF-8 still match on their
/// (valid) tail.
fn name_matches(name: &OsStr, suffix: Option<&str>) -> bool {
    suffix.is_none_or(|s| name.as_encoded_bytes().ends_with(s.as_bytes()))
}

/// A regular file found by [`scan`].
#[derive(Debug)]
struct Found {
    path: PathBuf,
    modified: SystemTime,
    len: u64,
}

/// Lists the regular files under `root` whose name matches `suffix`, without following
/// symbolic links, sorted by path.
///
/// Only an unreadable `root` is an error; problems below it are logged as warnings and counted
/// in `failed`.
fn scan(
    run: &dyn Run,
    root: &Path,
    recursive: bool,
    suffix: Option<&str>,
    failed: &mut u64,
) -> Result<Vec<Found>, JobError> {
    let mut found = Vec::new();
    let mut pending = vec![root.to_path_buf()];
    while let Some(dir) = pending.pop() {
        run.check_cancelled()?;
        let entries = match std::fs::read_dir(&dir) {
            Ok(entries) => entries,
            Err(e) if dir == root => return Err(unreadable_root(root, &e)),
            Err(e) => {
                tracing::warn!(dir = %dir.display(), "cannot read directory: {e}");
                *failed += 1;
                continue;
            }
        };
        for entry in entries {
            let entry = match entry {
                Ok(entry) => entry,
                Err(e) => {
                    tracing::warn!(dir = %dir.display(), "cannot read directory entry: {e}");
                    *failed += 1;
                    continue;
                }
            };
            let path = entry.path();
            // `DirEntry::file_type` and `DirEntry::metadata` do not follow symbolic links.
            let file_type = match entry.file_type() {
                Ok(t) => t,
                Err(e) => {
                    tracing::warn!(path = %path.display(), "cannot read file type: {e}");
                    *failed += 1;
                    continue;
                }
            };
            if file_type.is_symlink() {
                tracing::debug!(path = %path.display(), "skipping symbolic link");
            } else if file_type.is_dir() {
                if recursive {
                    pending.push(path);
                }
            } else if file_type.is_file() && name_matches(&entry.file_name(), suffix) {
                match entry.metadata().and_then(|m| Ok((m.modified()?, m.len()))) {
                    Ok((modified, len)) => found.push(Found {
                        path,
                        modified,
                        len,
                    }),
                    Err(e) => {
                        tracing::warn!(path = %path.display(), "cannot read file metadata: {e}");
                        *failed += 1;
                    }
                }
            }
        }
    }
    found.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(found)
}

/// The run fails when the directory to clean cannot be read; a missing directory or a denied
/// access will not fix itself, anything else might.
fn unreadable_root(root: &Path, e: &io::Error) -> JobError {
    use io::ErrorKind as K;
    let message = format!("cannot read directory {}: {e}", root.display());
    if matches!(
        e.kind(),
        K::NotFound | K::PermissionDenied | K::NotADirectory | K::InvalidInput
    ) {
        JobError::failed(message)
    } else {
        JobError::retryable(message)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::{Cell, RefCell};
    use std::fs::{self, File};
    use takt_plugin_api::abi::ErrorKind;

    const DAY: Duration = Duration::from_secs(SECONDS_PER_DAY);

    /// A fake run: records progress, reports cancelled after `cancel_after` checks.
    #[derive(Default)]
    struct FakeRun {
        checks: Cell<u64>,
        cancel_after: Option<u64>,
        progress: RefCell<Vec<(u64, u64)>>,
    }

    impl Run for FakeRun {
        fn check_cancelled(&self) -> Result<(), JobError> {
            let n = self.checks.get() + 1;
            self.checks.set(n);
            match self.cancel_after {
                Some(limit) if n > limit => Err(JobError::cancelled()),
                _ => Ok(()),
            }
        }

        fn progress(&self, done: u64, total: u64, _note: &str) {
            self.progress.borrow_mut().push((done, total));
        }
    }

    /// A fresh directory under the system temp dir, removed on drop.
    struct TempDir(PathBuf);

    impl TempDir {
        fn new(tag: &str) -> TempDir {
            let nanos = SystemTime::now()
                .duration_since(SystemTime::UNIX_EPOCH)
                .unwrap()
                .as_nanos();
            let dir = std::env::temp_dir()
                .join(format!("takt-clean-{tag}-{}-{nanos}", std::process::id()));
            fs::create_dir_all(&dir).unwrap();
            TempDir(dir)
        }

        /// Creates `rel` with `len` bytes, last modified `age` ago (relative to `now`).
        fn file(&self, rel: &str, len: usize, now: SystemTime, age: Duration) -> PathBuf {
            let path = self.0.join(rel);
            fs::create_dir_all(path.parent().unwrap()).unwrap();
            fs::write(&path, vec![b'x'; len]).unwrap();
            File::options()
                .write(true)
                .open(&path)
                .unwrap()
                .set_modified(now - age)
                .unwrap();
            path
        }
    }

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = fs::remove_dir_all(&self.0);
        }
    }

    fn params(dir: &Path, keep_days: u32) -> CleanParams {
        CleanParams {
            dir: dir.to_path_buf(),
            keep_days,
            suffix: None,
            dry_run: false,
            recursive: false,
        }
    }

    #[test]
    fn age_filter_keeps_files_younger_than_keep_days() {
        let now = SystemTime::now();
        let c = cutoff(now, 30).unwrap();
        assert!(is_expired(now - 31 * DAY, c));
        assert!(is_expired(now - 30 * DAY - Duration::from_secs(1), c));
        assert!(!is_expired(now - 30 * DAY, c));
        assert!(!is_expired(now - 29 * DAY, c));
        assert!(
            !is_expired(now + DAY, c),
            "a file from the future is not expired"
        );
        // keepDays 0: everything modified before now.
        let c = cutoff(now, 0).unwrap();
        assert!(is_expired(now - Duration::from_secs(1), c));
        assert!(!is_expired(now, c));
        // The largest keepDays is representable on every supported platform.
        assert!(cutoff(now, MAX_KEEP_DAYS).is_some());
    }

    #[test]
    fn suffix_filter_matches_the_end_of_the_name() {
        assert!(name_matches(OsStr::new("a.token"), Some(".token")));
        assert!(name_matches(OsStr::new(".token"), Some(".token")));
        assert!(!name_matches(OsStr::new("a.token.bak"), Some(".token")));
        assert!(!name_matches(OsStr::new("a.TOKEN"), Some(".token")));
        assert!(!name_matches(OsStr::new("token"), Some(".token")));
        assert!(name_matches(OsStr::new("anything"), None));
    }

    #[cfg(unix)]
    #[test]
    fn suffix_filter_copes_with_names_that_are_not_utf8() {
        use std::os::unix::ffi::OsStrExt;
        assert!(name_matches(
            OsStr::from_bytes(b"\xff\xfe.token"),
            Some(".token")
        ));
        assert!(!name_matches(
            OsStr::from_bytes(b"\xff\xfe.tok"),
            Some(".token")
        ));
    }

    #[test]
    fn params_are_camel_case_with_defaults_and_checked() {
        let p: CleanParams =
            serde_json::from_str(r#"{"dir": "/var/tokens", "keepDays": 30}"#).unwrap();
        assert_eq!(p, params(Path::new("/var/tokens"), 30));
        let p: CleanParams = serde_json::from_str(
            r#"{"dir": "/d", "keepDays": 1, "suffix": ".token", "dryRun": true, "recursive": true}"#,
        )
        .unwrap();
        assert_eq!(p.suffix.as_deref(), Some(".token"));
        assert!(p.dry_run && p.recursive);
        assert!(serde_json::from_str::<CleanParams>(r#"{"dir": "/d"}"#).is_err());
        assert!(serde_json::from_str::<CleanParams>(r#"{"dir": "/d", "keep_days": 1}"#).is_err());
        assert!(serde_json::from_str::<CleanParams>(r#"{"dir": "/d", "keepDays": -1}"#).is_err());

        let e = validate(&params(Path::new("/d"), MAX_KEEP_DAYS + 1)).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::INVALID_PARAMS);
        assert_eq!(
            e.message(),
            "invalid params: keepDays: 36501 is out of range 0..=36500"
        );
        validate(&params(Path::new("/d"), MAX_KEEP_DAYS)).unwrap();
        let e = validate(&params(Path::new(""), 1)).unwrap_err();
        assert_eq!(e.message(), "invalid params: dir: must not be empty");
    }

    #[test]
    fn the_schema_is_valid_json_naming_every_param() {
        let schema: serde_json::Value = serde_json::from_str(PARAMS_SCHEMA).unwrap();
        let props = schema["properties"].as_object().unwrap();
        let mut names: Vec<_> = props.keys().map(String::as_str).collect();
        names.sort_unstable();
        assert_eq!(names, ["dir", "dryRun", "keepDays", "recursive", "suffix"]);
        assert_eq!(schema["properties"]["keepDays"]["maximum"], MAX_KEEP_DAYS);
    }

    #[test]
    fn removes_only_expired_matching_regular_files() {
        let tmp = TempDir::new("basic");
        let now = SystemTime::now();
        let old = tmp.file("old.token", 10, now, 40 * DAY);
        let fresh = tmp.file("fresh.token", 20, now, DAY);
        let other = tmp.file("old.txt", 30, now, 40 * DAY);
        let nested = tmp.file("sub/nested.token", 40, now, 40 * DAY);
        let mut p = params(&tmp.0, 30);
        p.suffix = Some(".token".into());

        let run = FakeRun::default();
        let s = clean(&run, &p, now).unwrap();
        assert_eq!(
            s,
            CleanSummary {
                scanned: 2,
                removed: 1,
                bytes: 10,
                dry_run: false,
                failed: 0
            }
        );
        assert!(!old.exists());
        assert!(fresh.exists() && other.exists() && nested.exists());
        assert!(tmp.0.join("sub").is_dir(), "directories are never removed");
        assert_eq!(*run.progress.borrow(), [(1, 2), (2, 2)]);

        // Recursive, no suffix: the nested token and the old .txt go too.
        p.suffix = None;
        p.recursive = true;
        let s = clean(&FakeRun::default(), &p, now).unwrap();
        assert_eq!((s.scanned, s.removed, s.bytes, s.failed), (3, 2, 70, 0));
        assert!(fresh.exists() && !other.exists() && !nested.exists());
        assert!(tmp.0.join("sub").is_dir());
    }

    #[test]
    fn a_dry_run_removes_nothing() {
        let tmp = TempDir::new("dry");
        let now = SystemTime::now();
        let old = tmp.file("a", 5, now, 2 * DAY);
        let mut p = params(&tmp.0, 1);
        p.dry_run = true;
        let s = clean(&FakeRun::default(), &p, now).unwrap();
        assert_eq!(
            s,
            CleanSummary {
                scanned: 1,
                removed: 1,
                bytes: 5,
                dry_run: true,
                failed: 0
            }
        );
        assert!(old.exists());
    }

    #[cfg(unix)]
    #[test]
    fn symbolic_links_are_skipped_never_followed() {
        let outside = TempDir::new("outside");
        let tmp = TempDir::new("links");
        let now = SystemTime::now();
        let target_file = outside.file("victim.token", 1, now, 90 * DAY);
        outside.file("dir/deep.token", 1, now, 90 * DAY);
        let link_file = tmp.0.join("link.token");
        let link_dir = tmp.0.join("linkdir");
        std::os::unix::fs::symlink(&target_file, &link_file).unwrap();
        std::os::unix::fs::symlink(outside.0.join("dir"), &link_dir).unwrap();
        let mut p = params(&tmp.0, 0);
        p.recursive = true;
        let s = clean(&FakeRun::default(), &p, now).unwrap();
        assert_eq!((s.scanned, s.removed, s.failed), (0, 0, 0));
        assert!(target_file.exists() && outside.0.join("dir/deep.token").exists());
        assert!(fs::symlink_metadata(&link_file).is_ok());
    }

    #[test]
    fn a_missing_dir_fails_the_run_and_names_it() {
        let tmp = TempDir::new("missing");
        let missing = tmp.0.join("nope");
        let e = clean(&FakeRun::default(), &params(&missing, 1), SystemTime::now()).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::FAILED);
        assert!(!e.is_retryable());
        assert!(
            e.message()
                .starts_with(&format!("cannot read directory {}: ", missing.display())),
            "{e}"
        );
        // A file is not a directory.
        let file = tmp.file("f", 1, SystemTime::now(), DAY);
        let e = clean(&FakeRun::default(), &params(&file, 1), SystemTime::now()).unwrap_err();
        assert!(e.message().starts_with("cannot read directory "), "{e}");
    }

    #[test]
    fn cancellation_stops_between_files() {
        let tmp = TempDir::new("cancel");
        let now = SystemTime::now();
        for name in ["a", "b", "c"] {
            tmp.file(name, 1, now, 10 * DAY);
        }
        // One check while scanning the directory, one before the first file, then cancelled.
        let run = FakeRun {
            cancel_after: Some(2),
            ..FakeRun::default()
        };
        let e = clean(&run, &params(&tmp.0, 1), now).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::CANCELLED);
        assert_eq!(*run.progress.borrow(), [(1, 3)]);
        assert!(!tmp.0.join("a").exists());
        assert!(tmp.0.join("b").exists() && tmp.0.join("c").exists());
    }
}
