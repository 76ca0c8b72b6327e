//! Who may write the code the host loads.
//!
//! A plugin file is code the host runs with its own rights, so anyone who can replace the
//! file — or add one to the directory, or swap the directory — can run code as the host.
//! Like ssh with a key file, the loader refuses what others may write (Unix; on Windows the
//! README explains the ACL to set, since mode bits do not exist there):
//!
//! * **the plugin file** (after following links) and **the plugin directory**: owned by the
//!   host's user or root, and writable by neither the group nor others;
//! * **every directory above them**, up to `/`: owned by the host's user or root, and not
//!   group- or world-writable unless the sticky bit is set (`/tmp`: others may create
//!   entries there but not rename or remove ours, so they cannot swap our directory);
//! * **the shadow directory**, which holds the copies actually mapped, by the same rules as
//!   the plugin directory.
//!
//! The operator may switch the check off (`[plugins] check_permissions = false`), e.g. for a
//! directory whose group is exactly the people allowed to deploy.

use std::path::Path;

use super::loader::Refusal;

/// What to tell the operator about switching the check off.
#[cfg_attr(not(unix), allow(dead_code))]
const OPT_OUT: &str = "(or, if every user who can write it may run code as the host, set \
     [plugins] check_permissions = false in takt.toml)";

/// Checks a plugin file and the directories it is reached through.
pub(crate) fn check_file(file: &Path) -> Result<(), Refusal> {
    imp::check(file, file, Kind::File)
}

/// Checks a directory whose entries the host loads (`what` names it in messages). A missing
/// directory passes: reading it reports that better.
pub(crate) fn check_dir(dir: &Path, what: &str) -> Result<(), Refusal> {
    imp::check(dir, dir, Kind::Dir(what))
}

#[derive(Clone, Copy)]
#[cfg_attr(not(unix), allow(dead_code))]
enum Kind<'a> {
    File,
    Dir(&'a str),
}

#[cfg(unix)]
mod imp {
    use std::os::unix::fs::MetadataExt;
    use std::path::Path;

    use super::{Kind, OPT_OUT};
    use crate::plugins::loader::Refusal;

    pub(super) fn check(shown: &Path, path: &Path, kind: Kind<'_>) -> Result<(), Refusal> {
        let real = match std::fs::canonicalize(path) {
            Ok(p) => p,
            // Missing or unreadable: the loader's own read says so, with its fix.
            Err(_) => return Ok(()),
        };
        // SAFETY: geteuid has no preconditions.
        let me = unsafe { libc::geteuid() };
        let what = match kind {
            Kind::File => "the plugin file".to_string(),
            Kind::Dir(what) => what.to_string(),
        };
        strict(shown, &real, &what, me)?;
        let mut parent = real.parent();
        // A file's own directory is where a new plugin could be dropped next to it: as strict
        // as the file. Above that, a sticky directory is safe.
        if let Kind::File = kind
            && let Some(dir) = parent
        {
            strict(
                shown,
                dir,
                &format!("the directory {} of the plugin file", dir.display()),
                me,
            )?;
            parent = dir.parent();
        }
        while let Some(dir) = parent {
            let m = match std::fs::metadata(dir) {
                Ok(m) => m,
                Err(_) => break,
            };
            let label = format!("the directory {} above {what}", dir.display());
            owner(shown, dir, &label, m.uid(), me)?;
            let mode = m.mode() & 0o7777;
            if mode & 0o022 != 0 && mode & 0o1000 == 0 {
                return Err(writable(shown, dir, &label, mode, true));
            }
            parent = dir.parent();
        }
        Ok(())
    }

    /// Owned by the host's user or root; no group or world write bit.
    fn strict(shown: &Path, path: &Path, label: &str, me: u32) -> Result<(), Refusal> {
        let Ok(m) = std::fs::metadata(path) else {
            return Ok(());
        };
        owner(shown, path, label, m.uid(), me)?;
        let mode = m.mode() & 0o7777;
        if mode & 0o022 != 0 {
            return Err(writable(shown, path, label, mode, false));
        }
        Ok(())
    }

    fn owner(shown: &Path, path: &Path, label: &str, uid: u32, me: u32) -> Result<(), Refusal> {
        if uid == me || uid == 0 {
            return Ok(());
        }
        Err(Refusal {
            file: shown.to_path_buf(),
            reason: format!(
                "{label} belongs to uid {uid}, not to the host's user (uid {me}) or root, so that \
                 user could replace the code the host runs"
            ),
            fix: format!("chown {me} {} {OPT_OUT}", path.display()),
        })
    }

    fn writable(shown: &Path, path: &Path, label: &str, mode: u32, above: bool) -> Refusal {
        let who = match (mode & 0o020 != 0, mode & 0o002 != 0) {
            (true, true) => "its group and every user",
            (true, false) => "its group",
            _ => "every user",
        };
        let fix = if above {
            format!(
                "chmod go-w {} (or chmod +t, so that others cannot rename what they did not \
                 create) {OPT_OUT}",
                path.display()
            )
        } else {
            format!("chmod go-w {} {OPT_OUT}", path.display())
        };
        Refusal {
            file: shown.to_path_buf(),
            reason: format!(
                "{label} is writable by {who} (mode {mode:04o}), so they could run code as the \
                 host"
            ),
            fix,
        }
    }
}

#[cfg(not(unix))]
mod imp {
    use std::path::Path;

    use super::Kind;
    use crate::plugins::loader::Refusal;

    /// Windows has no mode bits; the README says which ACL to set on the plugin directory.
    pub(super) fn check(_shown: &Path, _path: &Path, _kind: Kind<'_>) -> Result<(), Refusal> {
        Ok(())
    }
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn temp(name: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("takt-perms-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        dir
    }

    fn chmod(p: &Path, mode: u32) {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
    }

    #[test]
    fn writable_files_and_directories_are_refused_with_mode_and_fix() {
        let dir = temp("modes");
        let file = dir.join("libp.so");
        std::fs::write(&file, b"x").unwrap();
        chmod(&file, 0o644);
        assert_eq!(check_file(&file), Ok(()), "umask 022 defaults pass");
        assert_eq!(check_dir(&dir, "the plugin directory"), Ok(()));

        chmod(&file, 0o664);
        let r = check_file(&file).unwrap_err();
        assert_eq!(r.file, file);
        assert!(
            r.reason
                .contains("the plugin file is writable by its group (mode 0664)"),
            "{r}"
        );
        assert!(r.fix.starts_with("chmod go-w "), "{r}");
        assert!(r.fix.contains("check_permissions = false"), "{r}");
        chmod(&file, 0o646);
        let r = check_file(&file).unwrap_err();
        assert!(
            r.reason.contains("writable by every user (mode 0646)"),
            "{r}"
        );
        chmod(&file, 0o644);

        chmod(&dir, 0o777);
        let r = check_dir(&dir, "the plugin directory").unwrap_err();
        assert!(
            r.reason.contains(
                "the plugin directory is writable by its group and every user (mode 0777)"
            ),
            "{r}"
        );
        let r = check_file(&file).unwrap_err();
        assert!(r.reason.contains("of the plugin file"), "{r}");
        // Sticky does not make the plugin directory itself safe: anyone could add a plugin.
        chmod(&dir, 0o1777);
        assert!(check_dir(&dir, "the plugin directory").is_err());

        // Above the plugin directory, a sticky world-writable directory (like /tmp) is safe,
        // a plain one is not.
        chmod(&dir, 0o1777);
        let inner = dir.join("plugins");
        std::fs::create_dir_all(&inner).unwrap();
        chmod(&inner, 0o755);
        assert_eq!(check_dir(&inner, "the plugin directory"), Ok(()));
        chmod(&dir, 0o775);
        let r = check_dir(&inner, "the plugin directory").unwrap_err();
        assert!(r.reason.contains("above the plugin directory"), "{r}");
        assert!(r.fix.contains("chmod +t"), "{r}");
        chmod(&dir, 0o755);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn files_of_other_users_are_refused() {
        // SAFETY: no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            eprintln!("SKIPPED: needs root to give a file away");
            return;
        }
        let dir = temp("owner");
        let file = dir.join("libp.so");
        std::fs::write(&file, b"x").unwrap();
        std::os::unix::fs::chown(&file, Some(4242), None).unwrap();
        let r = check_file(&file).unwrap_err();
        assert!(
            r.reason.contains(
                "the plugin file belongs to uid 4242, not to the host's user (uid 0) or root"
            ),
            "{r}"
        );
        assert!(r.fix.starts_with("chown 0 "), "{r}");
        std::os::unix::fs::chown(&dir, Some(4242), None).unwrap();
        std::os::unix::fs::chown(&file, Some(0), None).unwrap();
        let r = check_dir(&dir, "the plugin directory").unwrap_err();
        assert!(
            r.reason
                .contains("the plugin directory belongs to uid 4242"),
            "{r}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
