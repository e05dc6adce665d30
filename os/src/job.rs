//! Windows Job Objects that end a process tree together with their owner: the kernel keeps
//! one for every process it starts, and each worker one for its upstream, so that stopping or
//! losing a worker also ends whatever its upstream started (`npx` → `node`, …), as a process
//! group does on Unix. Children of a process in a job join that job; jobs nest (Windows 8+).
#![allow(unsafe_code)] // FFI calls into kernel32, each with its SAFETY comment

use std::ffi::c_void;
use std::io;
use std::os::windows::io::{AsRawHandle, FromRawHandle, OwnedHandle};

use windows_sys::Win32::Foundation::{FALSE, INVALID_HANDLE_VALUE};
use windows_sys::Win32::System::Diagnostics::ToolHelp::{
    CreateToolhelp32Snapshot, TH32CS_SNAPTHREAD, THREADENTRY32, Thread32First, Thread32Next,
};
use windows_sys::Win32::System::JobObjects::{
    AssignProcessToJobObject, CreateJobObjectW, IsProcessInJob, JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE,
    JOBOBJECT_EXTENDED_LIMIT_INFORMATION, JobObjectExtendedLimitInformation,
    SetInformationJobObject, TerminateJobObject,
};
use windows_sys::Win32::System::Threading::{
    CREATE_SUSPENDED, OpenThread, ResumeThread, THREAD_SUSPEND_RESUME,
};

/// The creation flag that starts a child with its main thread suspended: give it to
/// `Command::creation_flags`, put the child in its job ([`KillOnCloseJob::assign`]), then
/// [`resume`] it. So the child runs no instruction outside the job, and nothing it starts can
/// escape it.
pub const SUSPENDED: u32 = CREATE_SUSPENDED;

/// Resumes every thread of a child started with [`SUSPENDED`] (a process created suspended
/// has exactly its main thread; `std` does not hand out that thread's handle, so the threads
/// are found with a Toolhelp snapshot, as `process-wrap` does). Fails if no thread of the
/// child was resumed: the caller must then kill it (it would otherwise hang suspended).
pub fn resume(child: &tokio::process::Child) -> io::Result<()> {
    let Some(pid) = child.id() else {
        return Err(io::Error::other(
            "the child exited before it could be resumed",
        ));
    };
    // SAFETY: a documented flag and a process id (ignored for TH32CS_SNAPTHREAD); the call
    // returns a new handle or INVALID_HANDLE_VALUE.
    let raw = unsafe { CreateToolhelp32Snapshot(TH32CS_SNAPTHREAD, 0) };
    if raw == INVALID_HANDLE_VALUE || raw.is_null() {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `raw` is a valid handle just returned to us and owned by nothing else.
    let snapshot = unsafe { OwnedHandle::from_raw_handle(raw) };
    let mut entry = THREADENTRY32 {
        dwSize: u32::try_from(std::mem::size_of::<THREADENTRY32>()).map_err(io::Error::other)?,
        ..THREADENTRY32::default()
    };
    let mut resumed = 0;
    // SAFETY: `snapshot` is a valid snapshot handle; `entry` is a live THREADENTRY32 whose
    // `dwSize` is set, as both calls require.
    let mut more = unsafe { Thread32First(snapshot.as_raw_handle(), &raw mut entry) } != FALSE;
    while more {
        if entry.th32OwnerProcessID == pid {
            resume_thread(entry.th32ThreadID)?;
            resumed += 1;
        }
        // SAFETY: as for Thread32First.
        more = unsafe { Thread32Next(snapshot.as_raw_handle(), &raw mut entry) } != FALSE;
    }
    if resumed == 0 {
        return Err(io::Error::other(
            "no thread of the suspended child was found to resume",
        ));
    }
    Ok(())
}

fn resume_thread(thread_id: u32) -> io::Result<()> {
    // SAFETY: documented access right, no inheritance, a thread id from the snapshot; returns
    // a new handle or null.
    let raw = unsafe { OpenThread(THREAD_SUSPEND_RESUME, FALSE, thread_id) };
    if raw.is_null() {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `raw` is a valid handle just returned to us and owned by nothing else.
    let thread = unsafe { OwnedHandle::from_raw_handle(raw) };
    // SAFETY: `thread` is a valid thread handle opened with THREAD_SUSPEND_RESUME.
    if unsafe { ResumeThread(thread.as_raw_handle()) } == u32::MAX {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// An anonymous, non-inheritable Job Object with `JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE`: when its
/// only handle closes (this value is dropped, or the owning process ends however it ends),
/// Windows terminates every process in it.
#[derive(Debug)]
pub struct KillOnCloseJob(OwnedHandle);

impl KillOnCloseJob {
    /// Creates the job.
    pub fn new() -> io::Result<Self> {
        // SAFETY: null security attributes (default, non-inheritable handle) and a null name
        // (an anonymous job) are documented valid arguments; the call returns a new handle or
        // null.
        let raw = unsafe { CreateJobObjectW(std::ptr::null(), std::ptr::null()) };
        if raw.is_null() {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `raw` is a valid handle just returned to us and owned by nothing else.
        let job = unsafe { OwnedHandle::from_raw_handle(raw) };
        let mut info = JOBOBJECT_EXTENDED_LIMIT_INFORMATION::default();
        info.BasicLimitInformation.LimitFlags = JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE;
        let size = u32::try_from(std::mem::size_of::<JOBOBJECT_EXTENDED_LIMIT_INFORMATION>())
            .map_err(io::Error::other)?;
        // SAFETY: `job` is a valid job handle; the pointer and size describe a live, properly
        // initialised JOBOBJECT_EXTENDED_LIMIT_INFORMATION that outlives the call.
        let ok = unsafe {
            SetInformationJobObject(
                job.as_raw_handle(),
                JobObjectExtendedLimitInformation,
                (&raw const info).cast::<c_void>(),
                size,
            )
        };
        if ok == FALSE {
            return Err(io::Error::last_os_error());
        }
        Ok(Self(job))
    }

    /// Puts a running child into the job (with everything it starts from now on).
    pub fn assign(&self, child: &tokio::process::Child) -> io::Result<()> {
        let Some(process) = child.raw_handle() else {
            return Err(io::Error::other(
                "the child exited before it could be put in the job",
            ));
        };
        // SAFETY: `self.0` is a valid job handle; `process` is the child's process handle,
        // kept open by `child`, which is borrowed for the duration of the call.
        let ok = unsafe { AssignProcessToJobObject(self.0.as_raw_handle(), process) };
        if ok == FALSE {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Whether `child` is in this job (directly or through a job nested in it).
    pub fn contains(&self, child: &tokio::process::Child) -> io::Result<bool> {
        let Some(process) = child.raw_handle() else {
            return Err(io::Error::other("the child has exited"));
        };
        let mut inside = FALSE;
        // SAFETY: both handles are valid for the duration of the call (`child` is borrowed);
        // `inside` is a live BOOL the call writes.
        let ok = unsafe { IsProcessInJob(process, self.0.as_raw_handle(), &raw mut inside) };
        if ok == FALSE {
            return Err(io::Error::last_os_error());
        }
        Ok(inside != FALSE)
    }

    /// Terminates every process in the job now (the job itself stays usable).
    pub fn terminate(&self, exit_code: u32) -> io::Result<()> {
        // SAFETY: `self.0` is a valid job handle owned by this value.
        let ok = unsafe { TerminateJobObject(self.0.as_raw_handle(), exit_code) };
        if ok == FALSE {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }
}
