//! Communication hooks written in Rust: a [`CommHook`] averages each bucket
//! of a [`Reducer`](crate::Reducer) in place of the built-in hooks, through
//! the C ABI's `ddpspawn_comm_hook` (so a compression scheme needs no
//! LibTorch). Give one with
//! [`ReducerBuilder::custom_comm_hook`](crate::ReducerBuilder::custom_comm_hook).

use std::fmt;
use std::mem::ManuallyDrop;
use std::os::raw::c_void;
use std::panic::{self, AssertUnwindSafe};
use std::ptr::NonNull;
use std::sync::{Arc, Mutex};

use crate::error::to_c_string;
use crate::{sys, Context, DType, Element, Error, Result};

/// One bucket: some of the reducer's gradients, back to back. After
/// [`CommHook::reduce`] returns, its elements must hold the mean over the
/// ranks (or what the hook's compression makes of it).
pub struct Bucket<'a> {
    index: usize,
    bucket_count: usize,
    dtype: DType,
    data: &'a mut [u8],
}

impl Bucket<'_> {
    /// Buckets are reduced in index order on every rank.
    pub fn index(&self) -> usize {
        self.index
    }

    /// The reducer's number of buckets.
    pub fn bucket_count(&self) -> usize {
        self.bucket_count
    }

    /// The element type.
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// The number of elements.
    pub fn len(&self) -> usize {
        self.data.len() / self.dtype.size()
    }

    /// Always false: a reducer has no empty buckets.
    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
    }

    /// The elements, mutably, if they are `T`s.
    pub fn as_mut_slice<T: Element>(&mut self) -> Option<&mut [T]> {
        if T::DTYPE != self.dtype {
            return None;
        }
        let len = self.len();
        // SAFETY: the reducer's bucket holds `len` aligned elements of
        // `dtype`, which is T's (checked above), for the borrow of self.
        Some(unsafe { std::slice::from_raw_parts_mut(self.data.as_mut_ptr().cast::<T>(), len) })
    }
}

impl fmt::Debug for Bucket<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Bucket")
            .field("index", &self.index)
            .field("bucket_count", &self.bucket_count)
            .field("dtype", &self.dtype)
            .field("len", &self.len())
            .finish()
    }
}

/// A communication hook: averages one bucket at a time across the ranks of
/// `context` (the reducer's group), with any of its collectives. Every rank
/// reduces the same buckets in the same order, so the hook's collectives
/// match across ranks. The whole averaging happens in `reduce` (the C ABI's
/// separate `wait` is not used).
pub trait CommHook: Send {
    /// Leaves the mean over the ranks (or its approximation) in `bucket`.
    /// An error fails the reducer call that ran the hook, with the rank, the
    /// bucket and this error's message.
    fn reduce(&mut self, context: &Context, bucket: Bucket<'_>) -> Result<()>;
}

/// A hook shared by the reducers built with it (each reduces under its lock).
#[derive(Clone)]
pub(crate) struct SharedHook(pub(crate) Arc<Mutex<dyn CommHook>>);

impl fmt::Debug for SharedHook {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("CommHook")
    }
}

/// The C table of a hook, with its `user_data` (a boxed [`SharedHook`])
/// owned here until the library takes it ([`HookTable::hand_over`]).
pub(crate) struct HookTable {
    table: Box<sys::ddpspawn_comm_hook>,
    owned: bool,
}

impl HookTable {
    pub(crate) fn new(hook: &SharedHook) -> HookTable {
        let user_data = Box::into_raw(Box::new(hook.clone())).cast::<c_void>();
        HookTable {
            table: Box::new(sys::ddpspawn_comm_hook {
                struct_size: std::mem::size_of::<sys::ddpspawn_comm_hook>() as u32,
                user_data,
                start: Some(start),
                wait: None,
                release: Some(release),
            }),
            owned: true,
        }
    }

    /// The table, for the options of the create call.
    pub(crate) fn as_ptr(&self) -> *const sys::ddpspawn_comm_hook {
        &*self.table
    }

    /// After a successful create: the library calls `release` from now on.
    pub(crate) fn hand_over(&mut self) {
        self.owned = false;
    }
}

impl Drop for HookTable {
    fn drop(&mut self) {
        if self.owned {
            // SAFETY: the create call failed (or never happened), so the
            // library never took user_data, made by Box::into_raw in new().
            unsafe { release(self.table.user_data) };
        }
    }
}

unsafe extern "C" fn release(user_data: *mut c_void) {
    // SAFETY: user_data is the Box<SharedHook> made in HookTable::new,
    // released once (by the library, or by HookTable's drop).
    drop(unsafe { Box::from_raw(user_data.cast::<SharedHook>()) });
}

unsafe extern "C" fn start(
    user_data: *mut c_void,
    context: *mut sys::ddpspawn_context,
    bucket: *const sys::ddpspawn_bucket,
    _out_work: *mut *mut c_void,
) -> sys::ddpspawn_status {
    let outcome = panic::catch_unwind(AssertUnwindSafe(|| {
        // SAFETY: the library passes the user_data it was given (a live
        // Box<SharedHook>), a bucket valid for the call and a live context.
        let hook = unsafe { &*user_data.cast::<SharedHook>() };
        let bucket = unsafe { &*bucket };
        let dtype = DType::from_raw(bucket.dtype)
            .ok_or_else(|| Error::invalid(format!("unknown bucket dtype {}", bucket.dtype)))?;
        // SAFETY: `count` elements of `dtype` at `data`, the library's,
        // writable for the call.
        let data = unsafe {
            std::slice::from_raw_parts_mut(bucket.data.cast::<u8>(), bucket.count * dtype.size())
        };
        let context =
            NonNull::new(context).ok_or_else(|| Error::invalid("the library passed no context"))?;
        // The library's context, lent for the call: never destroyed here.
        let context = ManuallyDrop::new(Context::borrowed(context));
        let mut hook = hook
            .0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        hook.reduce(
            &context,
            Bucket {
                index: bucket.index as usize,
                bucket_count: bucket.bucket_count as usize,
                dtype,
                data,
            },
        )
    }));
    let error = match outcome {
        Ok(Ok(())) => return sys::DDPSPAWN_OK,
        Ok(Err(error)) => error,
        Err(_) => Error::Internal {
            message: "the Rust comm hook panicked".to_string(),
        },
    };
    let message = to_c_string("message", error.message().replace('\0', " "))
        .unwrap_or_else(|_| to_c_string("message", "the Rust comm hook failed").unwrap());
    // SAFETY: a NUL-terminated string, copied by the library.
    unsafe { sys::ddpspawn_set_last_error(error.code(), message.as_ptr()) }
}
