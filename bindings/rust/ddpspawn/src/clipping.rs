// Gradient clipping for a loop's own gradients (ddpspawn_dlpack.h's
// ddpspawn_clip_grad_norm_dlpack and ddpspawn_clip_grad_value_dlpack): the
// library's, with LibTorch's clip_grad_norm_ kernels, as C++'s
// Fabric::ClipGradients. No logic here.

use ddpspawn_sys as sys;

use crate::checkpoint::names_of;
use crate::error::{check, Result};
use crate::tensor::TensorRef;

/// This rank alone: scales the named `gradients` in place so that their
/// `norm_type` norm (`f64::INFINITY`: the largest magnitude) is at most
/// `max_norm`, and returns the norm before clipping. A norm that is not
/// finite is [`Error::InvalidArgument`](crate::Error::InvalidArgument)
/// naming the gradient that holds a NaN or an infinity, and nothing is
/// scaled.
pub fn clip_grad_norm(
    gradients: &[(&str, &TensorRef)],
    max_norm: f64,
    norm_type: f64,
) -> Result<f64> {
    let names = names_of(gradients)?;
    let name_ptrs: Vec<_> = names.iter().map(|n| n.as_ptr()).collect();
    let mut dls: Vec<sys::DLTensor> = gradients.iter().map(|(_, t)| t.to_dl()).collect();
    let dl_ptrs: Vec<*mut sys::DLTensor> = dls.iter_mut().map(|d| d as *mut _).collect();
    let mut norm = 0.0f64;
    // SAFETY: `names` and `dls` outlive the call and hold `gradients.len()`
    // entries; each TensorRef vouches for its memory, which the library
    // writes in place.
    check(unsafe {
        sys::ddpspawn_clip_grad_norm_dlpack(
            name_ptrs.as_ptr(),
            dl_ptrs.as_ptr(),
            gradients.len(),
            max_norm,
            norm_type,
            &mut norm,
        )
    })?;
    Ok(norm)
}

/// This rank alone: clamps every element of `gradients` to
/// `[-clip_value, clip_value]` in place.
pub fn clip_grad_value(gradients: &[&TensorRef], clip_value: f64) -> Result<()> {
    let mut dls: Vec<sys::DLTensor> = gradients.iter().map(|t| t.to_dl()).collect();
    let dl_ptrs: Vec<*mut sys::DLTensor> = dls.iter_mut().map(|d| d as *mut _).collect();
    // SAFETY: as in clip_grad_norm.
    check(unsafe {
        sys::ddpspawn_clip_grad_value_dlpack(dl_ptrs.as_ptr(), gradients.len(), clip_value)
    })
}
