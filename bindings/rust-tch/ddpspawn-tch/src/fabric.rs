// `Fabric`: Lightning Fabric's verbs for a tch-rs loop of one's own (launch,
// setup, the sampler, backward, no_backward_sync, gradient clipping, the
// collectives, save and load, log, seeding), over the `ddpspawn` crate's
// launcher, context, sampler, checkpoints, metrics and the reducer of
// `DistributedDataParallel`.
// It adds no mechanism: each verb is one of those calls (gradient clipping is
// the library's too), or tch's own tensor operations.

use std::any::Any;
use std::fmt::Display;
use std::panic::{self, AssertUnwindSafe};
use std::path::{Path, PathBuf};

use ddpspawn::{
    Context, DistributedSampler, Error, Launcher, ReduceOp, ReducerBuilder, Result, TensorRef,
};
use tch::nn::VarStore;
use tch::Tensor;

use crate::{tensor_ref, DistributedDataParallel};

/// A data-parallel loop of one's own, as Lightning's `Fabric` runs one: build
/// it with the number of ranks, [`launch`](Self::launch) the loop, and in the
/// loop [`setup`](Self::setup) the model, take this rank's share of each
/// epoch ([`epoch_indices`](Self::epoch_indices)) and call
/// [`backward`](Self::backward) in place of `loss.backward()`.
///
/// ```no_run
/// use ddpspawn_tch::Fabric;
/// use tch::nn::{self, Module, OptimizerConfig};
/// fn train(fabric: &Fabric) -> Result<String, Box<dyn std::error::Error>> {
///     let vs = nn::VarStore::new(tch::Device::Cpu);
///     let net = nn::linear(vs.root() / "fc", 4, 1, Default::default());
///     let mut model = fabric.setup(&vs)?; // rank 0's weights on every rank
///     let mut opt = nn::Sgd::default().build(&vs, 0.1)?;
///     let (x, y) = (tch::Tensor::randn([64, 4], tch::kind::FLOAT_CPU), tch::Tensor::zeros([64, 1], tch::kind::FLOAT_CPU));
///     for epoch in 0..3 {
///         let order = fabric.epoch_indices(64, epoch)?; // this rank's share
///         for rows in order.split(8, 0) {
///             opt.zero_grad();
///             let loss = net.forward(&x.index_select(0, &rows)).mse_loss(&y.index_select(0, &rows), tch::Reduction::Mean);
///             fabric.backward(&mut model, &loss)?; // the mean gradient of every rank
///             opt.step();
///         }
///     }
///     Ok(format!("{}", fabric.world_size()))
/// }
/// # fn main() -> Result<(), ddpspawn::Error> {
/// println!("{}", Fabric::new(2).launch(train)?); // rank 0's result
/// # Ok(())
/// # }
/// ```
///
/// CPU ranks only, for now (Gloo). Thread safety: a rank's `Fabric` is used
/// on the thread that runs the loop.
pub struct Fabric {
    launcher: Launcher,
    // Where log() writes metrics.csv; None until log_dir().
    log_dir: Option<PathBuf>,
    // Set in a rank, inside launch(); None before.
    context: Option<Context>,
}

/// A panic's message, for the launcher's report.
fn panic_text(payload: &(dyn Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".to_string())
}

/// `vs`'s variables by name, sorted, each with the tensor (which keeps its
/// memory alive) and the reference the library reads and writes.
fn named_variables(vs: &VarStore) -> Result<Vec<(String, Tensor, TensorRef)>> {
    let mut variables: Vec<(String, Tensor)> = vs.variables().into_iter().collect();
    variables.sort_by(|a, b| a.0.cmp(&b.0));
    variables
        .into_iter()
        .map(|(name, tensor)| {
            let reference = tensor_ref(&name, &tensor)?;
            Ok((name, tensor, reference))
        })
        .collect()
}

fn torch_error(what: &str, error: tch::TchError) -> Error {
    Error::InvalidArgument {
        message: format!("{what}: {error}"),
    }
}

/// `model`'s variables that have a gradient: the name, the gradient (which
/// keeps its memory alive) and the reference the library writes.
fn defined_gradients(
    model: &DistributedDataParallel<'_>,
) -> Result<Vec<(String, Tensor, TensorRef)>> {
    let mut gradients = Vec::new();
    for (name, variable) in model.names.iter().zip(&model.variables) {
        let gradient = variable.grad();
        if gradient.defined() {
            let reference = tensor_ref(&format!("the gradient of {name}"), &gradient)?;
            gradients.push((name.clone(), gradient, reference));
        }
    }
    Ok(gradients)
}

impl Fabric {
    /// `devices` CPU ranks on this machine, spawned from the current
    /// executable.
    pub fn new(devices: usize) -> Fabric {
        Fabric::with_launcher(Launcher::new(devices))
    }

    /// Ranks as `launcher` starts them (its timeout, nodes, rendezvous,
    /// restarts, environment).
    pub fn with_launcher(launcher: Launcher) -> Fabric {
        Fabric {
            launcher,
            log_dir: None,
            context: None,
        }
    }

    /// The directory [`log`](Self::log) writes `metrics.csv` to (made where
    /// missing).
    pub fn log_dir(mut self, dir: impl Into<PathBuf>) -> Fabric {
        self.log_dir = Some(dir.into());
        self
    }

    /// Runs `train` on every rank and returns rank 0's result in the
    /// launching process. The ranks rerun this executable with the same
    /// arguments; in a rank, `launch` runs `train` and ends the process (its
    /// exit code 0, or 1 after handing the error, or the panic's message, to
    /// the launcher), so it never returns there: what `main` does after it
    /// happens once. A rank that fails or dies fails the job, naming the
    /// rank and the cause. In a process that is already one rank of a job
    /// of several (torchrun's or srun's variables, or `MASTER_ADDR`, `RANK`
    /// and `WORLD_SIZE`) it joins that job and runs `train` here, returning
    /// this rank's result (an error of `train` as [`Error::Internal`] with
    /// its message).
    pub fn launch<F, E>(self, train: F) -> Result<String>
    where
        F: FnOnce(&Fabric) -> std::result::Result<String, E>,
        E: Display,
    {
        if ddpspawn::is_worker() {
            let code = match self.run_rank(train) {
                Ok(()) => 0,
                Err(text) => {
                    let _ = ddpspawn::set_error(&text.replace('\0', " "));
                    1
                }
            };
            std::process::exit(code);
        }
        // Already one rank of a job of several (torchrun's, srun's, or MASTER_ADDR, RANK and
        // WORLD_SIZE: the library's environment detection)? Then run as that rank, here.
        let joined = Context::from_env()?;
        if joined.world_size() > 1 {
            let mut rank = self;
            rank.context = Some(joined);
            return train(&rank).map_err(|error| Error::Internal {
                message: format!("the Fabric loop failed: {error}"),
            });
        }
        drop(joined);
        let report = self
            .launcher
            .spawn_current_exe(std::env::args_os().skip(1))?;
        let result = report.result().unwrap_or_default();
        String::from_utf8(result.to_vec()).map_err(|_| Error::InvalidArgument {
            message: "rank 0's result is not UTF-8".to_string(),
        })
    }

    /// In a rank: joins the group, runs `train`, hands rank 0's result back,
    /// and leaves the group (the context's drop).
    fn run_rank<F, E>(mut self, train: F) -> std::result::Result<(), String>
    where
        F: FnOnce(&Fabric) -> std::result::Result<String, E>,
        E: Display,
    {
        self.context = Some(Context::from_env().map_err(|e| e.to_string())?);
        let outcome = panic::catch_unwind(AssertUnwindSafe(|| train(&self)));
        let result = match outcome {
            Ok(Ok(result)) => result,
            Ok(Err(error)) => return Err(error.to_string()),
            Err(payload) => return Err(format!("panicked: {}", panic_text(payload.as_ref()))),
        };
        if self.is_global_zero() {
            ddpspawn::set_result(result.as_bytes()).map_err(|e| e.to_string())?;
        }
        Ok(())
    }

    /// The rank's context; outside a rank, an error naming the verb.
    fn context(&self, verb: &str) -> Result<&Context> {
        self.context
            .as_ref()
            .ok_or_else(|| Error::FailedPrecondition {
                message: format!(
                    "Fabric::{verb} is for a rank's function: call it inside launch()"
                ),
            })
    }

    /// This rank's context (the collectives, the straggler report); `None`
    /// outside a rank.
    pub fn rank_context(&self) -> Option<&Context> {
        self.context.as_ref()
    }

    /// This rank among all (0 outside a rank).
    pub fn global_rank(&self) -> usize {
        self.context.as_ref().map_or(0, Context::rank)
    }

    /// This rank on its node (0 outside a rank).
    pub fn local_rank(&self) -> usize {
        self.context.as_ref().map_or(0, Context::local_rank)
    }

    /// This rank's node (0 outside a rank).
    pub fn node_rank(&self) -> usize {
        self.context.as_ref().map_or(0, Context::node_rank)
    }

    /// The number of ranks (1 outside a rank).
    pub fn world_size(&self) -> usize {
        self.context.as_ref().map_or(1, Context::world_size)
    }

    /// Whether this is rank 0 (true outside a rank).
    pub fn is_global_zero(&self) -> bool {
        self.global_rank() == 0
    }

    /// The device this rank's tensors live on: the CPU.
    pub fn device(&self) -> tch::Device {
        tch::Device::Cpu
    }

    /// Gives every rank rank 0's variables and averages the trainable ones'
    /// gradients from then on ([`DistributedDataParallel::new`] with the
    /// default options).
    pub fn setup<'a>(&'a self, vs: &VarStore) -> Result<DistributedDataParallel<'a>> {
        self.setup_with(vs, &ReducerBuilder::new())
    }

    /// As [`setup`](Self::setup), with the reducer's options (bucket size,
    /// comm hook).
    pub fn setup_with<'a>(
        &'a self,
        vs: &VarStore,
        options: &ReducerBuilder,
    ) -> Result<DistributedDataParallel<'a>> {
        let context = self.context("setup")?;
        if vs.device() != self.device() {
            return Err(Error::InvalidArgument {
                message: format!(
                    "Fabric::setup: the VarStore is on {:?}; this rank's device is {:?}",
                    vs.device(),
                    self.device()
                ),
            });
        }
        DistributedDataParallel::new(context, vs, options)
    }

    /// A sampler of a dataset of `dataset_size` samples for this rank, as
    /// PyTorch's `DistributedSampler` (shuffled with seed 0, padded); its
    /// builder methods change that.
    pub fn sampler(&self, dataset_size: usize) -> Result<DistributedSampler> {
        Ok(DistributedSampler::for_context(
            self.context("sampler")?,
            dataset_size,
        ))
    }

    /// This rank's indices of a dataset of `dataset_size` samples in
    /// `epoch`, as PyTorch's `DistributedSampler` deals them (shuffled anew
    /// each epoch with seed 0, padded so that every rank gets as many): an
    /// `Int64` tensor for `index_select`.
    pub fn epoch_indices(&self, dataset_size: usize, epoch: usize) -> Result<Tensor> {
        let mut sampler = self.sampler(dataset_size)?;
        sampler.set_epoch(epoch);
        let indices: Vec<i64> = sampler.indices()?.into_iter().map(|i| i as i64).collect();
        Ok(Tensor::from_slice(&indices))
    }

    /// `loss.backward()`, then the gradients' mean over the ranks (nothing
    /// is communicated inside [`no_backward_sync`](Self::no_backward_sync)).
    pub fn backward(&self, model: &mut DistributedDataParallel<'_>, loss: &Tensor) -> Result<()> {
        self.context("backward")?;
        loss.f_backward()
            .map_err(|e| torch_error("Fabric::backward", e))?;
        model.sync_gradients()
    }

    /// Runs `body` with `model`'s gradient synchronization off when
    /// `enabled`: its backward passes accumulate locally, and the first
    /// [`backward`](Self::backward) after it averages what accumulated.
    /// Every rank must skip alike: among one launcher's ranks, ranks that
    /// do not fail at the next synchronized backward, naming each rank's
    /// backward passes.
    pub fn no_backward_sync<'m, R>(
        &self,
        model: &mut DistributedDataParallel<'m>,
        enabled: bool,
        body: impl FnOnce(&mut DistributedDataParallel<'m>) -> R,
    ) -> Result<R> {
        self.context("no_backward_sync")?;
        if !enabled {
            return Ok(body(model));
        }
        model.set_sync(false)?;
        let result = body(model);
        model.set_sync(true)?;
        Ok(result)
    }

    /// Scales the gradients so that their `norm_type` norm is at most
    /// `max_norm`, with the library's clipping (LibTorch's `clip_grad_norm_`
    /// kernels, C++'s `ClipGradients`); returns the norm before clipping. A non-finite norm is an error naming the variable whose
    /// gradient holds a NaN or an infinity, and nothing is clipped.
    pub fn clip_gradients(
        &self,
        model: &DistributedDataParallel<'_>,
        max_norm: f64,
        norm_type: f64,
    ) -> Result<f64> {
        self.context("clip_gradients")?;
        let gradients = defined_gradients(model)?;
        let named: Vec<(&str, &TensorRef)> =
            gradients.iter().map(|(n, _, r)| (n.as_str(), r)).collect();
        ddpspawn::clip_grad_norm(&named, max_norm, norm_type)
    }

    /// Clamps every gradient's values to `[-clip_value, clip_value]`.
    pub fn clip_gradient_values(
        &self,
        model: &DistributedDataParallel<'_>,
        clip_value: f64,
    ) -> Result<()> {
        self.context("clip_gradient_values")?;
        let gradients = defined_gradients(model)?;
        let refs: Vec<&TensorRef> = gradients.iter().map(|(_, _, r)| r).collect();
        ddpspawn::clip_grad_value(&refs, clip_value)
    }

    /// `op` over every rank's `tensor` (Lightning's default is
    /// [`ReduceOp::Mean`]); `tensor` is not changed.
    pub fn all_reduce(&self, tensor: &Tensor, op: ReduceOp) -> Result<Tensor> {
        let context = self.context("all_reduce")?;
        let reduced = tensor.detach().contiguous().copy();
        context.all_reduce_tensor(&tensor_ref("the tensor", &reduced)?, op)?;
        Ok(reduced)
    }

    /// Every rank's `tensor`, stacked in rank order: shape
    /// `[world_size, *tensor's shape]`.
    pub fn all_gather(&self, tensor: &Tensor) -> Result<Tensor> {
        let context = self.context("all_gather")?;
        let input = tensor.detach().contiguous();
        let mut shape = vec![self.world_size() as i64];
        shape.extend(input.size());
        let output = Tensor::empty(shape.as_slice(), (input.kind(), input.device()));
        context.all_gather_tensor(
            &tensor_ref("the tensor", &input)?,
            &tensor_ref("the gathered tensor", &output)?,
        )?;
        Ok(output)
    }

    /// Rank `src`'s `tensor` on every rank (every rank passes one of the same
    /// shape and kind); `tensor` is not changed.
    pub fn broadcast(&self, tensor: &Tensor, src: usize) -> Result<Tensor> {
        let context = self.context("broadcast")?;
        let copy = tensor.detach().contiguous().copy();
        context.broadcast_tensor(&tensor_ref("the tensor", &copy)?, src)?;
        Ok(copy)
    }

    /// Rank `src`'s bytes on every rank (the others' may differ in length).
    pub fn broadcast_bytes(&self, data: &[u8], src: usize) -> Result<Vec<u8>> {
        self.context("broadcast_bytes")?.broadcast_bytes(data, src)
    }

    /// Waits until every rank has reached the barrier of this `name`.
    pub fn barrier(&self, name: &str) -> Result<()> {
        self.context("barrier")?.barrier(name)
    }

    /// Collective: rank 0 writes `vs`'s variables (by their names, e.g.
    /// `fc.weight`) and `step` to `path` as a checkpoint in the Trainer's
    /// format (what `ddpspawn export`, the CLI's `--checkpoint` and C++'s
    /// `Fabric::Load` read), atomically; every rank returns rank 0's
    /// outcome. No optimizer state (tch's optimizers do not expose theirs),
    /// so `ddpspawn fit --resume-from` refuses it.
    pub fn save(&self, path: impl AsRef<Path>, vs: &VarStore, step: i64) -> Result<()> {
        let context = self.context("save")?;
        let variables = named_variables(vs)?;
        let refs: Vec<(&str, &TensorRef)> =
            variables.iter().map(|(n, _, r)| (n.as_str(), r)).collect();
        context.save_checkpoint(path, &refs, step)
    }

    /// Reads the checkpoint at `path` (this rank alone) into `vs`'s
    /// variables in place, each from its name's entry: [`save`](Self::save)'s,
    /// C++'s `Fabric::Save`'s or the Trainer's. A variable the checkpoint
    /// lacks, or of another shape or kind, is an error naming it, and then no
    /// variable has changed. Returns the checkpoint's step.
    pub fn load(&self, path: impl AsRef<Path>, vs: &VarStore) -> Result<i64> {
        self.context("load")?;
        let variables = named_variables(vs)?;
        let refs: Vec<(&str, &TensorRef)> =
            variables.iter().map(|(n, _, r)| (n.as_str(), r)).collect();
        ddpspawn::load_checkpoint(path, &refs)
    }

    /// Lightning's `log`: rank 0 appends `name`'s `value` at `step` (and
    /// `epoch`) to the [`log_dir`](Self::log_dir)'s `metrics.csv`, the
    /// Trainer's CSV logger's file; the other ranks write nothing.
    pub fn log(&self, name: &str, value: f64, step: i64, epoch: i64) -> Result<()> {
        self.log_dict(&[(name, value)], step, epoch)
    }

    /// Lightning's `log_dict`: [`log`](Self::log) for several values.
    pub fn log_dict(&self, values: &[(&str, f64)], step: i64, epoch: i64) -> Result<()> {
        let context = self.context("log")?;
        let dir = self
            .log_dir
            .as_ref()
            .ok_or_else(|| Error::FailedPrecondition {
                message: "Fabric::log needs Fabric::log_dir, the directory of metrics.csv"
                    .to_string(),
            })?;
        context.log_metrics(dir, epoch, step, values)
    }

    /// Seeds torch's generators on this rank (`tch::manual_seed`).
    pub fn seed_everything(&self, seed: i64) {
        tch::manual_seed(seed);
    }

    /// Prints `text` once, from rank 0.
    pub fn print(&self, text: &str) {
        if self.is_global_zero() {
            println!("{text}");
        }
    }
}
