// Element types and reduce operations for the typed collectives: the sealed
// `Element` trait maps f32/f64/i32/i64 to the C dtype constants.

use ddpspawn_sys as sys;

/// The element types a collective buffer can hold (`DDPSPAWN_FLOAT32` ...).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DType {
    Float32,
    Float64,
    Int32,
    Int64,
}

impl DType {
    /// The C constant.
    pub fn to_raw(self) -> i32 {
        match self {
            DType::Float32 => sys::DDPSPAWN_FLOAT32,
            DType::Float64 => sys::DDPSPAWN_FLOAT64,
            DType::Int32 => sys::DDPSPAWN_INT32,
            DType::Int64 => sys::DDPSPAWN_INT64,
        }
    }

    /// The type of a C constant; `None` for an unknown one.
    pub(crate) fn from_raw(raw: i32) -> Option<DType> {
        [DType::Float32, DType::Float64, DType::Int32, DType::Int64]
            .into_iter()
            .find(|d| d.to_raw() == raw)
    }

    /// The size of one element, in bytes.
    pub fn size(self) -> usize {
        match self {
            DType::Float32 | DType::Int32 => 4,
            DType::Float64 | DType::Int64 => 8,
        }
    }
}

mod sealed {
    use crate::grad_buffer::GradBuffer;

    /// Seals [`Element`](super::Element), and moves values of the element
    /// type in and out of a [`GradBuffer`] (crate-internal: the trait is
    /// unreachable from outside).
    pub trait Sealed: Sized {
        fn wrap(values: Vec<Self>) -> GradBuffer;
        fn view(buffer: &GradBuffer) -> Option<&[Self]>;
        fn view_mut(buffer: &mut GradBuffer) -> Option<&mut [Self]>;
        fn unwrap(buffer: GradBuffer) -> Result<Vec<Self>, GradBuffer>;
    }

    macro_rules! sealed {
        ($t:ty, $variant:ident) => {
            impl Sealed for $t {
                fn wrap(values: Vec<Self>) -> GradBuffer {
                    GradBuffer::$variant(values)
                }
                fn view(buffer: &GradBuffer) -> Option<&[Self]> {
                    match buffer {
                        GradBuffer::$variant(v) => Some(v),
                        _ => None,
                    }
                }
                fn view_mut(buffer: &mut GradBuffer) -> Option<&mut [Self]> {
                    match buffer {
                        GradBuffer::$variant(v) => Some(v),
                        _ => None,
                    }
                }
                fn unwrap(buffer: GradBuffer) -> Result<Vec<Self>, GradBuffer> {
                    match buffer {
                        GradBuffer::$variant(v) => Ok(v),
                        other => Err(other),
                    }
                }
            }
        };
    }
    sealed!(f32, F32);
    sealed!(f64, F64);
    sealed!(i32, I32);
    sealed!(i64, I64);
}

/// A type whose slices can go through [`Context`](crate::Context)
/// collectives and whose vectors can be [`Reducer`](crate::Reducer) buffers:
/// `f32`, `f64`, `i32` or `i64`. Sealed: the library knows only these.
pub trait Element: sealed::Sealed + Copy + Default + Send + Sync + 'static {
    /// The matching C dtype.
    const DTYPE: DType;
}

impl Element for f32 {
    const DTYPE: DType = DType::Float32;
}
impl Element for f64 {
    const DTYPE: DType = DType::Float64;
}
impl Element for i32 {
    const DTYPE: DType = DType::Int32;
}
impl Element for i64 {
    const DTYPE: DType = DType::Int64;
}

/// How [`Context::all_reduce`](crate::Context::all_reduce) and
/// [`Context::reduce`](crate::Context::reduce) combine the ranks' values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ReduceOp {
    Sum,
    /// Sum divided by the world size; integers truncate toward 0.
    Mean,
    Min,
    Max,
    Product,
}

impl ReduceOp {
    /// The C constant (`DDPSPAWN_SUM` ...).
    pub fn to_raw(self) -> i32 {
        match self {
            ReduceOp::Sum => sys::DDPSPAWN_SUM,
            ReduceOp::Mean => sys::DDPSPAWN_MEAN,
            ReduceOp::Min => sys::DDPSPAWN_MIN,
            ReduceOp::Max => sys::DDPSPAWN_MAX,
            ReduceOp::Product => sys::DDPSPAWN_PRODUCT,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn constants_match_header() {
        assert_eq!(<f32 as Element>::DTYPE.to_raw(), 0);
        assert_eq!(<f64 as Element>::DTYPE.to_raw(), 1);
        assert_eq!(<i32 as Element>::DTYPE.to_raw(), 2);
        assert_eq!(<i64 as Element>::DTYPE.to_raw(), 3);
        let ops = [
            ReduceOp::Sum,
            ReduceOp::Mean,
            ReduceOp::Min,
            ReduceOp::Max,
            ReduceOp::Product,
        ];
        for (i, op) in ops.iter().enumerate() {
            assert_eq!(op.to_raw(), i as i32);
        }
    }
}
