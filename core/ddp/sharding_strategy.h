// The sharding strategies, by FSDP's names: what each rank keeps of the gradients and the optimizer
// state (docs/sharding.md).
#ifndef DDPSPAWN_CORE_DDP_SHARDING_STRATEGY_H_
#define DDPSPAWN_CORE_DDP_SHARDING_STRATEGY_H_

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace ddpspawn {

// kNoShard: DDP (every rank keeps everything; ZeRO-1 shards the optimizer state on top).
// kShardGradOp: ZeRO-2 (the reducer's shard_gradients with a ShardGradOpOptimizer: each rank keeps
// its rows of the gradients and of the optimizer state; parameters stay whole). kFullShard: ZeRO-3
// (FullShard: each rank keeps its rows of the parameters too, and gathers one unit at a time for
// its forward and backward).
enum class ShardingStrategy { kNoShard, kShardGradOp, kFullShard };

// "no_shard", "shard_grad_op", "full_shard".
absl::string_view ShardingStrategyName(ShardingStrategy strategy);
// InvalidArgument for an unknown name; Unimplemented for "hybrid_shard", which FSDP has and
// ddpspawn does not yet.
absl::StatusOr<ShardingStrategy> ParseShardingStrategy(absl::string_view name);

// OK where `strategy` goes with the other options; else InvalidArgument saying why: shard_grad_op
// and full_shard shard the optimizer state themselves (no zero_redundancy_optimizer on top) and
// their reduce-scatter averages plainly (the "allreduce" communication hook, nothing wrapped around
// it).
absl::Status CheckShardingStrategy(ShardingStrategy strategy, bool zero_redundancy_optimizer,
                                   absl::string_view comm_hook);

}  // namespace ddpspawn

#endif  // DDPSPAWN_CORE_DDP_SHARDING_STRATEGY_H_
