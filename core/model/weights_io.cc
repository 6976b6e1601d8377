// Weights in torch's and safetensors' formats (see weights_io.h).
#include "core/model/weights_io.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <caffe2/serialize/inline_container.h>
#include <torch/csrc/jit/serialization/export.h>
#include <torch/csrc/jit/serialization/import_read.h>
#include <torch/csrc/jit/serialization/pickler.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <sstream>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/model/bounded_read.h"
#include "core/model/checkpoint.h"
#include "core/model/pickle_sizes.h"
#include "core/model/sharded_checkpoint.h"
#include "core/util/enum_names.h"
#include "core/util/exception_status.h"
#include "core/util/files.h"
#include "core/util/status_macros.h"
#include "nlohmann/json.hpp"

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "safetensors data is little-endian, as tensors are here");

namespace ddpspawn {
namespace {

// safetensors' dtype names.
const std::vector<std::pair<std::string, at::ScalarType>>& SafetensorsDtypes() {
  static const auto* dtypes = new std::vector<std::pair<std::string, at::ScalarType>>{
      {"F64", at::kDouble}, {"F32", at::kFloat}, {"F16", at::kHalf},  {"BF16", at::kBFloat16},
      {"I64", at::kLong},   {"I32", at::kInt},   {"I16", at::kShort}, {"I8", at::kChar},
      {"U8", at::kByte},    {"BOOL", at::kBool},
  };
  return *dtypes;
}

// The header is a JSON object padded with spaces to a multiple of 8 bytes; the tensors' bytes
// follow, back to back in the order given.
absl::StatusOr<std::string> EncodeSafetensors(const NamedTensors& weights) {
  nlohmann::ordered_json header;
  header["__metadata__"] = {{"format", "pt"}};
  std::string data;
  for (const auto& [name, tensor] : weights) {
    const at::Tensor cpu = tensor.detach().cpu().contiguous();
    std::string dtype;
    for (const auto& [dtype_name, type] : SafetensorsDtypes()) {
      if (type == cpu.scalar_type()) dtype = dtype_name;
    }
    if (dtype.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("tensor '", name, "' is ",
                                                     c10::toString(cpu.scalar_type()),
                                                     ", which safetensors does not hold"));
    }
    const size_t begin = data.size();
    data.append(static_cast<const char*>(cpu.data_ptr()), cpu.nbytes());
    header[name] = {
        {"dtype", dtype}, {"shape", cpu.sizes().vec()}, {"data_offsets", {begin, data.size()}}};
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  const uint64_t length = text.size();
  std::string bytes(sizeof(length), '\0');
  std::memcpy(bytes.data(), &length, sizeof(length));
  return absl::StrCat(bytes, text, data);
}

absl::Status BadSafetensors(absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat("not a valid safetensors file: ", why));
}

// Whether `bytes` starts like a safetensors file: a length that fits, then a JSON object.
bool LooksLikeSafetensors(const std::string& bytes) {
  uint64_t length = 0;
  if (bytes.size() < sizeof(length) + 2) return false;
  std::memcpy(&length, bytes.data(), sizeof(length));
  return length >= 2 && length <= bytes.size() - sizeof(length) && bytes[sizeof(length)] == '{';
}

absl::StatusOr<NamedTensors> DecodeSafetensors(const std::string& bytes) {
  uint64_t length = 0;
  std::memcpy(&length, bytes.data(), sizeof(length));
  const nlohmann::json header = nlohmann::json::parse(bytes.substr(sizeof(length), length), nullptr,
                                                      /*allow_exceptions=*/false);
  if (header.is_discarded() || !header.is_object())
    return BadSafetensors("its header is not a JSON object");
  const absl::string_view data = absl::string_view(bytes).substr(sizeof(length) + length);
  // Every byte of the data belongs to one tensor, in order (as safetensors itself checks).
  std::map<uint64_t, std::pair<uint64_t, std::string>> spans;  // begin -> end, name
  NamedTensors weights;
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") continue;
    if (!entry.is_object() || !entry.contains("dtype") || !entry["dtype"].is_string() ||
        !entry.contains("shape") || !entry["shape"].is_array() || !entry.contains("data_offsets") ||
        !entry["data_offsets"].is_array() || entry["data_offsets"].size() != 2) {
      return BadSafetensors(absl::StrCat("tensor '", name, "' lacks dtype, shape or data_offsets"));
    }
    at::ScalarType type = at::kFloat;
    bool known = false;
    for (const auto& [dtype_name, dtype] : SafetensorsDtypes()) {
      if (dtype_name == entry["dtype"].get<std::string>()) {
        type = dtype;
        known = true;
      }
    }
    if (!known) {
      return BadSafetensors(absl::StrCat("tensor '", name, "' has dtype ",
                                         entry["dtype"].get<std::string>(),
                                         ", which ddpspawn does not read"));
    }
    std::vector<int64_t> shape;
    uint64_t elements = 1;
    for (const nlohmann::json& size : entry["shape"]) {
      if (!size.is_number_unsigned() || size.get<uint64_t>() > (uint64_t{1} << 40)) {
        return BadSafetensors(absl::StrCat("tensor '", name, "' has a bad shape"));
      }
      shape.push_back(static_cast<int64_t>(size.get<uint64_t>()));
      elements *= size.get<uint64_t>();
      if (elements > data.size())
        return BadSafetensors(absl::StrCat("tensor '", name, "' is larger than the file"));
    }
    const nlohmann::json& offsets = entry["data_offsets"];
    if (!offsets[0].is_number_unsigned() || !offsets[1].is_number_unsigned()) {
      return BadSafetensors(absl::StrCat("tensor '", name, "' has bad data_offsets"));
    }
    const uint64_t begin = offsets[0].get<uint64_t>(), end = offsets[1].get<uint64_t>();
    const uint64_t expected = elements * c10::elementSize(type);
    if (end < begin || end > data.size() || end - begin != expected) {
      return BadSafetensors(absl::StrCat("tensor '", name, "' has data_offsets [", begin, ", ", end,
                                         "] for ", expected, " bytes in ", data.size()));
    }
    at::Tensor tensor = at::empty(shape, at::TensorOptions().dtype(type));
    if (expected > 0) std::memcpy(tensor.data_ptr(), data.data() + begin, expected);
    spans[begin] = {end, name};
    weights.emplace_back(name, std::move(tensor));
  }
  uint64_t covered = 0;
  for (const auto& [begin, span] : spans) {
    if (begin != covered) {
      return BadSafetensors(absl::StrCat("tensor '", span.second, "' starts at byte ", begin,
                                         " of the data, not at ", covered));
    }
    covered = span.first;
  }
  if (covered != data.size()) {
    return BadSafetensors(
        absl::StrCat("the tensors cover ", covered, " of the data's ", data.size(), " bytes"));
  }
  return weights;
}

// LibTorch's unpickler reads an OrderedDict as None, and so torch.save(model.state_dict()) as it
// is; every error says what to do.
absl::Status BadTorchFile(absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat(
      "not a state dict LibTorch can read (", why,
      "); save dict(model.state_dict()) rather than the OrderedDict state_dict() returns, or "
      "save safetensors"));
}

absl::StatusOr<NamedTensors> DecodeTorch(const std::string& bytes) {
  RETURN_IF_ERROR(CheckArchivePickles(bytes));
  c10::IValue value;
  try {
    // What torch::jit::pickle_load does, with a reader that stays in bounds.
    caffe2::serialize::PyTorchStreamReader reader(std::make_unique<BoundedReader>(bytes));
    value = torch::jit::readArchiveAndTensors("data", /*pickle_prefix=*/"", /*tensor_prefix=*/"",
                                              /*type_resolver=*/std::nullopt,
                                              /*obj_loader=*/std::nullopt,
                                              /*device=*/std::nullopt, reader);
  } catch (const std::exception& e) {
    return BadTorchFile(ExceptionMessage(e));
  }
  if (value.isGenericDict()) {
    const c10::Dict<c10::IValue, c10::IValue> dict = value.toGenericDict();
    const auto state_dict = dict.find(c10::IValue("state_dict"));
    if (state_dict != dict.end() && state_dict->value().isGenericDict())
      value = state_dict->value();
  }
  if (!value.isGenericDict()) return BadTorchFile(absl::StrCat("it holds a ", value.tagKind()));
  NamedTensors weights;
  for (const auto& item : value.toGenericDict()) {
    if (!item.key().isString() || !item.value().isTensor()) {
      return BadTorchFile("its dict maps something other than names to tensors");
    }
    const at::Tensor tensor = item.value().toTensor();
    RETURN_IF_ERROR(CheckWeightTensor(item.key().toStringRef(), tensor));
    weights.emplace_back(item.key().toStringRef(), tensor);
  }
  return weights;
}

// What torch.save writes for a dict of tensors: the pickle in data.pkl, each tensor's storage in
// data/<i>, in a zip archive. Unlike torch::jit::pickle_save, without TorchScript's type tags,
// which torch.load's default (weights_only=True) refuses.
std::string SaveAsTorchDoes(const c10::IValue& value) {
  std::string pickled;
  torch::jit::Pickler pickler(
      [&pickled](const char* bytes, size_t size) { pickled.append(bytes, size); },
      /*tensor_table=*/nullptr, /*type_renamer=*/nullptr,
      /*memoized_class_types=*/nullptr, /*get_tensor_id=*/nullptr,
      /*tag_aggregates=*/false);
  pickler.protocol();
  pickler.pushIValue(value);
  pickler.stop();
  std::string archive;
  caffe2::serialize::PyTorchStreamWriter writer([&archive](const void* bytes, size_t size) {
    archive.append(static_cast<const char*>(bytes), size);
    return size;
  });
  torch::jit::writeArchiveAndTensors("data", pickled.data(), pickled.size(), pickler.tensorData(),
                                     writer);
  writer.writeEndOfFile();
  return archive;
}

// A zip file whose records include a TorchScript module's constants: a ddpspawn checkpoint of
// format 1 (the bare LibTorch archive), not a torch.save'd dict.
bool IsModuleArchive(const std::string& bytes) {
  try {
    std::istringstream in(bytes);
    caffe2::serialize::PyTorchStreamReader reader(&in);
    return reader.hasRecord("constants.pkl");
  } catch (const std::exception&) {
    return false;
  }
}

bool IsDdpspawnCheckpoint(const std::string& bytes) {
  return absl::StartsWith(bytes, "ddpspawn-checkpoint-") || IsModuleArchive(bytes);
}

}  // namespace

constexpr NamedValue<WeightsFormat> kWeightsFormatNames[] = {
    {"torch", WeightsFormat::kTorch},
    {"safetensors", WeightsFormat::kSafetensors},
};

absl::string_view WeightsFormatName(WeightsFormat format) {
  return NameOf(kWeightsFormatNames, format);
}

absl::StatusOr<WeightsFormat> ParseWeightsFormat(absl::string_view name) {
  return ParseName(kWeightsFormatNames, "weights format", name);
}

absl::StatusOr<std::string> EncodeWeights(const NamedTensors& weights, WeightsFormat format) {
  if (format == WeightsFormat::kSafetensors) return EncodeSafetensors(weights);
  c10::Dict<std::string, at::Tensor> dict;
  for (const auto& [name, tensor] : weights) dict.insert(name, tensor.detach().cpu().contiguous());
  try {
    return SaveAsTorchDoes(c10::IValue(dict));
  } catch (const std::exception& e) {
    return ExceptionStatus("cannot write the state dict", e);
  }
}

absl::StatusOr<NamedTensors> DecodeWeights(const std::string& bytes) {
  if (LooksLikeSafetensors(bytes)) return DecodeSafetensors(bytes);
  return DecodeTorch(bytes);
}

absl::Status CheckWeightTensor(const std::string& name, const at::Tensor& tensor) {
  const bool plain_dtype =
      std::any_of(SafetensorsDtypes().begin(), SafetensorsDtypes().end(),
                  [&tensor](const auto& dtype) { return dtype.second == tensor.scalar_type(); });
  if (plain_dtype && tensor.layout() == at::kStrided) return absl::OkStatus();
  std::string plain;
  for (const auto& [dtype_name, type] : SafetensorsDtypes()) {
    absl::StrAppend(&plain, plain.empty() ? "" : ", ", c10::toString(type));
  }
  return absl::InvalidArgumentError(
      absl::StrCat("tensor '", name, "' is ", c10::toString(tensor.scalar_type()), " (",
                   c10::str(tensor.layout()), "); weights are dense tensors of ", plain));
}

absl::Status LoadWeights(const NamedTensors& weights, LightningModule& module) {
  std::map<std::string, const at::Tensor*> by_name;
  for (const auto& [name, tensor] : weights) by_name[name] = &tensor;
  const NamedTensors targets = module.named_state();
  for (const auto& [name, tensor] : targets) {  // all checked before any is changed
    const auto found = by_name.find(name);
    if (found == by_name.end()) {
      return absl::InvalidArgumentError(absl::StrCat("the weights have no tensor '", name,
                                                     "': were they saved from another model?"));
    }
    if (found->second->sizes() != tensor.sizes()) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor '", name, "' has shape ", c10::str(found->second->sizes()),
                       " in the weights but ", c10::str(tensor.sizes()), " in the model"));
    }
  }
  if (by_name.size() != targets.size()) {
    for (const auto& [name, tensor] : targets) by_name.erase(name);
    return absl::InvalidArgumentError(absl::StrCat(
        "the weights hold '", by_name.begin()->first, "', which the model does not have (",
        by_name.size(), " such tensors): were they saved from another model?"));
  }
  c10::NoGradGuard no_grad;
  for (const auto& [name, tensor] : targets) tensor.copy_(*by_name.at(name));
  return absl::OkStatus();
}

absl::StatusOr<NamedTensors> ReadWeightsFromAnyFormat(const std::string& bytes) {
  if (IsDdpspawnCheckpoint(bytes)) return ReadCheckpointWeights(bytes);
  return DecodeWeights(bytes);
}

absl::Status LoadWeightsFromAnyFormat(const std::string& bytes, LightningModule& module) {
  if (IsDdpspawnCheckpoint(bytes)) {
    return RestoreCheckpoint(bytes, module, nullptr, nullptr);
  }
  ASSIGN_OR_RETURN(NamedTensors weights, DecodeWeights(bytes));
  return LoadWeights(weights, module);
}

absl::StatusOr<NamedTensors> ReadWeightsAt(const std::string& path) {
  if (IsShardedCheckpoint(path)) return ReadShardedCheckpointWeights(path);
  ASSIGN_OR_RETURN(std::string bytes, ReadWholeFile(path));
  return ReadWeightsFromAnyFormat(bytes);
}

absl::Status LoadWeightsAt(const std::string& path, LightningModule& module) {
  if (IsShardedCheckpoint(path)) {
    ASSIGN_OR_RETURN(NamedTensors weights, ReadShardedCheckpointWeights(path));
    return LoadWeights(weights, module);
  }
  ASSIGN_OR_RETURN(std::string bytes, ReadWholeFile(path));
  return LoadWeightsFromAnyFormat(bytes, module);
}

}  // namespace ddpspawn
