// Replays a libFuzzer target's inputs as an ordinary test, without libFuzzer: each file named on
// the command line, or inside a directory named there, goes once through LLVMFuzzerTestOneInput.
// fuzz/BUILD.bazel links it with every target, so the seed corpora and the regression inputs run in
// every `bazel test` (and under --config=asan with ASan+UBSan); tools/fuzz runs the libFuzzer
// campaigns. A replay that finds no input fails: it checked nothing.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <system_error>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

// The files to replay: each argument that is a file, and every regular file in each argument that
// is a directory, in a fixed (sorted) order.
bool CollectInputs(int argc, char** argv, std::vector<std::filesystem::path>& inputs) {
  for (int i = 1; i < argc; ++i) {
    const std::filesystem::path path(argv[i]);
    std::error_code error;
    if (std::filesystem::is_directory(path, error)) {
      std::vector<std::filesystem::path> entries;
      for (const auto& entry : std::filesystem::directory_iterator(path, error)) {
        if (entry.is_regular_file()) entries.push_back(entry.path());
      }
      if (error) {
        std::fprintf(stderr, "fuzz replay: cannot list %s: %s\n", argv[i], error.message().c_str());
        return false;
      }
      std::sort(entries.begin(), entries.end());
      inputs.insert(inputs.end(), entries.begin(), entries.end());
    } else if (std::filesystem::is_regular_file(path, error)) {
      inputs.push_back(path);
    } else {
      std::fprintf(stderr, "fuzz replay: %s is neither a file nor a directory\n", argv[i]);
      return false;
    }
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::filesystem::path> inputs;
  if (!CollectInputs(argc, argv, inputs)) return 2;
  if (inputs.empty()) {
    std::fprintf(stderr, "fuzz replay: no input to replay (usage: %s FILE_OR_DIR...)\n", argv[0]);
    return 2;
  }
  for (const std::filesystem::path& input : inputs) {
    std::ifstream file(input, std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(file)),
                            std::istreambuf_iterator<char>());
    if (!file.good() && !file.eof()) {
      std::fprintf(stderr, "fuzz replay: cannot read %s\n", input.c_str());
      return 2;
    }
    std::printf("fuzz replay: %s (%zu bytes)\n", input.c_str(), bytes.size());
    std::fflush(stdout);  // a crash below then names the input
    LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
  }
  std::printf("fuzz replay: %zu inputs, no finding\n", inputs.size());
  return 0;
}
