// DistributedDataParallel-style gradient averaging for any framework: the
// `Reducer` owns its gradient buffers (Vecs whose heap blocks never move while
// it lives), hands the C reducer pointers into them once, and lends the caller
// slices between calls. It borrows the `Context` whose process group it uses.

use std::ffi::CString;
use std::fmt;
use std::marker::PhantomData;
use std::ops::{Deref, DerefMut};
use std::os::raw::c_void;
use std::ptr::{self, NonNull};
use std::sync::{Arc, Mutex};

use ddpspawn_sys as sys;

use crate::comm_hook::{CommHook, HookTable, SharedHook};
use crate::context::Context;
use crate::defaults::library_defaults;
use crate::element::{DType, Element};
use crate::error::{check, to_c_string, Error, Result};
use crate::grad_buffer::{GradBuffer, GradBufferMut};

/// Options of a [`Reducer`], a builder: set what you need, then
/// [`build`](ReducerBuilder::build).
///
/// ```no_run
/// use ddpspawn::{Context, ReducerBuilder};
/// # fn main() -> ddpspawn::Result<()> {
/// let ctx = Context::from_env()?;
/// let mut reducer = ReducerBuilder::new()
///     .bucket_cap_mb(50.0)
///     .comm_hook("fp16")
///     .find_unused_parameters(true)
///     .build(&ctx, vec![vec![0.0f32; 1024], vec![0.0f32; 16]])?;
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct ReducerBuilder {
    // `None`: the library's default (`ddpspawn_reducer_options_init_sized`).
    bucket_cap_mb: Option<f64>,
    first_bucket_cap_mb: Option<f64>,
    comm_hook: Option<String>,
    powersgd_rank: Option<u32>,
    powersgd_start_iteration: Option<u32>,
    find_unused_parameters: Option<bool>,
    custom_comm_hook: Option<SharedHook>,
}

impl Default for ReducerBuilder {
    fn default() -> Self {
        ReducerBuilder::new()
    }
}

impl ReducerBuilder {
    /// The library's defaults (`ddpspawn_reducer_options_init_sized`, with
    /// the numbers of `ddpspawn/ddpspawn_defaults.h`): PyTorch's bucket
    /// sizes, the `"allreduce"` hook, no unused-buffer detection.
    pub fn new() -> ReducerBuilder {
        ReducerBuilder {
            bucket_cap_mb: None,
            first_bucket_cap_mb: None,
            comm_hook: None,
            powersgd_rank: None,
            powersgd_start_iteration: None,
            find_unused_parameters: None,
            custom_comm_hook: None,
        }
    }

    /// Size cap of a bucket in MiB (positive).
    pub fn bucket_cap_mb(mut self, mb: f64) -> Self {
        self.bucket_cap_mb = Some(mb);
        self
    }

    /// Size cap of the first bucket in MiB (positive): the buffers at the end
    /// of the list, whose gradients a backward pass finishes first, start
    /// communicating early.
    pub fn first_bucket_cap_mb(mut self, mb: f64) -> Self {
        self.first_bucket_cap_mb = Some(mb);
        self
    }

    /// How a bucket is averaged: `"allreduce"`, `"fp16"` or `"bf16"`
    /// (compressed, lossy), or `"powersgd"` (low rank with error feedback;
    /// only matrices compress and buffers cross the C ABI flat, so here they
    /// are sent as they are), or `"batched_powersgd"` (each bucket as one
    /// square matrix, so flat buffers compress too). Another name makes
    /// `build` fail with
    /// [`Error::InvalidArgument`].
    pub fn comm_hook(mut self, name: impl Into<String>) -> Self {
        self.comm_hook = Some(name.into());
        self
    }

    /// PowerSGD's matrix approximation rank (>= 1).
    pub fn powersgd_rank(mut self, rank: u32) -> Self {
        self.powersgd_rank = Some(rank);
        self
    }

    /// PowerSGD runs plain all-reduce for this many iterations first.
    pub fn powersgd_start_iteration(mut self, iteration: u32) -> Self {
        self.powersgd_start_iteration = Some(iteration);
        self
    }

    /// `true`: a buffer that no rank marked ready in an iteration is left
    /// untouched by `finalize` (one extra small all-reduce per iteration).
    /// `false` (default): unmarked buffers count as zeros in the mean.
    pub fn find_unused_parameters(mut self, enabled: bool) -> Self {
        self.find_unused_parameters = Some(enabled);
        self
    }

    /// A hook written in Rust averages every bucket (instead of
    /// [`comm_hook`](ReducerBuilder::comm_hook)'s, which must then be unset
    /// or `"allreduce"`). Reducers built from this builder (or its clones)
    /// share the one hook, each reducing under its lock.
    pub fn custom_comm_hook(mut self, hook: impl CommHook + 'static) -> Self {
        self.custom_comm_hook = Some(SharedHook(Arc::new(Mutex::new(hook))));
        self
    }

    /// A reducer over `buffers` (anything that converts into
    /// [`GradBuffer`]s: `Vec<f32>`, ..., or `GradBuffer`s of mixed types),
    /// using `context`'s process group. Every rank passes the same lengths
    /// and element types in the same order. Empty buffers, an empty list,
    /// non-positive caps and unknown hook names are
    /// [`Error::InvalidArgument`].
    pub fn build<'ctx, I>(&self, context: &'ctx Context, buffers: I) -> Result<Reducer<'ctx>>
    where
        I: IntoIterator,
        I::Item: Into<GradBuffer>,
    {
        let (options, _comm_hook, mut hook_table) = self.options()?;
        let mut buffers: Vec<GradBuffer> = buffers.into_iter().map(Into::into).collect();
        // Pointers to the vectors' heap blocks: moving `buffers` (the outer
        // vector) into the Reducer below does not move them, and the Reducer
        // never lets them be replaced or resized.
        let pointers: Vec<*mut c_void> = buffers.iter_mut().map(GradBuffer::as_mut_ptr).collect();
        let counts: Vec<usize> = buffers.iter().map(GradBuffer::len).collect();
        let dtypes: Vec<i32> = buffers.iter().map(|b| b.dtype().to_raw()).collect();
        let mut raw: *mut sys::ddpspawn_reducer = ptr::null_mut();
        // SAFETY: a live context; the three arrays hold `buffers.len()`
        // entries and each pointer is valid for its count of elements of its
        // dtype for as long as the reducer lives (see above); `options` and
        // the hook name outlive the call; `raw` is a local.
        check(unsafe {
            sys::ddpspawn_reducer_create(
                context.as_mut_ptr(),
                pointers.as_ptr(),
                counts.as_ptr(),
                dtypes.as_ptr(),
                buffers.len(),
                &options,
                &mut raw,
            )
        })?;
        if let Some(table) = &mut hook_table {
            table.hand_over();
        }
        Ok(Reducer {
            handle: Handle::new(raw)?,
            buffers,
            sync: true,
            _context: PhantomData,
        })
    }

    /// The C options, and the hook name and custom hook table they point
    /// into (keep them alive while the options are used; hand the table over
    /// after a successful create).
    pub(crate) fn options(
        &self,
    ) -> Result<(
        sys::ddpspawn_reducer_options,
        Option<CString>,
        Option<HookTable>,
    )> {
        let comm_hook = match &self.comm_hook {
            Some(name) => Some(to_c_string("comm_hook", name.as_str())?),
            None => None,
        };
        let mut options: sys::ddpspawn_reducer_options = library_defaults()?;
        if let Some(mb) = self.bucket_cap_mb {
            options.bucket_cap_mb = mb;
        }
        if let Some(mb) = self.first_bucket_cap_mb {
            options.first_bucket_cap_mb = mb;
        }
        if let Some(name) = &comm_hook {
            options.comm_hook = name.as_ptr();
        }
        if let Some(rank) = self.powersgd_rank {
            options.powersgd_rank = to_i32("powersgd_rank", rank)?;
        }
        if let Some(iteration) = self.powersgd_start_iteration {
            options.powersgd_start_iteration = to_i32("powersgd_start_iteration", iteration)?;
        }
        if let Some(enabled) = self.find_unused_parameters {
            options.find_unused_parameters = i32::from(enabled);
        }
        let hook_table = self.custom_comm_hook.as_ref().map(HookTable::new);
        if let Some(table) = &hook_table {
            options.custom_comm_hook = table.as_ptr();
        }
        Ok((options, comm_hook, hook_table))
    }
}

/// A C reducer, destroyed on drop (shared by [`Reducer`] and
/// [`TensorReducer`](crate::TensorReducer)). Declare it before the memory
/// the C reducer points into, so that it is dropped first.
pub(crate) struct Handle(NonNull<sys::ddpspawn_reducer>);

impl Handle {
    pub(crate) fn new(raw: *mut sys::ddpspawn_reducer) -> Result<Handle> {
        NonNull::new(raw)
            .map(Handle)
            .ok_or_else(|| Error::Internal {
                message: "ddpspawn_reducer_create returned OK and no reducer".to_string(),
            })
    }

    pub(crate) fn mark_ready(&self, index: usize) -> Result<()> {
        // SAFETY: a live reducer.
        check(unsafe { sys::ddpspawn_reducer_mark_ready(self.0.as_ptr(), index) })
    }

    pub(crate) fn finalize(&self) -> Result<()> {
        // SAFETY: a live reducer.
        check(unsafe { sys::ddpspawn_reducer_finalize(self.0.as_ptr()) })
    }

    pub(crate) fn written(&self, index: usize) -> Result<bool> {
        let mut written = 0i32;
        // SAFETY: a live reducer and a valid out-pointer.
        check(unsafe { sys::ddpspawn_reducer_written(self.0.as_ptr(), index, &mut written) })?;
        Ok(written != 0)
    }

    pub(crate) fn set_sync(&self, enabled: bool) -> Result<()> {
        // SAFETY: a live reducer.
        check(unsafe { sys::ddpspawn_reducer_set_sync(self.0.as_ptr(), i32::from(enabled)) })
    }

    pub(crate) fn bucket_count(&self) -> usize {
        // SAFETY: a live reducer (-1 only for NULL).
        usize::try_from(unsafe { sys::ddpspawn_reducer_bucket_count(self.0.as_ptr()) }).unwrap_or(0)
    }

    pub(crate) fn compression(&self) -> Result<(i64, i64)> {
        let (mut sent, mut dense) = (0i64, 0i64);
        // SAFETY: a live reducer and valid out-pointers.
        check(unsafe {
            sys::ddpspawn_reducer_compression(self.0.as_ptr(), &mut sent, &mut dense)
        })?;
        Ok((sent, dense))
    }
}

impl Drop for Handle {
    fn drop(&mut self) {
        // SAFETY: created by ddpspawn_reducer_create*, destroyed once.
        unsafe { sys::ddpspawn_reducer_destroy(self.0.as_ptr()) }
    }
}

/// Averages a fixed set of gradient buffers across the ranks of a
/// [`Context`], like PyTorch's `DistributedDataParallel`, for frameworks that
/// are not LibTorch.
///
/// The reducer owns its buffers and lends them out between calls. Each
/// iteration: write the gradients ([`buffer_mut`](Reducer::buffer_mut),
/// [`buffers_mut`](Reducer::buffers_mut)), call
/// [`mark_ready`](Reducer::mark_ready) for each buffer as it becomes final
/// (any order; buckets of buffers, in reverse buffer order, start
/// communicating in bucket order as they fill), then
/// [`finalize`](Reducer::finalize): afterwards every buffer holds the mean
/// over the ranks. [`no_sync`](Reducer::no_sync) accumulates gradients
/// locally for a while; [`into_buffers`](Reducer::into_buffers) ends the
/// reducer and gives the vectors back.
///
/// ```no_run
/// use ddpspawn::{Context, Reducer};
/// # fn main() -> ddpspawn::Result<()> {
/// let ctx = Context::from_env()?;
/// let mut reducer = Reducer::new(&ctx, vec![vec![0.0f32; 3], vec![0.0f32; 1]])?;
/// for _step in 0..10 {
///     for i in (0..reducer.len()).rev() {            // as backward finishes each one
///         reducer.buffer_mut::<f32>(i)?.fill(ctx.rank() as f32);
///         reducer.mark_ready(i)?;
///     }
///     reducer.finalize()?;                            // every buffer: the mean
///     let mean = reducer.buffer::<f32>(0)?[0];
///     # let _ = mean;
/// }
/// # Ok(())
/// # }
/// ```
///
/// It borrows the context for its whole life, so the context outlives it.
/// It is neither `Send` nor `Sync`: use it on the thread that uses the
/// context.
pub struct Reducer<'ctx> {
    handle: Handle,
    // Declared after `handle` and dropped after it destroyed the C reducer,
    // which points into them.
    buffers: Vec<GradBuffer>,
    sync: bool,
    _context: PhantomData<&'ctx Context>,
}

impl<'ctx> Reducer<'ctx> {
    /// A reducer with the default options (see [`ReducerBuilder::new`]).
    pub fn new<I>(context: &'ctx Context, buffers: I) -> Result<Reducer<'ctx>>
    where
        I: IntoIterator,
        I::Item: Into<GradBuffer>,
    {
        ReducerBuilder::new().build(context, buffers)
    }

    /// Buffer `index` holds its final gradient for this iteration. An index
    /// out of range is [`Error::InvalidArgument`]; marking a buffer twice
    /// before `finalize` is [`Error::FailedPrecondition`].
    pub fn mark_ready(&self, index: usize) -> Result<()> {
        // It reads buffer `index`, which no `&mut` borrow can alias while
        // `self` is borrowed.
        self.handle.mark_ready(index)
    }

    /// Starts the buckets still waiting (buffers never marked count as
    /// zeros, or stay untouched with `find_unused_parameters`), waits for
    /// all of them, and writes the means into the buffers.
    pub fn finalize(&mut self) -> Result<()> {
        // It writes the buffers, which `&mut self` keeps unborrowed.
        self.handle.finalize()
    }

    /// Whether the last `finalize` wrote the mean into buffer `index`: false
    /// under no_sync and, with `find_unused_parameters`, for a buffer that no
    /// rank marked (left as it was); true for a buffer this rank did not mark
    /// when another rank did. An index out of range is
    /// [`Error::InvalidArgument`].
    pub fn written(&self, index: usize) -> Result<bool> {
        self.handle.written(index)
    }

    /// `false` is no_sync: `mark_ready` and `finalize` communicate nothing,
    /// so gradients accumulate locally; the first `finalize` after
    /// `set_sync(true)` averages what accumulated. Ranks that finalize
    /// different numbers of passes under no_sync are refused there
    /// (`ddpspawn_reducer_set_sync` in ddpspawn.h). See also
    /// [`no_sync`](Reducer::no_sync).
    pub fn set_sync(&mut self, enabled: bool) -> Result<()> {
        self.handle.set_sync(enabled)?;
        self.sync = enabled;
        Ok(())
    }

    /// Whether iterations are synced (false inside [`no_sync`](Reducer::no_sync)).
    pub fn sync_enabled(&self) -> bool {
        self.sync
    }

    /// Turns syncing off until the returned guard drops, which restores the
    /// previous setting (like `DistributedDataParallel.no_sync()`). Use the
    /// reducer through the guard meanwhile:
    ///
    /// ```no_run
    /// # fn main() -> ddpspawn::Result<()> {
    /// # let ctx = ddpspawn::Context::from_env()?;
    /// # let mut reducer = ddpspawn::Reducer::new(&ctx, vec![vec![0.0f64; 4]])?;
    /// {
    ///     let mut local = reducer.no_sync()?;
    ///     local.buffer_mut::<f64>(0)?[0] += 1.0;   // accumulate, no communication
    /// }
    /// reducer.buffer_mut::<f64>(0)?[0] += 1.0;
    /// reducer.mark_ready(0)?;
    /// reducer.finalize()?;                         // the mean of the accumulated sums
    /// # Ok(())
    /// # }
    /// ```
    pub fn no_sync(&mut self) -> Result<NoSync<'_, 'ctx>> {
        self.no_sync_if(true)
    }

    /// [`no_sync`](Reducer::no_sync) when `enabled`, else a guard that
    /// changes nothing: a conditional no_sync is one line,
    /// `let mut r = reducer.no_sync_if(skip_sync)?;`.
    pub fn no_sync_if(&mut self, enabled: bool) -> Result<NoSync<'_, 'ctx>> {
        let previous = self.sync;
        if enabled {
            self.set_sync(false)?;
        }
        Ok(NoSync {
            reducer: self,
            previous,
        })
    }

    /// The number of buckets the buffers were grouped into.
    pub fn bucket_count(&self) -> usize {
        self.handle.bucket_count()
    }

    /// The number of buffers.
    pub fn len(&self) -> usize {
        self.buffers.len()
    }

    /// Always false: a reducer has at least one buffer.
    pub fn is_empty(&self) -> bool {
        self.buffers.is_empty()
    }

    /// The element type of buffer `index`, if there is one.
    pub fn dtype(&self, index: usize) -> Option<DType> {
        self.buffers.get(index).map(GradBuffer::dtype)
    }

    /// Buffer `index` as `T`s. An index out of range or another element
    /// type is [`Error::InvalidArgument`].
    pub fn buffer<T: Element>(&self, index: usize) -> Result<&[T]> {
        let buffer = self.checked(index)?;
        match buffer.as_slice() {
            Some(slice) => Ok(slice),
            None => Err(wrong_type::<T>(index, buffer.dtype())),
        }
    }

    /// Buffer `index` as `T`s, to write a gradient into. An index out of
    /// range or another element type is [`Error::InvalidArgument`].
    pub fn buffer_mut<T: Element>(&mut self, index: usize) -> Result<&mut [T]> {
        let dtype = self.checked(index)?.dtype();
        self.buffers[index]
            .as_mut_slice()
            .ok_or_else(|| wrong_type::<T>(index, dtype))
    }

    /// Every buffer at once, for writing (e.g. one per layer):
    /// `reducer.buffers_mut().into_iter().map(|b| b.into_slice::<f32>())`.
    pub fn buffers_mut(&mut self) -> Vec<GradBufferMut<'_>> {
        self.buffers
            .iter_mut()
            .map(|buffer| GradBufferMut { buffer })
            .collect()
    }

    /// Ends the reducer and gives its buffers back, in order, with what the
    /// last `finalize` left in them.
    pub fn into_buffers(self) -> Vec<GradBuffer> {
        // The vectors' heap blocks stay where they are; the C reducer is
        // destroyed before they are handed out.
        let Reducer {
            handle, buffers, ..
        } = self;
        drop(handle);
        buffers
    }

    fn checked(&self, index: usize) -> Result<&GradBuffer> {
        self.buffers.get(index).ok_or_else(|| {
            Error::invalid(format!(
                "buffer index {index} is outside [0, {})",
                self.buffers.len()
            ))
        })
    }
}

impl fmt::Debug for Reducer<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let dtypes: Vec<DType> = self.buffers.iter().map(GradBuffer::dtype).collect();
        f.debug_struct("Reducer")
            .field("buffers", &self.buffers.len())
            .field("dtypes", &dtypes)
            .field("bucket_count", &self.bucket_count())
            .field("sync", &self.sync)
            .finish()
    }
}

/// The guard of [`Reducer::no_sync`]: the reducer, with syncing off until it
/// drops. Dereferences to the [`Reducer`].
pub struct NoSync<'r, 'ctx> {
    reducer: &'r mut Reducer<'ctx>,
    previous: bool,
}

impl<'ctx> Deref for NoSync<'_, 'ctx> {
    type Target = Reducer<'ctx>;
    fn deref(&self) -> &Reducer<'ctx> {
        self.reducer
    }
}

impl<'ctx> DerefMut for NoSync<'_, 'ctx> {
    fn deref_mut(&mut self) -> &mut Reducer<'ctx> {
        self.reducer
    }
}

impl Drop for NoSync<'_, '_> {
    fn drop(&mut self) {
        // Fails only for a NULL handle, which a Reducer never holds.
        let _ = self.reducer.set_sync(self.previous);
    }
}

impl fmt::Debug for NoSync<'_, '_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NoSync")
            .field("reducer", &self.reducer)
            .field("previous", &self.previous)
            .finish()
    }
}

fn wrong_type<T: Element>(index: usize, holds: DType) -> Error {
    Error::invalid(format!(
        "buffer {index} holds {holds:?} elements, not {:?}",
        T::DTYPE
    ))
}

fn to_i32(what: &str, value: u32) -> Result<i32> {
    i32::try_from(value).map_err(|_| Error::invalid(format!("{what} {value} is out of range")))
}
