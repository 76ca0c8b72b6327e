//! A `takt run` process in the background, for the tests that stop, signal or kill it.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// How long any awaited change may take on a loaded 2-core machine before the test fails.
pub(crate) const PATIENCE: Duration = Duration::from_secs(60);
/// How often the database and the processes are looked at while waiting.
pub(crate) const POLL: Duration = Duration::from_millis(50);

/// A background `takt run`. Its output goes to files rather than pipes, so a chatty host can
/// never block on a full pipe while the test is busy polling the database. Dropped while still
/// alive (a failed assertion), it is killed, so no host outlives its test.
pub(crate) struct Host {
    pub(crate) child: Child,
    stdout: PathBuf,
    stderr: PathBuf,
}

impl Host {
    /// Starts `cmd` (a `takt run …` command) with its output in `dir/<tag>.stdout` and
    /// `dir/<tag>.stderr`.
    pub(crate) fn spawn(cmd: &mut Command, dir: &Path, tag: &str) -> Host {
        let stdout = dir.join(format!("{tag}.stdout"));
        let stderr = dir.join(format!("{tag}.stderr"));
        let child = cmd
            .stdin(Stdio::null())
            .stdout(File::create(&stdout).expect("the stdout file can be created"))
            .stderr(File::create(&stderr).expect("the stderr file can be created"))
            .spawn()
            .expect("takt run starts");
        Host {
            child,
            stdout,
            stderr,
        }
    }

    /// What it printed on stdout so far.
    pub(crate) fn stdout(&self) -> String {
        std::fs::read_to_string(&self.stdout).unwrap_or_default()
    }

    /// What it printed on stderr so far.
    pub(crate) fn stderr(&self) -> String {
        std::fs::read_to_string(&self.stderr).unwrap_or_default()
    }

    /// Both outputs, for failure messages.
    pub(crate) fn output(&self) -> String {
        format!("--- stdout\n{}--- stderr\n{}", self.stdout(), self.stderr())
    }

    /// Waits until `check` returns something, failing the test after [`PATIENCE`] or as soon
    /// as the host exits (it was meant to stay up while we wait).
    pub(crate) fn wait_for<T>(&mut self, what: &str, mut check: impl FnMut() -> Option<T>) -> T {
        let start = Instant::now();
        loop {
            if let Some(found) = check() {
                return found;
            }
            if let Some(status) = self.child.try_wait().expect("the host can be waited for") {
                panic!(
                    "takt run exited ({status}) while waiting for {what}\n{}",
                    self.output()
                );
            }
            assert!(
                start.elapsed() < PATIENCE,
                "no {what} after {PATIENCE:?}\n{}",
                self.output()
            );
            std::thread::sleep(POLL);
        }
    }

    /// Waits until stdout contains `text`.
    pub(crate) fn wait_for_line(&mut self, text: &str) {
        let path = self.stdout.clone();
        self.wait_for(&format!("\"{text}\" on stdout"), || {
            std::fs::read_to_string(&path)
                .unwrap_or_default()
                .contains(text)
                .then_some(())
        });
    }

    /// Waits for the host to exit on its own (after `--for` or a signal).
    pub(crate) fn wait_exit(&mut self) -> ExitStatus {
        let start = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().expect("the host can be waited for") {
                return status;
            }
            assert!(
                start.elapsed() < PATIENCE,
                "takt run did not stop within {PATIENCE:?}\n{}",
                self.output()
            );
            std::thread::sleep(POLL);
        }
    }

    /// Sends a signal by name (`INT`, `TERM`), as an operator or a service manager would (std
    /// has no way to send one, and the crate has no libc dependency to do it in-process).
    #[cfg(unix)]
    pub(crate) fn signal(&mut self, name: &str) {
        let status = Command::new("kill")
            .args([&format!("-{name}"), &self.child.id().to_string()])
            .status()
            .expect("kill runs");
        assert!(status.success(), "kill -{name} failed: {status}");
    }
}

impl Drop for Host {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}
