//! The SID of the user this process runs as (Windows), for `tutti service install`: the
//! service runs as LocalSystem and its pipe admits that user ([`crate::pipe_access`]).
#![allow(unsafe_code)] // FFI calls into advapi32/kernel32, each with its SAFETY comment

use std::ffi::c_void;
use std::io;
use std::os::windows::io::{AsRawHandle, FromRawHandle, OwnedHandle};

use windows_sys::Win32::Foundation::{FALSE, HLOCAL, LocalFree};
use windows_sys::Win32::Security::Authorization::ConvertSidToStringSidW;
use windows_sys::Win32::Security::{GetTokenInformation, TOKEN_QUERY, TOKEN_USER, TokenUser};
use windows_sys::Win32::System::Threading::{GetCurrentProcess, OpenProcessToken};

use crate::pipe_access::UserSid;

/// The current user's SID (`S-1-5-21-…`).
pub fn current_user_sid() -> io::Result<UserSid> {
    let mut raw = std::ptr::null_mut();
    // SAFETY: GetCurrentProcess returns a pseudo handle that needs no closing; `raw` is a live
    // out-pointer the call writes a new token handle to.
    if unsafe { OpenProcessToken(GetCurrentProcess(), TOKEN_QUERY, &raw mut raw) } == FALSE {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `raw` is a valid handle just returned to us and owned by nothing else.
    let token = unsafe { OwnedHandle::from_raw_handle(raw) };
    let mut needed = 0u32;
    // SAFETY: a size query: null buffer with length 0; `needed` is a live out-pointer.
    unsafe {
        GetTokenInformation(
            token.as_raw_handle(),
            TokenUser,
            std::ptr::null_mut(),
            0,
            &raw mut needed,
        )
    };
    // u64 words: aligned for TOKEN_USER (pointer alignment).
    let words = usize::try_from(needed)
        .map_err(io::Error::other)?
        .div_ceil(8)
        .max(1);
    let mut buf = vec![0u64; words];
    // SAFETY: `buf` is a live, aligned buffer of at least `needed` bytes; `needed` is a live
    // out-pointer.
    let ok = unsafe {
        GetTokenInformation(
            token.as_raw_handle(),
            TokenUser,
            buf.as_mut_ptr().cast::<c_void>(),
            needed,
            &raw mut needed,
        )
    };
    if ok == FALSE {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the call filled `buf` with a TOKEN_USER (followed by the SID it points into).
    let sid = unsafe { (*buf.as_ptr().cast::<TOKEN_USER>()).User.Sid };
    let mut text = std::ptr::null_mut();
    // SAFETY: `sid` points into `buf`, alive for the call; `text` is a live out-pointer that
    // receives a LocalAlloc'd, NUL-terminated string.
    if unsafe { ConvertSidToStringSidW(sid, &raw mut text) } == FALSE {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `text` is NUL-terminated (documented), freed once just below and not used after.
    let s = unsafe { widestring::U16CStr::from_ptr_str(text) }.to_string_lossy();
    // SAFETY: `text` was allocated by ConvertSidToStringSidW with LocalAlloc.
    unsafe { LocalFree(text.cast::<c_void>() as HLOCAL) };
    UserSid::parse(&s).map_err(io::Error::other)
}

#[cfg(test)]
mod tests {
    /// Wine runs every process as one user with a real SID: the lane checks the lookup.
    #[test]
    fn the_current_user_has_a_sid() {
        let sid = super::current_user_sid().unwrap_or_else(|e| panic!("{e}"));
        assert!(sid.as_str().starts_with("S-1-5-"), "{sid}");
    }
}
