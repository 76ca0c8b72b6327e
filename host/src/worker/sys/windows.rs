//! Windows: standard handles, the Job Object's memory cap, exit codes. Compiled by the CI's
//! cross-check; not run there.

use std::fs::File;
use std::os::windows::io::{FromRawHandle, IntoRawHandle};
use std::process::{Child, ExitStatus};

use windows_sys::Win32::Foundation::{HANDLE, HANDLE_FLAG_INHERIT, SetHandleInformation};
use windows_sys::Win32::System::Console::{
    GetStdHandle, STD_ERROR_HANDLE, STD_INPUT_HANDLE, STD_OUTPUT_HANDLE, SetStdHandle,
};

/// Takes the protocol's pipes out of the standard handles (and out of inheritance, so a
/// child the plugin starts holds neither) and puts `NUL` in as stdin and stderr as stdout.
/// Returns (frames in, frames out).
pub(crate) fn take_protocol_pipes() -> std::io::Result<(File, File)> {
    let nul = File::open("NUL")?.into_raw_handle() as HANDLE;
    // SAFETY: documented calls on this process's standard handles; each pipe handle is owned
    // by exactly one `File` afterwards (std looks the standard handles up on every use, so it
    // no longer refers to them).
    unsafe {
        let input = GetStdHandle(STD_INPUT_HANDLE);
        let output = GetStdHandle(STD_OUTPUT_HANDLE);
        let error = GetStdHandle(STD_ERROR_HANDLE);
        SetHandleInformation(input, HANDLE_FLAG_INHERIT, 0);
        SetHandleInformation(output, HANDLE_FLAG_INHERIT, 0);
        if SetStdHandle(STD_INPUT_HANDLE, nul) == 0 || SetStdHandle(STD_OUTPUT_HANDLE, error) == 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok((
            File::from_raw_handle(input as _),
            File::from_raw_handle(output as _),
        ))
    }
}

/// The host's Job Object caps the worker's memory (`JOB_OBJECT_LIMIT_PROCESS_MEMORY`): nothing
/// to do inside the worker.
pub(crate) fn limit_memory(_bytes: u64) -> std::io::Result<()> {
    Ok(())
}

/// Ends the worker at once (`TerminateProcess`, not `ExitProcess`: no DLL detach code of a
/// plugin runs, so nothing can hang the exit); the host's kill-on-close Job Object ends what
/// the plugin started.
pub(crate) fn end_worker() -> ! {
    use windows_sys::Win32::System::Threading::{GetCurrentProcess, TerminateProcess};
    // SAFETY: terminating our own process.
    unsafe { TerminateProcess(GetCurrentProcess(), 0) };
    std::process::exit(0)
}

/// Whether `child` has exited (a process handle keeps its id reserved until closed, so there
/// is nothing to protect on Windows).
pub(crate) fn has_exited(child: &Child) -> bool {
    use std::os::windows::io::AsRawHandle;
    use windows_sys::Win32::System::Threading::WaitForSingleObject;
    // SAFETY: a zero-timeout wait on our own process handle.
    unsafe { WaitForSingleObject(child.as_raw_handle() as HANDLE, 0) == 0 }
}

/// The exit in words, and (exit code, signal): Windows reports crashes as NTSTATUS codes.
pub(crate) fn exit_words(status: ExitStatus) -> (String, Option<i32>, Option<i32>) {
    let code = status.code();
    let words = match code.map(|c| c as u32) {
        Some(0xC000_0005) => "it crashed: access violation (invalid memory access)".to_string(),
        Some(0xC000_00FD) => "it crashed: stack overflow".to_string(),
        Some(0xC000_0409) => {
            "it aborted (fail-fast: a Rust abort, or a buffer overrun detected)".to_string()
        }
        Some(0xC000_0017) | Some(0xC000_012D) => "it ran out of memory".to_string(),
        Some(c) if c >= 0xC000_0000 => format!("it crashed with status 0x{c:08X}"),
        Some(c) => format!("it exited with code {c}"),
        None => "it ended in an unknown way".to_string(),
    };
    (words, code, None)
}
