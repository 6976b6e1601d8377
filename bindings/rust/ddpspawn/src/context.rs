// The worker side's process group: `Context` joins the group described by the
// environment and runs collectives on Rust slices; dropping it leaves the
// group.

use std::os::raw::c_void;
use std::ptr::{self, NonNull};
use std::time::Duration;

use ddpspawn_sys as sys;

use crate::arrivals::{RankArrivals, StragglerReport};
use crate::defaults::library_defaults;
use crate::element::{Element, ReduceOp};
use crate::error::{c_str_to_string, check, to_c_string, Error, Result};
use crate::grad_buffer::GradBuffer;
use crate::reducer::{Reducer, ReducerBuilder};

/// A joined process group: this rank's place in the job and the collectives
/// between all ranks.
///
/// Every rank must call the same collectives in the same order (with the same
/// element count where the C API asks for it); a collective waits for all
/// ranks, up to the context's timeout.
///
/// `Context` is `Send` but not `Sync`: move it to another thread if you
/// like, but use it from one thread at a time.
///
/// ```no_run
/// use ddpspawn::{Context, ReduceOp};
/// # fn main() -> ddpspawn::Result<()> {
/// let ctx = Context::from_env()?;
/// let mut grads = vec![1.0f32; 4];
/// ctx.all_reduce(&mut grads, ReduceOp::Mean)?;
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
pub struct Context {
    raw: NonNull<sys::ddpspawn_context>,
}

// SAFETY: the handle is not tied to the thread that created it; `Context`
// is deliberately not `Sync`, so calls on one handle never overlap. The last
// error message is read on the thread that made the call.
unsafe impl Send for Context {}

impl Context {
    /// Joins the process group described by the environment: a ddpspawn
    /// launcher, torchrun/TorchElastic, SLURM, or plain
    /// `MASTER_ADDR`/`MASTER_PORT`/`RANK`/`WORLD_SIZE` (a single process when
    /// none is set), with the gloo backend and the default timeout (1800 s).
    pub fn from_env() -> Result<Context> {
        Context::create(None)
    }

    /// Like [`from_env`](Context::from_env) with a backend (`"gloo"` or
    /// `"nccl"`, the latter only with a CUDA LibTorch:
    /// [`Error::Unavailable`] otherwise) and a timeout for joining and for
    /// each collective (`Duration::ZERO` = the default, 1800 s).
    pub fn with_options(backend: &str, timeout: Duration) -> Result<Context> {
        let backend = to_c_string("backend", backend)?;
        let mut options: sys::ddpspawn_context_options = library_defaults()?;
        options.backend = backend.as_ptr();
        options.timeout_s = timeout.as_secs_f64();
        Context::create(Some(&options))
    }

    fn create(options: Option<&sys::ddpspawn_context_options>) -> Result<Context> {
        crate::check_abi_version()?;
        let options = options.map_or(ptr::null(), |o| o as *const _);
        let mut raw: *mut sys::ddpspawn_context = ptr::null_mut();
        // SAFETY: `options` is NULL or valid for the call; `raw` is a local.
        check(unsafe { sys::ddpspawn_context_create(options, &mut raw) })?;
        NonNull::new(raw)
            .map(|raw| Context { raw })
            .ok_or_else(|| Error::Internal {
                message: "ddpspawn_context_create returned OK and no context".to_string(),
            })
    }

    /// A handle the library owns and lends (a comm hook's); wrap it in
    /// `ManuallyDrop`, so that it is never destroyed here.
    pub(crate) fn borrowed(raw: NonNull<sys::ddpspawn_context>) -> Context {
        Context { raw }
    }

    fn as_const(&self) -> *const sys::ddpspawn_context {
        self.raw.as_ptr()
    }

    /// The handle, for the calls that take a mutable context.
    pub(crate) fn as_mut_ptr(&self) -> *mut sys::ddpspawn_context {
        self.raw.as_ptr()
    }

    /// This process's global rank, `0..world_size()`.
    pub fn rank(&self) -> usize {
        // SAFETY: a live context.
        to_index(unsafe { sys::ddpspawn_context_rank(self.as_const()) })
    }

    /// The number of ranks in the group.
    pub fn world_size(&self) -> usize {
        // SAFETY: a live context.
        to_index(unsafe { sys::ddpspawn_context_world_size(self.as_const()) })
    }

    /// This process's rank on its node.
    pub fn local_rank(&self) -> usize {
        // SAFETY: a live context.
        to_index(unsafe { sys::ddpspawn_context_local_rank(self.as_const()) })
    }

    /// The number of ranks on this node.
    pub fn local_world_size(&self) -> usize {
        // SAFETY: a live context.
        to_index(unsafe { sys::ddpspawn_context_local_world_size(self.as_const()) })
    }

    /// This node's index.
    pub fn node_rank(&self) -> usize {
        // SAFETY: a live context.
        to_index(unsafe { sys::ddpspawn_context_node_rank(self.as_const()) })
    }

    /// The cluster environment that was detected: `"ddpspawn"`,
    /// `"torchelastic"`, `"slurm"` or `"env"`.
    pub fn environment(&self) -> String {
        // SAFETY: a live context; the string is copied at once.
        unsafe { c_str_to_string(sys::ddpspawn_context_environment(self.as_const())) }
    }

    /// Which rank arrived last at this group's collectives so far, and by how
    /// much (see [`StragglerReport`]).
    pub fn straggler_report(&self) -> Result<StragglerReport> {
        let (mut measured, mut collectives, mut straggler) = (0i32, 0i64, -1i32);
        let mut summary: *const std::os::raw::c_char = ptr::null();
        // SAFETY: a live context and valid out pointers; the summary is
        // copied before the next call on the context.
        check(unsafe {
            sys::ddpspawn_context_straggler(
                self.raw.as_ptr(),
                &mut measured,
                &mut collectives,
                &mut straggler,
                &mut summary,
            )
        })?;
        // SAFETY: the context owns the string until its next such call.
        let summary = unsafe { c_str_to_string(summary) };
        let mut ranks = Vec::with_capacity(self.world_size());
        for rank in 0..self.world_size() {
            let mut arrivals = RankArrivals {
                arrived_last: 0,
                late_seconds: 0.0,
                waited_seconds: 0.0,
            };
            // SAFETY: a live context and valid out pointers.
            check(unsafe {
                sys::ddpspawn_context_rank_arrivals(
                    self.as_const(),
                    to_rank("rank", rank)?,
                    &mut arrivals.arrived_last,
                    &mut arrivals.late_seconds,
                    &mut arrivals.waited_seconds,
                )
            })?;
            ranks.push(arrivals);
        }
        Ok(StragglerReport {
            measured: measured != 0,
            collectives,
            straggler: usize::try_from(straggler).ok(),
            summary,
            ranks,
        })
    }

    /// Waits until every rank reached the barrier of this name.
    pub fn barrier(&self, name: &str) -> Result<()> {
        let name = to_c_string("barrier name", name)?;
        // SAFETY: a live context and a valid C string.
        check(unsafe { sys::ddpspawn_barrier(self.raw.as_ptr(), name.as_ptr()) })
    }

    /// Overwrites `data` on every rank with rank `src`'s. Every rank passes
    /// the same length.
    pub fn broadcast<T: Element>(&self, data: &mut [T], src: usize) -> Result<()> {
        let src = to_rank("src", src)?;
        // SAFETY: `data` is valid for `data.len()` elements of T's dtype.
        check(unsafe {
            sys::ddpspawn_broadcast(
                self.raw.as_ptr(),
                data.as_mut_ptr() as *mut c_void,
                data.len(),
                T::DTYPE.to_raw(),
                src,
            )
        })
    }

    /// Rank `src`'s bytes (at most 1 GiB), on every rank. Only `src`'s `data`
    /// matters; the others may pass anything (e.g. an empty slice).
    pub fn broadcast_bytes(&self, data: &[u8], src: usize) -> Result<Vec<u8>> {
        let src = to_rank("src", src)?;
        let mut out: *mut c_void = ptr::null_mut();
        let mut size: usize = 0;
        // SAFETY: `data` is valid for its length; out-parameters are locals.
        check(unsafe {
            sys::ddpspawn_broadcast_bytes(
                self.raw.as_ptr(),
                data.as_ptr() as *const c_void,
                data.len(),
                src,
                &mut out,
                &mut size,
            )
        })?;
        let out = LibraryBytes(out);
        out.copy(0, size)
    }

    /// In place: every rank ends with `op` over all ranks' `data`.
    pub fn all_reduce<T: Element>(&self, data: &mut [T], op: ReduceOp) -> Result<()> {
        // SAFETY: `data` is valid for `data.len()` elements of T's dtype.
        check(unsafe {
            sys::ddpspawn_all_reduce(
                self.raw.as_ptr(),
                data.as_mut_ptr() as *mut c_void,
                data.len(),
                T::DTYPE.to_raw(),
                op.to_raw(),
            )
        })
    }

    /// In place on rank `dst` only: it ends with `op` over all ranks'
    /// `data`; the other ranks' `data` is left as it was.
    pub fn reduce<T: Element>(&self, data: &mut [T], op: ReduceOp, dst: usize) -> Result<()> {
        let dst = to_rank("dst", dst)?;
        // SAFETY: `data` is valid for `data.len()` elements of T's dtype.
        check(unsafe {
            sys::ddpspawn_reduce(
                self.raw.as_ptr(),
                data.as_mut_ptr() as *mut c_void,
                data.len(),
                T::DTYPE.to_raw(),
                op.to_raw(),
                dst,
            )
        })
    }

    /// Every rank's `data`, concatenated in rank order
    /// (`world_size() * data.len()` elements). Every rank passes the same
    /// length.
    pub fn all_gather<T: Element>(&self, data: &[T]) -> Result<Vec<T>> {
        let total = self
            .world_size()
            .checked_mul(data.len())
            .ok_or_else(|| Error::invalid("all_gather output size overflows"))?;
        let mut out = vec![T::default(); total];
        // SAFETY: `data` holds `data.len()` elements and `out` has room for
        // world_size times as many, as the C function requires.
        check(unsafe {
            sys::ddpspawn_all_gather(
                self.raw.as_ptr(),
                data.as_ptr() as *const c_void,
                data.len(),
                T::DTYPE.to_raw(),
                out.as_mut_ptr() as *mut c_void,
            )
        })?;
        Ok(out)
    }

    /// Reduce-scatter (torch.distributed's `reduce_scatter_tensor`): `input`
    /// holds `world_size` chunks of `output.len()` elements in rank order,
    /// and `output` gets chunk `rank` of `op` over every rank's `input`.
    /// `input` must have exactly `world_size * output.len()` elements (an
    /// `InvalidArgument` error otherwise, before any communication).
    pub fn reduce_scatter<T: Element>(
        &self,
        input: &[T],
        output: &mut [T],
        op: ReduceOp,
    ) -> Result<()> {
        if Some(input.len()) != self.world_size().checked_mul(output.len()) {
            return Err(Error::invalid(format!(
                "reduce_scatter: the input has {} elements; it must have world_size ({}) \
                 times the output's {}",
                input.len(),
                self.world_size(),
                output.len()
            )));
        }
        // SAFETY: `input` holds world_size * output.len() elements and
        // `output` output.len(), of T's dtype, as the C function requires;
        // they are distinct borrows, so they do not overlap.
        check(unsafe {
            sys::ddpspawn_reduce_scatter(
                self.raw.as_ptr(),
                input.as_ptr() as *const c_void,
                output.as_mut_ptr() as *mut c_void,
                output.len(),
                T::DTYPE.to_raw(),
                op.to_raw(),
            )
        })
    }

    /// Every rank's bytes (up to 1 GiB per rank), indexed by rank.
    pub fn all_gather_bytes(&self, data: &[u8]) -> Result<Vec<Vec<u8>>> {
        let mut sizes = vec![0usize; self.world_size()];
        let mut out: *mut c_void = ptr::null_mut();
        // SAFETY: `data` is valid for its length; `sizes` has world_size
        // entries as the C function requires.
        check(unsafe {
            sys::ddpspawn_all_gather_bytes(
                self.raw.as_ptr(),
                data.as_ptr() as *const c_void,
                data.len(),
                &mut out,
                sizes.as_mut_ptr(),
            )
        })?;
        let out = LibraryBytes(out);
        let mut parts = Vec::with_capacity(sizes.len());
        let mut offset = 0usize;
        for size in sizes {
            parts.push(out.copy(offset, size)?);
            offset += size;
        }
        Ok(parts)
    }
}

impl Context {
    /// A gradient [`Reducer`] over `buffers` with the default options; use
    /// [`ReducerBuilder`] for others. Same as `Reducer::new(self, buffers)`.
    pub fn reducer<I>(&self, buffers: I) -> Result<Reducer<'_>>
    where
        I: IntoIterator,
        I::Item: Into<GradBuffer>,
    {
        ReducerBuilder::new().build(self, buffers)
    }
}

impl Drop for Context {
    fn drop(&mut self) {
        // SAFETY: created by ddpspawn_context_create, destroyed once.
        unsafe { sys::ddpspawn_context_destroy(self.raw.as_ptr()) }
    }
}

/// Memory the library handed over; released with `ddpspawn_free`.
struct LibraryBytes(*mut c_void);

impl LibraryBytes {
    /// Copies `size` bytes at `offset`. The library guarantees the block
    /// holds them; a NULL block with a non-zero size is its bug, reported as
    /// an [`Error::Internal`].
    fn copy(&self, offset: usize, size: usize) -> Result<Vec<u8>> {
        if size == 0 {
            return Ok(Vec::new());
        }
        if self.0.is_null() {
            return Err(Error::Internal {
                message: format!("the library returned no buffer for {size} bytes"),
            });
        }
        // SAFETY: the block holds at least offset + size bytes.
        Ok(unsafe { std::slice::from_raw_parts((self.0 as *const u8).add(offset), size) }.to_vec())
    }
}

impl Drop for LibraryBytes {
    fn drop(&mut self) {
        // SAFETY: NULL or a block the library allocated for us.
        unsafe { sys::ddpspawn_free(self.0) }
    }
}

/// A rank for C; larger than `i32::MAX` is an invalid argument.
fn to_rank(what: &str, rank: usize) -> Result<i32> {
    i32::try_from(rank).map_err(|_| Error::invalid(format!("{what} rank {rank} is out of range")))
}

/// A getter's value as an index; the getters return -1 only for a NULL
/// context, which a `Context` never holds.
fn to_index(value: i32) -> usize {
    usize::try_from(value).unwrap_or(0)
}
