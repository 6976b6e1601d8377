// LeakSanitizer's built-in suppressions (ASan builds only): leaks inside LibTorch that reading a
// damaged checkpoint triggers, not in ddpspawn. Linked into every program that reads checkpoints
// (//core:module depends on it), so that the launched ranks and the CLI a test starts get them with
// no file or environment variable; our own leaks are reported as they are.
#if defined(__SANITIZE_ADDRESS__)

// Visible to the sanitizer runtime (our code is built with hidden visibility).
extern "C" __attribute__((visibility("default"))) const char*
__lsan_default_suppressions() {  // NOLINT
  // PyTorchStreamReader leaks its miniz reader when a file is no valid zip archive (its constructor
  // throws after mz_zip_reader_init, so the destructor that would free it never runs): 152 bytes
  // per damaged file. miniz's central directory reader does not free the buffer of an entry's extra
  // field it refuses: up to 64 KiB per damaged file
  // (fuzz/corpus/weights/regression_zip_extra_field_leak).
  return "leak:mz_zip_reader_init\n"
         "leak:mz_zip_reader_read_central_dir\n";
}

#endif  // defined(__SANITIZE_ADDRESS__)
