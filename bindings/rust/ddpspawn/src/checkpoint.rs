// Checkpoints of named tensors in the Trainer's format (ddpspawn_dlpack.h's
// ddpspawn_checkpoint_save_dlpack and ddpspawn_checkpoint_load_dlpack): what
// `ddpspawn export`, the CLI's --checkpoint and C++'s Fabric read, and what
// they write. No logic here.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use ddpspawn_sys as sys;

use crate::context::Context;
use crate::error::{check, to_c_string, Result};
use crate::tensor::TensorRef;

fn path_string(path: &Path) -> Result<CString> {
    to_c_string("the checkpoint's path", path.as_os_str().as_bytes())
}

pub(crate) fn names_of(tensors: &[(&str, &TensorRef)]) -> Result<Vec<CString>> {
    tensors
        .iter()
        .map(|(name, _)| to_c_string("a tensor's name", *name))
        .collect()
}

impl Context {
    /// Collective (every rank calls it): rank 0 writes its `tensors` under
    /// their names and `step` to `path` as a checkpoint in the Trainer's
    /// format, atomically, and every rank returns rank 0's outcome. The other
    /// ranks' tensors are not read (they may pass none). No tensor, or an
    /// empty or repeated name, is [`Error::InvalidArgument`](crate::Error::InvalidArgument).
    pub fn save_checkpoint(
        &self,
        path: impl AsRef<Path>,
        tensors: &[(&str, &TensorRef)],
        step: i64,
    ) -> Result<()> {
        let path = path_string(path.as_ref())?;
        let names = names_of(tensors)?;
        let name_ptrs: Vec<_> = names.iter().map(|n| n.as_ptr()).collect();
        let dls: Vec<sys::DLTensor> = tensors.iter().map(|(_, t)| t.to_dl()).collect();
        let dl_ptrs: Vec<*const sys::DLTensor> = dls.iter().map(|d| d as *const _).collect();
        // SAFETY: a live context; the strings, the DLTensors (and the shapes
        // they point into, held by `tensors`) outlive the call, and each
        // TensorRef's creator vouched for its memory.
        check(unsafe {
            sys::ddpspawn_checkpoint_save_dlpack(
                self.as_mut_ptr(),
                path.as_ptr(),
                name_ptrs.as_ptr(),
                dl_ptrs.as_ptr(),
                tensors.len(),
                step,
            )
        })
    }
}

/// Reads the checkpoint at `path` into `tensors` in place, each from its
/// name's entry, on this rank alone (no collective); returns the checkpoint's
/// step. A name the checkpoint lacks, or another shape or element type, is
/// [`Error::InvalidArgument`](crate::Error::InvalidArgument) naming it, and
/// then no tensor has been written.
pub fn load_checkpoint(path: impl AsRef<Path>, tensors: &[(&str, &TensorRef)]) -> Result<i64> {
    let path = path_string(path.as_ref())?;
    let names = names_of(tensors)?;
    let name_ptrs: Vec<_> = names.iter().map(|n| n.as_ptr()).collect();
    let mut dls: Vec<sys::DLTensor> = tensors.iter().map(|(_, t)| t.to_dl()).collect();
    let dl_ptrs: Vec<*mut sys::DLTensor> = dls.iter_mut().map(|d| d as *mut _).collect();
    let mut step = 0i64;
    // SAFETY: as in save_checkpoint; the library writes into the tensors'
    // memory, which their TensorRefs allow.
    check(unsafe {
        sys::ddpspawn_checkpoint_load_dlpack(
            path.as_ptr(),
            name_ptrs.as_ptr(),
            dl_ptrs.as_ptr(),
            tensors.len(),
            &mut step,
        )
    })?;
    Ok(step)
}
