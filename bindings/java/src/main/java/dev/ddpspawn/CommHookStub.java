// A Java CommHook as the C ABI's ddpspawn_comm_hook: an upcall stub for `start`, no `wait`.
package dev.ddpspawn;

import static java.lang.foreign.ValueLayout.ADDRESS;
import static java.lang.foreign.ValueLayout.JAVA_INT;

import java.lang.foreign.Arena;
import java.lang.foreign.FunctionDescriptor;
import java.lang.foreign.Linker;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.lang.invoke.MethodHandle;
import java.lang.invoke.MethodHandles;
import java.lang.invoke.MethodType;

/**
 * The struct a reducer copies at creation, and the upcall stub it points to, both in {@code arena},
 * which the owning Reducer closes after destroying the reducer. No exception leaves the upcall (it
 * would end the JVM): it becomes the status code and last error the C ABI expects.
 */
final class CommHookStub {
  // struct ddpspawn_comm_hook: uint32 struct_size, void* user_data (8), start (16), wait (24),
  // release (32). struct ddpspawn_bucket: uint32 struct_size, int32 index (4), bucket_count (8),
  // dtype (12), void* data (16), size_t count (24).
  private static final long HOOK_SIZE = 40;
  private static final long BUCKET_SIZE = 32;
  private static final MethodHandle START;

  static {
    try {
      START =
          MethodHandles.lookup()
              .findStatic(
                  CommHookStub.class,
                  "start",
                  MethodType.methodType(
                      int.class,
                      CommHook.class,
                      MemorySegment.class,
                      MemorySegment.class,
                      MemorySegment.class,
                      MemorySegment.class));
    } catch (ReflectiveOperationException e) {
      throw new ExceptionInInitializerError(e);
    }
  }

  private CommHookStub() {}

  /** A ddpspawn_comm_hook for {@code hook}, allocated in {@code arena}. */
  static MemorySegment create(CommHook hook, Arena arena) {
    MemorySegment stub =
        Linker.nativeLinker()
            .upcallStub(
                MethodHandles.insertArguments(START, 0, hook),
                FunctionDescriptor.of(JAVA_INT, ADDRESS, ADDRESS, ADDRESS, ADDRESS),
                arena);
    MemorySegment struct = arena.allocate(HOOK_SIZE, 8);
    struct.set(JAVA_INT, 0, (int) HOOK_SIZE);
    struct.set(ADDRESS, 16, stub);
    return struct;
  }

  private static int start(
      CommHook hook,
      MemorySegment userData,
      MemorySegment context,
      MemorySegment bucketPointer,
      MemorySegment outWork) {
    try (Context borrowed = Context.borrowed(context)) {
      MemorySegment bucket = bucketPointer.reinterpret(BUCKET_SIZE);
      DType dtype = DType.ofCode(bucket.get(JAVA_INT, 12));
      long bytes = bucket.get(ValueLayout.JAVA_LONG, 24) * dtype.bytes;
      MemorySegment data = bucket.get(ADDRESS, 16).reinterpret(bytes);
      hook.reduce(
          borrowed,
          new CommHook.Bucket(bucket.get(JAVA_INT, 4), bucket.get(JAVA_INT, 8), dtype, data));
      return Status.OK;
    } catch (DdpspawnException e) {
      return setLastError(e.code(), e.getMessage());
    } catch (Throwable t) {
      return setLastError(Status.INTERNAL, "the Java comm hook threw " + t);
    }
  }

  private static int setLastError(int code, String message) {
    try (Arena arena = Arena.ofConfined()) {
      return (int)
          Native.call(Native.SET_LAST_ERROR, code, arena.allocateFrom(String.valueOf(message)));
    }
  }
}
