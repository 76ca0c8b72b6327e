//! Windows: the program runs inside a Job Object, and the job is what gets terminated.
//!
//! Windows has no process groups that a signal could reach: killing a process leaves its
//! children running, which is exactly seed 000 §5.2's failure. A Job Object is the kernel's
//! container for a process tree: every process a member starts joins the job too (nested jobs
//! since Windows 8), `TerminateJobObject` ends them all at once, and
//! `JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE` ends them when the last handle to the job closes — so
//! even a host that crashes takes its programs with it (its handles close on exit), something
//! the Unix process group cannot promise.
//!
//! The child is created suspended and only resumed once it is in the job; otherwise it could
//! start a grandchild in the instant before `AssignProcessToJobObject`, and that grandchild
//! would be outside. std does not hand out the main thread's handle, so the threads of the
//! (suspended, therefore single-threaded) process are found with a Toolhelp snapshot.
//!
//! The polite stop is `CTRL_BREAK_EVENT` to the child's console process group
//! (`CREATE_NEW_PROCESS_GROUP`), which console programs can handle like SIGTERM; a host
//! running as a service has no console, the event then goes nowhere, and the grace period
//! simply passes before `TerminateJobObject`. This file is compiled for Windows by the CI's
//! cross-check but has not been run there.

use std::os::windows::io::AsRawHandle;
use std::os::windows::process::CommandExt;
use std::process::{Child, Command, ExitStatus};

use windows_sys::Win32::Foundation::{CloseHandle, HANDLE, INVALID_HANDLE_VALUE};
use windows_sys::Win32::System::Console::{CTRL_BREAK_EVENT, GenerateConsoleCtrlEvent};
use windows_sys::Win32::System::Diagnostics::ToolHelp::{
    CreateToolhelp32Snapshot, TH32CS_SNAPTHREAD, THREADENTRY32, Thread32First, Thread32Next,
};
use windows_sys::Win32::System::JobObjects::{
    AssignProcessToJobObject, CreateJobObjectW, JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE,
    JOB_OBJECT_LIMIT_PROCESS_MEMORY, JOBOBJECT_BASIC_ACCOUNTING_INFORMATION,
    JOBOBJECT_EXTENDED_LIMIT_INFORMATION, JobObjectBasicAccountingInformation,
    JobObjectExtendedLimitInformation, QueryInformationJobObject, SetInformationJobObject,
    TerminateJobObject,
};
use windows_sys::Win32::System::Threading::{
    CREATE_NEW_PROCESS_GROUP, CREATE_SUSPENDED, INFINITE, OpenThread, ResumeThread,
    THREAD_SUSPEND_RESUME, WaitForSingleObject,
};

/// The polite stop request, for messages.
pub const SOFT_STOP: &str = "CTRL_BREAK";
/// The forced stop, for messages.
pub const HARD_STOP: &str = "TerminateJobObject";

/// The program's Job Object.
#[derive(Debug)]
pub struct Group {
    job: HANDLE,
    pid: u32,
    /// The process handle as an integer, for the waiter thread (valid until the `Child` is
    /// dropped, which the handler does only after the waiter has returned).
    process: usize,
    armed: bool,
}

// SAFETY: a job handle may be used from any thread.
unsafe impl Send for Group {}

/// Creates the child suspended, in its own console process group.
pub fn prepare(cmd: &mut Command) {
    cmd.creation_flags(CREATE_SUSPENDED | CREATE_NEW_PROCESS_GROUP);
}

impl Group {
    /// Puts the (suspended) child into a new kill-on-close job, then resumes it. On failure
    /// the child is killed: it must not run outside a job.
    pub fn attach(child: &mut Child) -> std::io::Result<Group> {
        Self::attach_with_memory_limit(child, None)
    }

    /// [`attach`](Self::attach), with the job also capping each member's committed memory at
    /// `limit` bytes (`JOB_OBJECT_LIMIT_PROCESS_MEMORY`): an allocation beyond it fails, which
    /// a Rust program turns into an abort.
    pub fn attach_with_memory_limit(
        child: &mut Child,
        limit: Option<u64>,
    ) -> std::io::Result<Group> {
        let process = child.as_raw_handle() as HANDLE;
        match Self::make_job(process, limit) {
            Ok(job) => {
                let group = Group {
                    job,
                    pid: child.id(),
                    process: process as usize,
                    armed: true,
                };
                if let Err(e) = resume(child.id()) {
                    group.kill();
                    return Err(e);
                }
                Ok(group)
            }
            Err(e) => {
                let _ = child.kill();
                let _ = child.wait();
                Err(e)
            }
        }
    }

    fn make_job(process: HANDLE, limit: Option<u64>) -> std::io::Result<HANDLE> {
        // SAFETY: documented Win32 calls on handles we own; `info` is a plain struct.
        unsafe {
            let job = CreateJobObjectW(std::ptr::null(), std::ptr::null());
            if job.is_null() {
                return Err(std::io::Error::last_os_error());
            }
            let mut info: JOBOBJECT_EXTENDED_LIMIT_INFORMATION = std::mem::zeroed();
            info.BasicLimitInformation.LimitFlags = JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE;
            if let Some(bytes) = limit {
                info.BasicLimitInformation.LimitFlags |= JOB_OBJECT_LIMIT_PROCESS_MEMORY;
                info.ProcessMemoryLimit = usize::try_from(bytes).unwrap_or(usize::MAX);
            }
            let ok = SetInformationJobObject(
                job,
                JobObjectExtendedLimitInformation,
                (&raw const info).cast(),
                size_of::<JOBOBJECT_EXTENDED_LIMIT_INFORMATION>() as u32,
            );
            if ok == 0 || AssignProcessToJobObject(job, process) == 0 {
                let e = std::io::Error::last_os_error();
                CloseHandle(job);
                return Err(e);
            }
            Ok(job)
        }
    }

    /// "job object of process 1234", for messages.
    pub fn describe(&self) -> String {
        format!("the job object of process {}", self.pid)
    }

    /// CTRL_BREAK to the child's console process group (best effort, see the module docs).
    pub fn ask_to_stop(&self) {
        // SAFETY: plain call; failure (no console) is acceptable.
        unsafe { GenerateConsoleCtrlEvent(CTRL_BREAK_EVENT, self.pid) };
    }

    /// Terminates every process in the job.
    pub fn kill(&self) {
        // SAFETY: `job` is a valid job handle until drop.
        unsafe { TerminateJobObject(self.job, 1) };
    }

    /// Whether any process of the job is still running.
    pub fn has_members(&self) -> bool {
        // SAFETY: `info` is a plain out-parameter of the documented size.
        unsafe {
            let mut info: JOBOBJECT_BASIC_ACCOUNTING_INFORMATION = std::mem::zeroed();
            let ok = QueryInformationJobObject(
                self.job,
                JobObjectBasicAccountingInformation,
                (&raw mut info).cast(),
                size_of::<JOBOBJECT_BASIC_ACCOUNTING_INFORMATION>() as u32,
                std::ptr::null_mut(),
            );
            ok == 0 || info.ActiveProcesses > 0
        }
    }

    /// The job is empty: nothing to terminate on drop (closing it still would).
    pub fn disarm(&mut self) {
        self.armed = false;
    }

    /// A function that blocks until the leader has exited. Runs on a waiter thread.
    pub fn exit_waiter(&self) -> impl FnOnce() + Send + 'static {
        let process = self.process;
        move || {
            // SAFETY: the handle stays open until the waiter has returned (see `process`).
            unsafe { WaitForSingleObject(process as HANDLE, INFINITE) };
        }
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        if self.armed {
            self.kill();
        }
        // SAFETY: our handle; closing it also kills what is left (KILL_ON_JOB_CLOSE).
        unsafe { CloseHandle(self.job) };
    }
}

/// Resumes every thread of process `pid` (one, since it was created suspended).
fn resume(pid: u32) -> std::io::Result<()> {
    // SAFETY: documented Toolhelp calls; `entry` is initialised with its size as required.
    unsafe {
        let snapshot = CreateToolhelp32Snapshot(TH32CS_SNAPTHREAD, 0);
        if snapshot == INVALID_HANDLE_VALUE {
            return Err(std::io::Error::last_os_error());
        }
        let mut entry: THREADENTRY32 = std::mem::zeroed();
        entry.dwSize = size_of::<THREADENTRY32>() as u32;
        let mut resumed = 0;
        let mut more = Thread32First(snapshot, &mut entry) != 0;
        while more {
            if entry.th32OwnerProcessID == pid {
                let thread = OpenThread(THREAD_SUSPEND_RESUME, 0, entry.th32ThreadID);
                if !thread.is_null() {
                    if ResumeThread(thread) != u32::MAX {
                        resumed += 1;
                    }
                    CloseHandle(thread);
                }
            }
            more = Thread32Next(snapshot, &mut entry) != 0;
        }
        CloseHandle(snapshot);
        if resumed == 0 {
            return Err(std::io::Error::other(
                "could not resume the suspended program after putting it into its job object",
            ));
        }
        Ok(())
    }
}

/// `(exit code, signal)`: Windows has no signals.
pub fn exit_parts(status: ExitStatus) -> (Option<i32>, Option<i32>) {
    (status.code(), None)
}

/// Unused on Windows (no signals); kept for one call site.
pub fn signal_name(signal: i32) -> String {
    format!("signal {signal}")
}

/// Errors of `spawn` that the resolution could not foresee, in words.
pub fn spawn_problem(e: &std::io::Error) -> Option<&'static str> {
    match e.raw_os_error()? {
        // ERROR_BAD_EXE_FORMAT
        193 => Some("not a valid Windows program (wrong architecture, or not an .exe)"),
        // ERROR_ACCESS_DENIED
        5 => Some("access denied by the system: check the file's permissions and any policy"),
        _ => None,
    }
}
