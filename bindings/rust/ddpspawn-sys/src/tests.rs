//! Unit tests against the library: its own `*_init` functions agree with this
//! crate's declarations, and NULL arguments are refused.

use super::*;

use std::ffi::CStr;
use std::mem::size_of;
use std::os::raw::{c_char, c_void};
use std::ptr;

/// The library's own `*_init` functions agree with the constants (same
/// struct size and defaults): the library and this crate describe the
/// same ABI. The library fills a generous buffer, so a library with a
/// longer struct fails the size check instead of writing past ours.
#[test]
fn library_init_functions_agree() {
    let mut buf = [0u64; 64];
    unsafe {
        ddpspawn_launch_options_init(buf.as_mut_ptr().cast());
        let o = &*(buf.as_ptr() as *const ddpspawn_launch_options);
        assert_eq!(o.struct_size as usize, size_of::<ddpspawn_launch_options>());
        assert_eq!(o.nprocs, 1);
        assert_eq!(o.grace_period_s, 5.0);
        assert_eq!(o.timeout_s, 0.0);
        assert_eq!(o.master_port, 0);
        assert_eq!((o.nnodes, o.node_rank), (1, 0));
        assert!(o.start_method.is_null() && o.worker_fn.is_none());
    }
    let mut buf = [0u64; 64];
    unsafe {
        ddpspawn_context_options_init(buf.as_mut_ptr().cast());
        let c = &*(buf.as_ptr() as *const ddpspawn_context_options);
        assert_eq!(
            c.struct_size as usize,
            size_of::<ddpspawn_context_options>()
        );
        assert!(c.backend.is_null());
        assert_eq!(c.timeout_s, 0.0);
    }
    let mut buf = [0u64; 64];
    unsafe {
        ddpspawn_reducer_options_init(buf.as_mut_ptr().cast());
        let r = &*(buf.as_ptr() as *const ddpspawn_reducer_options);
        assert_eq!(
            r.struct_size as usize,
            size_of::<ddpspawn_reducer_options>()
        );
        assert_eq!((r.bucket_cap_mb, r.first_bucket_cap_mb), (25.0, 1.0));
        assert!(r.comm_hook.is_null());
        assert_eq!(
            (
                r.powersgd_rank,
                r.powersgd_start_iteration,
                r.find_unused_parameters
            ),
            (1, 10, 0)
        );
    }
}

/// `T` filled with 0xab bytes, then given to `init` with its size.
unsafe fn init_sized<T>(init: unsafe fn(*mut T, u32) -> ddpspawn_status) -> T {
    let mut value = std::mem::MaybeUninit::<T>::uninit();
    ptr::write_bytes(value.as_mut_ptr(), 0xab, 1);
    assert_eq!(init(value.as_mut_ptr(), size_of::<T>() as u32), DDPSPAWN_OK);
    value.assume_init()
}

/// Each `*_init_sized` function writes every field of this crate's
/// struct, with the header's `*_INIT` values; a size that is no released
/// version's, or a NULL struct, is refused.
#[test]
fn library_init_sized_functions_fill_the_whole_struct() {
    unsafe {
        let o = init_sized(ddpspawn_launch_options_init_sized);
        assert_eq!(
            format!("{o:?}"),
            format!("{DDPSPAWN_LAUNCH_OPTIONS_INIT:?}")
        );
        let r = init_sized(ddpspawn_rank_report_init_sized);
        assert_eq!(r, DDPSPAWN_RANK_REPORT_INIT);
        let c = init_sized(ddpspawn_context_options_init_sized);
        assert_eq!(
            format!("{c:?}"),
            format!("{DDPSPAWN_CONTEXT_OPTIONS_INIT:?}")
        );
        let r = init_sized(ddpspawn_reducer_options_init_sized);
        assert_eq!(
            format!("{r:?}"),
            format!("{DDPSPAWN_REDUCER_OPTIONS_INIT:?}")
        );

        let mut options = DDPSPAWN_REDUCER_OPTIONS_INIT;
        let short = size_of::<ddpspawn_reducer_options>() as u32 - 4;
        assert_eq!(
            ddpspawn_reducer_options_init_sized(&mut options, short),
            DDPSPAWN_ERR_INVALID_ARGUMENT
        );
        assert!(!CStr::from_ptr(ddpspawn_last_error()).to_bytes().is_empty());
        assert_eq!(
            ddpspawn_launch_options_init_sized(
                ptr::null_mut(),
                size_of::<ddpspawn_launch_options>() as u32
            ),
            DDPSPAWN_ERR_INVALID_ARGUMENT
        );
    }
}

#[test]
fn links_and_reports_abi_version() {
    unsafe {
        assert_eq!(ddpspawn_abi_version(), DDPSPAWN_ABI_VERSION);
        let v = CStr::from_ptr(ddpspawn_version());
        assert!(!v.to_bytes().is_empty());
        let info = CStr::from_ptr(ddpspawn_build_info()).to_str().unwrap();
        assert!(info.contains("\ntorch=2."), "{info}");
        assert!(!ddpspawn_last_error().is_null());
        ddpspawn_free(ptr::null_mut());
        ddpspawn_job_destroy(ptr::null_mut());
        ddpspawn_context_destroy(ptr::null_mut());
        ddpspawn_reducer_destroy(ptr::null_mut());
        ddpspawn_run_result_destroy(ptr::null_mut());
    }
}

#[test]
fn null_arguments_are_invalid_argument() {
    unsafe {
        let mut job: *mut ddpspawn_job = ptr::null_mut();
        assert_eq!(
            ddpspawn_job_create(ptr::null(), &mut job),
            DDPSPAWN_ERR_INVALID_ARGUMENT
        );
        assert!(job.is_null());
        let msg = CStr::from_ptr(ddpspawn_last_error());
        assert!(!msg.to_bytes().is_empty());
        assert_eq!(ddpspawn_context_rank(ptr::null()), -1);
        assert_eq!(ddpspawn_context_world_size(ptr::null()), -1);
        assert_eq!(
            CStr::from_ptr(ddpspawn_context_environment(ptr::null())).to_bytes(),
            b""
        );

        let mut reducer: *mut ddpspawn_reducer = ptr::null_mut();
        let mut data = [0.0f32; 2];
        let buffers = [data.as_mut_ptr() as *mut c_void];
        let counts = [data.len()];
        let dtypes = [DDPSPAWN_FLOAT32];
        assert_eq!(
            ddpspawn_reducer_create(
                ptr::null_mut(),
                buffers.as_ptr(),
                counts.as_ptr(),
                dtypes.as_ptr(),
                1,
                ptr::null(),
                &mut reducer
            ),
            DDPSPAWN_ERR_INVALID_ARGUMENT
        );
        assert!(reducer.is_null());
        assert_eq!(
            ddpspawn_reducer_mark_ready(ptr::null_mut(), 0),
            DDPSPAWN_ERR_INVALID_ARGUMENT
        );
        assert_eq!(
            ddpspawn_reducer_finalize(ptr::null_mut()),
            DDPSPAWN_ERR_INVALID_ARGUMENT
        );
        assert_eq!(
            ddpspawn_reducer_set_sync(ptr::null_mut(), 0),
            DDPSPAWN_ERR_INVALID_ARGUMENT
        );
        let mut written = 0i32;
        assert_eq!(
            ddpspawn_reducer_written(ptr::null(), 0, &mut written),
            DDPSPAWN_ERR_INVALID_ARGUMENT
        );
        assert_eq!(ddpspawn_reducer_bucket_count(ptr::null()), -1);
    }
}

/// The training-run functions' NULL handling; nothing is started (a
/// run that got as far as forking would fork libtest's process).
#[test]
fn run_null_arguments() {
    unsafe {
        let mut result: *mut ddpspawn_run_result = ptr::null_mut();
        let options: [*const c_char; 1] = [ptr::null()];
        assert_eq!(
            ddpspawn_run(ptr::null(), options.as_ptr(), &mut result),
            DDPSPAWN_ERR_INVALID_ARGUMENT
        );
        assert!(result.is_null());
        assert_eq!(
            ddpspawn_run(b"fit\0".as_ptr().cast(), options.as_ptr(), ptr::null_mut()),
            DDPSPAWN_ERR_INVALID_ARGUMENT
        );
        // An unknown command is refused before any option is looked at.
        assert_eq!(
            ddpspawn_run(b"train\0".as_ptr().cast(), options.as_ptr(), &mut result),
            DDPSPAWN_ERR_INVALID_ARGUMENT
        );
        assert!(result.is_null());
        let msg = CStr::from_ptr(ddpspawn_last_error()).to_string_lossy();
        assert!(msg.contains("train"), "{msg}");
        assert!(ddpspawn_run_result_get(ptr::null(), b"epoch\0".as_ptr().cast()).is_null());
        assert_eq!(
            CStr::from_ptr(ddpspawn_run_result_text(ptr::null())).to_bytes(),
            b""
        );
    }
}
