//! From `program` to a file that may be started: the PATH lookup, the checks that make "cannot
//! start" errors precise (not found / not a file / not executable), and the allowlist.
//!
//! The plugin resolves the program itself instead of leaving it to `execvp`: the allowlist
//! must judge the very file that will run, and the OS's own error for a failed lookup
//! (`ENOENT`) cannot say whether the program, its directory or its `#!` interpreter is missing.
//! The resolved absolute path is what gets started, so the lookup and the start cannot
//! disagree.

use std::ffi::OsString;
use std::path::{Component, Path, PathBuf};

use takt_plugin_api::sdk::JobError;

/// A program that exists and may be executed.
#[derive(Debug, Clone)]
pub(crate) struct Resolved {
    /// Absolute, as found (symbolic links not resolved): what is started.
    pub(crate) path: PathBuf,
}

impl Resolved {
    /// With every symbolic link resolved: what the allowlist judges (computed only then —
    /// without an allowlist the syscalls are not worth it, see benchmark B9).
    pub(crate) fn canonical(&self) -> PathBuf {
        std::fs::canonicalize(&self.path).unwrap_or_else(|_| self.path.clone())
    }
}

/// Finds `program` as the OS would, relative to `cwd` when it is a relative path, on
/// `path_var` when it is a bare name.
pub(crate) fn resolve(
    program: &str,
    cwd: Option<&Path>,
    path_var: Option<OsString>,
) -> Result<Resolved, JobError> {
    let given = Path::new(program);
    let has_dir = given.components().count() > 1 || given.is_absolute();
    if has_dir {
        // Absolute even for a relative cwd: the child starts in cwd, so a relative path
        // would be read from there a second time.
        let here = std::env::current_dir().unwrap_or_default();
        let base = match cwd {
            Some(c) => here.join(c),
            None => here,
        };
        let path = normalize(&base.join(given));
        return match check_file(&path) {
            Ok(()) => finish(path),
            Err(Problem::Missing) => Err(JobError::failed(format!(
                "cannot start \"{program}\": not found: {} does not exist; check the path \
                 (relative paths are read from cwd, here {})",
                path.display(),
                base.display()
            ))),
            Err(p) => Err(p.error(program, &path)),
        };
    }
    let dirs: Vec<PathBuf> = path_var
        .as_deref()
        .map(|p| std::env::split_paths(p).collect())
        .unwrap_or_default();
    let mut first_problem: Option<(Problem, PathBuf)> = None;
    for dir in &dirs {
        for name in candidates(program) {
            let path = normalize(&dir.join(&name));
            match check_file(&path) {
                Ok(()) if path.is_absolute() => return finish(path),
                Ok(()) => {
                    // A relative PATH entry ("." or "bin") depends on whoever's cwd; refuse it
                    // rather than guess.
                    first_problem.get_or_insert((Problem::RelativePathEntry, path));
                }
                Err(Problem::Missing) => {}
                Err(p) => {
                    first_problem.get_or_insert((p, path));
                }
            }
        }
    }
    if let Some((p, path)) = first_problem {
        return Err(p.error(program, &path));
    }
    let searched = path_var
        .as_deref()
        .map(|p| p.to_string_lossy().into_owned())
        .unwrap_or_default();
    Err(JobError::failed(format!(
        "cannot start \"{program}\": not found on PATH (searched: {}); give an absolute path, \
         or set PATH in env",
        if searched.is_empty() {
            "nothing, PATH is empty"
        } else {
            &searched
        }
    )))
}

fn finish(path: PathBuf) -> Result<Resolved, JobError> {
    Ok(Resolved { path })
}

/// The file names tried for a bare name in one PATH directory.
fn candidates(program: &str) -> Vec<OsString> {
    let mut out = vec![OsString::from(program)];
    if cfg!(windows) && Path::new(program).extension().is_none() {
        let exts = std::env::var("PATHEXT").unwrap_or_else(|_| ".COM;.EXE;.BAT;.CMD".into());
        out.clear();
        for ext in exts.split(';').filter(|e| !e.is_empty()) {
            out.push(OsString::from(format!(
                "{program}{}",
                ext.to_ascii_lowercase()
            )));
        }
    }
    out
}

/// Why a path cannot be started.
#[derive(Debug)]
enum Problem {
    Missing,
    NotAFile,
    #[cfg_attr(not(unix), allow(dead_code))]
    NotExecutable(u32),
    Unreadable(std::io::Error),
    RelativePathEntry,
}

impl Problem {
    fn error(self, program: &str, path: &Path) -> JobError {
        let p = path.display();
        JobError::failed(match self {
            Problem::Missing => {
                format!("cannot start \"{program}\": not found: {p} does not exist")
            }
            Problem::NotAFile => format!(
                "cannot start \"{program}\": {p} is a directory (or another non-file), not a program"
            ),
            Problem::NotExecutable(mode) => format!(
                "cannot start \"{program}\": not executable: {p} has mode {mode:04o}, without \
                 execute permission; make it executable (chmod +x) or run it through its \
                 interpreter (program = \"/bin/sh\", args = [\"{p}\"])"
            ),
            Problem::Unreadable(e) => format!(
                "cannot start \"{program}\": permission denied looking at {p}: {e}; check the \
                 permissions of the file and its directories"
            ),
            Problem::RelativePathEntry => format!(
                "cannot start \"{program}\": it was found as {p} through a relative PATH entry, \
                 which depends on the working directory; give an absolute path, or make PATH \
                 absolute"
            ),
        })
    }
}

fn check_file(path: &Path) -> Result<(), Problem> {
    let meta = match std::fs::metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(Problem::Missing),
        // ENOTDIR: a component on the way is a file.
        Err(e) if e.kind() == std::io::ErrorKind::NotADirectory => return Err(Problem::Missing),
        Err(e) => return Err(Problem::Unreadable(e)),
    };
    if !meta.is_file() {
        return Err(Problem::NotAFile);
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = meta.permissions().mode();
        if mode & 0o111 == 0 {
            return Err(Problem::NotExecutable(mode & 0o7777));
        }
    }
    Ok(())
}

/// `a/./b/../c` → `a/c`, lexically (for messages and the allowlist of paths that do not exist).
fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                if !out.pop() {
                    out.push(c);
                }
            }
            other => out.push(other),
        }
    }
    out
}

/// Programs and directories that may be started; `None` allows everything.
///
/// An entry allows the file it names, or — when it names a directory — every program inside
/// it or below it. Both sides are compared with symbolic links resolved (entries when each
/// check runs, so a directory created after start-up counts), so `/bin` allows
/// `/usr/bin/true` on a merged-/usr system, and a link inside an allowed directory that points
/// outside it is refused: the allowlist judges the file that will actually run.
#[derive(Debug, Clone, Default)]
pub struct Allowlist {
    entries: Option<Vec<PathBuf>>,
    source: String,
}

impl Allowlist {
    /// Everything may be started.
    pub fn allow_all() -> Allowlist {
        Allowlist::default()
    }

    /// Only `entries` (programs or directories) may be started; `source` says where the list
    /// is configured, for the refusal message (`[exe] allowlist in /etc/takt/takt.toml`).
    /// Relative entries are read from the working directory of the process.
    pub fn only(entries: Vec<PathBuf>, source: impl Into<String>) -> Allowlist {
        let base = std::env::current_dir().unwrap_or_default();
        Allowlist {
            entries: Some(entries.iter().map(|e| normalize(&base.join(e))).collect()),
            source: source.into(),
        }
    }

    /// The entries, or `None` when everything is allowed.
    pub fn entries(&self) -> Option<&[PathBuf]> {
        self.entries.as_deref()
    }

    /// `Ok` when `program` may run; otherwise a refusal that names the program, the list and
    /// what to do.
    pub(crate) fn check(&self, given: &str, program: &Resolved) -> Result<(), JobError> {
        let Some(entries) = &self.entries else {
            return Ok(());
        };
        let canonical = program.canonical();
        let allowed = entries.iter().any(|e| {
            let e = std::fs::canonicalize(e).unwrap_or_else(|_| e.clone());
            canonical.starts_with(&e)
        });
        if allowed {
            return Ok(());
        }
        let list = entries
            .iter()
            .map(|e| format!("\"{}\"", e.display()))
            .collect::<Vec<_>>()
            .join(", ");
        let link = if canonical == program.path {
            String::new()
        } else {
            format!(" (a link to {})", canonical.display())
        };
        Err(JobError::failed(format!(
            "cannot start \"{given}\": refused by the allowlist: {}{link} is not in [{list}] \
             ({}); add the program or its directory to the allowlist, or run an allowed program",
            program.path.display(),
            if self.source.is_empty() {
                "the exe plugin's options"
            } else {
                &self.source
            }
        )))
    }
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;

    #[test]
    fn bare_names_follow_path_and_paths_follow_cwd() {
        let r = resolve("sh", None, Some("/nonexistent:/bin:/usr/bin".into())).unwrap();
        assert!(r.path.is_absolute() && r.path.ends_with("sh"), "{r:?}");
        let e = resolve("no-such-program-x", None, Some("/bin".into())).unwrap_err();
        assert!(
            e.message().contains("not found on PATH (searched: /bin)"),
            "{e}"
        );
        let e = resolve("./missing", Some(Path::new("/tmp")), None).unwrap_err();
        assert!(e.message().contains("/tmp/missing does not exist"), "{e}");
        let e = resolve("/tmp", None, None).unwrap_err();
        assert!(e.message().contains("is a directory"), "{e}");
        let r = resolve("../bin/sh", Some(Path::new("/usr/lib")), None).unwrap();
        assert_eq!(r.path, Path::new("/usr/bin/sh"));
    }

    #[test]
    fn the_allowlist_judges_the_real_file() {
        let sh = resolve("/bin/sh", None, None).unwrap();
        assert!(Allowlist::allow_all().check("/bin/sh", &sh).is_ok());
        assert!(
            Allowlist::only(vec!["/bin".into()], "t")
                .check("/bin/sh", &sh)
                .is_ok()
        );
        assert!(
            Allowlist::only(vec![sh.canonical()], "t")
                .check("/bin/sh", &sh)
                .is_ok()
        );
        let e = Allowlist::only(vec!["/opt/none".into()], "[exe] allowlist in x.toml")
            .check("sh", &sh)
            .unwrap_err();
        assert!(
            e.message().contains("refused by the allowlist")
                && e.message().contains("\"/opt/none\"")
                && e.message().contains("[exe] allowlist in x.toml"),
            "{e}"
        );
        // A prefix of the name is not a parent directory.
        let e = Allowlist::only(vec!["/bi".into()], "t").check("/bin/sh", &sh);
        assert!(e.is_err());
        assert!(Allowlist::only(vec![], "t").check("/bin/sh", &sh).is_err());
    }
}
