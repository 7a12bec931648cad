// devicefit's measuring wrapper around an export (simulator/targets/tflm/export.py): the
// exported model array, op resolver and arena, compiled for the device's core and kernel
// library and run under QEMU with semihosting. devicefit compiles it per export with a
// generated "df_export.h" that includes the export's header and names it:
//   namespace df = <name>;  #define DF_MODEL_DATA <name>_model_data  (and DF_ARENA)
//
//   harness report ARENA INPUTS OUTPUTS
//       RecordingMicroAllocator on an ARENA-byte heap arena: AllocateTensors, one Invoke on
//       the bytes of INPUTS (the input tensors' bytes back to back; "-": zeros), the outputs'
//       bytes written to OUTPUTS ("-": not written); prints head / tail / total, the tail
//       by category, and every buffer the memory planner was given.
//   harness probe ARENA INPUTS invoke|allocate
//       An application's own set-up on exactly ARENA bytes (MicroInterpreter on a plain
//       MicroAllocator), up to AllocateTensors or through one Invoke. One probe per
//       process: a too-small arena can crash TFLM instead of failing cleanly.
//   harness export - INPUTS OUTPUTS
//       The export as a firmware uses it: its arena array of its constant size, through
//       one Invoke; the outputs written as in report.
//
// Every line devicefit reads starts with "DF " (see simulator/targets/tflm/qemu.py).
// TFLM's own messages (MicroPrintf) go to stderr.

#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "tensorflow/lite/micro/arena_allocator/recording_single_arena_buffer_allocator.h"
#include "tensorflow/lite/micro/memory_helpers.h"
#include "tensorflow/lite/micro/memory_planner/greedy_memory_planner.h"
#include "tensorflow/lite/micro/micro_allocator.h"
#include "tensorflow/lite/micro/micro_interpreter.h"
#include "tensorflow/lite/micro/micro_mutable_op_resolver.h"
#include "tensorflow/lite/micro/micro_resource_variable.h"
#include "tensorflow/lite/micro/recording_micro_allocator.h"
#include "tensorflow/lite/schema/schema_generated.h"
#include "tensorflow/lite/schema/schema_utils.h"

#include "df_export.h"

#ifndef DF_BUILD_NAME
#define DF_BUILD_NAME "unnamed"
#endif

// Logging sink of TFLM (replaces debug_log.cc so that nothing else shares stdout).
extern "C" void DebugLog(const char* format, va_list args) { vfprintf(stderr, format, args); }
extern "C" int DebugVsnprintf(char* buffer, size_t buf_size, const char* format,
                              va_list vlist) {
  return vsnprintf(buffer, buf_size, format, vlist);
}

namespace {

using Resolver = df::OpResolver;

// n bytes starting on a 16-byte boundary, never freed (newlib's C++ mode declares no
// posix_memalign). An application's arena is aligned the same way (alignas(16)).
uint8_t* Aligned(size_t n) {
  auto* block = static_cast<uint8_t*>(malloc(n + 16));
  if (block == nullptr) return nullptr;
  return block + (16 - reinterpret_cast<uintptr_t>(block) % 16) % 16;
}

// Whole file into a 16-byte aligned heap block (the inputs).
uint8_t* ReadFile(const char* path, size_t* size) {
  FILE* f = fopen(path, "rb");
  if (f == nullptr) return nullptr;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  if (n < 0) { fclose(f); return nullptr; }
  uint8_t* block = Aligned(static_cast<size_t>(n));
  if (block == nullptr) { fclose(f); return nullptr; }
  size_t got = fread(block, 1, static_cast<size_t>(n), f);
  fclose(f);
  if (got != static_cast<size_t>(n)) return nullptr;
  *size = got;
  return block;
}

// One resource variable per distinct VAR_HANDLE shared_name in the model (what the
// tflite-micro Python interpreter allocates too).
int ResourceVariables(const tflite::Model* model) {
  constexpr int kMax = 64;
  const char* seen[kMax];
  int count = 0;
  auto* codes = model->operator_codes();
  auto* subgraphs = model->subgraphs();
  if (codes == nullptr || subgraphs == nullptr) return 0;
  for (const auto* sg : *subgraphs) {
    if (sg->operators() == nullptr) continue;
    for (const auto* op : *sg->operators()) {
      if (tflite::GetBuiltinCode(codes->Get(op->opcode_index())) !=
          tflite::BuiltinOperator_VAR_HANDLE) continue;
      const auto* options = op->builtin_options_as_VarHandleOptions();
      const char* name = options && options->shared_name() ? options->shared_name()->c_str() : "";
      bool known = false;
      for (int i = 0; i < count; ++i) known = known || strcmp(seen[i], name) == 0;
      if (!known && count < kMax) seen[count++] = name;
    }
  }
  return count;
}

void FillInputs(tflite::MicroInterpreter& interpreter, const uint8_t* data, size_t size) {
  size_t at = 0;
  for (size_t i = 0; i < interpreter.inputs_size(); ++i) {
    TfLiteTensor* t = interpreter.input(i);
    if (t == nullptr || t->data.raw == nullptr) continue;
    size_t n = t->bytes;
    size_t have = (data != nullptr && at < size) ? (size - at < n ? size - at : n) : 0;
    if (have) memcpy(t->data.raw, data + at, have);
    memset(t->data.raw + have, 0, n - have);
    at += n;
  }
}

uint32_t Fnv1a(const uint8_t* p, size_t n) {
  uint32_t h = 2166136261u;
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 16777619u;
  return h;
}

// Prints each output's digest and writes the outputs' bytes back to back ("-": not written).
void WriteOutputs(tflite::MicroInterpreter& interpreter, const char* outputs_path) {
  FILE* out = strcmp(outputs_path, "-") == 0 ? nullptr : fopen(outputs_path, "wb");
  for (size_t i = 0; i < interpreter.outputs_size(); ++i) {
    TfLiteTensor* t = interpreter.output(i);
    printf("DF output %u type %d bytes %u fnv %08x\n", static_cast<unsigned>(i),
           static_cast<int>(t->type), static_cast<unsigned>(t->bytes),
           static_cast<unsigned>(Fnv1a(t->data.uint8, t->bytes)));
    if (out != nullptr) fwrite(t->data.raw, 1, t->bytes, out);
  }
  if (out != nullptr) fclose(out);
  fflush(stdout);
}

const char* const kCategories[] = {"eval_tensors",     "persistent_tensors",
                                   "persistent_quantization", "persistent_buffers",
                                   "variable_buffers", "node_and_registration",
                                   "op_data"};

// The greedy planner TFLM uses, printing each buffer it is given: the planned tensors in
// AllocationInfoBuilder's order, then the kernels' scratch buffers.
class PrintingPlanner : public tflite::GreedyMemoryPlanner {
 public:
  void operator delete(void*) {}  // TFLM's classes have no heap delete; one is required
  TfLiteStatus AddBuffer(int size, int first, int last) override {
    printf("DF buffer %d size %d first %d last %d\n", count_++, size, first, last);
    return GreedyMemoryPlanner::AddBuffer(size, first, last);
  }
  TfLiteStatus AddBuffer(int size, int first, int last, int offline) override {
    printf("DF buffer %d size %d first %d last %d offline %d\n", count_++, size, first,
           last, offline);
    return GreedyMemoryPlanner::AddBuffer(size, first, last, offline);
  }

 private:
  int count_ = 0;
};

// Tensors AllocationInfoBuilder hands to the planner: not constant, not variable, not empty.
int PlannedTensors(const tflite::Model* model) {
  int n = 0;
  for (const auto* sg : *model->subgraphs()) {
    if (sg->tensors() == nullptr) continue;
    for (const auto* t : *sg->tensors()) {
      const auto* buffer = model->buffers()->Get(t->buffer());
      bool constant = buffer != nullptr &&
                      ((buffer->data() != nullptr && buffer->data()->size() > 0) ||
                       buffer->offset() > 1);
      size_t bytes = 0, type_size = 0;
      if (constant || t->is_variable() ||
          tflite::BytesRequiredForTensor(*t, &bytes, &type_size) != kTfLiteOk) continue;
      if (bytes > 0) ++n;
    }
  }
  return n;
}

struct Run {
  const tflite::Model* model;
  Resolver* resolver;
  int resource_variables;
  const uint8_t* inputs;
  size_t inputs_size;
};

tflite::MicroResourceVariables* Variables(tflite::MicroAllocator* allocator, int n) {
  return n > 0 ? tflite::MicroResourceVariables::Create(allocator, n) : nullptr;
}

int Report(const Run& run, size_t arena_size, const char* outputs_path) {
  uint8_t* arena = Aligned(arena_size);
  if (arena == nullptr) { printf("DF result fail heap\n"); return 1; }
  auto* allocator = tflite::RecordingMicroAllocator::Create(arena, arena_size);
  if (allocator == nullptr) { printf("DF result fail allocator\n"); return 1; }
  tflite::MicroInterpreter interpreter(run.model, *run.resolver, allocator,
                                       Variables(allocator, run.resource_variables));
  if (interpreter.initialization_status() != kTfLiteOk) { printf("DF result fail init\n"); return 1; }
  if (interpreter.AllocateTensors() != kTfLiteOk) { printf("DF result fail allocate\n"); return 1; }
  const auto* arena_allocator = allocator->GetSimpleMemoryAllocator();
  printf("DF arena head %u tail %u total %u\n",
         static_cast<unsigned>(arena_allocator->GetNonPersistentUsedBytes()),
         static_cast<unsigned>(arena_allocator->GetPersistentUsedBytes()),
         static_cast<unsigned>(arena_allocator->GetUsedBytes()));
  for (int c = 0; c < 7; ++c) {
    tflite::RecordedAllocation r =
        allocator->GetRecordedAllocation(static_cast<tflite::RecordedAllocationType>(c));
    printf("DF tail %s used %u requested %u count %u\n", kCategories[c],
           static_cast<unsigned>(r.used_bytes), static_cast<unsigned>(r.requested_bytes),
           static_cast<unsigned>(r.count));
  }
  FillInputs(interpreter, run.inputs, run.inputs_size);
  if (interpreter.Invoke() != kTfLiteOk) { printf("DF result fail invoke\n"); return 1; }
  WriteOutputs(interpreter, outputs_path);

  // The planner's input, on a second interpreter over a fresh arena.
  static PrintingPlanner planner;
  // (the first arena is still in use by `interpreter`)
  uint8_t* arena2 = Aligned(arena_size);
  if (arena2 == nullptr) { printf("DF plan none heap\nDF result ok\n"); return 0; }
  auto* plain = tflite::MicroAllocator::Create(arena2, arena_size, &planner);
  tflite::MicroInterpreter planned(run.model, *run.resolver, plain,
                                   Variables(plain, run.resource_variables));
  if (planned.AllocateTensors() == kTfLiteOk) {
    printf("DF plan tensors %d buffers %d max %u\n", PlannedTensors(run.model),
           planner.GetBufferCount(), static_cast<unsigned>(planner.GetMaximumMemorySize()));
  }
  printf("DF result ok\n");
  return 0;
}

// What an application does: MicroAllocator::Create on its arena (what MicroInterpreter's
// arena constructor calls), then AllocateTensors and, with `outputs`, Invoke. Returns the
// stage that failed, or nullptr.
const char* Application(const Run& run, uint8_t* arena, size_t arena_size, bool invoke,
                        const char* outputs_path) {
  auto* allocator = arena ? tflite::MicroAllocator::Create(arena, arena_size) : nullptr;
  if (allocator == nullptr) return "allocator";
  tflite::MicroResourceVariables* variables = nullptr;
  if (run.resource_variables > 0) {
    variables = Variables(allocator, run.resource_variables);
    if (variables == nullptr) return "resource_variables";
  }
  tflite::MicroInterpreter interpreter(run.model, *run.resolver, allocator, variables);
  if (interpreter.initialization_status() != kTfLiteOk) return "init";
  if (interpreter.AllocateTensors() != kTfLiteOk) return "allocate";
  if (!invoke) return nullptr;
  FillInputs(interpreter, run.inputs, run.inputs_size);
  if (interpreter.Invoke() != kTfLiteOk) return "invoke";
  if (outputs_path != nullptr) WriteOutputs(interpreter, outputs_path);
  return nullptr;
}

int Probe(const Run& run, size_t arena_size, bool invoke) {
  const char* failed = Application(run, Aligned(arena_size), arena_size, invoke, nullptr);
  printf("DF probe %u %s%s\n", static_cast<unsigned>(arena_size), failed ? "fail " : "ok",
         failed ? failed : "");
  return failed ? 1 : 0;
}

// The exported arena array, at its constant size.
int Export(const Run& run, const char* outputs_path) {
  const char* failed = Application(run, DF_ARENA, df::kArenaSize, true, outputs_path);
  printf("DF export arena %u %s%s\n", static_cast<unsigned>(df::kArenaSize),
         failed ? "fail " : "ok", failed ? failed : "");
  return failed ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 5) {
    printf("DF usage report|probe|export ARENA|- INPUTS OUTPUTS|invoke|allocate\n");
    return 2;
  }
  printf("DF harness 2 build %s pointer %u\n", DF_BUILD_NAME,
         static_cast<unsigned>(sizeof(void*)));
  size_t inputs_size = 0;
  uint8_t* inputs = nullptr;
  if (strcmp(argv[3], "-") != 0) {
    inputs = ReadFile(argv[3], &inputs_size);
    if (inputs == nullptr) { printf("DF error cannot read %s\n", argv[3]); return 2; }
  }
  const tflite::Model* model = tflite::GetModel(DF_MODEL_DATA);
  static Resolver resolver;
  if (df::RegisterOps(resolver) != kTfLiteOk) { printf("DF result fail resolver\n"); return 1; }
  Run run{model, &resolver, ResourceVariables(model), inputs, inputs_size};
  printf("DF model bytes %u subgraphs %u resource_variables %d\n",
         static_cast<unsigned>(df::kModelSize),
         static_cast<unsigned>(model->subgraphs()->size()), run.resource_variables);
  fflush(stdout);
  if (strcmp(argv[1], "export") == 0) return Export(run, argv[4]);
  size_t arena = strtoul(argv[2], nullptr, 10);
  if (strcmp(argv[1], "report") == 0) return Report(run, arena, argv[4]);
  if (strcmp(argv[1], "probe") == 0) return Probe(run, arena, strcmp(argv[4], "invoke") == 0);
  printf("DF usage unknown mode %s\n", argv[1]);
  return 2;
}
