//! Windows Job Objects that end a process tree together with their owner: the kernel keeps
//! one for every process it starts, and each worker one for its upstream, so that stopping or
//! losing a worker also ends whatever its upstream started (`npx` → `node`, …), as a process
//! group does on Unix. Children of a process in a job join that job; jobs nest (Windows 8+).
#![allow(unsafe_code)] // FFI calls into kernel32, each with its SAFETY comment

use std::ffi::c_void;
use std::io;
use std::os::windows::io::{AsRawHandle, FromRawHandle, OwnedHandle};

use windows_sys::Win32::Foundation::FALSE;
use windows_sys::Win32::System::JobObjects::{
    AssignProcessToJobObject, CreateJobObjectW, JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE,
    JOBOBJECT_EXTENDED_LIMIT_INFORMATION, JobObjectExtendedLimitInformation,
    SetInformationJobObject, TerminateJobObject,
};

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
