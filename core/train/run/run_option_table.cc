// The table of every run option (see run_option_table.h): its key, help section, value, help text
// and how it reads into a RunConfig.
#include "core/train/run/run_option_table.h"

#include <c10/core/Device.h>
#include <signal.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "core/comm/process_group.h"
#include "core/ddp/comm_hooks.h"
#include "core/ddp/post_local_sgd.h"
#include "core/launch/launcher.h"
#include "core/strategy/precision.h"
#include "core/train/callbacks/callback.h"
#include "core/train/loggers/logger_factory.h"
#include "core/train/loop/optimizer_factory.h"
#include "core/util/enum_names.h"
#include "core/util/status_macros.h"

namespace ddpspawn {
namespace {

using option_access::Batches;
using option_access::Choice;
using option_access::Expected;
using option_access::Flag;
using option_access::Integer;
using option_access::Number;
using option_access::OneOf;
using option_access::Text;

// Lightning's max_time: "DD:HH:MM:SS", or seconds.
absl::StatusOr<absl::Duration> ParseMaxTime(const std::string& v) {
  std::vector<std::string> parts = absl::StrSplit(v, ':');
  double seconds = 0;
  if (parts.size() == 4) {
    int64_t fields[4] = {};
    for (int i = 0; i < 4; ++i) {
      if (!absl::SimpleAtoi(parts[i], &fields[i]) || fields[i] < 0 || fields[i] > 100000) {
        return Expected("DD:HH:MM:SS or a number of seconds > 0");
      }
    }
    seconds = static_cast<double>(((fields[0] * 24 + fields[1]) * 60 + fields[2]) * 60 + fields[3]);
  } else if (parts.size() != 1 || !absl::SimpleAtod(v, &seconds) || !std::isfinite(seconds)) {
    return Expected("DD:HH:MM:SS or a number of seconds > 0");
  }
  if (!(seconds > 0)) return Expected("DD:HH:MM:SS or a number of seconds > 0");
  return absl::Seconds(seconds);
}

// The integer options' ranges. Counters (epochs, steps) and the seed take their field's whole
// non-negative range: they are only compared, incremented, or (the seed) added to modulo 2^64.
constexpr int64_t kIntMax = std::numeric_limits<int>::max();
constexpr int64_t kInt64Max = std::numeric_limits<int64_t>::max();
// A batch larger than a rank's shard is the whole shard; 2^31 - 1 samples is more than any shard
// held in memory, and keeps batch arithmetic far from overflow.
constexpr int64_t kMaxBatchSize = kIntMax;
// nnodes x nproc_per_node (at most 2^14 x 2^16 = 2^30) fits the int world size.
constexpr int64_t kMaxNodes = 16384;
constexpr int64_t kMaxPort = 65535;  // TCP; 0 picks a free port

// More restarts than anyone waits through; a bound keeps the count an int.
constexpr int64_t kMaxRestarts = 1000;

// `table`, in which each option with a fixed set of values shows them as its values: its enum's
// names (Choice) or its list (OneOf), never a second copy written beside them.
const std::vector<RunOption>* WithChoicesShown(std::vector<RunOption>* table) {
  for (RunOption& option : *table) {
    if (!option.access.choices.empty()) option.value = option.access.choices;
  }
  return table;
}

}  // namespace

// A data table (every option, one entry each), not logic: longer than a function may be.
// NOLINTNEXTLINE(readability-function-size)
const std::vector<RunOption>& RunOptionTable() {
  const std::string data = "Model and data", trainer = "Trainer", optimizer = "Optimizer",
                    callbacks =
                        "Callbacks (Lightning's EarlyStopping, ModelCheckpoint, "
                        "LearningRateMonitor)",
                    distributed = "Distributed (torchrun's names)";
  static const auto* table = WithChoicesShown(new std::vector<RunOption>{
      {"model", data, "SPEC",
       "mlp:IN,HIDDEN...,OUT (built in: several outputs classify, with integer labels; one "
       "output per label column regresses) or a TorchScript file whose exported "
       "training_step(self, batch: List[Tensor], batch_idx: int) returns the loss (see "
       "docs/training.md)",
       Text(&RunConfig::model)},
      {"train", data, "FILE",
       "training data: CSV (label in the last column) or .npy features; NaN, infinite or "
       "out-of-float32 values are errors",
       Text(&RunConfig::train)},
      {"train_labels", data, "FILE", "labels .npy, with .npy features",
       Text(&RunConfig::train_labels)},
      {"val", data, "FILE", "validation data (fit)", Text(&RunConfig::val)},
      {"val_labels", data, "FILE", "", Text(&RunConfig::val_labels)},
      {"data", data, "FILE", "data for validate, test and predict", Text(&RunConfig::data)},
      {"data_labels", data, "FILE", "", Text(&RunConfig::data_labels)},
      // Any int: the loader checks it against the file's columns.
      {"label_column", data, "N", "CSV column of the label (-1: the last)",
       Integer<-kIntMax - 1, kIntMax>(&RunConfig::label_column)},
      {"checkpoint", data, "FILE",
       "weights to start from (validate, test, predict): a ddpspawn checkpoint, a state dict "
       "torch.save wrote, or safetensors (see ddpspawn export --help)",
       Text(&RunConfig::checkpoint)},
      {"max_epochs", trainer, "N", "",
       Integer<0, kInt64Max>([](RunConfig& c) -> int64_t& { return c.trainer.max_epochs; })},
      {"max_steps", trainer, "N", "optimizer steps (-1: no limit)",
       Integer<-1, kInt64Max>([](RunConfig& c) -> int64_t& { return c.trainer.max_steps; })},
      {"batch_size", trainer, "N", "per rank",
       Integer<1, kMaxBatchSize>([](RunConfig& c) -> int64_t& { return c.trainer.batch_size; })},
      {"accumulate_grad_batches", trainer, "N", "",
       Integer<1, kIntMax>([](RunConfig& c) -> int& { return c.trainer.accumulate_grad_batches; })},
      {"gradient_clip_val", trainer, "X",
       "the gradients' largest global L2 norm, or largest element with --gradient-clip-algorithm "
       "value (0: off)",
       Number([](RunConfig& c) -> double& { return c.trainer.gradient_clip_val; }, 0)},
      {"gradient_clip_algorithm", trainer, "", "",
       Choice(
           [](RunConfig& c) -> GradientClipAlgorithm& { return c.trainer.gradient_clip_algorithm; },
           ParseGradientClipAlgorithm, GradientClipAlgorithmName)},
      {"check_val_every_n_epoch", trainer, "N", "",
       Integer<0, kIntMax>([](RunConfig& c) -> int& { return c.trainer.check_val_every_n_epoch; })},
      {"seed", trainer, "N", "",
       Integer<0, kInt64Max>([](RunConfig& c) -> uint64_t& { return c.trainer.seed; })},
      {"shuffle", trainer, "BOOL", "",
       Flag([](RunConfig& c) -> bool& { return c.trainer.shuffle; })},
      {"drop_last", trainer, "BOOL", "",
       Flag([](RunConfig& c) -> bool& { return c.trainer.drop_last; })},
      {"default_root_dir", trainer, "DIR", "metrics.csv, checkpoints/last.ckpt, predictions.csv",
       Text([](RunConfig& c) -> std::string& { return c.trainer.default_root_dir; })},
      {"resume_from", trainer, "FILE", "a checkpoint fit continues from",
       Text([](RunConfig& c) -> std::string& { return c.trainer.resume_from; })},
      {"num_threads", trainer, "N",
       absl::StrCat("intra-op threads per rank, at most ", kMaxNumThreads,
                    " (0: cores / local ranks)"),
       Integer<0, kMaxNumThreads>([](RunConfig& c) -> int& { return c.trainer.num_threads; })},
      {"log_every_n_steps", trainer, "N", "",
       Integer<0, kIntMax>([](RunConfig& c) -> int& { return c.trainer.log_every_n_steps; })},
      {"progress", trainer, "BOOL", "rank 0: a progress bar on a terminal, else a line per epoch",
       Flag([](RunConfig& c) -> bool& { return c.trainer.enable_progress; })},
      {"checkpoint_every_n_steps", trainer, "K",
       "fit also checkpoints every K steps (0: at each "
       "epoch's end only)",
       Integer<0, kInt64Max>(
           [](RunConfig& c) -> int64_t& { return c.trainer.checkpoint_every_n_steps; })},
      {"checkpoint_on_signal", trainer, "",
       "fit saves its checkpoint and stops on that signal (stopped_by=SIGUSR1); auto: SIGUSR1 in "
       "a SLURM job, where a requeued job (SLURM_RESTART_COUNT > 0) continues from that "
       "checkpoint",
       OneOf(&RunConfig::checkpoint_on_signal, {"auto", "none", "SIGUSR1", "SIGUSR2"})},
      {"max_time",
       trainer,
       "DD:HH:MM:SS|SECONDS",
       "as Lightning's, fit stops after the first optimizer step past it on any rank, saves its "
       "checkpoint (resumable mid-epoch) and succeeds (default: none)",
       {[](RunConfig& c, const std::string& v) -> absl::Status {
          ASSIGN_OR_RETURN(c.trainer.max_time, ParseMaxTime(v));
          return absl::OkStatus();
        },
        [](const RunConfig&) { return std::string(); }}},
      {"logger",
       trainer,
       "csv|tensorboard|csv,tensorboard",
       "where fit logs: metrics.csv and hparams.yaml (csv), TensorBoard's event files in "
       "tensorboard/ (tensorboard); the given options are the hyperparameters",
       {[](RunConfig& c, const std::string& v) -> absl::Status {
          absl::StatusOr<std::vector<std::string>> names = ParseLoggerNames(v);
          if (!names.ok()) return Expected("csv, tensorboard or csv,tensorboard");
          c.trainer.loggers = *std::move(names);
          return absl::OkStatus();
        },
        [](const RunConfig& c) { return absl::StrJoin(c.trainer.loggers, ","); }}},
      {"limit_train_batches", trainer, "N|FRACTION",
       "train on at most N batches of each epoch per rank, or that fraction of them (0.25); "
       "an integer is a count, a number with a point a fraction (1.0: all)",
       Batches([](RunConfig& c) -> BatchAmount& { return c.trainer.limit_train_batches; })},
      {"limit_val_batches", trainer, "N|FRACTION",
       "validate on at most N batches per rank, or that fraction (0: no validation)",
       Batches([](RunConfig& c) -> BatchAmount& { return c.trainer.limit_val_batches; })},
      {"limit_test_batches", trainer, "N|FRACTION", "test on at most N batches per rank",
       Batches([](RunConfig& c) -> BatchAmount& { return c.trainer.limit_test_batches; })},
      {"limit_predict_batches", trainer, "N|FRACTION",
       "predict at most N batches per rank: the dataset's first samples",
       Batches([](RunConfig& c) -> BatchAmount& { return c.trainer.limit_predict_batches; })},
      {"val_check_interval", trainer, "N|FRACTION",
       "validate after every N training batches of an epoch, or at that fraction of it "
       "(1.0: at its end)",
       Batches([](RunConfig& c) -> BatchAmount& { return c.trainer.val_check_interval; })},
      {"num_sanity_val_steps", trainer, "N",
       "validation batches per rank before the first epoch, not logged (-1: all)",
       Integer<-1, kInt64Max>(
           [](RunConfig& c) -> int64_t& { return c.trainer.num_sanity_val_steps; })},
      {"fast_dev_run",
       trainer,
       "N|BOOL",
       "N batches (true: 1) of training, validation, test and predict in one epoch, without "
       "sanity steps, checkpoint callbacks, early stopping or the rate monitor",
       {[](RunConfig& c, const std::string& v) -> absl::Status {
          if (absl::StatusOr<bool> flag = option_access::ParseBool(v); flag.ok()) {
            c.trainer.fast_dev_run = *flag ? 1 : 0;
            return absl::OkStatus();
          }
          int64_t n = 0;
          if (!absl::SimpleAtoi(v, &n) || n < 0) return Expected("true, false or a count >= 0");
          c.trainer.fast_dev_run = n;
          return absl::OkStatus();
        },
        [](const RunConfig& c) { return absl::StrCat(c.trainer.fast_dev_run); }}},
      {"overfit_batches", trainer, "N|FRACTION",
       "train and validate on the first N batches (or that fraction) of each rank's unshuffled "
       "shard of the training data (0: off)",
       Batches([](RunConfig& c) -> BatchAmount& { return c.trainer.overfit_batches; })},
      {"profiler", trainer, "",
       "simple: time per action on every rank, in profile.txt; pytorch: LibTorch's profiler, a "
       "Chrome trace per rank in profiler/",
       Choice([](RunConfig& c) -> ProfilerKind& { return c.trainer.profiler; }, ParseProfilerKind,
              ProfilerKindName)},
      {"deterministic", trainer, "BOOL",
       "LibTorch's deterministic algorithms on every rank; an op without one is an error",
       Flag([](RunConfig& c) -> bool& { return c.trainer.deterministic; })},
      {"allow_non_finite_loss", trainer, "BOOL",
       "false: a nan/inf training loss stops fit with an error, keeping the last good checkpoint",
       Flag([](RunConfig& c) -> bool& { return c.trainer.allow_non_finite_loss; })},
      {"early_stopping_monitor", callbacks, "METRIC",
       "stop fit when METRIC (e.g. val_loss) has not improved for --early-stopping-patience "
       "checks (one per epoch that logs it); empty: never",
       Text([](RunConfig& c) -> std::string& { return c.early_stopping.monitor; })},
      {"early_stopping_mode", callbacks, "", "auto: max for *accuracy, min for *loss, else set it",
       Choice([](RunConfig& c) -> MonitorMode& { return c.early_stopping.mode; }, ParseMonitorMode,
              MonitorModeName)},
      {"early_stopping_patience", callbacks, "N", "",
       Integer<0, kIntMax>([](RunConfig& c) -> int& { return c.early_stopping.patience; })},
      {"early_stopping_min_delta", callbacks, "X", "a smaller change is no improvement",
       Number([](RunConfig& c) -> double& { return c.early_stopping.min_delta; }, 0)},
      {"early_stopping_check_finite", callbacks, "BOOL", "stop at once when METRIC is nan or inf",
       Flag([](RunConfig& c) -> bool& { return c.early_stopping.check_finite; })},
      {"monitor", callbacks, "METRIC",
       "ModelCheckpoint: keep the --save-top-k best checkpoints by METRIC (e.g. val_accuracy) "
       "in checkpoints/, beside last.ckpt",
       Text([](RunConfig& c) -> std::string& { return c.model_checkpoint.monitor; })},
      {"mode", callbacks, "", "as --early-stopping-mode, for --monitor",
       Choice([](RunConfig& c) -> MonitorMode& { return c.model_checkpoint.mode; },
              ParseMonitorMode, MonitorModeName)},
      {"save_top_k", callbacks, "K",
       "-1: keep every checkpoint; without --monitor, 1 is last.ckpt alone",
       Integer<-1, kIntMax>([](RunConfig& c) -> int& { return c.model_checkpoint.save_top_k; })},
      {"every_n_epochs", callbacks, "N", "ModelCheckpoint checks every N epochs",
       Integer<0, kIntMax>([](RunConfig& c) -> int& { return c.model_checkpoint.every_n_epochs; })},
      {"every_n_train_steps", callbacks, "N",
       "ModelCheckpoint checks every N optimizer steps instead (0: at epoch ends)",
       Integer<0, kInt64Max>(
           [](RunConfig& c) -> int64_t& { return c.model_checkpoint.every_n_train_steps; })},
      {"checkpoint_filename", callbacks, "TEMPLATE",
       "Lightning's filename: {epoch}, {step}, {METRIC} or {METRIC:.4f}, each written name=value "
       "(default: {epoch}-{step}, and -{MONITOR:.4f} with --monitor)",
       Text([](RunConfig& c) -> std::string& { return c.model_checkpoint.filename; })},
      {"lr_monitor", callbacks, "",
       "log the learning rate as lr-SGD (lr-Adam, lr-AdamW) at each epoch's start or every "
       "--log-every-n-steps steps",
       Choice(&RunConfig::lr_monitor, ParseLoggingInterval, LoggingIntervalName)},
      {"optimizer", optimizer, "", "",
       Choice([](RunConfig& c) -> Optimizer& { return c.optimizer.optimizer; }, ParseOptimizer,
              OptimizerName)},
      {"lr", optimizer, "X", "",
       Number([](RunConfig& c) -> double& { return c.optimizer.lr; }, 1e-12)},
      {"momentum", optimizer, "X", "",
       Number([](RunConfig& c) -> double& { return c.optimizer.momentum; }, 0)},
      {"weight_decay", optimizer, "X", "",
       Number([](RunConfig& c) -> double& { return c.optimizer.weight_decay; }, 0)},
      {"betas",
       optimizer,
       "B1,B2",
       "adam and adamw (default: torch's 0.9,0.999)",
       {[](RunConfig& c, const std::string& v) -> absl::Status {
          std::vector<std::string> parts = absl::StrSplit(v, ',');
          double b1 = 0, b2 = 0;
          if (parts.size() != 2 || !absl::SimpleAtod(parts[0], &b1) ||
              !absl::SimpleAtod(parts[1], &b2) || !(b1 >= 0 && b1 < 1) || !(b2 >= 0 && b2 < 1)) {
            return Expected("two numbers in [0, 1), such as 0.9,0.999");
          }
          c.optimizer.betas = std::make_pair(b1, b2);
          return absl::OkStatus();
        },
        [](const RunConfig& c) {
          return c.optimizer.betas
                     ? absl::StrCat(c.optimizer.betas->first, ",", c.optimizer.betas->second)
                     : std::string();
        }}},
      {"eps",
       optimizer,
       "X",
       "adam, adamw, rmsprop and adagrad (default: torch's, 1e-8; adagrad's 1e-10)",
       {[](RunConfig& c, const std::string& v) -> absl::Status {
          double eps = 0;
          if (!absl::SimpleAtod(v, &eps) || !(eps > 0) || !std::isfinite(eps)) {
            return Expected("a finite number > 0");
          }
          c.optimizer.eps = eps;
          return absl::OkStatus();
        },
        [](const RunConfig& c) {
          return c.optimizer.eps ? absl::StrCat(*c.optimizer.eps) : std::string();
        }}},
      {"step_lr_every", optimizer, "N", "epochs between learning-rate steps (0: constant)",
       Integer<0, kInt64Max>([](RunConfig& c) -> int64_t& { return c.optimizer.step_lr_every; })},
      {"step_lr_gamma", optimizer, "X", "",
       Number([](RunConfig& c) -> double& { return c.optimizer.step_lr_gamma; }, 0)},
      {"lr_scheduler", optimizer, "",
       "cosine: to --lr-min over fit's steps; onecycle: torch's OneCycleLR peaking at --lr; "
       "plateau: times --lr-plateau-factor after --lr-plateau-patience epochs without a better "
       "--lr-plateau-monitor (not with --step-lr-every)",
       Choice([](RunConfig& c) -> LrSchedule& { return c.lr_scheduler.schedule; }, ParseLrSchedule,
              LrScheduleName)},
      {"lr_scheduler_interval", optimizer, "",
       "cosine and onecycle: set the rate before every step, or at each epoch's start (over "
       "--max-epochs; --lr-warmup-steps then counts epochs)",
       Choice([](RunConfig& c) -> LrInterval& { return c.lr_scheduler.interval; }, ParseLrInterval,
              LrIntervalName)},
      {"lr_warmup_steps", optimizer, "N",
       "a linear rise to --lr over the first N optimizer steps (cosine, plateau)",
       Integer<0, kInt64Max>([](RunConfig& c) -> int64_t& { return c.lr_scheduler.warmup_steps; })},
      {"lr_min", optimizer, "X", "",
       Number([](RunConfig& c) -> double& { return c.lr_scheduler.min_lr; }, 0)},
      {"lr_onecycle_pct_start", optimizer, "X", "the share of steps spent rising",
       Number([](RunConfig& c) -> double& { return c.lr_scheduler.onecycle_pct_start; }, 0)},
      {"lr_plateau_monitor", optimizer, "METRIC", "",
       Text([](RunConfig& c) -> std::string& { return c.lr_scheduler.plateau_monitor; })},
      {"lr_plateau_mode", optimizer, "", "",
       Choice([](RunConfig& c) -> MonitorMode& { return c.lr_scheduler.plateau_mode; },
              ParseMonitorMode, MonitorModeName)},
      {"lr_plateau_factor", optimizer, "X", "",
       Number([](RunConfig& c) -> double& { return c.lr_scheduler.plateau_factor; }, 0)},
      {"lr_plateau_patience", optimizer, "N", "",
       Integer<0, kIntMax>([](RunConfig& c) -> int& { return c.lr_scheduler.plateau_patience; })},
      {"nproc_per_node", distributed, "N",
       absl::StrCat("ranks on this node, at most ", kMaxNprocs,
                    " (under torchrun or srun: their LOCAL_WORLD_SIZE)"),
       Integer<1, kMaxNprocs>(&RunConfig::nproc_per_node)},
      {"start_method", distributed, "",
       "forkserver (the CLI's default): one exec of this program loads it and LibTorch, then "
       "forks the ranks (and a restart's); spawn: each rank execs this program; fork: the "
       "launcher forks each rank",
       Choice(&RunConfig::start_method, ParseStartMethod, StartMethodName)},
      {"max_restarts", distributed, "N",
       "when a rank fails, start the ranks again, up to N times, continuing from this job's "
       "last checkpoint (fit; with --checkpoint-every-n-steps K it is at most K steps old, and "
       "the weights end as without the failure); with --min-ranks, start each lost rank "
       "again instead, up to N times in all, to join the others at their next commit",
       Integer<0, kMaxRestarts>(&RunConfig::max_restarts)},
      {"min_ranks", distributed, "N",
       "elastic fit on one node: a rank that is killed or crashes is dropped while N or more go "
       "on, and they continue from their last in-memory commit on the ranks left, the rest of the "
       "epoch dealt among them (0: a lost rank fails the job)",
       Integer<0, kMaxNprocs>(&RunConfig::min_ranks)},
      {"elastic_commit_every_n_steps", distributed, "N",
       "with --min-ranks: every rank copies the whole training state into memory after every N "
       "optimizer steps (and when fit starts); a loss costs at most N steps re-run",
       Integer<1, kInt64Max>(&RunConfig::elastic_commit_every_n_steps)},
      {"nnodes", distributed, "N",
       "for N > 1, run ddpspawn on every node with its own --node-rank and node 0's "
       "--master-addr; under torchrun or srun leave the node options out",
       Integer<1, kMaxNodes>(&RunConfig::nnodes)},
      {"node_rank", distributed, "R", "", Integer<0, kMaxNodes - 1>(&RunConfig::node_rank)},
      {"master_addr", distributed, "A", "node 0's address", Text(&RunConfig::master_addr)},
      {"master_port", distributed, "P",
       "node 0's launcher serves the rendezvous on port P, on all interfaces (0: 29500)",
       Integer<0, kMaxPort>(&RunConfig::master_port)},
      {"timeout", distributed, "SECONDS",
       "each collective's limit; past it the job fails naming the ranks that never arrived and "
       "what every rank was last doing",
       Number([](RunConfig& c) -> double& { return c.timeout_s; }, 1e-3)},
      {"accelerator", distributed, "", "",
       Choice(&RunConfig::accelerator, ParseAccelerator, AcceleratorName)},
      {"devices", distributed, "N|I,J,...",
       "a device count, or CUDA indices such as 0,2 (sets --nproc-per-node)",
       Text(&RunConfig::devices)},
      {"process_group_backend", distributed, "", "default: nccl on cuda, gloo on cpu",
       Choice(&RunConfig::process_group_backend, ParseBackend, BackendName)},
      {"precision", distributed, "", "16-mixed needs cuda",
       Choice(&RunConfig::precision, ParsePrecision, PrecisionName)},
      {"ddp_comm_hook", distributed, "", "",
       Choice(&RunConfig::ddp_comm_hook, ParseCommHook, CommHookName)},
      {"find_unused_parameters", distributed, "BOOL", "", Flag(&RunConfig::find_unused_parameters)},
      {"sync_batchnorm", distributed, "BOOL",
       "BatchNorm statistics over every rank's batch; refused for a model without BatchNorm "
       "layers (the built-in MLP) and for TorchScript models",
       Flag(&RunConfig::sync_batchnorm)},
      {"static_graph", distributed, "BOOL",
       "the same parameters every step: the first step finds those no rank uses (their "
       "gradients stay untouched, as with --find-unused-parameters) and later steps reuse that",
       Flag(&RunConfig::static_graph)},
      {"gradient_as_bucket_view", distributed, "BOOL", "",
       Flag(&RunConfig::gradient_as_bucket_view)},
      {"zero_redundancy_optimizer", distributed, "BOOL",
       "ZeRO stage 1: each rank keeps and steps the optimizer state of its shard of the "
       "parameters only (torch's ZeroRedundancyOptimizer); checkpoints hold the unsharded state",
       Flag([](RunConfig& c) -> bool& { return c.trainer.zero_redundancy_optimizer; })},
      {"sharding_strategy", distributed, "",
       "FSDP's names: no_shard (DDP), shard_grad_op (ZeRO-2: each rank keeps its rows of the "
       "gradients and of the optimizer state; parameters stay whole) or full_shard (ZeRO-3: of "
       "the parameters too, gathered for the forward and backward: each layer of the built-in "
       "mlp, a TorchScript model whole); checkpoints hold the unsharded state unless "
       "state_dict_type is sharded",
       Choice(&RunConfig::sharding_strategy, ParseShardingStrategy, ShardingStrategyName)},
      {"auto_wrap_min_params", distributed, "N",
       "full_shard's units by size (FSDP's size_based_auto_wrap_policy): a layer becomes a unit "
       "once it holds at least N trainable elements no unit below it holds, the model takes "
       "the rest; fewer, larger units gather less often and hold more at once (0: each layer of "
       "the built-in mlp; refused for TorchScript models)",
       Integer<0, kInt64Max>([](RunConfig& c) -> int64_t& { return c.auto_wrap_min_params; })},
      {"reshard_after_forward", distributed, "BOOL",
       "full_shard: free each unit's parameters after its forward and gather them again for its "
       "backward (true, FSDP2's default), or keep them whole until its backward (one all-gather "
       "less a unit and step, every unit whole between forward and backward)",
       Flag(&RunConfig::reshard_after_forward)},
      {"full_shard_prefetch", distributed, "BOOL",
       "full_shard: start the next unit's all-gather while a unit runs (FSDP's prefetch, in "
       "forward and backward; two units whole at once), where the all-gather runs beside the "
       "rank (gloo across hosts, without shared memory or for a rank's piece above its 64 MB, "
       "nccl); through one host's shared memory it never does (nothing to overlap)",
       Flag(&RunConfig::full_shard_prefetch)},
      {"state_dict_type", distributed, "",
       "Lightning's FSDP names: full (rank 0 writes one file of the unsharded state) or sharded "
       "(shard_grad_op and full_shard: each rank writes its own shard into a checkpoint "
       "directory, which resumes on any number of ranks; docs/sharding.md)",
       OneOf(&RunConfig::state_dict_type, {"full", "sharded"})},
      {"bucket_cap_mb", distributed, "MB", "the gradient buckets' size cap",
       Number([](RunConfig& c) -> double& { return c.bucket_cap_mb; }, 1e-6)},
      {"first_bucket_cap_mb", distributed, "MB",
       "the first bucket's cap (small, so communication starts early)",
       Number([](RunConfig& c) -> double& { return c.first_bucket_cap_mb; }, 1e-6)},
      {"broadcast_buffers", distributed, "BOOL",
       "every rank takes rank 0's buffers (BatchNorm's statistics) before each forward",
       Flag(&RunConfig::broadcast_buffers)},
      {"powersgd_rank", distributed, "R",
       "ddp_comm_hook powersgd's matrix approximation rank (PyTorch's "
       "matrix_approximation_rank)",
       Integer<1, kIntMax>([](RunConfig& c) -> int& { return c.powersgd_rank; })},
      {"powersgd_start_iteration", distributed, "N",
       "ddp_comm_hook powersgd all-reduces plainly for the first N steps (PyTorch's "
       "start_powerSGD_iter)",
       Integer<0, kInt64Max>([](RunConfig& c) -> int64_t& { return c.powersgd_start_iteration; })},
      {"post_localsgd_start_iteration", distributed, "N",
       "ddp_comm_hook post_localsgd all-reduces plainly for the first N steps, then steps locally "
       "(PyTorch's start_localSGD_iter; also the model averaging's warm-up)",
       Integer<0, kInt64Max>(
           [](RunConfig& c) -> int64_t& { return c.post_localsgd_start_iteration; })},
      {"post_local_gradient_allreduce", distributed, "BOOL",
       "ddp_comm_hook post_localsgd averages gradients within each node after its start "
       "(PyTorch's post_local_gradient_allreduce with intra-node subgroups); false: each rank "
       "steps on its own gradients",
       Flag(&RunConfig::post_local_gradient_allreduce)},
      {"model_averaging_period", distributed, "N",
       "ddp_comm_hook post_localsgd (which needs it) averages the parameters over every rank "
       "every N optimizer steps once local steps start (Lightning's model_averaging_period)",
       Integer<1, kInt64Max>([](RunConfig& c) -> int64_t& { return c.model_averaging_period; })},
      {"ddp_comm_wrapper", distributed, "",
       "Lightning's: the hook's buckets cast to fp16 or bf16 and back around it",
       OneOf(&RunConfig::ddp_comm_wrapper, {"none", "fp16", "bf16"})},
  });
  return *table;
}

const RunOption* FindRunOption(const std::string& key) {
  static const auto* by_key = [] {
    auto* map = new std::map<std::string, const RunOption*>;
    for (const RunOption& option : RunOptionTable()) (*map)[option.key] = &option;
    return map;
  }();
  auto it = by_key->find(key);
  return it == by_key->end() ? nullptr : it->second;
}

}  // namespace ddpspawn
