// Sharded checkpoints: each rank's shard file, rank 0's common file, the staging directory, and
// re-sharding on load (see sharded_checkpoint.h).
#include "core/model/sharded_checkpoint.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <torch/serialize/archive.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <system_error>
#include <unordered_map>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/ddp/row_shards.h"
#include "core/ddp/sharded_optimizer.h"
#include "core/model/sealed_archive.h"
#include "core/model/weights_io.h"
#include "core/util/crc32.h"
#include "core/util/exception_status.h"
#include "core/util/files.h"
#include "core/util/output_dir.h"
#include "core/util/status_macros.h"

namespace ddpspawn {
namespace {

namespace fs = std::filesystem;

constexpr absl::string_view kShardKind = "ddpspawn-checkpoint-shard";
constexpr absl::string_view kCommonKind = "ddpspawn-checkpoint-common";
constexpr char kCommonFile[] = "common";
// Keys: a shard's rows of a parameter, and a tensor every rank holds whole (in `common`).
constexpr absl::string_view kRowsPrefix = "rows.";
constexpr absl::string_view kWholePrefix = "whole.";

std::string ShardFileName(int rank, int world) {
  return absl::StrCat("shard-", rank, "-of-", world);
}

// The sharded parameters' names, in the optimizer's order, and the other tensors of `state`.
struct Split {
  std::vector<std::string> sharded;
  NamedTensors whole;
};

absl::StatusOr<Split> SplitState(const NamedTensors& state, const ShardGradOpOptimizer& optimizer) {
  std::unordered_map<const void*, const std::string*> name_of;
  for (const auto& [name, tensor] : state) name_of[tensor.unsafeGetTensorImpl()] = &name;
  Split split;
  std::unordered_map<const void*, bool> sharded;
  for (const at::Tensor& p : AllParameters(optimizer)) {
    auto found = name_of.find(p.unsafeGetTensorImpl());
    if (found == name_of.end()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "sharded checkpoint: parameter ", split.sharded.size(), " of the optimizer (",
          c10::str(p.sizes()), ") is not among the module's named tensors"));
    }
    split.sharded.push_back(*found->second);
    sharded[p.unsafeGetTensorImpl()] = true;
  }
  for (const auto& [name, tensor] : state) {
    if (!sharded.count(tensor.unsafeGetTensorImpl())) split.whole.emplace_back(name, tensor);
  }
  return split;
}

// An error on any rank becomes the same error on every rank, naming the first that failed. A
// collective.
absl::Status AgreeOnEveryRank(const absl::Status& mine, ProcessGroup& group,
                              absl::string_view what) {
  ASSIGN_OR_RETURN(std::vector<std::string> all,
                   group.AllGatherBytes(mine.ok() ? "" : std::string(mine.message())));
  for (size_t r = 0; r < all.size(); ++r) {
    if (all[r].empty()) continue;
    const absl::StatusCode code =
        static_cast<int>(r) == group.rank() ? mine.code() : absl::StatusCode::kAborted;
    return absl::Status(code, absl::StrCat(what, ": rank ", r, ": ", all[r]));
  }
  return absl::OkStatus();
}

// This rank's shard file: its rows of each sharded parameter and its optimizer's shard state.
absl::StatusOr<std::string> SerializeShard(const Split& split,
                                           const ShardGradOpOptimizer& optimizer, int rank,
                                           int world) {
  torch::serialize::OutputArchive archive;
  RETURN_IF_ERROR(InvalidInputOnException("writing the shard", [&] {
    archive.write("rank", c10::IValue(int64_t{rank}));
    archive.write("world_size", c10::IValue(int64_t{world}));
    const std::vector<at::Tensor> rows = optimizer.StepGradientHolders();
    for (size_t i = 0; i < rows.size(); ++i) {
      // A copy of the rows alone: a view would serialize the whole parameter's storage.
      archive.write(absl::StrCat(kRowsPrefix, split.sharded[i]), rows[i].detach().cpu().clone());
    }
    torch::serialize::OutputArchive state;
    optimizer.shard_optimizer().save(state);
    archive.write("optimizer", state);
    return absl::OkStatus();
  }));
  return SealArchive(kShardKind, archive);
}

// Rank 0's common file.
absl::StatusOr<std::string> SerializeCommon(const Split& split,
                                            const ShardGradOpOptimizer& optimizer,
                                            const std::vector<std::string>& shard_records,
                                            absl::string_view extra) {
  torch::serialize::OutputArchive archive;
  RETURN_IF_ERROR(InvalidInputOnException("writing the common file", [&] {
    archive.write("world_size", c10::IValue(static_cast<int64_t>(shard_records.size())));
    archive.write("sharded.count", c10::IValue(static_cast<int64_t>(split.sharded.size())));
    const std::vector<at::Tensor> parameters = AllParameters(optimizer);
    for (size_t i = 0; i < split.sharded.size(); ++i) {
      archive.write(absl::StrCat("sharded.", i, ".name"), c10::IValue(split.sharded[i]));
      archive.write(absl::StrCat("sharded.", i, ".shape"),
                    at::tensor(parameters[i].sizes().vec(), at::kLong));
    }
    for (size_t r = 0; r < shard_records.size(); ++r) {
      archive.write(absl::StrCat("shard.", r), c10::IValue(shard_records[r]));
    }
    for (const auto& [name, tensor] : split.whole) {
      archive.write(absl::StrCat(kWholePrefix, name), tensor.detach().cpu());
    }
    archive.write("extra", c10::IValue(std::string(extra)));
    return absl::OkStatus();
  }));
  return SealArchive(kCommonKind, archive);
}

// "<size> <crc32>" of a file's bytes: what `common` records of each shard.
std::string ShardRecord(absl::string_view bytes) {
  return absl::StrCat(bytes.size(), " ", Crc32(bytes));
}

absl::Status ErrorCodeMessage(const std::error_code& error, absl::string_view what,
                              const std::string& path) {
  return absl::InternalError(absl::StrCat("cannot ", what, " ", path, ": ", error.message()));
}

// Rank 0: an empty staging directory beside `dir`, after checking that `dir` may be replaced.
absl::Status PrepareStaging(const std::string& dir, const std::string& staging) {
  RETURN_IF_ERROR(PrepareOutputDirectory(DirectoryOf(dir)));
  std::error_code error;
  const fs::file_status existing = fs::symlink_status(dir, error);
  if (fs::exists(existing) && !IsShardedCheckpoint(dir)) {
    return absl::FailedPreconditionError(
        absl::StrCat(dir, " exists and is not a sharded checkpoint (no ", kCommonFile,
                     " file in a directory); it was left alone: choose another path"));
  }
  fs::remove_all(staging, error);  // an interrupted save's, or nothing
  if (error) return ErrorCodeMessage(error, "remove the stale", staging);
  if (mkdir(staging.c_str(), 0755) != 0) {
    return absl::InternalError(absl::StrCat("cannot create ", staging, ": ", strerror(errno)));
  }
  return absl::OkStatus();
}

// Makes the rename of `path` durable: fsyncs the directory that holds it.
absl::Status SyncDirectoryOf(const std::string& path) {
  const std::string dir = DirectoryOf(path);
  const int fd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0 || fsync(fd) != 0) {
    const int error = errno;
    if (fd >= 0) close(fd);
    return absl::InternalError(absl::StrCat("cannot sync ", dir, ": ", strerror(error)));
  }
  close(fd);
  return absl::OkStatus();
}

// Rank 0, once every shard is in `staging`: the common file, then `staging` in place of `dir`. An
// existing checkpoint is exchanged with it in one step (renameat2's RENAME_EXCHANGE), so `dir`
// always holds one checkpoint whole, and then removed from `staging`. Where the file system cannot
// exchange (some network file systems), the previous one is moved aside to <dir>.previous first: a
// crash between the two renames leaves it there.
absl::Status Publish(const std::string& dir, const std::string& staging, absl::string_view common) {
  RETURN_IF_ERROR(
      WriteFileAtomically(absl::StrCat(staging, "/", kCommonFile), common, /*durable=*/true));
  std::error_code error;
  if (IsShardedCheckpoint(dir)) {
    if (renameat2(AT_FDCWD, staging.c_str(), AT_FDCWD, dir.c_str(), RENAME_EXCHANGE) == 0) {
      RETURN_IF_ERROR(SyncDirectoryOf(dir));
      fs::remove_all(staging, error);  // now the previous checkpoint
      if (error) return ErrorCodeMessage(error, "remove the previous checkpoint", staging);
      return absl::OkStatus();
    }
    if (errno != EINVAL && errno != ENOSYS) {
      return absl::InternalError(
          absl::StrCat("cannot exchange ", staging, " with ", dir, ": ", strerror(errno)));
    }
    const std::string previous = dir + ".previous";
    fs::remove_all(previous, error);
    if (error) return ErrorCodeMessage(error, "remove the stale", previous);
    fs::rename(dir, previous, error);
    if (error) return ErrorCodeMessage(error, "move aside the previous checkpoint", dir);
    fs::rename(staging, dir, error);
    if (error) return ErrorCodeMessage(error, "rename the new checkpoint to", dir);
    RETURN_IF_ERROR(SyncDirectoryOf(dir));
    fs::remove_all(previous, error);
    if (error) return ErrorCodeMessage(error, "remove the previous checkpoint", previous);
    return absl::OkStatus();
  }
  fs::rename(staging, dir, error);
  if (error) return ErrorCodeMessage(error, "rename the new checkpoint to", dir);
  return SyncDirectoryOf(dir);
}

}  // namespace

bool IsShardedCheckpoint(const std::string& path) {
  std::error_code error;
  return fs::is_directory(fs::symlink_status(path, error)) &&
         fs::is_regular_file(fs::symlink_status(fs::path(path) / kCommonFile, error));
}

absl::Status SaveShardedCheckpoint(const std::string& dir, const NamedTensors& state,
                                   const ShardGradOpOptimizer& optimizer, absl::string_view extra) {
  ProcessGroup& group = *optimizer.gradient_shard_group();
  const int rank = group.rank(), world = group.world_size();
  const std::string staging = dir + ".partial";
  absl::StatusOr<Split> split = SplitState(state, optimizer);
  absl::Status prepared = split.status();
  if (prepared.ok() && rank == 0) prepared = PrepareStaging(dir, staging);
  RETURN_IF_ERROR(AgreeOnEveryRank(prepared, group, "sharded checkpoint " + dir));
  // Each rank's shard; every rank learns whether every other wrote its own.
  absl::StatusOr<std::string> shard = SerializeShard(*split, optimizer, rank, world);
  absl::Status wrote = shard.status();
  if (wrote.ok()) {
    wrote = WriteFileAtomically(absl::StrCat(staging, "/", ShardFileName(rank, world)), *shard,
                                /*durable=*/true);
  }
  RETURN_IF_ERROR(AgreeOnEveryRank(wrote, group, "sharded checkpoint " + dir));
  ASSIGN_OR_RETURN(std::vector<std::string> records,
                   group.GatherBytes(ShardRecord(*shard), /*to=*/0));
  shard->clear();
  absl::Status published = absl::OkStatus();
  if (rank == 0) {
    absl::StatusOr<std::string> common = SerializeCommon(*split, optimizer, records, extra);
    published = common.ok() ? Publish(dir, staging, *common) : common.status();
  }
  return AgreeOnEveryRank(published, group, "sharded checkpoint " + dir);
}

namespace {

// What `common` says.
struct Common {
  int world = 0;
  std::vector<std::string> names;
  std::vector<std::vector<int64_t>> shapes;
  std::vector<std::string> shard_records;
  std::string extra;
};

absl::StatusOr<Common> ReadCommon(const std::string& dir, torch::serialize::InputArchive& archive) {
  const std::string path = absl::StrCat(dir, "/", kCommonFile);
  absl::StatusOr<std::string> bytes = ReadWholeFile(path);
  if (absl::IsNotFound(bytes.status())) {
    std::error_code error;
    return absl::NotFoundError(absl::StrCat(
        dir, " is not a sharded checkpoint: it has no ", kCommonFile, " file",
        fs::exists(dir + ".partial", error)
            ? absl::StrCat(" (", dir, ".partial is an interrupted save's, and incomplete)")
            : ""));
  }
  RETURN_IF_ERROR(bytes.status());
  if (absl::Status s = OpenSealedArchive(*bytes, kCommonKind, c10::Device(c10::kCPU), archive);
      !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", s.message()));
  }
  Common common;
  c10::IValue value;
  auto read_int = [&](const std::string& key) -> absl::StatusOr<int64_t> {
    if (!archive.try_read(key, value) || !value.isInt()) {
      return absl::InvalidArgumentError(absl::StrCat(path, " has no '", key, "'"));
    }
    return value.toInt();
  };
  auto read_string = [&](const std::string& key) -> absl::StatusOr<std::string> {
    if (!archive.try_read(key, value) || !value.isString()) {
      return absl::InvalidArgumentError(absl::StrCat(path, " has no '", key, "'"));
    }
    return value.toStringRef();
  };
  ASSIGN_OR_RETURN(int64_t world, read_int("world_size"));
  ASSIGN_OR_RETURN(int64_t count, read_int("sharded.count"));
  if (world < 1 || world > (1 << 20) || count < 0 || count > (1 << 24)) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, " says ", world, " ranks and ", count, " sharded tensors"));
  }
  common.world = static_cast<int>(world);
  for (int64_t i = 0; i < count; ++i) {
    ASSIGN_OR_RETURN(std::string name, read_string(absl::StrCat("sharded.", i, ".name")));
    at::Tensor shape;
    if (!archive.try_read(absl::StrCat("sharded.", i, ".shape"), shape) ||
        shape.scalar_type() != at::kLong || shape.dim() != 1) {
      return absl::InvalidArgumentError(absl::StrCat(path, " has no shape for ", name));
    }
    common.names.push_back(std::move(name));
    common.shapes.emplace_back(shape.data_ptr<int64_t>(),
                               shape.data_ptr<int64_t>() + shape.numel());
  }
  for (int r = 0; r < common.world; ++r) {
    ASSIGN_OR_RETURN(std::string record, read_string(absl::StrCat("shard.", r)));
    common.shard_records.push_back(std::move(record));
  }
  ASSIGN_OR_RETURN(common.extra, read_string("extra"));
  return common;
}

// The saved parameters must be this optimizer's, by name, order and shape.
absl::Status CheckSameParameters(const Common& common, const Split& split,
                                 const std::vector<at::Tensor>& parameters,
                                 const std::string& dir) {
  if (common.names.size() != split.sharded.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        dir, " holds ", common.names.size(), " sharded parameters, but this model's optimizer has ",
        split.sharded.size(), ": was it saved from another model?"));
  }
  for (size_t i = 0; i < common.names.size(); ++i) {
    if (common.names[i] != split.sharded[i]) {
      return absl::InvalidArgumentError(absl::StrCat(dir, "'s sharded parameter ", i, " is '",
                                                     common.names[i], "', but this model's is '",
                                                     split.sharded[i], "'"));
    }
    if (at::IntArrayRef(common.shapes[i]) != parameters[i].sizes()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "tensor '", common.names[i], "' has shape ", c10::str(at::IntArrayRef(common.shapes[i])),
          " in ", dir, " but ", c10::str(parameters[i].sizes()), " in the model"));
    }
  }
  return absl::OkStatus();
}

// The tensors every rank holds whole, from `common`.
absl::Status RestoreWhole(torch::serialize::InputArchive& archive, const Split& split,
                          const std::string& dir) {
  for (const auto& [name, tensor] : split.whole) {
    at::Tensor saved;  // a fresh one each time: try_read set_()s a tensor it is given
    if (!archive.try_read(absl::StrCat(kWholePrefix, name), saved)) {
      return absl::InvalidArgumentError(
          absl::StrCat(dir, " has no tensor '", name, "': was it saved from another model?"));
    }
    if (saved.sizes() != tensor.sizes()) {
      return absl::InvalidArgumentError(absl::StrCat("tensor '", name, "' has shape ",
                                                     c10::str(saved.sizes()), " in ", dir, " but ",
                                                     c10::str(tensor.sizes()), " in the model"));
    }
    at::Tensor target = tensor;
    RETURN_IF_ERROR(InvalidInputOnException(absl::StrCat("restoring tensor '", name, "'"), [&] {
      target.detach().copy_(saved);
      return absl::OkStatus();
    }));
  }
  return absl::OkStatus();
}

// Saved shard `k`'s file, checked against what `common` recorded of it, and opened.
absl::Status OpenShard(const std::string& dir, const Common& common, int k,
                       torch::serialize::InputArchive& archive) {
  const std::string path = absl::StrCat(dir, "/", ShardFileName(k, common.world));
  absl::StatusOr<std::string> bytes = ReadWholeFile(path);
  if (absl::IsNotFound(bytes.status())) {
    return absl::NotFoundError(absl::StrCat("the shard file ", path, " (saved by rank ", k, " of ",
                                            common.world, ") is missing"));
  }
  RETURN_IF_ERROR(bytes.status());
  if (ShardRecord(*bytes) != common.shard_records[k]) {
    return absl::DataLossError(absl::StrCat(
        "the shard file ", path, " is not the one this checkpoint saved (its size and CRC-32 are ",
        ShardRecord(*bytes), ", the common file recorded ", common.shard_records[k],
        "): it is damaged or from another save"));
  }
  if (absl::Status s = OpenSealedArchive(*bytes, kShardKind, c10::Device(c10::kCPU), archive);
      !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", s.message()));
  }
  return absl::OkStatus();
}

// What this rank gathers of each parameter's optimizer state, saved shard by saved shard.
struct StatePieces {
  std::unique_ptr<torch::optim::OptimizerParamState> shape;  // the first saved shard's, cloned
  std::vector<std::vector<at::Tensor>> pieces;               // per state tensor, in row order
};

// Reads saved shard `k` of `common.world` and copies what overlaps this rank's rows: the rows into
// `rows`, the state into `states`. The first shard read also gives the group options.
absl::Status ReadShard(const std::string& dir, const Common& common, int k, const Split& split,
                       const std::vector<at::Tensor>& rows, const std::vector<int64_t>& row_counts,
                       const std::vector<RowRange>& mine, ShardGradOpOptimizer& optimizer,
                       std::vector<StatePieces>& states,
                       std::unique_ptr<torch::optim::Optimizer>& options_from) {
  const std::string path = absl::StrCat(dir, "/", ShardFileName(k, common.world));
  torch::serialize::InputArchive archive;
  RETURN_IF_ERROR(OpenShard(dir, common, k, archive));
  torch::serialize::InputArchive state_archive;
  if (!archive.try_read("optimizer", state_archive)) {
    return absl::InvalidArgumentError(absl::StrCat(path, " has no optimizer state"));
  }
  absl::StatusOr<ShardGradOpOptimizer::SavedShard> saved =
      optimizer.ReadSavedShard(state_archive, k, common.world);
  if (!saved.ok())
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", saved.status().message()));
  c10::NoGradGuard no_grad;
  for (size_t i = 0; i < rows.size(); ++i) {
    const RowRange theirs = OwnedRowRange(row_counts[i], k, common.world);
    const int64_t begin = std::max(mine[i].begin, theirs.begin);
    const int64_t end = std::min(mine[i].end, theirs.end);
    auto found = saved->optimizer->state().find(saved->rows[i].unsafeGetTensorImpl());
    const bool has_state = found != saved->optimizer->state().end();
    if (has_state && states[i].shape == nullptr) {
      states[i].shape = found->second->clone();
      ASSIGN_OR_RETURN(std::vector<at::Tensor> tensors, OptimizerStateTensors(*found->second));
      states[i].pieces.resize(tensors.size());
    }
    if (begin >= end) continue;
    at::Tensor saved_rows;
    if (!archive.try_read(absl::StrCat(kRowsPrefix, split.sharded[i]), saved_rows) ||
        saved_rows.dim() == 0 || saved_rows.size(0) != theirs.end - theirs.begin) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, " lacks rank ", k, "'s rows of '", split.sharded[i], "'"));
    }
    rows[i]
        .detach()
        .narrow(0, begin - mine[i].begin, end - begin)
        .copy_(saved_rows.narrow(0, begin - theirs.begin, end - begin));
    if (!has_state) continue;
    ASSIGN_OR_RETURN(std::vector<at::Tensor> tensors, OptimizerStateTensors(*found->second));
    if (tensors.size() != states[i].pieces.size()) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": the optimizer state of '",
                                                     split.sharded[i], "' differs between shards"));
    }
    for (size_t t = 0; t < tensors.size(); ++t) {
      states[i].pieces[t].push_back(
          tensors[t].narrow(0, begin - theirs.begin, end - begin).clone());
    }
  }
  if (options_from == nullptr) options_from = std::move(saved->optimizer);
  return absl::OkStatus();
}

// The local half of a load: everything but the parameters' all-gather.
absl::StatusOr<ShardedCheckpointLoad> LoadLocally(const std::string& dir, const NamedTensors& state,
                                                  ShardGradOpOptimizer& optimizer) {
  ASSIGN_OR_RETURN(Split split, SplitState(state, optimizer));
  torch::serialize::InputArchive common_archive;
  ASSIGN_OR_RETURN(Common common, ReadCommon(dir, common_archive));
  const std::vector<at::Tensor> parameters = AllParameters(optimizer);
  RETURN_IF_ERROR(CheckSameParameters(common, split, parameters, dir));
  RETURN_IF_ERROR(RestoreWhole(common_archive, split, dir));
  ProcessGroup& group = *optimizer.gradient_shard_group();
  const int rank = group.rank(), world = group.world_size();
  const std::vector<at::Tensor> rows = optimizer.StepGradientHolders();
  std::vector<int64_t> row_counts;
  std::vector<RowRange> mine;
  for (const at::Tensor& p : parameters) {
    row_counts.push_back(RowCount(p));
    mine.push_back(OwnedRowRange(row_counts.back(), rank, world));
  }
  std::vector<StatePieces> states(parameters.size());
  std::unique_ptr<torch::optim::Optimizer> options_from;
  ShardedCheckpointLoad load;
  load.saved_world_size = common.world;
  load.extra = std::move(common.extra);
  for (int k = 0; k < common.world; ++k) {
    bool overlaps = false;
    for (size_t i = 0; i < parameters.size() && !overlaps; ++i) {
      const RowRange theirs = OwnedRowRange(row_counts[i], k, common.world);
      overlaps = std::max(mine[i].begin, theirs.begin) < std::min(mine[i].end, theirs.end);
    }
    // A rank that owns no rows at all still reads one shard, for the state's shape and options.
    const bool last_chance = k == common.world - 1 && load.shards_read.empty();
    if (!overlaps && !last_chance) continue;
    RETURN_IF_ERROR(
        ReadShard(dir, common, k, split, rows, row_counts, mine, optimizer, states, options_from));
    load.shards_read.push_back(k);
  }
  std::vector<std::unique_ptr<torch::optim::OptimizerParamState>> adopted(parameters.size());
  for (size_t i = 0; i < parameters.size(); ++i) {
    if (states[i].shape == nullptr) continue;  // never stepped
    adopted[i] = std::move(states[i].shape);
    size_t t = 0;
    RETURN_IF_ERROR(MapOptimizerStateTensors(*adopted[i], [&](const at::Tensor& like) {
      const std::vector<at::Tensor>& pieces = states[i].pieces[t++];
      at::Tensor joined = pieces.empty() ? like.narrow(0, 0, 0).clone() : at::cat(pieces);
      return joined.to(rows[i].device());
    }));
  }
  RETURN_IF_ERROR(optimizer.AdoptShardState(std::move(adopted), *options_from));
  return load;
}

}  // namespace

absl::StatusOr<std::string> ReadShardedCheckpointExtra(const std::string& dir) {
  torch::serialize::InputArchive archive;
  ASSIGN_OR_RETURN(Common common, ReadCommon(dir, archive));
  return std::move(common.extra);
}

absl::StatusOr<NamedTensors> ReadShardedCheckpointWeights(const std::string& dir) {
  torch::serialize::InputArchive common_archive;
  ASSIGN_OR_RETURN(Common common, ReadCommon(dir, common_archive));
  std::vector<std::vector<at::Tensor>> rows(common.names.size());
  for (int k = 0; k < common.world; ++k) {
    torch::serialize::InputArchive archive;
    RETURN_IF_ERROR(OpenShard(dir, common, k, archive));
    for (size_t i = 0; i < common.names.size(); ++i) {
      at::Tensor saved;
      if (!archive.try_read(absl::StrCat(kRowsPrefix, common.names[i]), saved)) {
        return absl::InvalidArgumentError(absl::StrCat(dir, "/", ShardFileName(k, common.world),
                                                       " lacks its rows of '", common.names[i],
                                                       "'"));
      }
      rows[i].push_back(saved);
    }
  }
  NamedTensors weights;
  for (size_t i = 0; i < common.names.size(); ++i) {
    at::Tensor whole;
    RETURN_IF_ERROR(InvalidInputOnException(
        absl::StrCat(dir, ": joining the rows of '", common.names[i], "'"), [&] {
          whole = at::cat(rows[i]);
          if (whole.numel() != c10::multiply_integers(common.shapes[i])) {
            return absl::InvalidArgumentError(absl::StrCat(
                "they do not make its shape ", c10::str(at::IntArrayRef(common.shapes[i]))));
          }
          whole = whole.reshape(common.shapes[i]);
          return absl::OkStatus();
        }));
    weights.emplace_back(common.names[i], whole);
  }
  for (const std::string& key : common_archive.keys()) {
    if (!absl::StartsWith(key, kWholePrefix)) continue;
    at::Tensor tensor;
    if (!common_archive.try_read(key, tensor)) {
      return absl::InvalidArgumentError(absl::StrCat(dir, "'s '", key, "' is unreadable"));
    }
    weights.emplace_back(key.substr(kWholePrefix.size()), tensor);
  }
  // As a checkpoint file's weights are (ReadCheckpointWeights).
  for (const auto& [name, tensor] : weights) RETURN_IF_ERROR(CheckWeightTensor(name, tensor));
  return weights;
}

absl::StatusOr<ShardedCheckpointLoad> LoadShardedCheckpoint(const std::string& dir,
                                                            const NamedTensors& state,
                                                            ShardGradOpOptimizer& optimizer) {
  ProcessGroup& group = *optimizer.gradient_shard_group();
  // A saved tensor whose trailing shape or dtype does not fit makes LibTorch throw while it is
  // copied or joined: an error like any other, agreed by every rank.
  absl::StatusOr<ShardedCheckpointLoad> load;
  const absl::Status local = InvalidInputOnException("reading the shards", [&] {
    load = LoadLocally(dir, state, optimizer);
    return load.status();
  });
  if (!local.ok()) load = local;
  RETURN_IF_ERROR(AgreeOnEveryRank(load.status(), group,
                                   absl::StrCat("cannot load the sharded checkpoint ", dir)));
  RETURN_IF_ERROR(optimizer.GatherParameters());
  return load;
}

}  // namespace ddpspawn
