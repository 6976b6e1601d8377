// Training runs in N ranks in one call: fit, validate, test, predict and export (ddpspawn_run).
package dev.ddpspawn;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.util.ArrayList;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * Runs the library's Trainer: a model (a built-in like "mlp:64,128,10" or a TorchScript file) on
 * CSV or .npy data, with the CLI's options (keys as the CLI's flags, "nproc_per_node",
 * "max_epochs", "lr" ...). The ranks are forked from this process but run only the library's native
 * code, never Java. Returns rank 0's key=value result ("checkpoint", "metric.val_accuracy" ...), in
 * the order the run reported it. Stateless; one run at a time per thread.
 */
public final class Trainer {
  private Trainer() {}

  /** Runs {@code command} ("fit", "validate", "test", "predict" or "export") with options. */
  public static Map<String, String> run(String command, Map<String, String> options) {
    try (Arena arena = Arena.ofConfined()) {
      List<String> pairs = new ArrayList<>(options.size());
      options.forEach((key, value) -> pairs.add(key + "=" + value));
      MemorySegment out = arena.allocate(ValueLayout.ADDRESS);
      int code =
          (int)
              Native.call(
                  Native.RUN, arena.allocateFrom(command), Launcher.strings(arena, pairs), out);
      if (code != Status.OK) {
        String message = Status.lastError();
        throw Status.exception(code, message, JobReport.ofLastRun());
      }
      MemorySegment result = out.get(ValueLayout.ADDRESS, 0);
      try {
        long count = (long) Native.call(Native.RUN_RESULT_COUNT, result);
        Map<String, String> values = new LinkedHashMap<>();
        for (long i = 0; i < count; i++) {
          values.put(
              Native.string((MemorySegment) Native.call(Native.RUN_RESULT_KEY, result, i)),
              Native.string((MemorySegment) Native.call(Native.RUN_RESULT_VALUE, result, i)));
        }
        return Collections.unmodifiableMap(values);
      } finally {
        Native.call(Native.RUN_RESULT_DESTROY, result);
      }
    }
  }
}
