//! The functions of `ddpspawn/ddpspawn_dlpack.h` and the DLPack declarations
//! (`dlpack/dlpack.h`) they take, laid out as in every DLPack release since
//! 0.6. `tests/dlpack.rs` checks them against the C compiler's view of both
//! headers.

// DLPack's own C names, so that its documentation applies as it is.
#![allow(non_upper_case_globals)]

use std::os::raw::{c_char, c_void};

use crate::{ddpspawn_context, ddpspawn_reducer, ddpspawn_reducer_options, ddpspawn_status};

/// `DLDeviceType`: CPU memory.
pub const kDLCPU: i32 = 1;
/// `DLDeviceType`: CUDA device memory.
pub const kDLCUDA: i32 = 2;
/// `DLDataTypeCode`s.
pub const kDLInt: u8 = 0;
pub const kDLUInt: u8 = 1;
pub const kDLFloat: u8 = 2;
pub const kDLBfloat: u8 = 4;
/// (DLPack 0.8 and later; the library's LibTorch reads it.)
pub const kDLBool: u8 = 6;

/// Where a tensor's memory is.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DLDevice {
    pub device_type: i32,
    pub device_id: i32,
}

/// An element type: `code` (`kDLFloat` ...), `bits`, `lanes` (1).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DLDataType {
    pub code: u8,
    pub bits: u8,
    pub lanes: u16,
}

/// A tensor the caller owns: `shape` (and `strides`, NULL for compact
/// row-major) point to `ndim` values and must stay valid during the call.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct DLTensor {
    pub data: *mut c_void,
    pub device: DLDevice,
    pub ndim: i32,
    pub dtype: DLDataType,
    pub shape: *mut i64,
    pub strides: *mut i64,
    pub byte_offset: u64,
}

/// A tensor handed over with its owner (`DLManagedTensor`):
/// `ddpspawn_reducer_buffers_in_buckets_dlpack` returns these; call
/// `deleter(tensor)` once when done with it.
#[repr(C)]
#[derive(Debug)]
pub struct DLManagedTensor {
    pub dl_tensor: DLTensor,
    pub manager_ctx: *mut c_void,
    pub deleter: Option<unsafe extern "C" fn(*mut DLManagedTensor)>,
}

crate::dynamic_functions! {
    // Tensors are borrowed for the call.
    pub fn ddpspawn_all_reduce_dlpack(
        context: *mut ddpspawn_context,
        tensor: *mut DLTensor,
        op: i32,
    ) -> ddpspawn_status;
    pub fn ddpspawn_reduce_dlpack(
        context: *mut ddpspawn_context,
        tensor: *mut DLTensor,
        op: i32,
        dst: i32,
    ) -> ddpspawn_status;
    pub fn ddpspawn_broadcast_dlpack(
        context: *mut ddpspawn_context,
        tensor: *mut DLTensor,
        src: i32,
    ) -> ddpspawn_status;
    pub fn ddpspawn_all_gather_dlpack(
        context: *mut ddpspawn_context,
        input: *const DLTensor,
        output: *mut DLTensor,
    ) -> ddpspawn_status;
    /// Added in version node `DDPSPAWN_1.1`.
    pub fn ddpspawn_reduce_scatter_dlpack(
        context: *mut ddpspawn_context,
        input: *const DLTensor,
        output: *mut DLTensor,
        op: i32,
    ) -> ddpspawn_status;
    /// The tensors' memory must outlive the reducer; the `DLTensor` structs
    /// and their shape arrays need not.
    pub fn ddpspawn_reducer_create_dlpack(
        context: *mut ddpspawn_context,
        gradients: *const *mut DLTensor,
        num_gradients: usize,
        options: *const ddpspawn_reducer_options,
        out_reducer: *mut *mut ddpspawn_reducer,
    ) -> ddpspawn_status;
    /// Collective: rank 0 writes `count` named tensors and `step` as a
    /// checkpoint in the Trainer's format; every rank returns its outcome.
    /// Added in version node `DDPSPAWN_1.3`.
    pub fn ddpspawn_checkpoint_save_dlpack(
        context: *mut ddpspawn_context,
        path: *const c_char,
        names: *const *const c_char,
        tensors: *const *const DLTensor,
        count: usize,
        step: i64,
    ) -> ddpspawn_status;
    /// This rank alone: reads a checkpoint into the named tensors in place;
    /// `out_step` (may be NULL) gets its step. Added in version node
    /// `DDPSPAWN_1.3`.
    pub fn ddpspawn_checkpoint_load_dlpack(
        path: *const c_char,
        names: *const *const c_char,
        tensors: *const *mut DLTensor,
        count: usize,
        out_step: *mut i64,
    ) -> ddpspawn_status;
    /// This rank alone: scales the gradients in place so that their
    /// `norm_type` norm is at most `max_norm`, as `clip_grad_norm_`; a
    /// non-finite one names `names[i]` (may be NULL); `out_norm` (may be
    /// NULL) gets the norm before clipping. Added in
    /// version node `DDPSPAWN_1.4`.
    pub fn ddpspawn_clip_grad_norm_dlpack(
        names: *const *const c_char,
        gradients: *const *mut DLTensor,
        count: usize,
        max_norm: f64,
        norm_type: f64,
        out_norm: *mut f64,
    ) -> ddpspawn_status;
    /// This rank alone: clamps the gradients to `[-clip_value, clip_value]`
    /// in place. Added in version node `DDPSPAWN_1.4`.
    pub fn ddpspawn_clip_grad_value_dlpack(
        gradients: *const *mut DLTensor,
        count: usize,
        clip_value: f64,
    ) -> ddpspawn_status;
    /// gradient_as_bucket_view: moves the reducer's buffers into its buckets
    /// and writes each bucket slot into `out_buffers` (`num_buffers`
    /// entries) as a `DLManagedTensor` the caller releases with its deleter.
    pub fn ddpspawn_reducer_buffers_in_buckets_dlpack(
        reducer: *mut ddpspawn_reducer,
        out_buffers: *mut *mut DLManagedTensor,
        num_buffers: usize,
    ) -> ddpspawn_status;
}
