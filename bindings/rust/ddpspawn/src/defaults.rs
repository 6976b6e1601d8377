// The C structs this crate hands to the library, with the library's defaults:
// each comes from the library's `*_init_sized` function (libgit2's
// `*_init(opts, version)`), given the size of the Rust struct, so the library
// writes exactly the fields this crate knows about (a newer library never
// writes past the end of ours) and its defaults are never copied here.

use std::mem::{size_of, MaybeUninit};

use ddpspawn_sys as sys;

use crate::error::{check, Error, Result};

/// A C struct that the library initialises with its defaults.
pub(crate) trait LibraryDefaults: Sized {
    /// The library's `*_init_sized` function for this struct.
    ///
    /// # Safety
    /// `value` is valid for writes of `struct_size` bytes.
    unsafe fn init_sized(value: *mut Self, struct_size: u32) -> sys::ddpspawn_status;
}

macro_rules! library_defaults {
    ($($ty:ident => $init:ident),+ $(,)?) => {
        $(impl LibraryDefaults for sys::$ty {
            unsafe fn init_sized(value: *mut Self, struct_size: u32) -> sys::ddpspawn_status {
                sys::$init(value, struct_size)
            }
        })+
    };
}

library_defaults!(
    ddpspawn_launch_options => ddpspawn_launch_options_init_sized,
    ddpspawn_rank_report => ddpspawn_rank_report_init_sized,
    ddpspawn_context_options => ddpspawn_context_options_init_sized,
    ddpspawn_reducer_options => ddpspawn_reducer_options_init_sized,
);

/// A `T` holding the loaded library's defaults, or the library's error (e.g.
/// [`Error::InvalidArgument`] when it has no released version of `T` of this
/// crate's size). Checks the ABI version first.
pub(crate) fn library_defaults<T: LibraryDefaults>() -> Result<T> {
    crate::check_abi_version()?;
    let size = u32::try_from(size_of::<T>()).map_err(|_| Error::Internal {
        message: format!("a struct of {} bytes", size_of::<T>()),
    })?;
    let mut value = MaybeUninit::<T>::zeroed();
    // SAFETY: `value` is valid for writes of `size_of::<T>()` bytes, and the
    // library writes no more than `size` bytes.
    check(unsafe { T::init_sized(value.as_mut_ptr(), size) })?;
    // SAFETY: every `T` here holds integers, floats, raw pointers and
    // `Option`s of function pointers, for which all-zero bytes are valid; the
    // library wrote its defaults over them.
    Ok(unsafe { value.assume_init() })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The library's defaults, and the size this crate passed, come back.
    #[test]
    fn defaults_come_from_the_library() {
        let launch: sys::ddpspawn_launch_options = library_defaults().unwrap();
        assert_eq!(
            launch.struct_size as usize,
            size_of::<sys::ddpspawn_launch_options>()
        );
        assert_eq!((launch.nprocs, launch.grace_period_s), (1, 5.0));
        assert!(launch.start_method.is_null() && launch.worker_fn.is_none());

        let report: sys::ddpspawn_rank_report = library_defaults().unwrap();
        assert_eq!(
            report.struct_size as usize,
            size_of::<sys::ddpspawn_rank_report>()
        );
        assert_eq!(report.state, sys::DDPSPAWN_RANK_NOT_STARTED);

        let context: sys::ddpspawn_context_options = library_defaults().unwrap();
        assert_eq!(
            context.struct_size as usize,
            size_of::<sys::ddpspawn_context_options>()
        );
        assert!(context.backend.is_null());

        let reducer: sys::ddpspawn_reducer_options = library_defaults().unwrap();
        assert_eq!(
            reducer.struct_size as usize,
            size_of::<sys::ddpspawn_reducer_options>()
        );
        assert_eq!((reducer.bucket_cap_mb, reducer.powersgd_rank), (25.0, 1));
    }

    /// A size the library refuses is this crate's error with its message.
    #[test]
    fn refused_size_is_an_error() {
        #[derive(Debug)]
        struct Short;
        impl LibraryDefaults for Short {
            unsafe fn init_sized(_: *mut Self, _: u32) -> sys::ddpspawn_status {
                let mut options = MaybeUninit::<sys::ddpspawn_reducer_options>::zeroed();
                let short = size_of::<sys::ddpspawn_reducer_options>() as u32 - 4;
                sys::ddpspawn_reducer_options_init_sized(options.as_mut_ptr(), short)
            }
        }
        let err = library_defaults::<Short>().unwrap_err();
        assert_eq!(err.kind(), crate::ErrorKind::InvalidArgument, "{err}");
        assert!(err.message().contains("struct_size"), "{err}");
    }
}
