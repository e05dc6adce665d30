/* The one export of bcryptprimitives.dll that Rust's standard library imports (ProcessPrng,
 * Windows 10+), for the Wine lane only: Debian bookworm's Wine 8.0 does not ship the DLL,
 * so no Rust program built for Windows starts under it. This stand-in fills the buffer from
 * RtlGenRandom (advapi32's SystemFunction036), which Wine implements. scripts/test-wine builds
 * it with MinGW and puts it in the Wine prefix's system32; nothing of it ships. */
#include <windows.h>

BOOLEAN WINAPI SystemFunction036(PVOID buffer, ULONG length);

BOOL WINAPI ProcessPrng(PBYTE data, SIZE_T length)
{
    while (length > 0) {
        ULONG chunk = length > 0x10000000 ? 0x10000000 : (ULONG)length;
        if (!SystemFunction036(data, chunk))
            return FALSE;
        data += chunk;
        length -= chunk;
    }
    return TRUE;
}
