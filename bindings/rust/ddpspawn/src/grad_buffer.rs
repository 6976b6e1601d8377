// A reducer's gradient buffers: `GradBuffer`, a vector of one of the element
// types the library knows, and `GradBufferMut`, the elements of one lent
// without the vector (so the reducer's pointer into it stays valid).

use std::fmt;
use std::os::raw::c_void;

use crate::element::{DType, Element};

/// One gradient buffer of a [`Reducer`]: a vector of one of the element
/// types the library knows.
///
/// Build one from any `Vec<f32>`, `Vec<f64>`, `Vec<i32>` or `Vec<i64>` with
/// `.into()` (or [`GradBuffer::zeros`]); [`Reducer::into_buffers`] gives them
/// back.
#[derive(Debug, Clone, PartialEq)]
pub enum GradBuffer {
    F32(Vec<f32>),
    F64(Vec<f64>),
    I32(Vec<i32>),
    I64(Vec<i64>),
}

impl GradBuffer {
    /// `len` zeros of `T`.
    pub fn zeros<T: Element>(len: usize) -> GradBuffer {
        T::wrap(vec![T::default(); len])
    }

    /// The element type.
    pub fn dtype(&self) -> DType {
        match self {
            GradBuffer::F32(_) => DType::Float32,
            GradBuffer::F64(_) => DType::Float64,
            GradBuffer::I32(_) => DType::Int32,
            GradBuffer::I64(_) => DType::Int64,
        }
    }

    /// The number of elements.
    pub fn len(&self) -> usize {
        match self {
            GradBuffer::F32(v) => v.len(),
            GradBuffer::F64(v) => v.len(),
            GradBuffer::I32(v) => v.len(),
            GradBuffer::I64(v) => v.len(),
        }
    }

    /// Whether it has no elements (a reducer rejects such a buffer).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The elements, if they are `T`s.
    pub fn as_slice<T: Element>(&self) -> Option<&[T]> {
        T::view(self)
    }

    /// The elements, mutably, if they are `T`s.
    pub fn as_mut_slice<T: Element>(&mut self) -> Option<&mut [T]> {
        T::view_mut(self)
    }

    /// The vector, if it holds `T`s; else the buffer itself back.
    pub fn into_vec<T: Element>(self) -> std::result::Result<Vec<T>, GradBuffer> {
        T::unwrap(self)
    }

    pub(crate) fn as_mut_ptr(&mut self) -> *mut c_void {
        match self {
            GradBuffer::F32(v) => v.as_mut_ptr() as *mut c_void,
            GradBuffer::F64(v) => v.as_mut_ptr() as *mut c_void,
            GradBuffer::I32(v) => v.as_mut_ptr() as *mut c_void,
            GradBuffer::I64(v) => v.as_mut_ptr() as *mut c_void,
        }
    }
}

impl<T: Element> From<Vec<T>> for GradBuffer {
    fn from(values: Vec<T>) -> GradBuffer {
        T::wrap(values)
    }
}

/// Mutable access to the elements of one of a reducer's buffers (from
/// [`Reducer::buffers_mut`]). It lends the elements only: the vector itself
/// cannot be replaced or resized, so the reducer's pointer into it stays
/// valid.
pub struct GradBufferMut<'a> {
    pub(crate) buffer: &'a mut GradBuffer,
}

impl<'a> GradBufferMut<'a> {
    /// The element type.
    pub fn dtype(&self) -> DType {
        self.buffer.dtype()
    }

    /// The number of elements.
    pub fn len(&self) -> usize {
        self.buffer.len()
    }

    /// Always false: a reducer has no empty buffers.
    pub fn is_empty(&self) -> bool {
        self.buffer.is_empty()
    }

    /// The elements, if they are `T`s.
    pub fn as_slice<T: Element>(&self) -> Option<&[T]> {
        self.buffer.as_slice()
    }

    /// The elements, mutably, if they are `T`s.
    pub fn as_mut_slice<T: Element>(&mut self) -> Option<&mut [T]> {
        self.buffer.as_mut_slice()
    }

    /// The elements for the whole borrow of the reducer, if they are `T`s.
    pub fn into_slice<T: Element>(self) -> Option<&'a mut [T]> {
        T::view_mut(self.buffer)
    }
}

impl fmt::Debug for GradBufferMut<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GradBufferMut")
            .field("dtype", &self.dtype())
            .field("len", &self.len())
            .finish()
    }
}
