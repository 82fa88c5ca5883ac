# kernels/module.mk — the kernels' CUDA flags and bench targets.
#
# The CUDA objects are linked by gcc (no libstdc++): build them without C++
# exceptions and thread-safe statics so they need no C++ runtime.
$(O)/obj/kernels/%.cu.o: NVCCFLAGS += -Xcompiler -fno-exceptions,-fno-threadsafe-statics
