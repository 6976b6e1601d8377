// DLPack's DLTensor structs over native buffers, for the C ABI's calls on named tensors
// (checkpoints, gradient clipping; capi/include/ddpspawn/ddpspawn_dlpack.h).
package dev.ddpspawn;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.util.List;
import java.util.function.Function;

/** Builds arrays of DLTensor pointers in an arena. Stateless. */
final class DLTensors {
  // struct DLTensor: void* data; DLDevice {int32 type, int32 id}; int32 ndim;
  // DLDataType {uint8 code, uint8 bits, uint16 lanes}; int64* shape; int64* strides;
  // uint64 byte_offset.
  private static final long SIZE = 48;
  private static final int CPU = 1; // kDLCPU
  private static final byte INT = 0; // kDLInt
  private static final byte FLOAT = 2; // kDLFloat

  private DLTensors() {}

  /**
   * A DLTensor* array, one for each parameter's buffer that {@code buffer} picks (its value or its
   * gradient), compact and on the CPU.
   */
  static MemorySegment of(
      Arena arena, List<Parameter> parameters, Function<Parameter, MemorySegment> buffer) {
    MemorySegment pointers = arena.allocate(ValueLayout.ADDRESS, Math.max(1, parameters.size()));
    for (int i = 0; i < parameters.size(); i++) {
      Parameter parameter = parameters.get(i);
      long[] shape = parameter.shape();
      MemorySegment tensor = arena.allocate(SIZE, 8);
      tensor.set(ValueLayout.ADDRESS, 0, buffer.apply(parameter));
      tensor.set(ValueLayout.JAVA_INT, 8, CPU);
      tensor.set(ValueLayout.JAVA_INT, 12, 0);
      tensor.set(ValueLayout.JAVA_INT, 16, shape.length);
      DType dtype = parameter.dtype();
      boolean floating = dtype == DType.FLOAT32 || dtype == DType.FLOAT64;
      tensor.set(ValueLayout.JAVA_BYTE, 20, floating ? FLOAT : INT);
      tensor.set(ValueLayout.JAVA_BYTE, 21, (byte) (8 * dtype.bytes));
      tensor.set(ValueLayout.JAVA_SHORT, 22, (short) 1);
      tensor.set(
          ValueLayout.ADDRESS,
          24,
          arena.allocateFrom(ValueLayout.JAVA_LONG, shape.length == 0 ? new long[1] : shape));
      tensor.set(ValueLayout.ADDRESS, 32, MemorySegment.NULL); // compact
      tensor.set(ValueLayout.JAVA_LONG, 40, 0L);
      pointers.setAtIndex(ValueLayout.ADDRESS, i, tensor);
    }
    return pointers;
  }

  /** The parameters' names as a C string array. */
  static MemorySegment names(Arena arena, List<Parameter> parameters) {
    return Launcher.strings(arena, parameters.stream().map(Parameter::name).toList());
  }
}
