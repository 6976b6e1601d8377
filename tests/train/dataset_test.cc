// Loading datasets: .npy files written byte by byte here (and one by NumPy itself), every .npy
// error, CSV parsing and its errors, NaN and infinities refused, label types, and splitting.
#include "core/train/data/dataset.h"

#include <ATen/ATen.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/venv.h"

namespace ddpspawn {
namespace {

using ::testing::HasSubstr;

std::string TempPath(const std::string& name) {
  return absl::StrCat(testing::TempDir(), "/", name);
}

std::string WriteFile(const std::string& name, const std::string& bytes) {
  std::string path = TempPath(name);
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  out.close();
  EXPECT_TRUE(out.good()) << "cannot write " << path;
  return path;
}

template <typename T>
std::string RawBytes(const std::vector<T>& values) {
  std::string bytes(values.size() * sizeof(T), '\0');
  if (!values.empty()) std::memcpy(&bytes[0], values.data(), bytes.size());
  return bytes;
}

// A .npy file as NumPy writes it: magic, version, little-endian header length (2 bytes for version
// 1, 4 for 2 and 3), the dict padded with spaces and a newline to a multiple of 64 bytes, then the
// data.
std::string NpyBytes(const std::string& descr, const std::string& shape, const std::string& data,
                     bool fortran_order = false, int major = 1) {
  std::string dict =
      absl::StrCat("{'descr': '", descr, "', 'fortran_order': ", fortran_order ? "True" : "False",
                   ", 'shape': ", shape, ", }");
  size_t preamble = major == 1 ? 10 : 12;
  size_t total = preamble + dict.size() + 1;
  dict.append((64 - total % 64) % 64, ' ');
  dict.push_back('\n');
  std::string bytes("\x93NUMPY", 6);
  bytes.push_back(static_cast<char>(major));
  bytes.push_back('\0');
  size_t length = dict.size();
  for (size_t i = 0; i < preamble - 8; ++i)
    bytes.push_back(static_cast<char>((length >> (8 * i)) & 0xff));
  return bytes + dict + data;
}

TEST(LoadNpyTest, Float32Matrix) {
  std::vector<float> values = {1.5f, -2.f, 3.25f, 0.f, 1e6f, -0.125f};
  std::string path = WriteFile("f4.npy", NpyBytes("<f4", "(2, 3)", RawBytes(values)));
  absl::StatusOr<at::Tensor> tensor = LoadNpy(path);
  ASSERT_TRUE(tensor.ok()) << tensor.status();
  EXPECT_EQ(tensor->scalar_type(), at::kFloat);
  EXPECT_EQ(tensor->sizes().vec(), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(tensor->index({1, 1}).item<float>(), 1e6f);
  EXPECT_TRUE(tensor->equal(at::tensor(values, at::kFloat).reshape({2, 3})));
}

TEST(LoadNpyTest, Float64Vector) {
  std::vector<double> values = {0.1, 0.2, -1e300, 42.0};
  std::string path = WriteFile("f8.npy", NpyBytes("<f8", "(4,)", RawBytes(values)));
  absl::StatusOr<at::Tensor> tensor = LoadNpy(path);
  ASSERT_TRUE(tensor.ok()) << tensor.status();
  EXPECT_EQ(tensor->scalar_type(), at::kDouble);
  EXPECT_EQ(tensor->sizes().vec(), (std::vector<int64_t>{4}));
  for (int i = 0; i < 4; ++i) EXPECT_EQ(tensor->index({i}).item<double>(), values[i]);
}

TEST(LoadNpyTest, Int64ThreeDimensions) {
  std::vector<int64_t> values;
  for (int64_t i = 0; i < 12; ++i) values.push_back(i * (int64_t{1} << 40));
  std::string path = WriteFile("i8.npy", NpyBytes("<i8", "(2, 3, 2)", RawBytes(values)));
  absl::StatusOr<at::Tensor> tensor = LoadNpy(path);
  ASSERT_TRUE(tensor.ok()) << tensor.status();
  EXPECT_EQ(tensor->scalar_type(), at::kLong);
  EXPECT_EQ(tensor->sizes().vec(), (std::vector<int64_t>{2, 3, 2}));
  EXPECT_EQ(tensor->index({1, 2, 1}).item<int64_t>(), 11 * (int64_t{1} << 40));
}

TEST(LoadNpyTest, SmallerIntegerTypesAndScalar) {
  std::vector<int32_t> i4 = {-1, 7};
  std::vector<int16_t> i2 = {-300, 300};
  std::vector<uint8_t> u1 = {0, 255, 9};
  absl::StatusOr<at::Tensor> a =
      LoadNpy(WriteFile("i4.npy", NpyBytes("<i4", "(2,)", RawBytes(i4))));
  absl::StatusOr<at::Tensor> b =
      LoadNpy(WriteFile("i2.npy", NpyBytes("<i2", "(2,)", RawBytes(i2))));
  absl::StatusOr<at::Tensor> c =
      LoadNpy(WriteFile("u1.npy", NpyBytes("|u1", "(3,)", RawBytes(u1))));
  absl::StatusOr<at::Tensor> scalar =
      LoadNpy(WriteFile("scalar.npy", NpyBytes("<f8", "()", RawBytes(std::vector<double>{2.5}))));
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(b.ok()) << b.status();
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_TRUE(scalar.ok()) << scalar.status();
  EXPECT_EQ(a->scalar_type(), at::kInt);
  EXPECT_EQ(a->index({0}).item<int32_t>(), -1);
  EXPECT_EQ(b->scalar_type(), at::kShort);
  EXPECT_EQ(b->index({0}).item<int16_t>(), -300);
  EXPECT_EQ(c->scalar_type(), at::kByte);
  EXPECT_EQ(c->index({1}).item<uint8_t>(), 255);
  EXPECT_EQ(scalar->dim(), 0);
  EXPECT_EQ(scalar->item<double>(), 2.5);
}

TEST(LoadNpyTest, Version2Header) {
  std::vector<float> values = {1, 2, 3};
  std::string path =
      WriteFile("v2.npy", NpyBytes("<f4", "(3,)", RawBytes(values), false, /*major=*/2));
  absl::StatusOr<at::Tensor> tensor = LoadNpy(path);
  ASSERT_TRUE(tensor.ok()) << tensor.status();
  EXPECT_EQ(tensor->index({2}).item<float>(), 3.f);
}

TEST(LoadNpyTest, WrittenByNumPy) {
  const std::string python = testing_support::VenvPython();
  if (std::system((python + " -c 'import numpy' >/dev/null 2>&1").c_str()) != 0)
    FAIL() << python << " has no numpy (run tools/setup)";
  std::string path = TempPath("numpy.npy");
  std::string command = absl::StrCat(python, " -c \"import numpy as np; np.save('", path,
                                     "', np.arange(12, dtype=np.float64).reshape(3, 4))\"");
  ASSERT_EQ(std::system(command.c_str()), 0) << command;
  absl::StatusOr<at::Tensor> tensor = LoadNpy(path);
  ASSERT_TRUE(tensor.ok()) << tensor.status();
  EXPECT_EQ(tensor->scalar_type(), at::kDouble);
  EXPECT_EQ(tensor->sizes().vec(), (std::vector<int64_t>{3, 4}));
  EXPECT_TRUE(tensor->equal(at::arange(12, at::kDouble).reshape({3, 4})));
}

TEST(LoadNpyTest, TruncatedData) {
  std::vector<float> values = {1, 2, 3, 4, 5};  // 20 bytes, 24 expected
  std::string path = WriteFile("truncated.npy", NpyBytes("<f4", "(2, 3)", RawBytes(values)));
  absl::StatusOr<at::Tensor> tensor = LoadNpy(path);
  ASSERT_FALSE(tensor.ok());
  EXPECT_EQ(tensor.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(tensor.status().message(), HasSubstr(path));
  EXPECT_THAT(tensor.status().message(),
              HasSubstr("expects 24 bytes of data for shape (2, 3) of <f4, has 20"));
}

TEST(LoadNpyTest, FortranOrderIsAnError) {
  std::string path =
      WriteFile("fortran.npy", NpyBytes("<f4", "(2, 2)", RawBytes(std::vector<float>{1, 2, 3, 4}),
                                        /*fortran_order=*/true));
  absl::StatusOr<at::Tensor> tensor = LoadNpy(path);
  ASSERT_FALSE(tensor.ok());
  EXPECT_EQ(tensor.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(tensor.status().message(), HasSubstr(path));
  EXPECT_THAT(tensor.status().message(), HasSubstr("fortran_order"));
}

TEST(LoadNpyTest, BigEndianIsAnError) {
  std::string path =
      WriteFile("big_endian.npy",
                NpyBytes(">f4", "(2,)", std::string("\x3f\x80\x00\x00\x40\x00\x00\x00", 8)));
  absl::StatusOr<at::Tensor> tensor = LoadNpy(path);
  ASSERT_FALSE(tensor.ok());
  EXPECT_EQ(tensor.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(tensor.status().message(), HasSubstr(path));
  EXPECT_THAT(tensor.status().message(), HasSubstr("big-endian"));
  EXPECT_THAT(tensor.status().message(), HasSubstr("'>f4'"));
}

TEST(LoadNpyTest, BadMagicIsAnError) {
  std::string path = WriteFile("bad_magic.npy", "PK\x03\x04 this is a zip");
  absl::StatusOr<at::Tensor> tensor = LoadNpy(path);
  ASSERT_FALSE(tensor.ok());
  EXPECT_EQ(tensor.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(tensor.status().message(), HasSubstr(path));
  EXPECT_THAT(tensor.status().message(), HasSubstr("not a .npy file"));
}

TEST(LoadNpyTest, UnsupportedDtypeNamesTheSupportedOnes) {
  std::string path =
      WriteFile("complex.npy", NpyBytes("<c8", "(1,)", RawBytes(std::vector<float>{1, 0})));
  absl::StatusOr<at::Tensor> tensor = LoadNpy(path);
  ASSERT_FALSE(tensor.ok());
  EXPECT_THAT(tensor.status().message(), HasSubstr(path));
  EXPECT_THAT(tensor.status().message(), HasSubstr("unsupported dtype '<c8'"));
  EXPECT_THAT(tensor.status().message(), HasSubstr("'<f4', '<f8'"));
}

TEST(LoadNpyTest, UnsupportedVersionAndMalformedHeader) {
  std::string bytes = NpyBytes("<f4", "(1,)", RawBytes(std::vector<float>{1}));
  std::string v9 = bytes;
  v9[6] = 9;
  absl::StatusOr<at::Tensor> tensor = LoadNpy(WriteFile("v9.npy", v9));
  ASSERT_FALSE(tensor.ok());
  EXPECT_THAT(tensor.status().message(), HasSubstr("version 9.0"));

  std::string malformed = NpyBytes("<f4", "[1]", "");
  tensor = LoadNpy(WriteFile("malformed.npy", malformed));
  ASSERT_FALSE(tensor.ok());
  EXPECT_THAT(tensor.status().message(), HasSubstr("malformed header"));
}

TEST(LoadNpyTest, MissingFileIsNotFound) {
  std::string path = TempPath("does_not_exist.npy");
  absl::StatusOr<at::Tensor> tensor = LoadNpy(path);
  ASSERT_FALSE(tensor.ok());
  EXPECT_EQ(tensor.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(tensor.status().message(), HasSubstr(path));
}

TEST(LoadNpyDatasetTest, ConvertsFeaturesAndIntegerLabels) {
  std::string features = WriteFile(
      "ds_x.npy", NpyBytes("<f8", "(3, 2)", RawBytes(std::vector<double>{1, 2, 3, 4, 5, 6})));
  std::string labels =
      WriteFile("ds_y.npy", NpyBytes("<i4", "(3,)", RawBytes(std::vector<int32_t>{2, 0, 1})));
  absl::StatusOr<Dataset> dataset = LoadNpyDataset(features, labels);
  ASSERT_TRUE(dataset.ok()) << dataset.status();
  EXPECT_EQ(dataset->size(), 3);
  EXPECT_EQ(dataset->features.scalar_type(), at::kFloat);
  EXPECT_EQ(dataset->features.sizes().vec(), (std::vector<int64_t>{3, 2}));
  EXPECT_EQ(dataset->features.index({2, 1}).item<float>(), 6.f);
  EXPECT_EQ(dataset->labels.scalar_type(), at::kLong);
  EXPECT_TRUE(dataset->labels.equal(at::tensor({2, 0, 1}, at::kLong)));
  EXPECT_THAT(dataset->source, HasSubstr(features));
  EXPECT_THAT(dataset->source, HasSubstr(labels));
}

TEST(LoadNpyDatasetTest, FloatLabelsStayTwoDimensional) {
  std::string features =
      WriteFile("reg_x.npy", NpyBytes("<i8", "(2,)", RawBytes(std::vector<int64_t>{7, 8})));
  std::string labels = WriteFile(
      "reg_y.npy", NpyBytes("<f8", "(2, 2)", RawBytes(std::vector<double>{0.5, 1, 1.5, 2})));
  absl::StatusOr<Dataset> dataset = LoadNpyDataset(features, labels);
  ASSERT_TRUE(dataset.ok()) << dataset.status();
  EXPECT_EQ(dataset->features.scalar_type(), at::kFloat);
  EXPECT_EQ(dataset->labels.scalar_type(), at::kFloat);
  EXPECT_EQ(dataset->labels.sizes().vec(), (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(dataset->labels.index({1, 0}).item<float>(), 1.5f);
}

TEST(LoadNpyDatasetTest, DifferentSizesNameBothFiles) {
  std::string features =
      WriteFile("mismatch_x.npy", NpyBytes("<f4", "(3, 1)", RawBytes(std::vector<float>{1, 2, 3})));
  std::string labels =
      WriteFile("mismatch_y.npy", NpyBytes("<i8", "(2,)", RawBytes(std::vector<int64_t>{0, 1})));
  absl::StatusOr<Dataset> dataset = LoadNpyDataset(features, labels);
  ASSERT_FALSE(dataset.ok());
  EXPECT_EQ(dataset.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(dataset.status().message(), HasSubstr(features + " has 3 rows"));
  EXPECT_THAT(dataset.status().message(), HasSubstr(labels + " has 2"));
}

TEST(LoadNpyDatasetTest, NonFiniteValuesNameTheFileAndElement) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::string labels =
      WriteFile("finite_y.npy", NpyBytes("<i8", "(2,)", RawBytes(std::vector<int64_t>{0, 1})));
  std::string features = WriteFile(
      "nan_x.npy", NpyBytes("<f4", "(2, 3)", RawBytes(std::vector<float>{1, 2, 3, 4, 5, nan})));
  absl::StatusOr<Dataset> dataset = LoadNpyDataset(features, labels);
  ASSERT_FALSE(dataset.ok());
  EXPECT_EQ(dataset.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(dataset.status().message(),
              HasSubstr(features + ": row 1 (counted from 0), element [1, 2]: nan is not a "
                                   "finite number"));

  // Finite in float64, infinite in float32.
  features =
      WriteFile("huge_x.npy", NpyBytes("<f8", "(2, 1)", RawBytes(std::vector<double>{1e300, 0})));
  dataset = LoadNpyDataset(features, labels);
  ASSERT_FALSE(dataset.ok());
  EXPECT_THAT(dataset.status().message(),
              HasSubstr(features + ": row 0 (counted from 0), element [0, 0]: 1e+300 is outside "
                                   "float32's range"));

  features = WriteFile("fine_x.npy", NpyBytes("<f4", "(2, 1)", RawBytes(std::vector<float>{1, 2})));
  labels = WriteFile(
      "inf_y.npy",
      NpyBytes("<f4", "(2,)",
               RawBytes(std::vector<float>{0.5f, std::numeric_limits<float>::infinity()})));
  dataset = LoadNpyDataset(features, labels);
  ASSERT_FALSE(dataset.ok());
  EXPECT_THAT(dataset.status().message(),
              HasSubstr(labels + ": row 1 (counted from 0), element [1]: inf is not a finite"));
}

TEST(LoadNpyDatasetTest, LabelTypes) {
  std::string features =
      WriteFile("lt_x.npy", NpyBytes("<f4", "(3, 1)", RawBytes(std::vector<float>{1, 2, 3})));
  std::string integral =
      WriteFile("lt_y.npy", NpyBytes("<f8", "(3, 1)", RawBytes(std::vector<double>{2, 0, 1})));
  absl::StatusOr<Dataset> dataset = LoadNpyDataset(features, integral, LabelType::kInt64);
  ASSERT_TRUE(dataset.ok()) << dataset.status();
  EXPECT_TRUE(dataset->labels.equal(at::tensor({2, 0, 1}, at::kLong)));

  std::string fractional =
      WriteFile("lt_half.npy", NpyBytes("<f4", "(3,)", RawBytes(std::vector<float>{2, 0.5f, 1})));
  dataset = LoadNpyDataset(features, fractional, LabelType::kInt64);
  ASSERT_FALSE(dataset.ok());
  EXPECT_THAT(dataset.status().message(),
              HasSubstr(fractional + ": row 1 (counted from 0): label 0.5 is not an integer"));

  std::string classes =
      WriteFile("lt_i.npy", NpyBytes("<i4", "(3,)", RawBytes(std::vector<int32_t>{2, 0, 1})));
  dataset = LoadNpyDataset(features, classes, LabelType::kFloat32);
  ASSERT_TRUE(dataset.ok()) << dataset.status();
  EXPECT_TRUE(dataset->labels.equal(at::tensor({2.f, 0.f, 1.f})));
}

TEST(LoadCsvDatasetTest, NonFiniteValuesNameLineAndColumn) {
  const struct {
    std::string field, expected;
  } cases[] = {
      {"1e400", "\"1e400\" is not a finite number"},  // SimpleAtod: inf
      {"nan", "\"nan\" is not a finite number"},
      {"-inf", "\"-inf\" is not a finite number"},
      {"1e39", "\"1e39\" is outside float32's range"},  // finite in float64
  };
  for (const auto& c : cases) {
    std::string path = WriteFile("non_finite.csv", absl::StrCat("x,y\n1,0\n", c.field, ",1\n"));
    absl::StatusOr<Dataset> dataset = LoadCsvDataset(path);
    ASSERT_FALSE(dataset.ok()) << c.field;
    EXPECT_EQ(dataset.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(dataset.status().message(),
                HasSubstr(absl::StrCat(path, ":3: column 1 (\"x\"): ", c.expected)));
    // The same in the label column.
    path = WriteFile("non_finite_label.csv", absl::StrCat("x,y\n1,0.5\n2,", c.field, "\n"));
    dataset = LoadCsvDataset(path);
    ASSERT_FALSE(dataset.ok()) << c.field;
    EXPECT_THAT(dataset.status().message(),
                HasSubstr(absl::StrCat(path, ":3: column 2 (\"y\"): ", c.expected)));
  }
}

TEST(LoadCsvDatasetTest, DetectsHeaderAndIntegralLabels) {
  std::string path = WriteFile("header.csv", "x1,x2,label\n1.5,2,0\n-3,4e1,1\n\n5,6,2\n");
  absl::StatusOr<Dataset> dataset = LoadCsvDataset(path);
  ASSERT_TRUE(dataset.ok()) << dataset.status();
  EXPECT_EQ(dataset->size(), 3);
  EXPECT_EQ(dataset->source, path);
  EXPECT_TRUE(
      dataset->features.equal(at::tensor({1.5f, 2.f, -3.f, 40.f, 5.f, 6.f}).reshape({3, 2})));
  EXPECT_EQ(dataset->labels.scalar_type(), at::kLong);
  EXPECT_TRUE(dataset->labels.equal(at::tensor({0, 1, 2}, at::kLong)));
}

TEST(LoadCsvDatasetTest, NoHeaderAndLabelColumn) {
  std::string path = WriteFile("first.csv", "1,0.5,2\n0,1.5,3\n");
  CsvOptions options;
  options.label_column = 0;
  absl::StatusOr<Dataset> dataset = LoadCsvDataset(path, options);
  ASSERT_TRUE(dataset.ok()) << dataset.status();
  EXPECT_EQ(dataset->size(), 2);
  EXPECT_TRUE(dataset->features.equal(at::tensor({0.5f, 2.f, 1.5f, 3.f}).reshape({2, 2})));
  EXPECT_TRUE(dataset->labels.equal(at::tensor({1, 0}, at::kLong)));
}

TEST(LoadCsvDatasetTest, FloatLabels) {
  std::string path = WriteFile("float_labels.csv", "1,0.5\n2,1.25\n3,2\n");
  absl::StatusOr<Dataset> dataset = LoadCsvDataset(path);
  ASSERT_TRUE(dataset.ok()) << dataset.status();
  EXPECT_EQ(dataset->labels.scalar_type(), at::kFloat);
  EXPECT_TRUE(dataset->labels.equal(at::tensor({0.5f, 1.25f, 2.f})));
  EXPECT_EQ(dataset->features.sizes().vec(), (std::vector<int64_t>{3, 1}));
}

TEST(LoadCsvDatasetTest, LabelTypeOptions) {
  // As np.savetxt writes integers: integral values are int64 labels.
  std::string path = WriteFile("savetxt.csv",
                               "1.000000000000000000e+00,3.000000000000000000e+00\n"
                               "2.000000000000000000e+00,0.000000000000000000e+00\n");
  absl::StatusOr<Dataset> dataset = LoadCsvDataset(path);
  ASSERT_TRUE(dataset.ok()) << dataset.status();
  EXPECT_TRUE(dataset->labels.equal(at::tensor({3, 0}, at::kLong)));

  CsvOptions as_float;
  as_float.label_type = CsvOptions::LabelType::kFloat32;
  dataset = LoadCsvDataset(path, as_float);
  ASSERT_TRUE(dataset.ok()) << dataset.status();
  EXPECT_TRUE(dataset->labels.equal(at::tensor({3.f, 0.f})));

  CsvOptions as_int;
  as_int.label_type = CsvOptions::LabelType::kInt64;
  std::string fractional = WriteFile("fractional.csv", "1,2\n3,4.5\n");
  dataset = LoadCsvDataset(fractional, as_int);
  ASSERT_FALSE(dataset.ok());
  EXPECT_THAT(dataset.status().message(), HasSubstr(fractional + ":2: column 2"));
  EXPECT_THAT(dataset.status().message(), HasSubstr("not an integer"));
}

TEST(LoadCsvDatasetTest, DelimiterQuotesAndCrlf) {
  std::string path = WriteFile("semicolon.csv", "\"a;b\"; \"c\" ;y\r\n1;2;7\r\n3; 4 ;8\r\n");
  CsvOptions options;
  options.delimiter = ';';
  absl::StatusOr<Dataset> dataset = LoadCsvDataset(path, options);
  ASSERT_TRUE(dataset.ok()) << dataset.status();
  EXPECT_TRUE(dataset->features.equal(at::tensor({1.f, 2.f, 3.f, 4.f}).reshape({2, 2})));
  EXPECT_TRUE(dataset->labels.equal(at::tensor({7, 8}, at::kLong)));
}

TEST(LoadCsvDatasetTest, NonNumericFieldNamesLineAndColumn) {
  std::string path = WriteFile("bad_field.csv", "a,b,c\n1,2,3\n4,x,6\n");
  absl::StatusOr<Dataset> dataset = LoadCsvDataset(path);
  ASSERT_FALSE(dataset.ok());
  EXPECT_EQ(dataset.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(dataset.status().message(),
              HasSubstr(path + ":3: column 2 (\"b\"): \"x\" is not a number"));
}

TEST(LoadCsvDatasetTest, HeaderNoMeansTheFirstRowIsData) {
  std::string path = WriteFile("forced_data.csv", "a,b\n1,2\n");
  CsvOptions options;
  options.header = CsvOptions::Header::kNo;
  absl::StatusOr<Dataset> dataset = LoadCsvDataset(path, options);
  ASSERT_FALSE(dataset.ok());
  EXPECT_THAT(dataset.status().message(), HasSubstr(path + ":1: column 1"));

  options.header = CsvOptions::Header::kYes;
  std::string numeric_header = WriteFile("numeric_header.csv", "0,1\n1,2\n");
  dataset = LoadCsvDataset(numeric_header, options);
  ASSERT_TRUE(dataset.ok()) << dataset.status();
  EXPECT_EQ(dataset->size(), 1);
}

TEST(LoadCsvDatasetTest, RaggedRowIsAnError) {
  std::string path = WriteFile("ragged.csv", "1,2,3\n4,5,6\n7,8\n");
  absl::StatusOr<Dataset> dataset = LoadCsvDataset(path);
  ASSERT_FALSE(dataset.ok());
  EXPECT_EQ(dataset.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(dataset.status().message(), HasSubstr(path + ":3: has 2 fields, expected 3"));
}

TEST(LoadCsvDatasetTest, EmptyOrHeaderOnlyIsAnError) {
  std::string empty = WriteFile("empty.csv", "");
  absl::StatusOr<Dataset> dataset = LoadCsvDataset(empty);
  ASSERT_FALSE(dataset.ok());
  EXPECT_EQ(dataset.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(dataset.status().message(), HasSubstr(empty));
  EXPECT_THAT(dataset.status().message(), HasSubstr("empty"));

  dataset = LoadCsvDataset(WriteFile("blank.csv", "\n  \n"));
  ASSERT_FALSE(dataset.ok());
  EXPECT_THAT(dataset.status().message(), HasSubstr("empty"));

  dataset = LoadCsvDataset(WriteFile("header_only.csv", "x,y\n"));
  ASSERT_FALSE(dataset.ok());
  EXPECT_THAT(dataset.status().message(), HasSubstr("no data rows"));
}

TEST(LoadCsvDatasetTest, LabelColumnOutOfRangeAndMissingFile) {
  std::string path = WriteFile("two_columns.csv", "1,2\n");
  CsvOptions options;
  options.label_column = 2;
  absl::StatusOr<Dataset> dataset = LoadCsvDataset(path, options);
  ASSERT_FALSE(dataset.ok());
  EXPECT_THAT(dataset.status().message(), HasSubstr("label_column 2"));

  dataset = LoadCsvDataset(TempPath("missing.csv"));
  ASSERT_FALSE(dataset.ok());
  EXPECT_EQ(dataset.status().code(), absl::StatusCode::kNotFound);
}

TEST(SplitDatasetTest, FirstRowsAndTheRest) {
  Dataset dataset;
  dataset.features = at::arange(10, at::kFloat).reshape({5, 2});
  dataset.labels = at::arange(5, at::kLong);
  dataset.source = "data.csv";
  absl::StatusOr<std::pair<Dataset, Dataset>> split = SplitDataset(dataset, 3);
  ASSERT_TRUE(split.ok()) << split.status();
  EXPECT_EQ(split->first.size(), 3);
  EXPECT_EQ(split->second.size(), 2);
  EXPECT_TRUE(split->second.labels.equal(at::tensor({3, 4}, at::kLong)));
  EXPECT_TRUE(split->second.features.equal(at::tensor({6.f, 7.f, 8.f, 9.f}).reshape({2, 2})));
  EXPECT_EQ(split->first.source, "data.csv[0:3]");
  EXPECT_EQ(split->second.source, "data.csv[3:5]");

  split = SplitDataset(dataset, 5);
  ASSERT_TRUE(split.ok()) << split.status();
  EXPECT_EQ(split->second.size(), 0);
  EXPECT_FALSE(SplitDataset(dataset, 6).ok());
  EXPECT_FALSE(SplitDataset(dataset, -1).ok());
  EXPECT_THAT(SplitDataset(dataset, 6).status().message(), HasSubstr("data.csv"));
}

}  // namespace
}  // namespace ddpspawn
