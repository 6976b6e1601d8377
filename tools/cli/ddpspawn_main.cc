// The ddpspawn command line: fit, validate, test or predict a model on CSV/.npy data across N
// spawned ranks, with torchrun-style flags. The launcher re-runs this command line as each rank
// (or, with --start-method forkserver, once, as the server that forks the ranks). It prints rank
// 0's result as key=value lines (checkpoint=..., metric.val_loss=...). Exit status: 0 done, 1 a
// rank failed, 2 the launcher refused the command or could not start the job; SIGINT and SIGTERM
// end it by that signal once the ranks are stopped.
#include <pthread.h>

#include <csignal>
#include <cstdio>
#include <cstring>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/comm/process_group.h"
#include "core/launch/launcher.h"
#include "core/train/run/export.h"
#include "core/train/run/run.h"
#include "core/version/build_info.h"

namespace {

constexpr char kUsage[] =
    "usage: ddpspawn fit|validate|test|predict --model SPEC [options]\n"
    "       ddpspawn export --checkpoint FILE --format torch|safetensors --output FILE\n"
    "\n"
    "Trains (fit) or evaluates a model with DistributedDataParallel across\n"
    "--nproc-per-node spawned ranks. Options take --name VALUE or --name=VALUE.\n"
    "\n"
    "example: ddpspawn fit --model mlp:64,128,10 --train train.csv --val val.csv \\\n"
    "           --nproc-per-node 2 --max-epochs 20 --lr 0.1 --momentum 0.9\n"
    "\n"
    "ddpspawn --version prints the version, the LibTorch, CUDA and NCCL it\n"
    "was built with, the process-group backends compiled in, and the CUDA\n"
    "devices visible.\n"
    "\n";

// The exit status when a rank failed (its exit code or signal is in the message), as torchrun's.
constexpr int kRankFailed = 1;
// The exit status when the launcher refused the command or could not start the job (usage, an
// option, an input, a node that never came), as argparse's for a usage error. No rank failed.
constexpr int kRefused = 2;

int Fail(const std::string& message, int exit_code = kRefused) {
  std::fprintf(stderr, "ddpspawn: error: %s\n", message.c_str());
  return exit_code;
}

// How a launch that failed ends the CLI, so that a script can tell the cases apart without reading
// the message. A rank of a job that torchrun or srun started (`outer_rank`) fails as a rank,
// whatever the status. A run stopped by SIGINT or SIGTERM ends by that signal once its ranks are
// stopped and cleaned up, as a shell expects (which shows 130 and 143).
int FailedLaunch(const absl::Status& status, bool outer_rank) {
  const std::string message(status.message());
  if (outer_rank || absl::IsAborted(status)) return Fail(message, kRankFailed);
  if (const int sig = ddpspawn::SignalThatStoppedLastJob(); absl::IsCancelled(status) && sig != 0) {
    Fail(message);
    std::fflush(stderr);
    std::signal(sig, SIG_DFL);
    sigset_t only;
    sigemptyset(&only);
    sigaddset(&only, sig);
    pthread_sigmask(SIG_UNBLOCK, &only, nullptr);
    std::raise(sig);
    return 128 + sig;  // not reached
  }
  return Fail(message, kRefused);
}

}  // namespace

int main(int argc, char** argv) {
  ddpspawn::ServeForksIfForkserver();  // --start-method forkserver: returns in each rank
  if (argc < 2) {
    std::fprintf(stderr, "%s%s", kUsage, ddpspawn::RunOptionsHelp().c_str());
    return 2;
  }
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--version") == 0) {
      // The CUDA devices too: this process exits next, so asking CUDA is harmless here (a launcher
      // that forks CUDA ranks must not).
      std::printf("%scuda_devices=%d\n", ddpspawn::BuildInfoText().c_str(),
                  ddpspawn::CudaDeviceCount());
      return 0;
    }
    if (std::strcmp(argv[i], "--help") == 0 || std::strcmp(argv[i], "-h") == 0) {
      const bool exporting = std::strcmp(argv[1], "export") == 0;
      std::printf("%s", exporting ? ddpspawn::ExportHelp().c_str()
                                  : absl::StrCat(kUsage, ddpspawn::RunOptionsHelp()).c_str());
      return 0;
    }
  }
  const std::string command = argv[1];
  ddpspawn::RunOptions options;
  for (int i = 2; i < argc; ++i) {
    std::string arg = argv[i];
    if (!absl::StartsWith(arg, "--")) return Fail("unexpected argument '" + arg + "'");
    arg = arg.substr(2);
    size_t eq = arg.find('=');
    if (eq != std::string::npos) {
      options.emplace_back(arg.substr(0, eq), arg.substr(eq + 1));
    } else if (i + 1 < argc && !absl::StartsWith(argv[i + 1], "--")) {
      options.emplace_back(arg, argv[++i]);
    } else {
      options.emplace_back(arg, "");  // a bare flag: true
    }
  }
  ddpspawn::RunReport report;
  const absl::Status status = ddpspawn::Run(command, options, &report);
  if (report.worker_exit_code.has_value()) return *report.worker_exit_code;
  if (!status.ok()) {
    return report.refused ? Fail(std::string(status.message()))
                          : FailedLaunch(status, report.outer_rank);
  }
  if (report.prints_result) std::printf("%s", report.result.c_str());
  return 0;
}
