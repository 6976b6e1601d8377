// The sharding strategies' names (see sharding_strategy.h).
#include "core/ddp/sharding_strategy.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "core/util/enum_names.h"

namespace ddpspawn {
namespace {

constexpr NamedValue<ShardingStrategy> kShardingStrategyNames[] = {
    {"no_shard", ShardingStrategy::kNoShard},
    {"shard_grad_op", ShardingStrategy::kShardGradOp},
    {"full_shard", ShardingStrategy::kFullShard},
};

}  // namespace

absl::string_view ShardingStrategyName(ShardingStrategy strategy) {
  return NameOf(kShardingStrategyNames, strategy);
}

absl::StatusOr<ShardingStrategy> ParseShardingStrategy(absl::string_view name) {
  if (name == "hybrid_shard") {
    return absl::UnimplementedError(
        "sharding strategy hybrid_shard (full_shard within each node, replicas across nodes) is "
        "not implemented yet; full_shard shards over every rank (docs/sharding.md)");
  }
  return ParseName(kShardingStrategyNames, "sharding strategy", name);
}

absl::Status CheckShardingStrategy(ShardingStrategy strategy, bool zero_redundancy_optimizer,
                                   absl::string_view comm_hook) {
  if (strategy == ShardingStrategy::kNoShard) return absl::OkStatus();
  const absl::string_view name = ShardingStrategyName(strategy);
  if (zero_redundancy_optimizer) {
    return absl::InvalidArgumentError(absl::StrCat(
        "zero_redundancy_optimizer with sharding_strategy ", name, ": ", name,
        " shards the optimizer state already (ZeRO-2 and ZeRO-3 include ZeRO-1); leave "
        "zero_redundancy_optimizer out"));
  }
  if (comm_hook != "allreduce") {
    return absl::InvalidArgumentError(absl::StrCat(
        "sharding_strategy ", name,
        " reduce-scatters each gradient bucket, so the communication hook '", comm_hook,
        "' cannot run on it; compression hooks, their wrappers and post-local SGD need "
        "unsharded gradients (no_shard)"));
  }
  return absl::OkStatus();
}

}  // namespace ddpspawn
