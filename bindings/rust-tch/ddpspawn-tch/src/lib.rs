//! DistributedDataParallel for tch-rs models: the gradients of a `VarStore`
//! averaged across the ranks of a [`ddpspawn::Context`] by ddpspawn's
//! gradient reducer, in place (the reducer reads and writes the gradients'
//! own memory through DLPack, shapes included, so the `"powersgd"` hook
//! compresses matrices).
//!
//! ```no_run
//! use ddpspawn::{Context, ReducerBuilder};
//! use ddpspawn_tch::DistributedDataParallel;
//! use tch::nn::{self, Module, OptimizerConfig};
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let ctx = Context::from_env()?;
//! let vs = nn::VarStore::new(tch::Device::Cpu);
//! let net = nn::linear(vs.root() / "fc", 64, 10, Default::default());
//! let mut ddp = DistributedDataParallel::new(&ctx, &vs, &ReducerBuilder::new())?;
//! let mut opt = nn::Sgd::default().build(&vs, 0.1)?;
//! # let (x, y) = (tch::Tensor::zeros([8, 64], tch::kind::FLOAT_CPU), tch::Tensor::zeros([8], tch::kind::INT64_CPU));
//! ddp.zero_grad(); // in place: the reducer holds the gradient tensors
//! net.forward(&x).cross_entropy_for_logits(&y).backward();
//! ddp.sync_gradients()?; // every gradient: the mean over the ranks
//! opt.step();
//! # Ok(())
//! # }
//! ```
//!
//! tch has no gradient hooks, so the buckets are reduced after `backward()`
//! returns (one after another, overlapping with each other), not during it.
//!
//! [`Fabric`] puts Lightning Fabric's verbs (`launch`, `setup`, `backward`,
//! `no_backward_sync`, `clip_gradients`, the collectives) over these pieces.

use ddpspawn::{
    Context, Device, Error, ReducerBuilder, Result, TensorReducer, TensorRef, TensorType,
};
use tch::nn::VarStore;
use tch::{Kind, Tensor};

mod fabric;
pub use fabric::Fabric;

/// The gradients of a `VarStore`'s trainable variables, averaged over the
/// ranks after each backward pass ([`sync_gradients`](Self::sync_gradients)).
///
/// On creation, rank 0's variables (trainable or not) are broadcast to every
/// rank, and every trainable variable gets a gradient tensor (zeros) that the
/// reducer holds for its life. Zero them with
/// [`zero_grad`](Self::zero_grad), in place. tch's `Optimizer::zero_grad`
/// sets them to undefined (LibTorch's `set_to_none`): that works too, at the
/// cost of copying each new gradient into the held one and the mean back.
/// Every rank builds the same model, in the same order, and uses every
/// trainable variable in each backward pass. Thread safety: use it on the
/// thread that uses the context; it borrows the context for its life.
pub struct DistributedDataParallel<'ctx> {
    // Declared first: dropped before the gradients it points into.
    reducer: TensorReducer<'ctx>,
    names: Vec<String>,
    variables: Vec<Tensor>,
    // The gradients the reducer holds (handles that keep them alive).
    held: Vec<Tensor>,
    copied: usize,
}

fn tensor_type(kind: Kind) -> Result<TensorType> {
    Ok(match kind {
        Kind::Half => TensorType::Float16,
        Kind::BFloat16 => TensorType::BFloat16,
        Kind::Float => TensorType::Float32,
        Kind::Double => TensorType::Float64,
        Kind::Int8 => TensorType::Int8,
        Kind::Uint8 => TensorType::UInt8,
        Kind::Int16 => TensorType::Int16,
        Kind::Int => TensorType::Int32,
        Kind::Int64 => TensorType::Int64,
        Kind::Bool => TensorType::Bool,
        other => {
            return Err(Error::InvalidArgument {
                message: format!("tensors of kind {other:?} have no DLPack type here"),
            })
        }
    })
}

/// `tensor`'s memory as a [`TensorRef`] for the `ddpspawn` crate's calls on
/// tensors (collectives, checkpoints), `name` naming it in errors: a
/// contiguous CPU or CUDA tensor of a kind DLPack has. The tensor must stay
/// alive and in place while the result is used, and the calls write into
/// its memory (also when the tensor requires grad).
pub fn tensor_ref(name: &str, tensor: &Tensor) -> Result<TensorRef> {
    if !tensor.is_contiguous() {
        return Err(Error::InvalidArgument {
            message: format!("{name} is not contiguous"),
        });
    }
    let device = match tensor.device() {
        tch::Device::Cpu => Device::Cpu,
        tch::Device::Cuda(index) => Device::Cuda(i32::try_from(index).unwrap_or(i32::MAX)),
        other => {
            return Err(Error::InvalidArgument {
                message: format!("{name} is on {other:?}: only CPU and CUDA tensors"),
            })
        }
    };
    // SAFETY: a contiguous tensor of this shape and kind at this address,
    // which the caller keeps alive and in place.
    Ok(unsafe {
        TensorRef::new(
            tensor.data_ptr(),
            &tensor.size(),
            tensor_type(tensor.kind())?,
            device,
        )
    })
}

impl<'ctx> DistributedDataParallel<'ctx> {
    /// Broadcasts rank 0's variables, gives every trainable variable a
    /// gradient, and builds the reducer over the gradients with `options`.
    pub fn new(context: &'ctx Context, vs: &VarStore, options: &ReducerBuilder) -> Result<Self> {
        // Every variable, by name (the same order on every rank).
        let mut all: Vec<(String, Tensor)> = vs.variables().into_iter().collect();
        all.sort_by(|a, b| a.0.cmp(&b.0));
        tch::no_grad(|| -> Result<()> {
            for (name, tensor) in &all {
                context.broadcast_tensor(&tensor_ref(name, tensor)?, 0)?;
            }
            Ok(())
        })?;
        // The trainable ones in creation order, whose reverse is roughly the
        // order backward finishes them (the reducer's buckets run reversed).
        let variables = vs.trainable_variables();
        let names: Vec<String> = variables
            .iter()
            .map(|v| {
                all.iter()
                    .find(|(_, t)| t.data_ptr() == v.data_ptr())
                    .map_or_else(|| "a variable".to_string(), |(n, _)| n.clone())
            })
            .collect();
        if variables.is_empty() {
            return Err(Error::InvalidArgument {
                message: "the VarStore has no trainable variable".to_string(),
            });
        }
        // A backward pass of zero: every variable gets a zero gradient.
        if variables.iter().any(|v| !v.grad().defined()) {
            let zero: Tensor = variables.iter().map(|v| v.sum(v.kind()) * 0.0).fold(
                Tensor::zeros([], (Kind::Float, variables[0].device())),
                |a, b| a + b,
            );
            zero.backward();
        }
        let held: Vec<Tensor> = variables.iter().map(Tensor::grad).collect();
        let tensors = names
            .iter()
            .zip(&held)
            .map(|(name, gradient)| tensor_ref(&format!("the gradient of {name}"), gradient))
            .collect::<Result<Vec<_>>>()?;
        Ok(DistributedDataParallel {
            reducer: options.build_tensors(context, tensors)?,
            names,
            variables,
            held,
            copied: 0,
        })
    }

    /// Zeros every gradient in place (use it in place of the optimizer's
    /// `zero_grad`, which drops them).
    pub fn zero_grad(&mut self) {
        for variable in &mut self.variables {
            variable.zero_grad();
        }
    }

    /// After `backward()`: averages every gradient over the ranks, in place
    /// (under no_sync, does nothing). A variable without a gradient (not
    /// used in this backward pass, after tch's `zero_grad`) is
    /// [`Error::FailedPrecondition`] naming it, before anything is
    /// communicated; after [`zero_grad`](Self::zero_grad) an unused
    /// variable's gradient stays zeros and counts as such in the mean.
    pub fn sync_gradients(&mut self) -> Result<()> {
        // Gradients that LibTorch allocated anew since zero_grad(set_to_none).
        let mut replaced = Vec::new();
        for (index, (name, variable)) in self.names.iter().zip(&self.variables).enumerate() {
            let gradient = variable.grad();
            if !gradient.defined() {
                return Err(Error::FailedPrecondition {
                    message: format!(
                        "{name} has no gradient: every trainable variable must take part in \
                         each backward pass"
                    ),
                });
            }
            if gradient.data_ptr() != self.held[index].data_ptr() {
                self.held[index].copy_(&gradient);
                replaced.push((index, gradient));
            }
        }
        for index in (0..self.variables.len()).rev() {
            self.reducer.mark_ready(index)?;
        }
        self.reducer.finalize()?;
        self.copied = replaced.len();
        for (index, mut gradient) in replaced {
            gradient.copy_(&self.held[index]);
        }
        Ok(())
    }

    /// `false` is no_sync: backward passes accumulate gradients locally and
    /// `sync_gradients` does nothing until `set_sync(true)`; the next sync
    /// averages what accumulated.
    pub fn set_sync(&mut self, enabled: bool) -> Result<()> {
        self.reducer.set_sync(enabled)
    }

    /// The reducer (bucket count, PowerSGD's compression).
    pub fn reducer(&self) -> &TensorReducer<'ctx> {
        &self.reducer
    }

    /// How many gradients the last `sync_gradients` had to copy in and out
    /// (0 after [`zero_grad`](Self::zero_grad): the reducer worked on the
    /// gradients themselves).
    pub fn copied(&self) -> usize {
        self.copied
    }

    /// The trainable variables' names, in the reducer's order.
    pub fn names(&self) -> &[String] {
        &self.names
    }
}
