// Tensors in memory the caller owns (a tch-rs / LibTorch tensor, a GPU
// buffer), described the DLPack way (element type, shape, device) for the
// collectives and the reducer of ddpspawn_dlpack.h: no copy, and the shapes
// travel, so PowerSGD compresses matrices.

use std::fmt;
use std::marker::PhantomData;
use std::os::raw::c_void;
use std::ptr;

use ddpspawn_sys as sys;

use crate::context::Context;
use crate::element::ReduceOp;
use crate::error::{check, Error, Result};
use crate::reducer::{Handle, ReducerBuilder};

/// The element types a [`TensorRef`] can hold (which ones a collective
/// accepts is the library's to say: it names what it refuses).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TensorType {
    Float16,
    BFloat16,
    Float32,
    Float64,
    Int8,
    UInt8,
    Int16,
    Int32,
    Int64,
    Bool,
}

impl TensorType {
    fn to_dl(self) -> sys::DLDataType {
        let (code, bits) = match self {
            TensorType::Float16 => (sys::kDLFloat, 16),
            TensorType::BFloat16 => (sys::kDLBfloat, 16),
            TensorType::Float32 => (sys::kDLFloat, 32),
            TensorType::Float64 => (sys::kDLFloat, 64),
            TensorType::Int8 => (sys::kDLInt, 8),
            TensorType::UInt8 => (sys::kDLUInt, 8),
            TensorType::Int16 => (sys::kDLInt, 16),
            TensorType::Int32 => (sys::kDLInt, 32),
            TensorType::Int64 => (sys::kDLInt, 64),
            TensorType::Bool => (sys::kDLBool, 8),
        };
        sys::DLDataType {
            code,
            bits,
            lanes: 1,
        }
    }
}

/// Where a [`TensorRef`]'s memory is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Device {
    Cpu,
    /// CUDA device memory on the given device (needs a CUDA device).
    Cuda(i32),
}

/// A compact row-major tensor in memory that ddpspawn does not own: its
/// address, shape, element type and device. Built with the `unsafe`
/// [`TensorRef::new`], whose caller vouches for the memory; every use after
/// that is safe.
#[derive(Clone, PartialEq, Eq)]
pub struct TensorRef {
    data: *mut c_void,
    shape: Vec<i64>,
    dtype: TensorType,
    device: Device,
}

impl TensorRef {
    /// # Safety
    ///
    /// `data` must point to the product of `shape` elements of `dtype` on
    /// `device`, in row-major order without gaps, that ddpspawn may read and
    /// write in place whenever this value is used in a call (and, given to a
    /// [`TensorReducer`], for as long as the reducer lives), while nothing
    /// else reads or writes them.
    pub unsafe fn new(data: *mut c_void, shape: &[i64], dtype: TensorType, device: Device) -> Self {
        TensorRef {
            data,
            shape: shape.to_vec(),
            dtype,
            device,
        }
    }

    /// The tensor's shape.
    pub fn shape(&self) -> &[i64] {
        &self.shape
    }

    /// The tensor's element type.
    pub fn dtype(&self) -> TensorType {
        self.dtype
    }

    /// The DLTensor that describes it; it points into `self.shape`, so it is
    /// valid while `self` is.
    pub(crate) fn to_dl(&self) -> sys::DLTensor {
        let (device_type, device_id) = match self.device {
            Device::Cpu => (sys::kDLCPU, 0),
            Device::Cuda(id) => (sys::kDLCUDA, id),
        };
        sys::DLTensor {
            data: self.data,
            device: sys::DLDevice {
                device_type,
                device_id,
            },
            ndim: i32::try_from(self.shape.len()).unwrap_or(i32::MAX),
            dtype: self.dtype.to_dl(),
            // The library reads the shape and never writes it.
            shape: self.shape.as_ptr() as *mut i64,
            strides: ptr::null_mut(),
            byte_offset: 0,
        }
    }
}

impl fmt::Debug for TensorRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TensorRef")
            .field("shape", &self.shape)
            .field("dtype", &self.dtype)
            .field("device", &self.device)
            .finish()
    }
}

fn to_rank(what: &str, rank: usize) -> Result<i32> {
    i32::try_from(rank).map_err(|_| Error::invalid(format!("{what} {rank} is out of range")))
}

impl Context {
    /// In place: every rank's tensor ends with `op` over all ranks' tensors
    /// (`ddpspawn_all_reduce_dlpack`).
    pub fn all_reduce_tensor(&self, tensor: &TensorRef, op: ReduceOp) -> Result<()> {
        let mut dl = tensor.to_dl();
        // SAFETY: a live context; `dl` describes memory its TensorRef's
        // creator vouched for, and its shape outlives the call.
        check(unsafe { sys::ddpspawn_all_reduce_dlpack(self.as_mut_ptr(), &mut dl, op.to_raw()) })
    }

    /// Overwrites every rank's tensor with `src`'s
    /// (`ddpspawn_broadcast_dlpack`).
    pub fn broadcast_tensor(&self, tensor: &TensorRef, src: usize) -> Result<()> {
        let src = to_rank("src rank", src)?;
        let mut dl = tensor.to_dl();
        // SAFETY: as in all_reduce_tensor.
        check(unsafe { sys::ddpspawn_broadcast_dlpack(self.as_mut_ptr(), &mut dl, src) })
    }

    /// `output` gets every rank's `input` in rank order
    /// (`ddpspawn_all_gather_dlpack`): the same element type and device, and
    /// world size times `input`'s elements (shape `[world_size, *shape]`, or
    /// any compact shape with that many elements); `input` is not changed.
    pub fn all_gather_tensor(&self, input: &TensorRef, output: &TensorRef) -> Result<()> {
        let input = input.to_dl();
        let mut output = output.to_dl();
        // SAFETY: as in all_reduce_tensor, for both tensors.
        check(unsafe { sys::ddpspawn_all_gather_dlpack(self.as_mut_ptr(), &input, &mut output) })
    }

    /// `output` gets this rank's chunk of `op` over every rank's `input`
    /// (`ddpspawn_reduce_scatter_dlpack`, torch's `reduce_scatter_tensor`):
    /// `input` holds world size equal chunks in rank order (world size times
    /// `output`'s elements, the same element type and device); `input` is not
    /// changed.
    pub fn reduce_scatter_tensor(
        &self,
        input: &TensorRef,
        output: &TensorRef,
        op: ReduceOp,
    ) -> Result<()> {
        let input = input.to_dl();
        let mut output = output.to_dl();
        // SAFETY: as in all_reduce_tensor, for both tensors.
        check(unsafe {
            sys::ddpspawn_reduce_scatter_dlpack(self.as_mut_ptr(), &input, &mut output, op.to_raw())
        })
    }
}

impl ReducerBuilder {
    /// A reducer over tensors in the caller's memory
    /// (`ddpspawn_reducer_create_dlpack`): each keeps its shape, so the
    /// `"powersgd"` hook compresses those of two or more dimensions. The
    /// memory must stay valid for the reducer's life (see
    /// [`TensorRef::new`]). Every rank passes the same shapes and types in
    /// the same order.
    pub fn build_tensors<'ctx>(
        &self,
        context: &'ctx Context,
        tensors: Vec<TensorRef>,
    ) -> Result<TensorReducer<'ctx>> {
        let (options, _comm_hook, mut hook_table) = self.options()?;
        let mut described: Vec<sys::DLTensor> = tensors.iter().map(TensorRef::to_dl).collect();
        let pointers: Vec<*mut sys::DLTensor> = described
            .iter_mut()
            .map(|dl| dl as *mut sys::DLTensor)
            .collect();
        let mut raw: *mut sys::ddpspawn_reducer = ptr::null_mut();
        // SAFETY: a live context; `pointers` holds `tensors.len()` valid
        // DLTensors whose shapes live in `tensors`; the memory they describe
        // outlives the reducer (TensorRef::new's contract); `options` and
        // the hook name outlive the call; `raw` is a local.
        check(unsafe {
            sys::ddpspawn_reducer_create_dlpack(
                context.as_mut_ptr(),
                pointers.as_ptr(),
                pointers.len(),
                &options,
                &mut raw,
            )
        })?;
        if let Some(table) = &mut hook_table {
            table.hand_over();
        }
        Ok(TensorReducer {
            handle: Handle::new(raw)?,
            tensors,
            _context: PhantomData,
        })
    }
}

/// A [`Reducer`](crate::Reducer) over tensors in the caller's memory, made
/// by [`ReducerBuilder::build_tensors`]: each iteration,
/// [`mark_ready`](TensorReducer::mark_ready) each gradient as it is final,
/// then [`finalize`](TensorReducer::finalize); the means are written into
/// the tensors' memory. It borrows the context for its whole life; it is
/// neither `Send` nor `Sync`.
pub struct TensorReducer<'ctx> {
    handle: Handle,
    tensors: Vec<TensorRef>,
    _context: PhantomData<&'ctx Context>,
}

impl TensorReducer<'_> {
    /// Gradient `index` is final for this iteration.
    pub fn mark_ready(&self, index: usize) -> Result<()> {
        self.handle.mark_ready(index)
    }

    /// Starts what is left, waits, and writes the means into the tensors.
    pub fn finalize(&mut self) -> Result<()> {
        self.handle.finalize()
    }

    /// Whether the last `finalize` wrote the mean into tensor `index` (see
    /// [`Reducer::written`](crate::Reducer::written)).
    pub fn written(&self, index: usize) -> Result<bool> {
        self.handle.written(index)
    }

    /// `false` is no_sync: gradients accumulate locally until the first
    /// `finalize` after `set_sync(true)`.
    pub fn set_sync(&mut self, enabled: bool) -> Result<()> {
        self.handle.set_sync(enabled)
    }

    /// The number of buckets.
    pub fn bucket_count(&self) -> usize {
        self.handle.bucket_count()
    }

    /// With the `"powersgd"` hook: the elements the last compressed
    /// iteration sent and the gradient elements they stood for (the first is
    /// smaller when it compressed); `(0, 0)` before it starts and with the
    /// other hooks.
    pub fn compression(&self) -> Result<(i64, i64)> {
        self.handle.compression()
    }

    /// The tensors, in the order given.
    pub fn tensors(&self) -> &[TensorRef] {
        &self.tensors
    }
}

impl fmt::Debug for TensorReducer<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TensorReducer")
            .field("tensors", &self.tensors.len())
            .field("bucket_count", &self.bucket_count())
            .finish()
    }
}
