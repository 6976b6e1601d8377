//! Loads `libddpspawn.so.1` at the first call into it, so that a program that
//! depends on these crates needs no rpath and no build script of its own: the
//! path the build script found (`DDPSPAWN_LIB_DIR` or `pkg-config`) is built
//! into the crate, and `$DDPSPAWN_LIBRARY` (a path) overrides it at run time,
//! as for the Python and Java bindings. Each function's address is looked up
//! once. A library that cannot be loaded, or lacks a function, is a panic that
//! names the path (or the function) and the variable that overrides it.

use std::ffi::{CStr, CString, OsString};
use std::os::raw::{c_char, c_int, c_void};
use std::os::unix::ffi::OsStringExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicPtr, AtomicUsize, Ordering};

extern "C" {
    fn dlopen(filename: *const c_char, flags: c_int) -> *mut c_void;
    fn dlsym(handle: *mut c_void, symbol: *const c_char) -> *mut c_void;
    fn dlerror() -> *mut c_char;
}

const RTLD_NOW: c_int = 2;
const RTLD_GLOBAL: c_int = 0x100;

/// Where the build script found the library ("" when building docs only).
const BUILT_LIBRARY: &str = env!("DDPSPAWN_SYS_LIBRARY");

static HANDLE: AtomicPtr<c_void> = AtomicPtr::new(std::ptr::null_mut());

/// The library this process loads: `$DDPSPAWN_LIBRARY` when set and not
/// empty, else the one the build script found.
pub fn library_path() -> PathBuf {
    match std::env::var_os("DDPSPAWN_LIBRARY").filter(|p| !p.is_empty()) {
        Some(path) => PathBuf::from(path),
        None => PathBuf::from(BUILT_LIBRARY),
    }
}

fn handle() -> *mut c_void {
    let loaded = HANDLE.load(Ordering::Acquire);
    if !loaded.is_null() {
        return loaded;
    }
    // Two threads may both get here: dlopen counts references and returns the
    // same handle to both.
    let path = library_path();
    let c_path = CString::new(OsString::from(path.clone()).into_vec())
        .unwrap_or_else(|_| panic!("ddpspawn-sys: the library path {path:?} holds a NUL byte"));
    // SAFETY: c_path is a NUL-terminated string; dlerror's result is read
    // before any other dl* call on this thread.
    let opened = unsafe { dlopen(c_path.as_ptr(), RTLD_NOW | RTLD_GLOBAL) };
    if opened.is_null() {
        let why = unsafe { last_dl_error() };
        panic!(
            "ddpspawn-sys: cannot load {} ({why}); set DDPSPAWN_LIBRARY to the path of \
             libddpspawn.so.1, or rebuild with DDPSPAWN_LIB_DIR or pkg-config naming it",
            path.display()
        );
    }
    HANDLE.store(opened, Ordering::Release);
    opened
}

/// The address of `name` (NUL-terminated), looked up once into `slot`.
#[doc(hidden)]
pub fn resolve(slot: &AtomicUsize, name: &'static str) -> usize {
    let cached = slot.load(Ordering::Acquire);
    if cached != 0 {
        return cached;
    }
    let handle = handle();
    // SAFETY: name ends in NUL (the macro below appends it).
    let address = unsafe { dlsym(handle, name.as_ptr() as *const c_char) } as usize;
    if address == 0 {
        panic!(
            "ddpspawn-sys: {} has no {} (a library older than this crate?)",
            library_path().display(),
            name.trim_end_matches('\0')
        );
    }
    slot.store(address, Ordering::Release);
    address
}

unsafe fn last_dl_error() -> String {
    let text = dlerror();
    if text.is_null() {
        "no reason given".to_string()
    } else {
        CStr::from_ptr(text).to_string_lossy().into_owned()
    }
}

/// Declares the C ABI's functions as `unsafe fn`s of the same names and
/// signatures, each calling the loaded library's function of that name.
#[doc(hidden)]
#[macro_export]
macro_rules! dynamic_functions {
    ($(
        $(#[$meta:meta])*
        pub fn $name:ident($($arg:ident: $ty:ty),* $(,)?) $(-> $ret:ty)?;
    )*) => {$(
        $(#[$meta])*
        #[allow(clippy::missing_safety_doc, clippy::too_many_arguments)]
        pub unsafe fn $name($($arg: $ty),*) $(-> $ret)? {
            static ADDRESS: ::std::sync::atomic::AtomicUsize =
                ::std::sync::atomic::AtomicUsize::new(0);
            let address = $crate::resolve(&ADDRESS, concat!(stringify!($name), "\0"));
            // SAFETY: the library exports $name with this signature (the
            // header's; tests/layout.rs checks the names against it).
            let function: unsafe extern "C" fn($($ty),*) $(-> $ret)? =
                ::std::mem::transmute::<usize, _>(address);
            function($($arg),*)
        }
    )*};
}
