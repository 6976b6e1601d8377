// Sharded checkpoints (FSDP's sharded state dict, as torch.distributed.checkpoint lays it out):
// under shard_grad_op or full_shard each rank writes its own rows of the parameters and of their
// optimizer state, and reads back only the rows it owns, on any number of ranks. No rank gathers
// another's shard to save, and none holds the whole model to load.
//
// A sharded checkpoint is a directory:
//   shard-<r>-of-<W>  rank r's rows (core/ddp/row_shards.h) of every parameter its
//                     ShardGradOpOptimizer steps, and its optimizer state of those rows;
//   common            rank 0's, written last: the number of ranks, each sharded parameter's name
//                     and shape, each shard file's size and CRC-32, the tensors every rank holds
//                     whole (buffers, frozen parameters) and the caller's own bytes.
// Every file is a sealed archive (sealed_archive.h). The ranks write into <dir>.partial, which rank
// 0 exchanges with <dir> (RENAME_EXCHANGE) once every shard is written: <dir> holds the previous
// checkpoint or the new one, whole (where the file system cannot exchange, the previous one is
// moved aside to <dir>.previous first). Loading on W' ranks, rank r' reads `common`, then only the
// saved shard files that hold rows it owns now, one at a time: its own rows and one saved shard at
// most. A missing, damaged or foreign shard file is an error that names it and the rank that needed
// it.
//
// On several machines each rank writes its file where it runs: <dir> must be on a file system every
// rank sees, as for torch.distributed.checkpoint.
#ifndef DDPSPAWN_CORE_MODEL_SHARDED_CHECKPOINT_H_
#define DDPSPAWN_CORE_MODEL_SHARDED_CHECKPOINT_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/ddp/shard_grad_op_optimizer.h"
#include "core/model/module.h"

namespace ddpspawn {

// Writes `optimizer`'s rows of the parameters and its shard's state, and `state`'s other tensors
// (rank 0's, whole), with `extra` (any bytes, kept as given), to the directory `dir`. A collective
// over the optimizer's group. `state` names the module's tensors (its named parameters and
// buffers); every parameter the optimizer steps must be among them. A rank that cannot write its
// shard fails the save on every rank, naming it; the previous checkpoint at `dir` then stays.
// `dir`, when it exists, must be a sharded checkpoint: anything else there is refused, not
// replaced.
absl::Status SaveShardedCheckpoint(const std::string& dir, const NamedTensors& state,
                                   const ShardGradOpOptimizer& optimizer, absl::string_view extra);

struct ShardedCheckpointLoad {
  std::string extra;             // as saved
  int saved_world_size = 0;      // the ranks that saved it
  std::vector<int> shards_read;  // the saved ranks whose shard files this rank read
};

// Reads the checkpoint at `dir` into this rank's rows of the parameters, its optimizer's shard
// state (and group options), and `state`'s other tensors; then, under shard_grad_op, all-gathers
// the rows into every rank's whole parameters. A collective; any number of ranks may load what any
// number saved. The saved parameters must have this model's names, order and shapes; an error names
// the first that differs. An error on one rank fails the load on every rank, naming it.
absl::StatusOr<ShardedCheckpointLoad> LoadShardedCheckpoint(const std::string& dir,
                                                            const NamedTensors& state,
                                                            ShardGradOpOptimizer& optimizer);

// The caller's bytes of the checkpoint at `dir` (what SaveShardedCheckpoint was given), from its
// common file alone.
absl::StatusOr<std::string> ReadShardedCheckpointExtra(const std::string& dir);

// Every tensor of the checkpoint at `dir`, whole: each sharded parameter's rows from every shard
// file, joined, and the replicated tensors. In this process alone, and the whole model at once: for
// an export to one file, or an evaluation that holds the model whole anyway.
absl::StatusOr<NamedTensors> ReadShardedCheckpointWeights(const std::string& dir);

// Whether `path` is a directory holding a sharded checkpoint's `common` file.
bool IsShardedCheckpoint(const std::string& path);

}  // namespace ddpspawn

#endif  // DDPSPAWN_CORE_MODEL_SHARDED_CHECKPOINT_H_
