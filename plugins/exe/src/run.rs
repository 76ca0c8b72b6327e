//! One run of `exe::run`: resolve, check, start, watch, stop, reap, report.

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime};

use serde::Serialize;
use takt_plugin_api::sdk::{JobContext, JobError};

use crate::ExeOptions;
use crate::output::{Sink, Stream, StreamReport};
use crate::params::ExeParams;
use crate::pump::{Pump, Wait};
use crate::resolve::resolve;
use crate::sys::{self, Group};

/// How long the pipes get to reach end-of-file once the group is gone. Only a process that
/// left the group (and kept a pipe) makes the handler wait that long; it then reports the
/// tails read so far.
const READER_WAIT: Duration = Duration::from_millis(1500);

/// How long to wait, after SIGKILL, for the group to be empty (the kernel needs a moment to
/// tear processes down, and their new parent to reap them).
const KILL_WAIT: Duration = Duration::from_secs(2);

/// The result JSON of `exe::run` (also the `data` of its errors).
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ExeResult {
    /// The file that was started (absolute).
    pub program: String,
    /// Its process id.
    pub pid: u32,
    /// The exit code, when it exited (not killed by a signal).
    pub exit_code: Option<i32>,
    /// The signal that ended it (Unix).
    pub signal: Option<i32>,
    /// Whether the exit code is one of `successCodes`.
    pub success: bool,
    /// From start to reap.
    pub elapsed_ms: u64,
    /// `"timeout"` or `"cancel"` when the host asked the run to stop; `None` otherwise.
    pub stopped: Option<String>,
    /// Processes of its group outlived it and were terminated.
    pub leftover_processes: bool,
    /// An output pipe was still open after the group was gone (a process that left the
    /// group holds it); the tails are what had arrived by then.
    pub output_pipe_left_open: bool,
    /// Standard output.
    pub stdout: StreamReport,
    /// Standard error.
    pub stderr: StreamReport,
}

/// What ended the wait for the program.
enum End {
    Exited,
    Stopped { timeout: bool },
}

pub(crate) fn run(
    ctx: &JobContext,
    p: ExeParams,
    opts: &ExeOptions,
) -> Result<ExeResult, JobError> {
    p.validate()?;
    if let Some(cwd) = &p.cwd
        && !cwd.is_dir()
    {
        return Err(JobError::failed(format!(
            "cannot start \"{}\": the working directory {} does not exist or is not a \
             directory; create it or fix cwd",
            p.program,
            cwd.display()
        )));
    }
    let (program, args) = command_line(&p);
    let path_var = match p.env.get("PATH") {
        Some(v) => Some(v.into()),
        None => std::env::var_os("PATH"),
    };
    let resolved = resolve(&program, p.cwd.as_deref(), path_var)?;
    opts.allowlist.check(&program, &resolved)?;

    let mut cmd = Command::new(&resolved.path);
    cmd.args(&args);
    if p.env_clear {
        cmd.env_clear();
    }
    for k in &p.env_remove {
        cmd.env_remove(k);
    }
    cmd.envs(&p.env);
    if let Some(cwd) = &p.cwd {
        cmd.current_dir(cwd);
    }
    cmd.stdin(if p.stdin.is_some() {
        Stdio::piped()
    } else {
        Stdio::null()
    });
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    sys::prepare(&mut cmd);

    let shown = resolved.path.display().to_string();
    let t0 = Instant::now();
    let mut child = cmd.spawn().map_err(|e| spawn_error(&program, &shown, &e))?;
    let pid = child.id();
    let mut group = match Group::attach(&mut child) {
        Ok(g) => g,
        Err(e) => {
            // (Windows has already killed it; on Unix this cannot happen, but if it did the
            // program must not run unwatched.)
            let _ = child.kill();
            let _ = child.wait();
            return Err(JobError::retryable(format!(
                "cannot start \"{program}\": could not put it under the plugin's control \
                 ({e}); it was stopped again"
            )));
        }
    };

    // From here on every exit path reaps the child; `group` kills the tree if we panic.
    let out = Sink::new(Stream::Stdout, p.output_limit, p.log_lines);
    let err = Sink::new(Stream::Stderr, p.output_limit, p.log_lines);
    let mut pump = match Pump::start(&mut child, &group, out, err, ctx) {
        Ok(pump) => pump,
        Err(e) => {
            // No thread for the watchers: stop the program rather than run it unwatched.
            group.kill();
            let _ = child.wait();
            return Err(JobError::retryable(format!(
                "cannot watch \"{program}\": {e}; it was killed"
            )));
        }
    };
    if let (Some(mut pipe), Some(text)) = (child.stdin.take(), p.stdin.clone()) {
        // Its own thread: a program that does not read its input must not block us. The
        // write ends (EPIPE) when the program exits or is killed; dropping closes the pipe.
        let _ = std::thread::Builder::new()
            .name("takt-exe-stdin".into())
            .spawn(move || {
                let _ = pipe.write_all(text.as_bytes());
            });
    }

    let end = match pump.wait(ctx, None, true) {
        Wait::Exited => End::Exited,
        Wait::Cancelled | Wait::Deadline => End::Stopped {
            timeout: ctx.deadline().is_some_and(|d| SystemTime::now() >= d),
        },
    };

    let grace = p
        .kill_grace_ms
        .map(Duration::from_millis)
        .unwrap_or(opts.kill_grace);
    let mut leftovers = false;
    let mut forced = false;
    let status = match end {
        End::Exited => {
            let status = child.wait();
            if group.has_members() {
                leftovers = true;
                ctx.warn(&format!(
                    "{shown} exited but left processes in its {}: sending {}, then {} after \
                     {grace:?}",
                    group.describe(),
                    sys::SOFT_STOP,
                    sys::HARD_STOP
                ));
                group.ask_to_stop();
                forced = stop_members_after(&mut pump, ctx, &group, Instant::now() + grace);
            }
            status
        }
        End::Stopped { timeout } => {
            ctx.warn(&format!(
                "{}: sending {} to {}, then {} after {grace:?}",
                if timeout {
                    "the run timed out"
                } else {
                    "the run was cancelled"
                },
                sys::SOFT_STOP,
                group.describe(),
                sys::HARD_STOP
            ));
            let deadline = Instant::now() + grace;
            group.ask_to_stop();
            if pump.wait(ctx, Some(deadline), false) == Wait::Deadline {
                group.kill();
                forced = true;
                pump.wait(ctx, None, false);
            }
            let status = child.wait();
            if group.has_members() {
                forced |= stop_members_after(&mut pump, ctx, &group, deadline);
            }
            status
        }
    };
    if !(leftovers || forced || matches!(end, End::Stopped { .. })) || !group.has_members() {
        // Exited with nothing left (checked above), or everything stopped: nothing to kill.
        group.disarm();
    }
    let elapsed = t0.elapsed();
    let status = status
        .map_err(|e| JobError::failed(format!("lost track of \"{program}\" (pid {pid}): {e}")))?;

    let pipe_open = !pump.drain(ctx, Instant::now() + READER_WAIT);
    let [out, err] = pump.reports(ctx);
    let (exit_code, signal) = sys::exit_parts(status);
    let success = exit_code.is_some_and(|c| p.success_codes.contains(&c));
    let result = ExeResult {
        program: shown.clone(),
        pid,
        exit_code,
        signal,
        success,
        elapsed_ms: u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX),
        stopped: match end {
            End::Exited => None,
            End::Stopped { timeout: true } => Some("timeout".into()),
            End::Stopped { timeout: false } => Some("cancel".into()),
        },
        leftover_processes: leftovers,
        output_pipe_left_open: pipe_open,
        stdout: out,
        stderr: err,
    };
    if pipe_open {
        ctx.warn(&format!(
            "an output pipe of {shown} is still open after its {} ended: a process that left \
             the group holds it; the result has the output read so far",
            group.describe()
        ));
    }
    let ended = match (exit_code, signal) {
        (Some(c), _) => format!("exit code {c}"),
        (None, Some(s)) => format!("signal {}", sys::signal_name(s)),
        (None, None) => "an unknown status".to_string(),
    };
    let attach = |e: JobError| match serde_json::to_value(&result) {
        Ok(d) => e.with_data(d),
        Err(_) => e,
    };
    if let End::Stopped { timeout } = end {
        // The host records timed_out / cancelled itself; this message (with the output so far)
        // is what it keeps as the plugin's answer.
        return Err(attach(JobError::failed(format!(
            "{shown} was stopped because the run {}: {} sent to its {}{}, ended with {ended} \
             after {:.1}s; {}",
            if timeout {
                "timed out"
            } else {
                "was cancelled"
            },
            sys::SOFT_STOP,
            group.describe(),
            if forced {
                format!(", then {}", sys::HARD_STOP)
            } else {
                String::new()
            },
            elapsed.as_secs_f64(),
            tails(&result, 600)
        ))));
    }
    if success {
        return Ok(result);
    }
    let why = match (exit_code, signal) {
        (Some(c), _) => format!(
            "exited with code {c}, which is not a success code ({:?})",
            p.success_codes
        ),
        (None, Some(s)) => format!("was killed by {} (not by takt)", sys::signal_name(s)),
        (None, None) => "ended with an unknown status".to_string(),
    };
    // Retryable: a program failing is the case the job's retry policy is for (a locked file,
    // a database that was down); the policy decides whether another attempt happens.
    Err(attach(JobError::retryable(format!(
        "{shown} {why} after {:.1}s; {}",
        elapsed.as_secs_f64(),
        tails(&result, 1200)
    ))))
}

/// The program and its arguments, through the shell when asked.
fn command_line(p: &ExeParams) -> (String, Vec<String>) {
    if !p.shell {
        return (p.program.clone(), p.args.clone());
    }
    if cfg!(windows) {
        (
            "cmd.exe".to_string(),
            vec!["/C".to_string(), p.program.clone()],
        )
    } else {
        // `sh -c line sh a1 a2`: the args are $1, $2, … and $0 is "sh".
        let mut args = vec!["-c".to_string(), p.program.clone(), "sh".to_string()];
        args.extend(p.args.iter().cloned());
        ("/bin/sh".to_string(), args)
    }
}

/// Waits (draining output) until `deadline` for the group to empty, then SIGKILLs what is
/// left; `true` when it had to.
fn stop_members_after(pump: &mut Pump, ctx: &JobContext, group: &Group, deadline: Instant) -> bool {
    if wait_empty(pump, ctx, group, deadline) {
        return false;
    }
    group.kill();
    wait_empty(pump, ctx, group, Instant::now() + KILL_WAIT);
    true
}

/// Polls (draining output) until the group has no members or `until` passed; whether it is
/// empty.
fn wait_empty(pump: &mut Pump, ctx: &JobContext, group: &Group, until: Instant) -> bool {
    loop {
        if !group.has_members() {
            return true;
        }
        if Instant::now() >= until {
            return false;
        }
        pump.idle(ctx, Duration::from_millis(10));
    }
}

/// The last lines of stderr (and of stdout when stderr is empty), at most `max` bytes each.
fn tails(r: &ExeResult, max: usize) -> String {
    let last = |s: &str| {
        let s = s.trim_end();
        let mut start = s.len().saturating_sub(max);
        while !s.is_char_boundary(start) {
            start += 1;
        }
        let cut = &s[start..];
        if start > 0 {
            format!("…{cut}")
        } else {
            cut.to_string()
        }
    };
    let err = last(&r.stderr.tail);
    let out = last(&r.stdout.tail);
    match (err.is_empty(), out.is_empty()) {
        (true, true) => "it printed nothing".to_string(),
        (false, true) => format!("stderr ends: {err}"),
        (true, false) => format!("stdout ends: {out}"),
        (false, false) => format!("stderr ends: {err} | stdout ends: {out}"),
    }
}

fn spawn_error(program: &str, path: &str, e: &std::io::Error) -> JobError {
    match sys::spawn_problem(e) {
        Some(why) => JobError::failed(format!("cannot start \"{program}\" ({path}): {why} ({e})")),
        // Out of processes, memory or file descriptors: the host's state, worth a retry.
        None => JobError::retryable(format!("cannot start \"{program}\" ({path}): {e}")),
    }
}
