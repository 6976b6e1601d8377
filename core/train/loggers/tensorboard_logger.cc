// TensorBoard's event files (see tensorboard_logger.h). The field numbers are those of
// tensorflow/core/util/event.proto, tensorflow/core/framework/ summary.proto,
// tensorboard/plugins/hparams/{plugin_data,api}.proto and google/protobuf/struct.proto.
#include "core/train/loggers/tensorboard_logger.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "core/util/crc32.h"
#include "core/util/output_dir.h"

namespace ddpspawn {
namespace {

// The protobuf wire format: a field is a key (number << 3 | wire type), then a varint (0), 8
// little-endian bytes (1), a length and bytes (2) or 4 little-endian bytes (5).
void Varint(std::string& out, uint64_t value) {
  while (value >= 0x80) {
    out.push_back(static_cast<char>((value & 0x7f) | 0x80));
    value >>= 7;
  }
  out.push_back(static_cast<char>(value));
}
void Key(std::string& out, int field, int wire_type) {
  Varint(out, static_cast<uint64_t>(field) << 3 | static_cast<uint64_t>(wire_type));
}
void LittleEndian(std::string& out, uint64_t bits, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>(bits >> (8 * i)));
}
void BytesField(std::string& out, int field, absl::string_view bytes) {
  Key(out, field, 2);
  Varint(out, bytes.size());
  out.append(bytes.data(), bytes.size());
}
void DoubleField(std::string& out, int field, double value) {
  uint64_t bits = 0;
  std::memcpy(&bits, &value, sizeof bits);
  Key(out, field, 1);
  LittleEndian(out, bits, 8);
}
void FloatField(std::string& out, int field, float value) {
  uint32_t bits = 0;
  std::memcpy(&bits, &value, sizeof bits);
  Key(out, field, 5);
  LittleEndian(out, bits, 4);
}
void VarintField(std::string& out, int field, uint64_t value) {
  Key(out, field, 0);
  Varint(out, value);
}

// tensorflow.Event with wall_time (1), step (2) and one of file_version (3) or summary (5).
std::string Event(int64_t step, int payload_field, absl::string_view payload) {
  std::string event;
  DoubleField(event, 1, absl::ToDoubleSeconds(absl::Now() - absl::UnixEpoch()));
  VarintField(event, 2, static_cast<uint64_t>(step));
  BytesField(event, payload_field, payload);
  return event;
}

// google.protobuf.Value: number_value (2), string_value (3) or bool_value (4).
std::string ProtobufValue(const std::string& text) {
  std::string value;
  double number = 0;
  if (text == "true" || text == "false") {
    VarintField(value, 4, text == "true" ? 1 : 0);
  } else if (absl::SimpleAtod(text, &number)) {
    DoubleField(value, 2, number);
  } else {
    BytesField(value, 3, text);
  }
  return value;
}

class TensorBoardLogger : public MetricLogger {
 public:
  TensorBoardLogger(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}
  ~TensorBoardLogger() override { close(fd_); }

  absl::Status WriteEvent(absl::string_view event) {
    const std::string record = TfRecord(event);
    for (size_t done = 0; done < record.size();) {
      const ssize_t n = write(fd_, record.data() + done, record.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        return absl::InternalError(
            absl::StrCat("cannot write ", path_, ": ", std::strerror(errno)));
      }
      done += static_cast<size_t>(n);
    }
    return absl::OkStatus();
  }

  // The HParams plugin's session start: Summary.Value (tag 1, metadata 9) whose SummaryMetadata's
  // plugin_data (1) names the plugin (1) and holds HParamsPluginData (2), whose session_start_info
  // (3) maps (1) each name to a Value and says when it started (5).
  absl::Status LogHyperparameters(const std::map<std::string, std::string>& params) override {
    std::string session;
    for (const auto& [name, text] : params) {
      std::string entry;
      BytesField(entry, 1, name);
      BytesField(entry, 2, ProtobufValue(text));
      BytesField(session, 1, entry);
    }
    DoubleField(session, 5, absl::ToDoubleSeconds(absl::Now() - absl::UnixEpoch()));
    std::string plugin_data_content;
    BytesField(plugin_data_content, 3, session);
    std::string plugin_data;
    BytesField(plugin_data, 1, "hparams");
    BytesField(plugin_data, 2, plugin_data_content);
    std::string metadata;
    BytesField(metadata, 1, plugin_data);
    std::string value;
    BytesField(value, 1, "_hparams_/session_start_info");
    BytesField(value, 9, metadata);
    std::string summary;
    BytesField(summary, 1, value);
    return WriteEvent(Event(0, 5, summary));
  }

  // A scalar: Summary.Value's tag (1) and simple_value (2).
  absl::Status LogMetric(int64_t /*epoch*/, int64_t step, const std::string& name,
                         double value) override {
    std::string scalar;
    BytesField(scalar, 1, name);
    FloatField(scalar, 2, static_cast<float>(value));
    std::string summary;
    BytesField(summary, 1, scalar);
    return WriteEvent(Event(step, 5, summary));
  }

 private:
  const int fd_;
  const std::string path_;
};

}  // namespace

std::string TfRecord(absl::string_view data) {
  auto masked = [](absl::string_view bytes) {
    const uint32_t crc = Crc32c(bytes);
    return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
  };
  std::string length;
  LittleEndian(length, data.size(), 8);
  std::string record = length;
  LittleEndian(record, masked(length), 4);
  record.append(data.data(), data.size());
  LittleEndian(record, masked(data), 4);
  return record;
}

absl::StatusOr<std::unique_ptr<MetricLogger>> MakeTensorBoardLogger(const std::string& dir) {
  if (absl::Status prepared = PrepareOutputDirectory(dir); !prepared.ok()) return prepared;
  char host[256] = "localhost";
  gethostname(host, sizeof host - 1);
  const int64_t seconds = absl::ToUnixSeconds(absl::Now());
  for (int n = 0; n < 100; ++n) {
    std::string path =
        absl::StrCat(dir, "/events.out.tfevents.", seconds, ".", host, ".", getpid(), ".", n);
    const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd < 0 && errno == EEXIST) continue;
    if (fd < 0) {
      return absl::InternalError(absl::StrCat("cannot create ", path, ": ", std::strerror(errno)));
    }
    auto logger = std::make_unique<TensorBoardLogger>(fd, std::move(path));
    if (absl::Status s = logger->WriteEvent(Event(0, 3, "brain.Event:2")); !s.ok()) return s;
    return logger;
  }
  return absl::AlreadyExistsError(
      absl::StrCat("100 event files of this process and second already exist in ", dir));
}

}  // namespace ddpspawn
