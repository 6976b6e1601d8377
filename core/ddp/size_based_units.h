// FSDP's size_based_auto_wrap_policy for FullShard: the units of a module chosen by how many
// parameters each would hold, instead of listed by hand. Pure functions; thread-compatible (they
// read the module tree and change nothing).
#ifndef DDPSPAWN_CORE_DDP_SIZE_BASED_UNITS_H_
#define DDPSPAWN_CORE_DDP_SIZE_BASED_UNITS_H_

#include <cstdint>
#include <memory>
#include <vector>

namespace torch::nn {
class Module;
}  // namespace torch::nn

namespace ddpspawn {

// Going down from `module`, children before their parents, a module becomes a unit when the
// trainable parameter elements it holds that no unit below it holds number at least `min_params`;
// `module` itself is the last unit when any such parameter is left to it (FSDP wraps the root
// always). Every trainable parameter is then in exactly one unit, as FullShard::Wrap wants. A
// larger `min_params` gives fewer, larger units: fewer all-gathers a step, more parameters whole at
// once. A parameter shared by two modules counts once, for the first that holds it.
std::vector<std::shared_ptr<torch::nn::Module>> SizeBasedUnits(
    const std::shared_ptr<torch::nn::Module>& module, int64_t min_params);

}  // namespace ddpspawn

#endif  // DDPSPAWN_CORE_DDP_SIZE_BASED_UNITS_H_
