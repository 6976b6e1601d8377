// Loading datasets from .npy and CSV files, and splitting them (see dataset.h). The .npy reader
// follows NumPy's format description (numpy/lib/format.py): magic, version, header length, a Python
// dict literal with 'descr', 'fortran_order' and 'shape', then the raw data.
#include "core/train/data/dataset.h"

#include <ATen/ATen.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "core/util/files.h"
#include "core/util/status_macros.h"

namespace ddpspawn {
namespace {

// .npy data is little-endian (we reject '>'), copied as is into tensors.
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "the .npy reader assumes a little-endian host");

constexpr absl::string_view kNpyMagic("\x93NUMPY", 6);
constexpr char kSupportedDtypes[] = "'<f4', '<f8', '|i1', '<i2', '<i4', '<i8', '|u1', '|b1'";

absl::Status Invalid(const std::string& path, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(path, ": ", what));
}

// ---------------------------------------------------------------------------
// .npy

struct NpyHeader {
  std::string descr;
  bool fortran_order = false;
  std::vector<int64_t> shape;
};

std::string ShapeText(const std::vector<int64_t>& shape) {
  // Python's tuple notation: (), (3,), (3, 4).
  if (shape.size() == 1) return absl::StrCat("(", shape[0], ",)");
  return absl::StrCat("(", absl::StrJoin(shape, ", "), ")");
}

// A parser for the dict literal in a .npy header, e.g.
// {'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }
class NpyHeaderParser {
 public:
  explicit NpyHeaderParser(absl::string_view text) : text_(text) {}

  // On failure, the returned message says what is wrong (without the path).
  absl::StatusOr<NpyHeader> Parse() {
    NpyHeader header;
    bool has_descr = false, has_fortran_order = false, has_shape = false;
    if (!Consume('{')) return Error("expected '{'");
    while (!Consume('}')) {
      ASSIGN_OR_RETURN(std::string key, ParseString());
      if (!Consume(':')) return Error("expected ':'");
      if (key == "descr") {
        SkipSpace();
        if (pos_ < text_.size() && (text_[pos_] == '[' || text_[pos_] == '{'))
          return absl::InvalidArgumentError(absl::StrCat(
              "structured dtypes are not supported (supported: ", kSupportedDtypes, ")"));
        ASSIGN_OR_RETURN(std::string descr, ParseString());
        header.descr = descr;
        has_descr = true;
      } else if (key == "fortran_order") {
        if (ConsumeWord("True")) {
          header.fortran_order = true;
        } else if (ConsumeWord("False")) {
          header.fortran_order = false;
        } else {
          return Error("expected True or False for 'fortran_order'");
        }
        has_fortran_order = true;
      } else if (key == "shape") {
        RETURN_IF_ERROR(ParseShape(&header.shape));
        has_shape = true;
      } else {
        return absl::InvalidArgumentError(absl::StrCat("unexpected key '", key, "' in the header"));
      }
      if (!Consume(',')) {
        if (!Consume('}')) return Error("expected ',' or '}'");
        break;
      }
    }
    if (!has_descr || !has_fortran_order || !has_shape)
      return absl::InvalidArgumentError(
          "the header lacks one of 'descr', 'fortran_order', 'shape'");
    return header;
  }

 private:
  absl::Status Error(absl::string_view what) const {
    return absl::InvalidArgumentError(absl::StrCat("malformed header (", what, " at offset ", pos_,
                                                   " of \"", absl::StripAsciiWhitespace(text_),
                                                   "\")"));
  }

  void SkipSpace() {
    while (pos_ < text_.size() && absl::ascii_isspace(text_[pos_])) ++pos_;
  }

  bool Consume(char c) {
    SkipSpace();
    if (pos_ < text_.size() && text_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }

  bool ConsumeWord(absl::string_view word) {
    SkipSpace();
    if (!absl::StartsWith(text_.substr(pos_), word)) return false;
    pos_ += word.size();
    return true;
  }

  // A Python string literal in single or double quotes (no escapes needed).
  absl::StatusOr<std::string> ParseString() {
    SkipSpace();
    if (pos_ >= text_.size() || (text_[pos_] != '\'' && text_[pos_] != '"'))
      return Error("expected a quoted string");
    char quote = text_[pos_++];
    size_t end = text_.find(quote, pos_);
    if (end == absl::string_view::npos) return Error("unterminated string");
    std::string value(text_.substr(pos_, end - pos_));
    pos_ = end + 1;
    return value;
  }

  // A tuple of non-negative integers: (), (3,), (3, 4). Python 2 wrote 3L.
  absl::Status ParseShape(std::vector<int64_t>* shape) {
    if (!Consume('(')) return Error("expected '(' for 'shape'");
    while (!Consume(')')) {
      SkipSpace();
      size_t start = pos_;
      while (pos_ < text_.size() && absl::ascii_isdigit(text_[pos_])) ++pos_;
      int64_t dim;
      if (!absl::SimpleAtoi(text_.substr(start, pos_ - start), &dim))
        return Error("expected a non-negative integer in 'shape'");
      if (pos_ < text_.size() && text_[pos_] == 'L') ++pos_;
      shape->push_back(dim);
      if (!Consume(',')) {
        if (!Consume(')')) return Error("expected ',' or ')' in 'shape'");
        break;
      }
    }
    return absl::OkStatus();
  }

  absl::string_view text_;
  size_t pos_ = 0;
};

struct NpyDtype {
  at::ScalarType type;
  int64_t item_size;
};

// Maps a 'descr' such as '<f4' to a tensor dtype; the message names the dtype and, when it is not
// supported, the supported ones.
absl::StatusOr<NpyDtype> ParseDescr(const std::string& descr) {
  struct Known {
    const char* kind_and_size;
    at::ScalarType type;
  };
  static constexpr Known kKnown[] = {
      {"f4", at::kFloat}, {"f8", at::kDouble}, {"i1", at::kChar}, {"i2", at::kShort},
      {"i4", at::kInt},   {"i8", at::kLong},   {"u1", at::kByte}, {"b1", at::kBool},
  };
  if (descr.size() == 3 && absl::StrContains("<>|=", descr[0])) {
    absl::string_view kind_and_size = absl::string_view(descr).substr(1);
    for (const Known& known : kKnown) {
      if (kind_and_size != known.kind_and_size) continue;
      int64_t item_size = descr[2] - '0';
      if (descr[0] == '>' && item_size > 1)
        return absl::InvalidArgumentError(absl::StrCat(
            "big-endian data ('", descr,
            "') is not supported; save it little-endian, e.g. np.save(path, array.astype('<",
            kind_and_size, "'))"));
      return NpyDtype{known.type, item_size};
    }
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unsupported dtype '", descr, "' (supported: ", kSupportedDtypes, ")"));
}

uint32_t ReadLittleEndian(absl::string_view bytes) {
  uint32_t value = 0;
  for (size_t i = bytes.size(); i-- > 0;)
    value = (value << 8) | static_cast<unsigned char>(bytes[i]);
  return value;
}

// Parses .npy bytes; errors are InvalidArgument naming `path`.
absl::StatusOr<at::Tensor> ParseNpy(const std::string& path, absl::string_view bytes) {
  if (bytes.size() < kNpyMagic.size() || bytes.substr(0, kNpyMagic.size()) != kNpyMagic)
    return Invalid(path, "not a .npy file (it does not start with \"\\x93NUMPY\")");
  if (bytes.size() < 8) return Invalid(path, "truncated .npy preamble");
  int major = static_cast<unsigned char>(bytes[6]);
  int minor = static_cast<unsigned char>(bytes[7]);
  if (major < 1 || major > 3 || minor != 0)
    return Invalid(path, absl::StrCat("unsupported .npy format version ", major, ".", minor,
                                      " (supported: 1.0, 2.0, 3.0)"));
  size_t length_size = major == 1 ? 2 : 4;
  size_t header_start = 8 + length_size;
  if (bytes.size() < header_start) return Invalid(path, "truncated .npy preamble");
  size_t header_length = ReadLittleEndian(bytes.substr(8, length_size));
  if (bytes.size() - header_start < header_length)
    return Invalid(path, absl::StrCat("truncated header (expects ", header_length, " bytes, has ",
                                      bytes.size() - header_start, ")"));
  absl::StatusOr<NpyHeader> header =
      NpyHeaderParser(bytes.substr(header_start, header_length)).Parse();
  if (!header.ok()) return Invalid(path, header.status().message());
  absl::StatusOr<NpyDtype> dtype = ParseDescr(header->descr);
  if (!dtype.ok()) return Invalid(path, dtype.status().message());
  if (header->fortran_order)
    return Invalid(
        path,
        "fortran_order is True; only C order is supported (save np.ascontiguousarray(array))");

  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  int64_t count = 1;
  for (int64_t dim : header->shape) {
    if (dim != 0 && count > kMax / dim)
      return Invalid(path, absl::StrCat("shape ", ShapeText(header->shape), " is too large"));
    count *= dim;
  }
  if (count > kMax / dtype->item_size)
    return Invalid(path, absl::StrCat("shape ", ShapeText(header->shape), " is too large"));
  int64_t expected = count * dtype->item_size;
  absl::string_view data = bytes.substr(header_start + header_length);
  if (static_cast<int64_t>(data.size()) != expected)
    return Invalid(
        path, absl::StrCat("expects ", expected, " bytes of data for shape ",
                           ShapeText(header->shape), " of ", header->descr, ", has ", data.size()));

  at::Tensor tensor = at::empty(header->shape, at::TensorOptions().dtype(dtype->type));
  if (expected > 0) std::memcpy(tensor.data_ptr(), data.data(), expected);
  return tensor;
}

// ---------------------------------------------------------------------------
// CSV

// Splits one line at `delimiter` outside double quotes ("" inside quotes is a quote), and strips
// spaces around each field. False on an unterminated quote.
bool SplitCsvLine(absl::string_view line, char delimiter, std::vector<std::string>* fields) {
  fields->clear();
  std::string field;
  bool in_quotes = false;
  for (size_t i = 0; i < line.size(); ++i) {
    char c = line[i];
    if (in_quotes) {
      if (c != '"') {
        field += c;
      } else if (i + 1 < line.size() && line[i + 1] == '"') {
        field += '"';
        ++i;
      } else {
        in_quotes = false;
      }
    } else if (c == '"') {
      in_quotes = true;
    } else if (c == delimiter) {
      fields->emplace_back(absl::StripAsciiWhitespace(field));
      field.clear();
    } else {
      field += c;
    }
  }
  fields->emplace_back(absl::StripAsciiWhitespace(field));
  return !in_quotes;
}

bool ParseNumber(absl::string_view text, double* value) {
  return !text.empty() && absl::SimpleAtod(text, value);
}

// Why a value cannot be data (it is stored as float32), or null. SimpleAtod reads "nan", "inf" and
// 1e400 (as inf); training on any of them gives NaN.
const char* NonFinite(double value) {
  if (!std::isfinite(value)) return "is not a finite number (NaN and infinities are refused)";
  if (std::fabs(value) > std::numeric_limits<float>::max())
    return "is outside float32's range (about +-3.4e38)";
  return nullptr;
}

// The label as an exact integer, if it is one: parsed as an integer, or a number with an integral
// value in int64's range (np.savetxt writes 1.0e+00).
bool IntegralLabel(absl::string_view text, double value, int64_t* integer) {
  if (absl::SimpleAtoi(text, integer)) return true;
  // 2^63 is exact in double; the range is [-2^63, 2^63).
  constexpr double kLimit = 9223372036854775808.0;
  if (!std::isfinite(value) || std::trunc(value) != value || value < -kLimit || value >= kLimit)
    return false;
  *integer = static_cast<int64_t>(value);
  return true;
}

// What LoadCsvDataset has read of a CSV file so far.
struct CsvTable {
  std::vector<std::string> header_names;  // when the file has a header
  size_t columns = 0;
  size_t first_line = 0;  // the line that set `columns`
  size_t label_index = 0;
  std::vector<float> features;
  std::vector<double> label_values;
  std::vector<int64_t> label_integers;
  bool labels_integral = true;
};

// "file:line", for errors.
std::string CsvWhere(const std::string& path, size_t line_number) {
  return absl::StrCat(path, ":", line_number);
}

// "column 3 (\"name\")": a column for errors, with its header name when it has one.
std::string CsvColumnText(const CsvTable& table, size_t column) {
  std::string text = absl::StrCat("column ", column + 1);
  if (column < table.header_names.size() && !table.header_names[column].empty())
    absl::StrAppend(&text, " (\"", table.header_names[column], "\")");
  return text;
}

// Sets `table`'s columns, label column and header names from the first row; true: a header.
absl::StatusOr<bool> ReadFirstCsvRow(const std::string& path, size_t line_number,
                                     const CsvOptions& options,
                                     const std::vector<std::string>& fields, CsvTable& table) {
  table.columns = fields.size();
  table.first_line = line_number;
  if (table.columns < 2)
    return absl::InvalidArgumentError(
        absl::StrCat(CsvWhere(path, line_number), ": has ", table.columns,
                     " field; a dataset needs at least 2 columns (features and a label) - is "
                     "the delimiter '",
                     std::string(1, options.delimiter), "' right?"));
  int label_column = options.label_column < 0
                         ? static_cast<int>(table.columns) + options.label_column
                         : options.label_column;
  if (label_column < 0 || label_column >= static_cast<int>(table.columns))
    return absl::InvalidArgumentError(absl::StrCat(path, ": label_column ", options.label_column,
                                                   " is out of range for ", table.columns,
                                                   " columns"));
  table.label_index = static_cast<size_t>(label_column);
  bool header = options.header == CsvOptions::Header::kYes;
  if (options.header == CsvOptions::Header::kAuto) {
    double unused;
    for (const std::string& field : fields)
      if (!ParseNumber(field, &unused)) header = true;
  }
  if (header) table.header_names = fields;
  return header;
}

// Appends a data row's features and label to `table`; errors name the line and column.
absl::Status AddCsvRow(const std::string& path, size_t line_number, const CsvOptions& options,
                       const std::vector<std::string>& fields, CsvTable& table) {
  for (size_t column = 0; column < table.columns; ++column) {
    double value;
    if (!ParseNumber(fields[column], &value))
      return absl::InvalidArgumentError(absl::StrCat(CsvWhere(path, line_number), ": ",
                                                     CsvColumnText(table, column), ": \"",
                                                     fields[column], "\" is not a number"));
    if (const char* problem = NonFinite(value); problem != nullptr)
      return absl::InvalidArgumentError(absl::StrCat(CsvWhere(path, line_number), ": ",
                                                     CsvColumnText(table, column), ": \"",
                                                     fields[column], "\" ", problem));
    if (column != table.label_index) {
      table.features.push_back(static_cast<float>(value));
      continue;
    }
    table.label_values.push_back(value);
    int64_t integer = 0;
    if (IntegralLabel(fields[column], value, &integer)) {
      table.label_integers.push_back(integer);
    } else if (options.label_type == CsvOptions::LabelType::kInt64) {
      return absl::InvalidArgumentError(absl::StrCat(
          CsvWhere(path, line_number), ": ", CsvColumnText(table, column), ": label \"",
          fields[column], "\" is not an integer (label_type is kInt64)"));
    } else {
      table.labels_integral = false;
    }
  }
  return absl::OkStatus();
}

// `table`'s `rows` data rows as a Dataset: float32 features, int64 or float32 labels.
Dataset CsvTableDataset(const std::string& path, const CsvOptions& options, const CsvTable& table,
                        int64_t rows) {
  Dataset dataset;
  dataset.source = path;
  dataset.features = at::empty({rows, static_cast<int64_t>(table.columns) - 1}, at::kFloat);
  std::memcpy(dataset.features.data_ptr<float>(), table.features.data(),
              table.features.size() * sizeof(float));
  bool integer_labels =
      options.label_type == CsvOptions::LabelType::kInt64 ||
      (options.label_type == CsvOptions::LabelType::kAuto && table.labels_integral);
  if (integer_labels) {
    dataset.labels = at::empty({rows}, at::kLong);
    std::memcpy(dataset.labels.data_ptr<int64_t>(), table.label_integers.data(),
                rows * sizeof(int64_t));
  } else {
    dataset.labels = at::empty({rows}, at::kFloat);
    float* labels = dataset.labels.data_ptr<float>();
    for (int64_t i = 0; i < rows; ++i) labels[i] = static_cast<float>(table.label_values[i]);
  }
  return dataset;
}

// ---------------------------------------------------------------------------
// Checking values

// "[3, 2]": the index of element `flat` (in C order) of a tensor of `shape`, as NumPy writes it.
std::string IndexText(int64_t flat, at::IntArrayRef shape) {
  std::vector<int64_t> index(shape.size());
  for (size_t d = shape.size(); d-- > 0;) {
    index[d] = flat % shape[d];
    flat /= shape[d];
  }
  return absl::StrCat("[", absl::StrJoin(index, ", "), "]");
}

// "row 3 (counted from 0), element [3, 2]", for errors about an element.
std::string ElementText(int64_t flat, at::IntArrayRef shape) {
  int64_t row_size = 1;
  for (size_t d = 1; d < shape.size(); ++d) row_size *= shape[d];
  const int64_t row = row_size == 0 ? 0 : flat / row_size;
  return absl::StrCat("row ", row, " (counted from 0), element ", IndexText(flat, shape));
}

// The first element where `mask` is true (in C order), or -1.
int64_t FirstTrue(const at::Tensor& mask) {
  at::Tensor hits = mask.reshape({-1}).nonzero();
  return hits.size(0) == 0 ? -1 : hits[0][0].item<int64_t>();
}

// OK, or InvalidArgument naming `path` and the first element of `converted` (`original` as float32)
// that is NaN or infinite: one of `original`'s, or one outside float32's range.
absl::Status CheckFinite(const std::string& path, const at::Tensor& original,
                         const at::Tensor& converted) {
  if (!at::isFloatingType(original.scalar_type())) return absl::OkStatus();
  const int64_t bad = FirstTrue(at::logical_not(at::isfinite(converted)));
  if (bad < 0) return absl::OkStatus();
  const double value = original.reshape({-1})[bad].item<double>();
  const char* problem = NonFinite(value);
  return Invalid(path, absl::StrCat(ElementText(bad, original.sizes()), ": ", value, " ",
                                    problem ? problem : "is not finite in float32"));
}

// Labels as int64 class indices: [n] or [n, 1] (flattened to [n]); float labels must be integral
// values (finite ones, see CheckFinite).
absl::StatusOr<at::Tensor> ClassLabels(const std::string& path, const at::Tensor& labels) {
  if (labels.dim() == 2 && labels.size(1) != 1)
    return Invalid(path, absl::StrCat("integer labels must have shape (n,) or (n, 1), not ",
                                      ShapeText(labels.sizes().vec())));
  at::Tensor flat = labels.reshape({labels.size(0)});
  if (at::isFloatingType(flat.scalar_type())) {
    at::Tensor values = flat.to(at::kDouble);
    constexpr double kLimit = 9223372036854775808.0;  // 2^63: int64's range is [-2^63, 2^63)
    const int64_t bad = FirstTrue(
        values.ne(values.trunc()).logical_or(values.ge(kLimit)).logical_or(values.lt(-kLimit)));
    if (bad >= 0)
      return Invalid(
          path, absl::StrCat("row ", bad, " (counted from 0): label ", values[bad].item<double>(),
                             " is not an integer (class labels must be)"));
  }
  return flat.to(at::kLong);
}

}  // namespace

absl::StatusOr<at::Tensor> LoadNpy(const std::string& path) {
  ASSIGN_OR_RETURN(std::string bytes, ReadWholeFile(path));
  return ParseNpy(path, bytes);
}

absl::StatusOr<Dataset> LoadNpyDataset(const std::string& features_path,
                                       const std::string& labels_path, LabelType label_type) {
  ASSIGN_OR_RETURN(at::Tensor features, LoadNpy(features_path));
  ASSIGN_OR_RETURN(at::Tensor labels, LoadNpy(labels_path));
  if (features.dim() < 1)
    return Invalid(features_path,
                   "features must have at least one dimension (one row per sample), not shape ()");
  if (labels.dim() < 1 || labels.dim() > 2)
    return Invalid(labels_path, absl::StrCat("labels must have shape (n,) or (n, k), not ",
                                             ShapeText(labels.sizes().vec())));
  if (features.size(0) != labels.size(0))
    return absl::InvalidArgumentError(absl::StrCat(
        "features and labels differ in size: ", features_path, " has ", features.size(0),
        " rows (shape ", ShapeText(features.sizes().vec()), "), ", labels_path, " has ",
        labels.size(0), " (shape ", ShapeText(labels.sizes().vec()), ")"));

  Dataset dataset;
  dataset.features = features.to(at::kFloat);
  RETURN_IF_ERROR(CheckFinite(features_path, features, dataset.features));
  const bool float_labels = at::isFloatingType(labels.scalar_type());
  if (float_labels) {
    RETURN_IF_ERROR(CheckFinite(labels_path, labels, labels.to(at::kFloat)));
  }
  if (label_type == LabelType::kAuto)
    label_type = float_labels ? LabelType::kFloat32 : LabelType::kInt64;
  if (label_type == LabelType::kFloat32) {
    dataset.labels = labels.to(at::kFloat);
  } else {
    ASSIGN_OR_RETURN(at::Tensor classes, ClassLabels(labels_path, labels));
    dataset.labels = std::move(classes);
  }
  dataset.source = absl::StrCat(features_path, " + ", labels_path);
  return dataset;
}

absl::StatusOr<Dataset> LoadCsvDataset(const std::string& path, const CsvOptions& options) {
  ASSIGN_OR_RETURN(std::string contents, ReadWholeFile(path));

  CsvTable table;
  std::vector<std::string> fields;
  size_t line_number = 0;
  for (absl::string_view line : absl::StrSplit(contents, '\n')) {
    ++line_number;
    absl::ConsumeSuffix(&line, "\r");
    if (absl::StripAsciiWhitespace(line).empty()) continue;
    if (!SplitCsvLine(line, options.delimiter, &fields))
      return absl::InvalidArgumentError(
          absl::StrCat(CsvWhere(path, line_number), ": unterminated double quote"));

    if (table.columns == 0) {  // the first row: header or data
      ASSIGN_OR_RETURN(bool header, ReadFirstCsvRow(path, line_number, options, fields, table));
      if (header) continue;
    } else if (fields.size() != table.columns) {
      return absl::InvalidArgumentError(
          absl::StrCat(CsvWhere(path, line_number), ": has ", fields.size(), " fields, expected ",
                       table.columns, " (as on line ", table.first_line, ")"));
    }

    RETURN_IF_ERROR(AddCsvRow(path, line_number, options, fields, table));
  }

  if (table.columns == 0) return Invalid(path, "the file is empty (no rows)");
  int64_t rows = static_cast<int64_t>(table.label_values.size());
  if (rows == 0) return Invalid(path, "has a header row but no data rows");
  return CsvTableDataset(path, options, table, rows);
}

absl::StatusOr<std::pair<Dataset, Dataset>> SplitDataset(const Dataset& dataset, int64_t count) {
  if (!dataset.features.defined() || dataset.features.dim() < 1)
    return absl::InvalidArgumentError(
        absl::StrCat("cannot split ", dataset.source, ": it has no features tensor"));
  int64_t size = dataset.size();
  if (count < 0 || count > size)
    return absl::InvalidArgumentError(absl::StrCat("cannot split ", dataset.source, " after row ",
                                                   count, ": it has ", size,
                                                   " rows (the count must be in [0, ", size, "])"));
  auto part = [&](int64_t start, int64_t length) {
    Dataset result;
    result.features = dataset.features.narrow(0, start, length);
    if (dataset.labels.defined()) result.labels = dataset.labels.narrow(0, start, length);
    result.source = absl::StrCat(dataset.source, "[", start, ":", start + length, "]");
    return result;
  };
  return std::make_pair(part(0, count), part(count, size - count));
}

absl::StatusOr<std::vector<at::Tensor>> ReadBatch(const Dataset& data,
                                                  const std::vector<int64_t>& indices,
                                                  int64_t begin, int64_t end, int workers) {
  std::vector<int64_t> chosen(indices.begin() + begin, indices.begin() + end);
  if (data.samples != nullptr) {
    absl::StatusOr<std::vector<at::Tensor>> batch = ReadSamples(*data.samples, chosen, workers);
    if (!batch.ok()) {
      return absl::Status(batch.status().code(),
                          absl::StrCat(data.source, ": ", batch.status().message()));
    }
    return batch;
  }
  at::Tensor index = at::tensor(chosen, at::kLong);
  return std::vector<at::Tensor>{data.features.index_select(0, index),
                                 data.labels.index_select(0, index)};
}

}  // namespace ddpspawn
