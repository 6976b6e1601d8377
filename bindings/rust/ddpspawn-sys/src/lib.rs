//! Raw declarations of ddpspawn's C ABI, one for one with
//! `capi/include/ddpspawn/ddpspawn.h` (ABI version 1).
//!
//! Everything here is `unsafe` and follows the header's conventions: fallible
//! functions return a [`ddpspawn_status`] (`DDPSPAWN_OK == 0`) and leave the
//! message in [`ddpspawn_last_error`]; option structs carry their size as the
//! first field. Get the library's defaults for an option struct from its
//! `*_init_sized` function with `size_of::<T>()` as the size (what the safe
//! crate does): the library writes exactly the fields this crate knows about,
//! so a newer library with a longer struct never writes past the end of ours,
//! and the defaults are the library's own. The plain `*_init` functions write
//! a whole struct of the library's own size: not into a Rust struct. The
//! `*_INIT` constants (and `Default`) mirror the header's macros, i.e. the
//! defaults of the header this crate was written against.
//!
//! The safe API lives in the `ddpspawn` crate. The functions of
//! `ddpspawn/ddpspawn_dlpack.h`, with the DLPack structs they take, are in
//! the `dlpack` module (re-exported here; checked by `tests/dlpack.rs`).

// The declarations keep the header's C names (`ddpspawn_job`,
// `ddpspawn_status`, ...), one for one, so that the header's documentation
// applies as it is.
#![allow(non_camel_case_types)]

// The declarations live in modules by kind, all re-exported here: `types`
// (status codes, structs, constants), `functions` (the C functions, loaded
// by `loader` at the first call) and `dlpack`; every item is reached at the
// crate root.
mod dlpack;
mod functions;
mod loader;
mod types;
pub use dlpack::*;
pub use functions::*;
pub use loader::library_path;
#[doc(hidden)]
pub use loader::resolve;
pub use types::*;

/// The ABI major version this crate declares; the library's SONAME is
/// `libddpspawn.so.1`.
pub const DDPSPAWN_ABI_VERSION: i32 = 1;

#[cfg(test)]
mod tests;
